//! A video vendor's fake behind the relay, for the conformance suite and the OpenAI SDK check:
//! `cargo xtask fake-veo` serves the integration suite's strict Veo fake (tests/it/fake_veo.rs:
//! the Gemini API's key header, paths, and every submission field with its type, 400 on any
//! mismatch) in a process of its own, and [`VeoProcess`] starts it for a command.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cmd::{drain, stdout_lines};
use crate::fake_veo::{FakeVeo, VEO_KEY, veo_mp4};

pub const USAGE: &str = "usage: cargo xtask fake-veo [--run-ms N] [--mp4-out PATH]

  the integration suite's Veo fake (Gemini API) on a free loopback port, until killed
  --run-ms N     operations finish after N ms (default 100)
  --mp4-out PATH write the MP4 every finished operation serves to PATH";

/// The vendor model the relay's first-format `model_h3` is mapped to.
pub const VEO_MODEL: &str = "veo-3.1-generate-preview";

pub fn run_fake_veo(args: &[String]) -> anyhow::Result<()> {
    let (mut run_ms, mut mp4_out) = (100, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--run-ms" => {
                let value = it.next().context("--run-ms needs a value")?;
                run_ms = value
                    .parse()
                    .with_context(|| format!("--run-ms: {value:?} is not a number"))?;
            }
            "--mp4-out" => mp4_out = Some(it.next().context("--mp4-out needs a path")?.clone()),
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    if let Some(path) = mp4_out {
        std::fs::write(&path, veo_mp4()).with_context(|| format!("writing {path}"))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(async move {
        let fake = FakeVeo::start().await;
        fake.switches.run_ms.store(run_ms, Ordering::SeqCst);
        println!("fake veo on {}", fake.base);
        println!("  kind = \"veo\", api_key = \"{VEO_KEY}\", model {VEO_MODEL}");
        println!("  operations finish after {run_ms} ms; Ctrl-C stops");
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        drop(fake);
        Ok(())
    })
}

/// `cargo xtask fake-veo` started by this process; killed when dropped.
pub struct VeoProcess {
    child: Child,
    /// The Gemini API's base, a `veo` channel's `base_url`.
    pub base: String,
}

impl Drop for VeoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl VeoProcess {
    /// Starts the fake, its MP4 written to `mp4_out`.
    pub fn start(mp4_out: &Path) -> anyhow::Result<VeoProcess> {
        let exe = std::env::current_exe().context("the xtask binary")?;
        let mut child = Command::new(exe)
            .arg("fake-veo")
            // Long enough for a cancel to reach a running task, short for the suite.
            .args(["--run-ms", "1500"])
            .arg("--mp4-out")
            .arg(mp4_out)
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the Veo fake")?;
        let rx = stdout_lines(&mut child, "fake-veo")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut process = VeoProcess {
            child,
            base: String::new(),
        };
        while process.base.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .context("the Veo fake did not print its address in time")?;
            if let Some(rest) = line.strip_prefix("fake veo on ") {
                process.base = rest.trim().to_owned();
            }
        }
        drain(rx);
        Ok(process)
    }

    /// The relay's configuration of `model_h3` served only by a `veo` channel on this fake,
    /// after `head` (the `[server]`, `[tasks]`... sections of the caller).
    pub fn relay_config(&self, head: &str) -> String {
        format!(
            r#"{head}
[models.model_h3]
kind = "video"
price_per_second = 10
[[channels]]
name = "veo"
kind = "veo"
base_url = "{base}"
api_key = "{VEO_KEY}"
models = ["model_h3"]
request_timeout_secs = 5
nearest_longer_duration = true
model_map = {{ model_h3 = "{VEO_MODEL}" }}
"#,
            base = self.base
        )
    }
}
