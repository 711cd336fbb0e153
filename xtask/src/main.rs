//! Project automation: `cargo xtask ci` is what CI runs.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

mod bench;
mod conformance;
mod crash;
mod fake_upstream;
#[path = "../../tests/it/fake_video.rs"]
#[allow(dead_code)]
mod fake_video;
mod floors;
mod fuzz;
mod openapi;
mod schemathesis;

const USAGE: &str = "usage: cargo xtask ci [--no-sdk] [--quick] | cargo xtask sdk-messages

  ci        fmt check, clippy -D warnings, every test (slow ones included: RUN_SLOW_TESTS=1),
            a short fuzz pass (5 s per target), a short crash run, the official SDK checks
            and a bounded Schemathesis pass
  --no-sdk  skip the SDK checks (they install the SDKs from PyPI into target/sdk-venv*)
  --quick   skip the slow tests, the fuzz pass, the crash run and the SDK checks
  --slow    accepted for clarity: slow tests run by default
  sdk-messages  only the Anthropic SDK check of /v1/messages (part of ci)
  conformance   the black-box suite against a running relay (part of ci, which starts one);
                `conformance --start` builds and starts a relay and runs the suite against it
  fake-upstream a fake video upstream (openai-videos and ark) on 127.0.0.1, for trying the
                relay by hand; `fake-upstream --help` lists its switches
  bench         the relay against a bare proxy and the direct path, its memory while videos
                are downloaded, its poller with 10,000 tasks in flight, reads and start-up over
                1M stored tasks; writes BENCHMARKS.md. `bench --only SECTION` runs one part
                (messages, submissions, polling, downloads, poller, stored)
  fuzz          `fuzz [--secs N] [TARGET ...]`: build the cargo-fuzz targets in fuzz/ and run
                each for N seconds (default 60); stops at the first crash and prints its input
                and the command that replays it (installs cargo-fuzz when missing)
  crash         SIGKILL the relay at random moments under load, cycle after cycle over one
                data directory, then check that no acknowledged task was lost and the ledger
                balances (`crash --cycles 3 --debug` is part of ci)
  floors        the files of every crate by floor, bottom first, and every circle of files
                (`use` lines and paths in code); fails when there is a circle. `floors --help`
  openapi       validate docs/openapi.yaml (openapi-spec-validator from PyPI; part of ci with the
                SDK checks)
  schemathesis  property-based tests of the running relay against docs/openapi.yaml
                (Schemathesis from PyPI in target/schemathesis-venv; a bounded pass is part of
                ci with the SDK checks)";

/// Seconds each fuzz target runs in `ci` (`cargo xtask fuzz` runs them longer).
const CI_FUZZ_SECS: &str = "5";

/// The admin token of the relay the SDK checks run against.
const SDK_ADMIN_TOKEN: &str = "sdk-check-admin-token";

/// The OpenAI Python SDK version the check pins.
const OPENAI_SDK: &str = "openai==3.54.0";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(&args[1..]),
        // The Anthropic SDK check alone (it also runs as part of `ci`).
        Some("sdk-messages") => anthropic_sdk_check(),
        Some("openapi") => openapi::validate(),
        Some("fuzz") => fuzz::fuzz(&args[1..]),
        Some("fake-upstream") => fake_upstream::run(&args[1..]),
        Some("crash") => crash::run(&args[1..]),
        Some("schemathesis") => schemathesis::run(&args[1..]),
        Some("bench") => bench::bench(&root(), &target_dir(), &args[1..]),
        Some("conformance") if args.get(1).is_some_and(|a| a == "--start") => {
            conformance::ci::run()
        }
        Some("conformance") => match conformance::main(&args[1..]) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Some("floors") => match floors::run(&args[1..]) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        _ => {
            eprintln!(
                "{USAGE}\n\n{}\n\n{}\n\n{}",
                conformance::USAGE,
                crash::USAGE,
                floors::USAGE
            );
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

fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("target"))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
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
    if !quick {
        fuzz::fuzz(&["--secs".to_owned(), CI_FUZZ_SECS.to_owned()])?;
        crash::run(&["--cycles", "3", "--debug"].map(String::from))?;
    }
    if sdk {
        sdk_check()?;
    }
    if sdk {
        openapi::validate()?;
        schemathesis::run(&["--max-examples", "10", "--max-time", "120"].map(String::from))?;
    }
    if !quick {
        conformance::ci::run()?;
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
    let python = python_with("sdk-venv", OPENAI_SDK)?;

    let work = target.join("sdk-check");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        "[simulator]\ntask_secs = 1\nfps = 8\n[security]\nallow_private_urls = true\n",
    )?;
    let relay = start_relay(
        &target.join("debug").join("relay"),
        &config,
        &work.join("data"),
        SDK_ADMIN_TOKEN,
        "warn",
    )?;
    let (base, key) = (&relay.base, &relay.key);
    run(
        "OpenAI SDK check",
        Command::new(&python)
            .args(["-W", "ignore::DeprecationWarning"])
            .arg(root.join("tests").join("sdk").join("openai_videos.py"))
            .env("RELAY_BASE_URL", base)
            .env("RELAY_KEY", key)
            .env("RELAY_ADMIN_TOKEN", SDK_ADMIN_TOKEN),
    )?;
    drop(relay);
    anthropic_sdk_check()
}

