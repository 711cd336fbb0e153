//! The peers: their pinned versions, how each is installed under `target/bench/peers`, how each
//! is configured to send its model (see [`PeerKind::model`]) to the fake upstream, started,
//! checked and stopped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The request of every row (the `messages` section's) for `model`, whole or streamed.
pub(super) fn request(model: &str, stream: bool) -> String {
    let stream = if stream { "\"stream\":true," } else { "" };
    format!(
        r#"{{{stream}"model":"{model}","max_tokens":64,"messages":[{{"role":"user","content":"Say hello."}}]}}"#
    )
}

/// The model the relay and the floor are asked for.
pub(super) const MODEL: &str = "bench-chat";

/// litellm-rs on crates.io, its `gateway` binary (the `sqlite` feature brings the storage the
/// binary requires; no database is configured).
pub const LITELLM_RS: &str = "0.9.0";
/// `@portkey-ai/gateway` on npm.
pub const PORTKEY: &str = "1.15.2";
/// `hono` and `@hono/node-server` under it, held back by npm overrides: later releases are
/// known to break its streams, and the published package ships no lockfile. `hono` is the
/// release its `^4.9.7` was written from; `@hono/node-server` the one of the latest repository
/// lockfile at hand (1.8.2's; the `^1.3.3` range has not moved since).
pub const HONO: &str = "4.9.7";
pub const HONO_NODE_SERVER: &str = "1.13.5";
/// `litellm[proxy]` on PyPI: the newest whose `proxy` extra installs from PyPI alone (later
/// ones need a `litellm-proxy` package of the same version).
pub const LITELLM: &str = "1.106.12";

/// The LiteLLM proxy's master key (it refuses to start without one), sent as `x-api-key`.
const LITELLM_KEY: &str = "sk-bench-5f0c9e2b7a1d4386a9e1";

/// Seconds a peer has to answer its first request (LiteLLM imports for a while).
const READY_SECS: u64 = 180;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    LitellmRs,
    Portkey,
    Litellm,
}

impl PeerKind {
    pub const ALL: [PeerKind; 3] = [PeerKind::LitellmRs, PeerKind::Portkey, PeerKind::Litellm];

