//! The `cargo xtask ci` step: start the built relay on a free loopback port with short task
//! times, make a `motion` key through the admin API, and run the suite against it. With a
//! vendor (`--vendor veo`), the relay's `model_h3` is served by that vendor's channel kind in
//! front of its fake (`cargo xtask fake-veo`, started here), and the suite runs in vendor mode.

use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;

use super::client::{Client, Req};

const ADMIN_TOKEN: &str = "conformance-admin-token-5f0c9e2b7a1d4386";
const MAX_BODY_BYTES: usize = 1 << 20;
const TASK_TIMEOUT_SECS: u64 = 8;

/// `conformance --start [--vendor veo]`: the arguments after `conformance`.
pub fn run_args(args: &[String]) -> anyhow::Result<()> {
    let mut vendor = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--start" => {}
            "--vendor" => match it.next().map(String::as_str) {
                Some("veo") => vendor = Some("veo"),
                other => bail!("--vendor: the vendors with a fake here are: veo (got {other:?})"),
            },
            other => bail!("unknown argument {other}\n{}", super::USAGE),
        }
    }
    run(vendor)
}

/// Starts a relay (with `vendor`'s fake behind it when given) and runs the suite against it.
pub fn run(vendor: Option<&str>) -> anyhow::Result<()> {
    crate::cmd::run(
        "cargo build -p relay",
        crate::cmd::cargo().args(["build", "-p", "relay"]),
    )?;
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| crate::cmd::root().join("target"));
    let work = target.join(match vendor {
        Some(_) => "conformance-vendor",
        None => "conformance",
    });
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    // A vendor's operations are polled often: its fake finishes them in 100 ms.
    let polls = match vendor {
        Some(_) => "poll_interval_min_ms = 50\npoll_interval_max_ms = 300\n",
        None => "",
    };
    let head = format!(
        "[server]\nmax_body_bytes = {MAX_BODY_BYTES}\n[tasks]\ntimeout_secs = {TASK_TIMEOUT_SECS}\n{polls}\
         [simulator]\ntask_secs = 1\nfps = 8\n[security]\nallow_private_urls = true\n\
         [limits]\nrps = 1000\nburst = 1000\nauth_failures_burst = 1000000\n"
    );
    let fake = match vendor {
        Some(_) => Some(crate::vendor::VeoProcess::start(&work.join("vendor.mp4"))?),
        None => None,
    };
    let text = match &fake {
        Some(fake) => fake.relay_config(&head),
        None => head,
    };
    std::fs::write(&config, text)?;
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
        match &fake {
            Some(fake) => eprintln!(
                "xtask: conformance suite against {base}, model_h3 on a veo channel to {}",
                fake.base
            ),
            None => eprintln!("xtask: conformance suite against {base}"),
        }
        let started = Instant::now();
        let mut args: Vec<String> = [
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
        if let Some(vendor) = vendor {
            args.extend([
                "--vendor".to_owned(),
                vendor.to_owned(),
                "--vendor-mp4".to_owned(),
            ]);
            args.push(work.join("vendor.mp4").display().to_string());
        }
        let passed = super::main(&args)?;
        eprintln!("xtask: conformance: {:.0?}", started.elapsed());
        if !passed {
            bail!("the conformance suite failed");
        }
        Ok(())
    }
}
