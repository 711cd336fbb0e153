//! A relay binary started for a command: on a free loopback port, its address and first key
//! read from its start-up lines, stopped when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cmd::{drain, stdout_lines};

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
    let command = relay_command(binary, config, data, admin_token, log);
    spawn_started(command, key, stderr)
}

/// [`start_relay`] under a wrapper program (`wrapper[0]`, with the rest of `wrapper` as its
/// arguments before the relay's own command line), its log off.
pub fn start_relay_under(
    wrapper: &[String],
    binary: &Path,
    config: &Path,
    data: &Path,
    admin_token: &str,
) -> anyhow::Result<StartedRelay> {
    let relay = relay_command(binary, config, data, admin_token, "error");
    let (program, before) = wrapper.split_first().context("an empty wrapper")?;
    let mut command = Command::new(program);
    command
        .args(before)
        .arg(relay.get_program())
        .args(relay.get_args());
    for (name, value) in relay.get_envs() {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    // Named, so the relay does not run itself again (`exec`): a wrapper such as valgrind
    // would lose the new image.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        command.env("MIMALLOC_PURGE_DELAY", "0");
    }
    spawn_started(command, None, Stdio::inherit())
}

/// Spawns `command` (a relay) and reads its start-up lines.
pub fn spawn_started(
    mut command: Command,
    key: Option<&str>,
    stderr: Stdio,
) -> anyhow::Result<StartedRelay> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {:?}", command.get_program()))?;
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
    let rx = stdout_lines(child, "relay")?;
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
    drain(rx);
    Ok((base.unwrap_or_default(), key.unwrap_or_default()))
}