    pub fn name(self) -> &'static str {
        match self {
            PeerKind::LitellmRs => "litellm-rs",
            PeerKind::Portkey => "portkey",
            PeerKind::Litellm => "litellm",
        }
    }

    /// The model the peer is asked for: `bench-chat`, but for litellm-rs, whose native
    /// Messages path serves only a model of a Claude family it knows (it bills by its own
    /// catalogue, and asks the upstream's `count_tokens` before each message), Claude Haiku 4.5.
    pub fn model(self) -> &'static str {
        match self {
            PeerKind::LitellmRs => "claude-haiku-4-5",
            PeerKind::Portkey | PeerKind::Litellm => MODEL,
        }
    }

    /// The name and version a row shows.
    pub fn label(self) -> String {
        match self {
            PeerKind::LitellmRs => format!("litellm-rs {LITELLM_RS}"),
            PeerKind::Portkey => format!("Portkey gateway {PORTKEY}"),
            PeerKind::Litellm => format!("LiteLLM proxy {LITELLM}"),
        }
    }

    fn home(self, peers: &Path) -> PathBuf {
        peers.join(self.name())
    }

    /// What runs the peer, once installed.
    fn program(self, peers: &Path) -> PathBuf {
        let home = self.home(peers);
        match self {
            PeerKind::LitellmRs => home.join("bin").join("gateway"),
            PeerKind::Portkey => home
                .join("node_modules")
                .join("@portkey-ai")
                .join("gateway")
                .join("build")
                .join("start-server.js"),
            PeerKind::Litellm => home.join("venv").join("bin").join("litellm"),
        }
    }

    /// Whether the pinned version is installed.
    pub fn installed(self, peers: &Path) -> bool {
        let home = self.home(peers);
        if !self.program(peers).exists() {
            return false;
        }
        match self {
            PeerKind::LitellmRs => std::fs::read_to_string(home.join(".crates.toml"))
                .is_ok_and(|s| s.contains(&format!("litellm-rs {LITELLM_RS} "))),
            PeerKind::Portkey => {
                let version = |p: &[&str]| {
                    let mut path = home.join("node_modules");
                    for part in p {
                        path.push(part);
                    }
                    std::fs::read_to_string(path.join("package.json"))
                        .ok()
                        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                        .and_then(|v| v["version"].as_str().map(str::to_owned))
                };
                version(&["@portkey-ai", "gateway"]).as_deref() == Some(PORTKEY)
                    && version(&["hono"]).as_deref() == Some(HONO)
                    && version(&["@hono", "node-server"]).as_deref() == Some(HONO_NODE_SERVER)
            }
            PeerKind::Litellm => std::fs::read_dir(home.join("venv").join("lib"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|python| {
                    python
                        .path()
                        .join("site-packages")
                        .join(format!("litellm-{LITELLM}.dist-info"))
                        .exists()
                }),
        }
    }

    /// Installs the pinned version under `peers`.
    pub fn install(self, peers: &Path) -> anyhow::Result<()> {
        let home = self.home(peers);
        std::fs::create_dir_all(&home)?;
        match self {
            PeerKind::LitellmRs => {
                // Its own target directory, kept: an interrupted build goes on where it stopped.
                let jobs = std::env::var("CARGO_BUILD_JOBS").unwrap_or_else(|_| "1".into());
                crate::cmd::run(
                    &format!("cargo install litellm-rs {LITELLM_RS} (many minutes)"),
                    crate::cmd::cargo()
                        .args(["install", "--locked", "--root"])
                        .arg(&home)
                        .args(["litellm-rs", "--version", LITELLM_RS])
                        .args(["--bin", "gateway", "--features", "sqlite"])
                        .env("CARGO_TARGET_DIR", home.join("build"))
                        .env("CARGO_BUILD_JOBS", jobs),
                )
            }
            PeerKind::Portkey => {
                let manifest = serde_json::json!({
                    "name": "relay-bench-portkey",
                    "private": true,
                    "dependencies": { "@portkey-ai/gateway": PORTKEY },
                    "overrides": { "hono": HONO, "@hono/node-server": HONO_NODE_SERVER },
                });
                std::fs::write(home.join("package.json"), format!("{manifest:#}\n"))?;
                crate::cmd::run(
                    &format!("npm install @portkey-ai/gateway@{PORTKEY}"),
                    Command::new("npm").current_dir(&home).args([
                        "install",
                        "--no-audit",
                        "--no-fund",
                        "--ignore-scripts",
                    ]),
                )
            }
            PeerKind::Litellm => {
                let venv = home.join("venv");
                if !venv.join("bin").join("python").exists() {
                    crate::cmd::run(
                        "python3 -m venv",
                        Command::new("python3").args(["-m", "venv"]).arg(&venv),
                    )?;
                }
                crate::cmd::run(
                    &format!("pip install litellm[proxy]=={LITELLM}"),
                    Command::new(venv.join("bin").join("python")).args([
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--disable-pip-version-check",
                        &format!("litellm[proxy]=={LITELLM}"),
                    ]),
                )
            }
        }
    }

    /// The peer's command, its config in `dir`, listening on `port`.
    fn command(self, peers: &Path, dir: &Path, port: u16) -> Command {
        let program = self.program(peers);
        match self {
            PeerKind::LitellmRs => {
                let mut cmd = Command::new(program);
                cmd.arg("--config")
                    .arg(dir.join("gateway.yaml"))
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--log-level", "error"]);
                cmd
            }
            PeerKind::Portkey => {
                let mut cmd = Command::new("node");
                cmd.arg(program)
                    .arg(format!("--port={port}"))
                    .arg("--headless")
                    .env("NODE_ENV", "production");
                cmd
            }
            PeerKind::Litellm => {
                let mut cmd = Command::new(program);
                cmd.arg("--config")
                    .arg(dir.join("config.yaml"))
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--num_workers", "1"])
                    // The model prices it ships, not fetched at start.
                    .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                    .env("LITELLM_LOG", "ERROR")
                    .env("LITELLM_TELEMETRY", "False")
                    .env_remove("DATABASE_URL");
                cmd
            }
        }
    }

    /// Writes the peer's config for the fake at `upstream` into `dir`.
    fn configure(self, dir: &Path, upstream: SocketAddr) -> anyhow::Result<()> {
        match self {
            PeerKind::LitellmRs => std::fs::write(
                dir.join("gateway.yaml"),
                format!(
                    "schema_version: \"1.0\"\n\
                     server:\n  host: \"127.0.0.1\"\n  port: 8080\n  dev_mode: true\n\
                     providers:\n  - name: \"bench-upstream\"\n    provider_type: \"anthropic\"\n    \
                     api_key: \"upstream-key\"\n    base_url: \"http://{upstream}\"\n    weight: 1.0\n    \
                     endpoint_access: private_network\n    \
                     rpm: 100000000\n    tpm: 4000000000\n    max_concurrent_requests: 100000\n    \
                     timeout: 30\n    max_retries: 0\n    models:\n      - \"{model}\"\n    enabled: true\n\
                     router:\n  strategy: \"round_robin\"\n\
                     storage:\n  database:\n    url: \"sqlite::memory:\"\n    enabled: false\n    \
                     max_connections: 1\n    connection_timeout: 5\n    ssl: false\n  redis:\n    \
                     url: \"redis://127.0.0.1:1\"\n    enabled: false\n    max_connections: 1\n    \
                     connection_timeout: 5\n    cluster: false\n\
                     guardrails:\n  enabled: false\n\
                     monitoring:\n  metrics:\n    enabled: false\n    port: 9090\n    \
                     path: \"/metrics\"\n    interval_seconds: 15\n  tracing:\n    enabled: false\n  \
                     health:\n    path: \"/health\"\n    detailed: false\n\
                     auth:\n  enable_jwt: false\n  enable_api_key: false\n  allow_anonymous: true\n  \
                     jwt_secret: \"\"\n  jwt_expiration: 86400\n  api_key_header: \"Authorization\"\n\
                     pricing:\n  source: \"embedded://model_prices_extended\"\n  allow_degraded: false\n  \
                     unpriced_model_policy: allow_unpriced\n  unpriced_fallback_cost_per_1k_tokens: 0.0\n\
                     rate_limit:\n  enabled: false\n  strategy: token_bucket\n  default_rpm: 100000000\n  \
                     default_tpm: 4000000000\n",
                    model = self.model()
                ),
            )?,
            PeerKind::Portkey => {}
            PeerKind::Litellm => std::fs::write(
                dir.join("config.yaml"),
                format!(
                    "model_list:\n  - model_name: bench-chat\n    litellm_params:\n      \
                     model: anthropic/bench-chat\n      api_base: http://{upstream}\n      \
                     api_key: upstream-key\n\
                     litellm_settings:\n  telemetry: false\n\
                     general_settings:\n  master_key: {LITELLM_KEY}\n"
                ),
            )?,
        }
        Ok(())
    }
}

