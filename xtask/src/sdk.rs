//! The official SDKs, unchanged, against the built relay: the OpenAI Python SDK on the first
//! video format (with the simulator, and once more with the Veo fake behind `model_h3`), the
//! Anthropic Python SDKs on `/v1/messages`, and the `standardwebhooks`
//! package verifying a webhook the relay delivered.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cmd::{cargo, drain, python_with, root, run, stdout_lines, target_dir};
use crate::relay::{StartedRelay, start_relay};

/// The admin token of the relay the SDK checks run against.
const SDK_ADMIN_TOKEN: &str = "sdk-check-admin-token-5f0c9e2b7a1d4386";

/// The OpenAI Python SDK version the check pins.
const OPENAI_SDK: &str = "openai==3.54.0";

/// The Standard Webhooks Python package (the verifier webhook receivers use), pinned.
const STANDARD_WEBHOOKS: &str = "standardwebhooks==1.1.0";

/// Runs the official OpenAI Python SDK, unchanged, against the built relay binary.
pub fn sdk_check() -> anyhow::Result<()> {
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let root = root();
    let target = target_dir();
    let python = python_with("sdk-venv", OPENAI_SDK)?;
    python_with("sdk-venv", STANDARD_WEBHOOKS)?;

    let work = target.join("sdk-check");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        "[simulator]\ntask_secs = 1\nfps = 8\n[security]\nallow_private_urls = true\n",
    )?;
    let relay = sdk_relay(&work, &config)?;
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
    run(
        "Standard Webhooks check",
        Command::new(&python)
            .arg(root.join("tests").join("sdk").join("standard_webhooks.py"))
            .env("RELAY_BASE_URL", base)
            .env("RELAY_ADMIN_TOKEN", SDK_ADMIN_TOKEN),
    )?;
    drop(relay);
    openai_sdk_vendor_check(&python)?;
    anthropic_sdk_check()
}

/// `cargo xtask sdk-vendor`: the OpenAI SDK check with the Veo fake behind the relay, alone.
pub fn openai_sdk_vendor_alone() -> anyhow::Result<()> {
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let python = python_with("sdk-venv", OPENAI_SDK)?;
    openai_sdk_vendor_check(&python)
}

/// The OpenAI SDK's create, poll and download against a relay whose `model_h3` is a `veo`
/// channel in front of `cargo xtask fake-veo`: the download must be the fake's MP4.
fn openai_sdk_vendor_check(python: &Path) -> anyhow::Result<()> {
    let work = target_dir().join("sdk-check-vendor");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let mp4 = work.join("vendor.mp4");
    let fake = crate::vendor::VeoProcess::start(&mp4)?;
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        // The fake's storage is another loopback port: private addresses allowed, as in the
        // conformance suite's vendor mode.
        fake.relay_config(
            "[tasks]\npoll_interval_min_ms = 50\npoll_interval_max_ms = 300\n\
             [security]\nallow_private_urls = true\n",
        ),
    )?;
    let relay = sdk_relay(&work, &config)?;
    run(
        "OpenAI SDK check (veo fake behind the relay)",
        Command::new(python)
            .args(["-W", "ignore::DeprecationWarning"])
            .arg(
                root()
                    .join("tests")
                    .join("sdk")
                    .join("openai_videos_vendor.py"),
            )
            .env("RELAY_BASE_URL", &relay.base)
            .env("RELAY_KEY", &relay.key)
            .env("RELAY_VENDOR_MP4", &mp4),
    )?;
    drop(relay);
    drop(fake);
    Ok(())
}

/// The Anthropic Python SDKs the messages check pins: a current one (it sends the key as a
/// Bearer token) and an older one (`x-api-key`), each in its own virtualenv.
const ANTHROPIC_SDKS: [(&str, &str); 2] = [
    ("sdk-venv-anthropic2", "anthropic==2.12.0"),
    ("sdk-venv-anthropic0", "anthropic==0.75.0"),
];

/// Runs the official Anthropic Python SDKs, unchanged, against the built relay's
/// `/v1/messages` and `/v1/messages/batches`: the simulator's `sim-chat`, and `conv-chat` on an
/// `openai-chat` channel in front of a fake chat completions server
/// (tests/sdk/fake_openai_chat.py).
pub fn anthropic_sdk_check() -> anyhow::Result<()> {
    run(
        "cargo build -p relay",
        cargo().args(["build", "-p", "relay"]),
    )?;
    let root = root();
    let target = target_dir();
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
        let relay = sdk_relay(&work, &config)?;
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

/// The debug relay with `config` over `work/data`, for an SDK check.
fn sdk_relay(work: &Path, config: &Path) -> anyhow::Result<StartedRelay> {
    start_relay(
        &target_dir().join("debug").join("relay"),
        config,
        &work.join("data"),
        SDK_ADMIN_TOKEN,
        "warn",
    )
}

/// The rest of the first line of `child`'s stdout that starts with `prefix`.
fn first_line(child: &mut Child, prefix: &str) -> anyhow::Result<String> {
    let rx = stdout_lines(child, "child")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .with_context(|| format!("no line starting {prefix:?} in time"))?;
        if let Some(rest) = line.strip_prefix(prefix) {
            drain(rx);
            return Ok(rest.trim().to_owned());
        }
    }
}