/// The Anthropic Python SDKs the messages check pins: a current one (it sends the key as a
/// Bearer token) and an older one (`x-api-key`), each in its own virtualenv.
const ANTHROPIC_SDKS: [(&str, &str); 2] = [
    ("sdk-venv-anthropic2", "anthropic==2.12.0"),
    ("sdk-venv-anthropic0", "anthropic==0.75.0"),
];

/// Runs the official Anthropic Python SDKs, unchanged, against the built relay's
/// `/v1/messages`: the simulator's `sim-chat`, and `conv-chat` on an `openai-chat` channel in
/// front of a fake chat completions server (tests/sdk/fake_openai_chat.py).
fn anthropic_sdk_check() -> anyhow::Result<()> {
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let root = root();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let mut pythons = Vec::new();
    for (dir, pin) in ANTHROPIC_SDKS {
        pythons.push((pin, python_with(dir, pin)?));
    }
    let sdk_dir = root.join("tests").join("sdk");
    let work = target.join("sdk-check-messages");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let mut fake = Command::new("python3")
        .arg(sdk_dir.join("fake_openai_chat.py"))
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tests/sdk/fake_openai_chat.py")?;
    let result = (|| {
        let fake_url = first_line(&mut fake, "listening ")?;
        let config = work.join("relay.toml");
        std::fs::write(
            &config,
            format!(
                r#"[limits]
rps = 1000
burst = 1000
[models.sim-chat]
kind = "chat"
input_price_per_mtok = 1000
output_price_per_mtok = 3000
[models.conv-chat]
kind = "chat"
input_price_per_mtok = 1000
output_price_per_mtok = 3000
[[channels]]
name = "simulator"
kind = "simulator"
models = ["sim-chat"]
[[channels]]
name = "local-chat"
kind = "openai-chat"
models = ["conv-chat"]
base_url = "{fake_url}/v1"
"#
            ),
        )?;
        let relay = start_relay(
            &target.join("debug").join("relay"),
            &config,
            &work.join("data"),
            SDK_ADMIN_TOKEN,
            "warn",
        )?;
        let (base, key) = (&relay.base, &relay.key);
        {
            for (pin, python) in &pythons {
                run(
                    &format!("Anthropic SDK check ({pin})"),
                    Command::new(python)
                        .args(["-W", "ignore::DeprecationWarning"])
                        .arg(sdk_dir.join("anthropic_messages.py"))
                        .env("RELAY_BASE_URL", base)
                        .env("RELAY_KEY", key),
                )?;
            }
            Ok(())
        }
    })();
    let _ = fake.kill();
    let _ = fake.wait();
    result
}

/// The rest of the first line of `child`'s stdout that starts with `prefix`.
fn first_line(child: &mut Child, prefix: &str) -> anyhow::Result<String> {
    let stdout = child.stdout.take().context("child stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .with_context(|| format!("no line starting {prefix:?} in time"))?;
        if let Some(rest) = line.strip_prefix(prefix) {
            std::thread::spawn(move || while rx.recv().is_ok() {});
            return Ok(rest.trim().to_owned());
        }
    }
}

/// A relay binary started on a free loopback port; stopped when dropped.
pub struct StartedRelay {
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The first API key it printed.
    pub key: String,
}

impl Drop for StartedRelay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `binary` with `config` over `data`, on 127.0.0.1:0, and reads its address and key.
pub fn start_relay(
    binary: &Path,
    config: &Path,
    data: &Path,
    admin_token: &str,
    log: &str,
) -> anyhow::Result<StartedRelay> {
    start_relay_keyed(binary, config, data, admin_token, log, None)
}

/// [`start_relay`] over a data directory whose store has keys already: `key` (one of them) is
/// not printed, so only the address is read.
pub fn start_relay_keyed(
    binary: &Path,
    config: &Path,
    data: &Path,
    admin_token: &str,
    log: &str,
    key: Option<&str>,
) -> anyhow::Result<StartedRelay> {
    start_relay_logged(binary, config, data, admin_token, log, key, None)
}

/// [`start_relay_keyed`] with the relay's log (its stderr) appended to `log_file` when given,
/// so that it can be read afterwards.
pub fn start_relay_logged(
    binary: &Path,
    config: &Path,
    data: &Path,
    admin_token: &str,
    log: &str,
    key: Option<&str>,
    log_file: Option<&Path>,
) -> anyhow::Result<StartedRelay> {
    let stderr = match log_file {
        Some(path) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => Stdio::inherit(),
    };
    let mut child = relay_command(binary, config, data, admin_token, log)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    match read_startup(&mut child, key) {
        Ok((base, key)) => Ok(StartedRelay { child, base, key }),
        Err(e) => {
            let exited = child.try_wait().ok().flatten();
            let _ = child.kill();
            let _ = child.wait();
            Err(match exited {
                Some(status) => e.context(format!("the relay exited ({status})")),
                None => e,
            })
        }
    }
}

/// The command that starts `binary` with `config` over `data`, on 127.0.0.1:0.
pub fn relay_command(
    binary: &Path,
    config: &Path,
    data: &Path,
    admin_token: &str,
    log: &str,
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env("RELAY_LOG", log)
        .env("RELAY_ADMIN_TOKEN", admin_token);
    cmd
}

/// Reads the relay's start-up lines: its address and, unless `known` already, the first key.
fn read_startup(child: &mut Child, known: Option<&str>) -> anyhow::Result<(String, String)> {
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
    let (mut base, mut key) = (None, known.map(str::to_owned));
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