/// A peer running for the bench, in a process group of its own; stopped when dropped.
pub struct Peer {
    kind: PeerKind,
    child: Child,
    pub addr: SocketAddr,
    upstream: SocketAddr,
    dir: tempfile::TempDir,
}

impl Peer {
    /// Configures and starts `kind` for the fake at `upstream`, and waits until it answers.
    pub fn start(kind: PeerKind, peers: &Path, upstream: SocketAddr) -> anyhow::Result<Peer> {
        let dir = tempfile::Builder::new()
            .prefix("relay-bench-peer-")
            .tempdir()
            .context("creating a temporary directory")?;
        kind.configure(dir.path(), upstream)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = std::fs::File::create(dir.path().join("log"))?;
        let child = kind
            .command(peers, dir.path(), port)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", kind.name()))?;
        let mut peer = Peer {
            kind,
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            upstream,
            dir,
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = peer.child.try_wait() {
                bail!(
                    "{} exited ({status}) at start:\n{}",
                    kind.name(),
                    peer.log()
                );
            }
            if peer.ask(false).is_ok_and(|(code, _)| code == 200) {
                eprintln!(
                    "bench: {} answers after {:.1} s",
                    kind.label(),
                    started.elapsed().as_secs_f64()
                );
                return Ok(peer);
            }
            if started.elapsed() > Duration::from_secs(READY_SECS) {
                let last = peer.ask(false).map(|(c, b)| format!("{c} {b}"));
                bail!(
                    "{} did not answer in {READY_SECS} s (last: {last:?}):\n{}",
                    kind.name(),
                    peer.log()
                );
            }
            // Polling a process that is starting: nothing tells when it listens.
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The headers of a request to this peer.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("anthropic-version", "2023-06-01".to_owned()),
            ("content-type", "application/json".to_owned()),
        ];
        match self.kind {
            PeerKind::Portkey => {
                h.push(("x-portkey-provider", "anthropic".to_owned()));
                h.push((
                    "x-portkey-custom-host",
                    format!("http://{}/v1", self.upstream),
                ));
                h.push(("x-api-key", "upstream-key".to_owned()));
            }
            PeerKind::Litellm => h.push(("x-api-key", LITELLM_KEY.to_owned())),
            PeerKind::LitellmRs => {}
        }
        h
    }

