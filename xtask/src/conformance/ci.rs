//! The `cargo xtask ci` step: start the built relay on a free loopback port with short task
//! times, make a `motion` key through the admin API, and run the suite against it.

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use super::client::{Client, Req};

const ADMIN_TOKEN: &str = "conformance-admin-token-5f0c9e2b7a1d4386";
const MAX_BODY_BYTES: usize = 1 << 20;
const TASK_TIMEOUT_SECS: u64 = 8;

pub fn run() -> anyhow::Result<()> {
    crate::cmd::run(
        "cargo build -p relay",
        crate::cmd::cargo().args(["build", "-p", "relay"]),
    )?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| crate::cmd::root().join("target"));
    let work = target.join("conformance");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nmax_body_bytes = {MAX_BODY_BYTES}\n[tasks]\ntimeout_secs = {TASK_TIMEOUT_SECS}\n\
             [simulator]\ntask_secs = 1\nfps = 8\n[security]\nallow_private_urls = true\n\
             [limits]\nrps = 1000\nburst = 1000\nauth_failures_burst = 1000000\n"
        ),
    )?;
    let relay = crate::relay::start_relay(
        &target.join("debug").join("relay"),
        &config,
        &work.join("data"),
        ADMIN_TOKEN,
        "error",
    )?;
    let (base, key) = (relay.base.clone(), relay.key.clone());
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = Client::new(&base)?;
        let created = rt.block_on(
            client.send(
                Req::post("/admin/keys")
                    .bearer(ADMIN_TOKEN)
                    .json(&json!({"name": "conformance-motion", "group": "motion"})),
            ),
        )?;
        let motion = created.json()["key"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("creating a motion key: {}", created.describe()))?;
        drop(rt);
        eprintln!("xtask: conformance suite against {base}");
        let started = Instant::now();
        let args: Vec<String> = [
            "--base-url",
            &base,
            "--key",
            &key,
            "--key-group2",
            &motion,
            "--admin-token",
            ADMIN_TOKEN,
            "--max-body-bytes",
            &MAX_BODY_BYTES.to_string(),
            "--task-timeout-secs",
            &TASK_TIMEOUT_SECS.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let passed = super::main(&args)?;
        eprintln!("xtask: conformance: {:.0?}", started.elapsed());
        if !passed {
            bail!("the conformance suite failed");
        }
        Ok(())
    }
}
