//! `cargo xtask openapi`: validates docs/openapi.yaml with the `openapi-spec-validator` Python
//! package (OpenAPI 3.1 schema and references), installed from PyPI into target/sdk-venv.

use std::process::Command;

/// The validator version the check pins.
const VALIDATOR: &str = "openapi-spec-validator==0.9.0";

pub fn validate() -> anyhow::Result<()> {
    let root = crate::cmd::root();
    let python = crate::cmd::python_with("sdk-venv", VALIDATOR)?;
    crate::cmd::run(
        "validate docs/openapi.yaml",
        Command::new(&python)
            .args(["-m", "openapi_spec_validator"])
            .arg(root.join("docs").join("openapi.yaml")),
    )
}