    /// One request, whole or streamed, on a connection of its own: status and body.
    fn ask(&self, stream: bool) -> anyhow::Result<(u16, String)> {
        let body = request(self.kind.model(), stream);
        let mut conn = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut req = format!(
            "POST /v1/messages HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in self.headers() {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        conn.write_all(req.as_bytes())?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer)?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let code = answer
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("no status line")?;
        Ok((code, answer))
    }

    /// Whether the peer passes the fake's answer on: the whole message's text, and a stream
    /// to its last event.
    pub fn check(&self) -> anyhow::Result<()> {
        let (code, whole) = self.ask(false)?;
        if code != 200 || !whole.contains("Hello from the bench upstream.") {
            bail!("{}: whole answer {code}:\n{whole}", self.kind.name());
        }
        let (code, stream) = self.ask(true)?;
        if code != 200 || !stream.contains("message_stop") || !stream.contains(" there.") {
            bail!("{}: stream {code}:\n{stream}", self.kind.name());
        }
        Ok(())
    }

    /// The peer's process and all below it.
    pub fn tree(&self) -> Vec<u32> {
        let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                // After the command name in brackets: state, then the parent's pid.
                let ppid = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some((pid, ppid))
            })
            .collect();
        let mut tree = vec![self.pid()];
        let mut i = 0;
        while let Some(&p) = tree.get(i) {
            tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
            i += 1;
        }
        tree
    }

    /// The last lines the peer wrote.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The whole group the peer started (its own id names it).
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_the_messages_sections_for_each_model() {
        let whole: serde_json::Value =
            serde_json::from_str(&request(PeerKind::LitellmRs.model(), false)).unwrap();
        assert_eq!(whole["model"], "claude-haiku-4-5");
        assert_eq!(whole["max_tokens"], 64);
        assert!(whole.get("stream").is_none());
        let stream: serde_json::Value = serde_json::from_str(&request(MODEL, true)).unwrap();
        assert_eq!(stream["stream"], true);
        assert_eq!(stream["model"], "bench-chat");
        assert_eq!(stream["messages"][0]["content"], "Say hello.");
    }
}
