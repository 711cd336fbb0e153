//! `cargo xtask profile`: the instructions the relay executes per request, counted by
//! callgrind, for a whole `/v1/messages` answer and a streamed one (from the simulator's chat
//! model, and from an `anthropic` channel to the bench's fake upstream, the bench's path, over
//! plain HTTP and over TLS with HTTP/2, the `tls` section's path) and a
//! `GET /v1/videos/{id}` poll. Counts do not depend on the machine's load, so a regression
//! shows without noise.
//!
//! The release relay runs under `valgrind --tool=callgrind`, instrumented only once it has
//! started; for each kind of request, after a warm-up, the counters are zeroed, N requests are
//! sent on one keep-alive connection, the charges of the messages are waited for (they are
//! written off the answer's path, and counted) and the counters are dumped. The figure is the
//! dumped total over N: everything the process did, on every thread, for those requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bench::party::Party;
use crate::bench::relays::messages_config;
use crate::bench::tls::Certs;
use crate::cmd;

pub const USAGE: &str = "usage: cargo xtask profile [--requests N] [--relay PATH]

  Runs the release relay under callgrind (installs valgrind from Debian's packages when it is
  missing) and prints the instructions it executes per request for a whole /v1/messages
  answer and a streamed one (the simulator's chat model, then an anthropic channel to the
  bench's fake upstream, run by this xtask as a process of its own, over plain HTTP and over
  TLS) and a GET /v1/videos/{id}
  poll, as a Markdown table. N requests of each kind are counted (default 200) after a warm-up,
  with the relay's connection threads not spinning between requests ([server] spin_us = 0).
  --relay PATH profiles that relay binary instead of building this tree's (to compare builds).";

const ADMIN: &str = "profile-admin-token-5f0c9e2b7a1d4386";
const MESSAGE: &str = r#"{"model":"sim-chat","max_tokens":64,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;
const STREAM: &str = r#"{"model":"sim-chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;
const NATIVE: &str = r#"{"model":"bench-chat","max_tokens":64,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;
const NATIVE_STREAM: &str = r#"{"model":"bench-chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;
const TLS: &str = r#"{"model":"tls-chat","max_tokens":64,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;
const TLS_STREAM: &str = r#"{"model":"tls-chat","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Hello there, relay"}]}"#;

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let mut requests: u64 = 200;
    let mut binary: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--requests" => {
                requests = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--requests needs a number\n{USAGE}"))?;
            }
            "--relay" => {
                binary = Some(it.next().context("--relay needs a path")?.into());
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    ensure_valgrind()?;
    let binary = match binary {
        Some(path) => path,
        None => {
            cmd::run(
                "cargo build --release -p relay",
                cmd::cargo().args(["build", "--release", "-p", "relay"]),
            )?;
            cmd::target_dir().join("release").join("relay")
        }
    };
    let work = cmd::target_dir().join("profile");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let config = work.join("relay.toml");
    // The bench's relay (its fake native upstream in a process of its own, not counted); a
    // file's models and channels replace the default's, so the simulator's are listed again.
    let xtask = std::env::current_exe().context("this xtask's path")?;
    let fake = Party::start(&xtask, "fake-messages", &[])?;
    // The same upstream over TLS (HTTP/2 by ALPN), trusted through the channel's CA file.
    let certs = Certs::make()?;
    let tls_stats = work.join("tls-stats");
    let tls_fake = Party::start(&xtask, "fake-messages", &certs.party_args(&tls_stats))?;
    let text = format!(
        "{}[models.tls-chat]\nkind = \"chat\"\ninput_price_per_mtok = 1000\n\
         output_price_per_mtok = 3000\n\
         [[channels]]\nname = \"tls-upstream\"\nkind = \"anthropic\"\nmodels = [\"tls-chat\"]\n\
         base_url = \"https://{}\"\napi_key = \"upstream-key\"\nca_file = {:?}\n\
         [simulator]\ntask_secs = 3600\n\
         [models.sim-chat]\nkind = \"chat\"\ninput_price_per_mtok = 1000\n\
         output_price_per_mtok = 3000\n\
         [[channels]]\nname = \"simulator\"\nkind = \"simulator\"\n\
         models = [\"model_h3\", \"sim-chat\"]\n",
        messages_config(fake.addr),
        tls_fake.addr,
        certs.ca.to_str().context("the CA file's path")?,
    );
    // Connection threads that do not spin between requests: what is counted is the requests'
    // own work, not how many times a thread looked for more while it waited (a build older
    // than `spin_us` does not spin and does not take the key).
    std::fs::write(&config, format!("[server]\nspin_us = 0\n{text}"))?;
    let takes_spin = Command::new(&binary)
        .args(["config", "check"])
        .arg(&config)
        .output()
        .with_context(|| format!("running {}", binary.display()))?
        .status
        .success();
    if !takes_spin {
        std::fs::write(&config, text)?;
    }
    let out = work.join("callgrind.out");
    let wrapper = [
        "valgrind".to_owned(),
        "--tool=callgrind".to_owned(),
        "--instr-atstart=no".to_owned(),
        "--cache-sim=no".to_owned(),
        "--branch-sim=no".to_owned(),
        format!("--callgrind-out-file={}", out.display()),
    ];
    let relay =
        crate::relay::start_relay_under(&wrapper, &binary, &config, &work.join("data"), ADMIN)?;
    let pid = relay.child.id();
    let addr = relay.base.trim_start_matches("http://").to_owned();
    let mut conn = Conn::open(&addr)?;
    let key = relay.key.clone();
    let bearer = format!("Bearer {key}");
    let admin = format!("Bearer {ADMIN}");

    let (status, body) = conn.call(
        "POST",
        "/v1/videos",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        br#"{"model":"model_h3","prompt":"profile","size":"64x64"}"#,
    )?;
    if status != 200 {
        bail!("POST /v1/videos answered {status}");
    }
    let video: serde_json::Value = serde_json::from_slice(&body)?;
    let video_id = video["id"].as_str().context("no video id")?.to_owned();
    let poll_path = format!("/v1/videos/{video_id}");
    let message_headers = [
        ("x-api-key", key.as_str()),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];

    callgrind_control(&["-i", "on"], pid)?;
    let mut rows = Vec::new();
    for (name, kind) in [
        ("whole answer (/v1/messages)", Kind::Message(MESSAGE)),
        ("stream (/v1/messages, stream: true)", Kind::Message(STREAM)),
        ("whole answer, anthropic channel", Kind::Message(NATIVE)),
        ("stream, anthropic channel", Kind::Message(NATIVE_STREAM)),
        (
            "whole answer, anthropic channel over TLS",
            Kind::Message(TLS),
        ),
        (
            "stream, anthropic channel over TLS",
            Kind::Message(TLS_STREAM),
        ),
        ("poll (GET /v1/videos/{id})", Kind::Poll),
    ] {
        let send = |conn: &mut Conn| -> anyhow::Result<()> {
            let (status, _) = match kind {
                Kind::Message(body) => {
                    conn.call("POST", "/v1/messages", &message_headers, body.as_bytes())?
                }
                Kind::Poll => conn.call("GET", &poll_path, &[("authorization", &bearer)], b"")?,
            };
            if status != 200 {
                bail!("{name}: answered {status}");
            }
            Ok(())
        };
        for _ in 0..20 {
            send(&mut conn)?;
        }
        let charged_before = quota_used(&mut conn, &admin)?;
        callgrind_control(&["-z"], pid)?;
        for _ in 0..requests {
            send(&mut conn)?;
        }
        if matches!(kind, Kind::Message(_)) {
            wait_for_charges(&mut conn, &admin, charged_before, requests)?;
        }
        let total = dump_total(pid, &out)?;
        rows.push((name, total / requests));
    }
    drop(conn);
    drop(relay);
    drop(fake);
    drop(tls_fake);

    println!("| request | instructions per request |\n|---|---:|");
    for (name, per) in rows {
        println!("| {name} | {} |", group(per));
    }
    println!(
        "\n{requests} requests of each kind on one connection, release relay under callgrind \
         (every thread, the charge writer included; the fake upstream not counted)."
    );
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Message(&'static str),
    Poll,
}

/// Installs valgrind from Debian's packages when it is missing.
fn ensure_valgrind() -> anyhow::Result<()> {
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Ok(());
    }
    cmd::apt_install("valgrind")
}

