//! What the commands share: the workspace's paths, `cargo`, a program run with a timer that
//! fails on a non-zero exit, a child's stdout as lines, a virtualenv with a pinned package,
//! and the parser of whole-number flags.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc::Receiver;
use std::time::Instant;

use anyhow::{Context, bail};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target"))
}

/// A cargo command at the workspace's root, without what `cargo run` set for xtask itself:
/// build scripts (ring's) rerun when `CARGO_PKG_NAME` or `CARGO_MANIFEST_DIR` differ from the
/// last build's, so a cargo started with xtask's would rebuild ring and all above it after
/// every plain `cargo build`, and back again.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || matches!(
                name,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
            );
        if set_by_cargo_run {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// A flag's whole-number value within `min..=max`; else an error naming the flag and the
/// accepted range, followed by `usage`.
pub fn count_flag(text: &str, flag: &str, min: u32, max: u32, usage: &str) -> anyhow::Result<u32> {
    text.parse()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .with_context(|| format!("{flag} must be a whole number from {min} to {max}\n{usage}"))
}

/// The S3-compatible server of the blob tests (`tests/it/moto.rs`) and the cluster run, pinned.
pub const MOTO: &str = "moto[server]==5.2.1";

/// A virtualenv `target/DIR` (made when missing) with `pin` pip-installed; its python.
pub fn python_with(dir: &str, pin: &str) -> anyhow::Result<PathBuf> {
    let venv = target_dir().join(dir);
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run(
            "python3 -m venv",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    run(
        &format!("pip install {pin}"),
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            pin,
        ]),
    )?;
    Ok(python)
}

pub fn run(what: &str, cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask: {what}");
    let started = Instant::now();
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    eprintln!("xtask: {what}: {:.0?}", started.elapsed());
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// The lines of `child`'s stdout, read on a thread of their own; `what` names the child in
/// the error when its stdout was taken already.
pub fn stdout_lines(child: &mut Child, what: &str) -> anyhow::Result<Receiver<String>> {
    let stdout = child
        .stdout
        .take()
        .with_context(|| format!("{what} stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Keeps reading `lines` in the background, so that the child never blocks on a full pipe.
pub fn drain(lines: Receiver<String>) {
    std::thread::spawn(move || while lines.recv().is_ok() {});
}

/// Installs a Debian package with apt-get (through sudo when not root), saying so; updates the
/// package lists and tries again when the first attempt fails.
pub fn apt_install(package: &str) -> anyhow::Result<()> {
    eprintln!("xtask: {package} is missing; installing it with apt-get install -y {package}");
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false);
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg("apt-get");
            sudo
        };
        cmd.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", package]) {
        eprintln!("xtask: apt-get install failed; updating the package lists and trying again");
        if !(apt(&["update"]) && apt(&["install", "-y", package])) {
            anyhow::bail!(
                "could not install {package} (apt-get install -y {package}); install it and run again"
            );
        }
    }
    Ok(())
}

/// Whether something listens on `addr` (a loopback `IP:port`).
pub fn listening(addr: &str) -> bool {
    addr.parse().is_ok_and(|a| {
        std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2)).is_ok()
    })
}

/// The services the tests use, checked before they run: PostgreSQL on 127.0.0.1:5432 (the
/// store's suite on its second backend; `RELAY_TEST_POSTGRES_URL` points elsewhere) must be
/// there; Redis on 127.0.0.1:6379 (the cluster tests; `RELAY_TEST_REDIS_URL` points elsewhere)
/// is started here when nothing answers, installed from Debian's packages when missing.
pub fn ensure_services() -> anyhow::Result<()> {
    if std::env::var_os("RELAY_TEST_POSTGRES_URL").is_none() && !listening("127.0.0.1:5432") {
        anyhow::bail!(
            "PostgreSQL is required for the tests: start it on 127.0.0.1:5432 (trust auth, database `test`) or set RELAY_TEST_POSTGRES_URL"
        );
    }
    if std::env::var_os("RELAY_TEST_REDIS_URL").is_none() && !listening("127.0.0.1:6379") {
        if !Command::new("redis-server")
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            apt_install("redis-server")?;
        }
        eprintln!("xtask: nothing answers on 127.0.0.1:6379; starting redis-server there");
        run(
            "redis-server",
            Command::new("redis-server").args([
                "--bind",
                "127.0.0.1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
            ]),
        )?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !listening("127.0.0.1:6379") {
            if std::time::Instant::now() >= deadline {
                anyhow::bail!("redis-server did not listen on 127.0.0.1:6379 within 10 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(())
}
