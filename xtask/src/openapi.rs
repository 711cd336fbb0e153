//! `cargo xtask openapi`: validates docs/openapi.yaml with the `openapi-spec-validator` Python
//! package (OpenAPI 3.1 schema and references), installed from PyPI into target/sdk-venv.

use std::path::PathBuf;
use std::process::Command;

/// The validator version the check pins.
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

pub fn validate() -> anyhow::Result<()> {
    let root = crate::root();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let venv = target.join("sdk-venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        crate::run(
            "python3 -m venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    crate::run(
        &format!("pip install {VALIDATOR}"),
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            VALIDATOR,
        ]),
    )?;
    crate::run(
        "validate docs/openapi.yaml",
        Command::new(&python)
            .args(["-m", "openapi_spec_validator"])
            .arg(root.join("docs").join("openapi.yaml")),
    )
}
