//! The relay under test: its binary, configuration, data directory and log, its admin token
//! and the quota of the key the load uses; started normally or killed while it starts.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};

pub const ADMIN_TOKEN: &str = "crash-admin-token-5f0c9e2b7a1d4386";
/// The quota of the key under test: finite, and large enough never to run out.
pub const QUOTA: i64 = 50_000_000;

/// The relay's configuration: tasks finish (or time out) within seconds, tiny videos, no rate
/// limit in the way.
pub const CONFIG: &str = "[tasks]
timeout_secs = 4
[simulator]
task_secs = 0.3
fps = 2
[limits]
rps = 100000
burst = 100000
poll_rps_per_task = 100000
";

/// The relay's process and files.
pub struct Site {
    pub binary: PathBuf,
    pub config: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
}

impl Site {
    pub fn start(&self, key: Option<&str>) -> anyhow::Result<crate::relay::StartedRelay> {
        crate::relay::start_relay_logged(
            &self.binary,
            &self.config,
            &self.data,
            ADMIN_TOKEN,
            "warn",
            key,
            Some(&self.log),
        )
    }

    /// Starts the relay and SIGKILLs it `after` later, whatever it is doing (opening the store,
    /// finding due tasks, binding). Fails when it had already exited by itself.
    pub fn kill_while_starting(&self, after: Duration) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut child = crate::relay::relay_command(
            &self.binary,
            &self.config,
            &self.data,
            ADMIN_TOKEN,
            "warn",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .with_context(|| format!("starting {}", self.binary.display()))?;
        // The wait is the point: a random moment of the start-up, not a synchronisation.
        std::thread::sleep(after);
        let exited = child.try_wait()?;
        let _ = child.kill();
        let _ = child.wait();
        if let Some(status) = exited {
            bail!("the relay exited by itself while starting ({status})");
        }
        Ok(())
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}
