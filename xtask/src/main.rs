//! Project automation: `cargo xtask ci` is what CI runs.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask ci [--no-sdk] [--quick]

  ci        fmt check, clippy -D warnings, every test (slow ones included: RUN_SLOW_TESTS=1),
            and the official SDK checks
  --no-sdk  skip the SDK checks (they install the SDKs from PyPI into target/sdk-venv*)
  --quick   skip the slow tests and the SDK checks
  --slow    accepted for clarity: slow tests run by default";

/// The admin token of the relay the SDK checks run against.
const SDK_ADMIN_TOKEN: &str = "sdk-check-admin-token";

/// The OpenAI Python SDK version the check pins.
const OPENAI_SDK: &str = "openai==3.54.0";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&args[1..]),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn run(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: {what}");
    let started = Instant::now();
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    eprintln!("xtask: {what}: {:.0?}", started.elapsed());
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn ci(args: &[String]) -> anyhow::Result<()> {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let quick = has("--quick");
    let sdk = !has("--no-sdk") && !quick;
    if let Some(other) = args
        .iter()
        .find(|a| !matches!(a.as_str(), "--no-sdk" | "--quick" | "--slow"))
    {
        bail!("unknown argument {other}\n{USAGE}");
    }
    run(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--check"]),
    )?;
    run(
        "cargo clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    let mut test = cargo();
    test.args(["test", "--workspace"]);
    if !quick {
        test.env("RUN_SLOW_TESTS", "1");
    }
    run("cargo test", &mut test)?;
    if sdk {
        sdk_check()?;
    }
    eprintln!("xtask: ci passed");
    Ok(())
}

/// Runs the official OpenAI Python SDK, unchanged, against the built relay binary.
fn sdk_check() -> anyhow::Result<()> {
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let root = root();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let venv = target.join("sdk-venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run(
            "python3 -m venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    run(
        "pip install the OpenAI SDK",
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            OPENAI_SDK,
        ]),
    )?;

    let work = target.join("sdk-check");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        "[simulator]\ntask_secs = 1\nfps = 8\n[security]\nallow_private_urls = true\n",
    )?;
    let relay = target.join("debug").join("relay");
    let mut child = Command::new(&relay)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(work.join("data"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env("RELAY_LOG", "warn")
        .env("RELAY_ADMIN_TOKEN", SDK_ADMIN_TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", relay.display()))?;
    let result = (|| {
        let (base, key) = read_startup(&mut child)?;
        run(
            "OpenAI SDK check",
            Command::new(&python)
                .args(["-W", "ignore::DeprecationWarning"])
                .arg(root.join("tests").join("sdk").join("openai_videos.py"))
                .env("RELAY_BASE_URL", &base)
                .env("RELAY_KEY", &key)
                .env("RELAY_ADMIN_TOKEN", SDK_ADMIN_TOKEN),
        )
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Reads the relay's start-up lines: its address and the first key.
fn read_startup(child: &mut Child) -> anyhow::Result<(String, String)> {
    let stdout = child.stdout.take().context("relay stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut base, mut key) = (None, None);
    while base.is_none() || key.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .context("the relay did not print its address and key in time")?;
        if let Some(rest) = line.strip_prefix("relay listening on ") {
            base = Some(rest.trim().to_owned());
        } else if line.starts_with("first API key") {
            key = line.rsplit(' ').next().map(str::to_owned);
        }
    }
    // Keep draining in the background.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Ok((base.unwrap_or_default(), key.unwrap_or_default()))
}
