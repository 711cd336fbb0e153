//! `cargo xtask console [--screenshots]`: the web console in a real browser. Debian's chromium
//! (installed with apt-get when missing), driven by Playwright from tests/console (`npm ci`
//! when its node_modules is missing), against the debug relay with the built-in simulator.

use std::path::Path;
use std::process::Command;

use anyhow::bail;

use crate::cmd::{apt_install, cargo, root, run, target_dir};
use crate::relay::start_relay;

pub const USAGE: &str = "usage: cargo xtask console [--screenshots]

  console        builds and starts the debug relay (simulator channels, a fresh data directory)
                 and runs tests/console/console.test.mjs against it in Debian's chromium
                 (/usr/bin/chromium, installed with apt-get when missing) through Playwright
                 (`npm ci` in tests/console when node_modules is missing)
  --screenshots  also writes a screenshot of each page to docs/console/*.png";

/// The admin token of the relay the browser test runs against.
const ADMIN_TOKEN: &str = "console-check-admin-token-5f0c9e2b7a1d4386";

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Short simulated tasks, so that a video finishes while the browser waits; a rate limit that
/// a person clicking through every page (and the test) stays under.
const CONFIG: &str = "[simulator]
task_secs = 2
fps = 12
[limits]
rps = 100
burst = 200
";

pub fn run_console(args: &[String]) -> anyhow::Result<()> {
    let mut screenshots = false;
    for arg in args {
        match arg.as_str() {
            "--screenshots" => screenshots = true,
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    if !Path::new(CHROMIUM).exists() {
        apt_install("chromium")?;
    }
    if !Path::new(CHROMEDRIVER).exists() {
        apt_install("chromium-driver")?;
    }
    let root = root();
    let tests = root.join("tests").join("console");
    if !tests.join("node_modules").join("playwright-core").exists() {
        run(
            "npm ci (tests/console)",
            Command::new("npm").arg("ci").current_dir(&tests),
        )?;
    }
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let work = target_dir().join("console-check");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(&config, CONFIG)?;
    let relay = start_relay(
        &target_dir().join("debug").join("relay"),
        &config,
        &work.join("data"),
        ADMIN_TOKEN,
        "warn",
    )?;
    eprintln!(
        "xtask: relay at {}; console at {}/console",
        relay.base, relay.base
    );
    let mut node = Command::new("node");
    node.arg("console.test.mjs")
        .current_dir(&tests)
        .env("RELAY_BASE_URL", &relay.base)
        .env("RELAY_KEY", &relay.key)
        .env("RELAY_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("CHROMIUM", CHROMIUM);
    if screenshots {
        node.env("CONSOLE_SCREENSHOTS", root.join("docs").join("console"));
    }
    let result = run("browser test of the console (tests/console)", &mut node);
    drop(relay);
    result
}