fn callgrind_control(args: &[&str], pid: u32) -> anyhow::Result<()> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .context("running callgrind_control")?;
    if !out.status.success() {
        bail!(
            "callgrind_control {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Dumps the counters and reads the total of the new dump file.
fn dump_total(pid: u32, out: &Path) -> anyhow::Result<u64> {
    let before = dumps(out)?;
    callgrind_control(&["-d"], pid)?;
    let fresh = dumps(out)?
        .into_iter()
        .find(|p| !before.contains(p))
        .context("callgrind wrote no dump")?;
    let text = std::fs::read_to_string(&fresh)?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals: ")
                .or_else(|| l.strip_prefix("summary: "))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no totals in {}", fresh.display()))
}

/// The dump files callgrind has written next to `out` (`out.1`, `out.2`, ...).
fn dumps(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = out.parent().context("dump directory")?;
    let stem = out
        .file_name()
        .and_then(|n| n.to_str())
        .context("dump name")?;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(stem))
        {
            found.push(path);
        }
    }
    Ok(found)
}

/// The first key's `quota_used`, through the admin API.
fn quota_used(conn: &mut Conn, admin: &str) -> anyhow::Result<i64> {
    let (status, body) = conn.call("GET", "/admin/keys", &[("authorization", admin)], b"")?;
    if status != 200 {
        bail!("GET /admin/keys answered {status}");
    }
    let keys: serde_json::Value = serde_json::from_slice(&body)?;
    Ok(keys["data"]
        .as_array()
        .and_then(|d| d.first())
        .and_then(|k| k["quota_used"].as_i64())
        .unwrap_or(0))
}

/// Waits (bounded) until the key's usage grew by one charge per message at least.
fn wait_for_charges(
    conn: &mut Conn,
    admin: &str,
    before: i64,
    messages: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut pause = Duration::from_millis(20);
    loop {
        if quota_used(conn, admin)? >= before + messages as i64 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the charges of {messages} messages were not written in time");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One keep-alive HTTP/1.1 connection, blocking: enough for a request at a time.
struct Conn {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    fn open(addr: &str) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            reader: BufReader::new(stream),
            host: addr.to_owned(),
        })
    }

    /// Sends one request and reads the whole answer (by length or chunked).
    fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\n", self.host);
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let stream = self.reader.get_mut();
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;

        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let (mut length, mut chunked) = (None, false);
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim_end(), 16)
                    .with_context(|| format!("bad chunk size {line:?}"))?;
                let mut chunk = vec![0; size + 2];
                self.reader.read_exact(&mut chunk)?;
                if size == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(length) = length {
            out.resize(length, 0);
            self.reader.read_exact(&mut out)?;
        }
        Ok((status, out))
    }
}
