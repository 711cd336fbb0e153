//! `cargo xtask crash`: SIGKILLs the relay binary at random moments under load, cycle after
//! cycle over one data directory, then checks through the public and admin APIs that no
//! acknowledged task was lost, that every task ended final, and that the key's ledger balances.
//!
//! Each cycle starts the relay (now and then it is also killed while it starts up), drives
//! submissions of both formats, cancels, polls and `/v1/messages` calls (whole and streamed) on
//! several connections at once, and SIGKILLs it after a random delay. A submission answered
//! `200` is acknowledged: the relay promised to keep it. A seed makes the random choices
//! (delays, operations, scenarios) repeatable; timing on a shared machine is not.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

pub const USAGE: &str = "cargo xtask crash [--cycles N] [--debug] [--seed S] [--workers N]

  --cycles   how many times the relay is SIGKILLed under load (default 100)
  --debug    run the debug binary (the one `cargo build` makes) instead of the release one
  --seed     the seed of every random choice (printed; default from the clock)
  --workers  concurrent connections driving load (default 4)";

const ADMIN_TOKEN: &str = "crash-admin-token";
/// The quota of the key under test: finite, and large enough never to run out.
const QUOTA: i64 = 50_000_000;
/// Operations one connection sends at most in one cycle.
const MAX_OPS_PER_WORKER: u32 = 80;
/// The longest a cycle runs before its SIGKILL.
const MAX_KILL_DELAY_MS: u64 = 1500;
/// How long every acknowledged task gets to end after the last start.
const FINAL_DEADLINE: Duration = Duration::from_secs(180);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The relay's configuration: tasks finish (or time out) within seconds, tiny videos, no rate
/// limit in the way.
const CONFIG: &str = "[tasks]
timeout_secs = 4
[simulator]
task_secs = 0.3
fps = 2
[limits]
rps = 100000
burst = 100000
poll_rps_per_task = 100000
";

/// Simulator directives a submission carries: plain runs, failures, timeouts, upstream errors.
const SCENARIOS: &[&str] = &["", "", "", "fail", "stuck", "delay_ms=800", "error=500"];

struct Options {
    cycles: u32,
    debug: bool,
    seed: u64,
    workers: u32,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut opts = Options {
        cycles: 100,
        debug: false,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        workers: 4,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
                .cloned()
        };
        match arg.as_str() {
            "--cycles" => {
                opts.cycles =
                    crate::cmd::count_flag(&value("--cycles")?, "--cycles", 1, u32::MAX, USAGE)?;
            }
            "--seed" => {
                opts.seed = value("--seed")?
                    .parse()
                    .with_context(|| format!("--seed must be a whole number\n{USAGE}"))?;
            }
            "--workers" => {
                opts.workers =
                    crate::cmd::count_flag(&value("--workers")?, "--workers", 1, 64, USAGE)?;
            }
            "--debug" => opts.debug = true,
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(opts)
}

/// SplitMix64: small, seedable, and the same everywhere.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// A generator for one part of the run, independent of the others' draws.
    fn derive(seed: u64, parts: &[u64]) -> Rng {
        let mut rng = Rng(seed);
        for p in parts {
            rng.0 ^= p.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            rng.next();
        }
        rng
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Video,
    Generation,
}

impl Format {
    fn of(id: &str) -> Option<Format> {
        if id.starts_with("video_") {
            Some(Format::Video)
        } else if id.starts_with("gen_") {
            Some(Format::Generation)
        } else {
            None
        }
    }
    fn path(self, id: &str) -> String {
        match self {
            Format::Video => format!("/v1/videos/{id}"),
            Format::Generation => format!("/v1/video/generations/{id}"),
        }
    }
    fn is_final(self, status: &str) -> bool {
        match self {
            Format::Video => matches!(status, "completed" | "failed" | "cancelled"),
            Format::Generation => matches!(status, "succeeded" | "failed" | "cancelled"),
        }
    }
}

/// What the load saw: acknowledged tasks (shared by every cycle, so cancels and polls reach
/// tasks of earlier cycles too) and counts.
#[derive(Default)]
struct Seen {
    acked: Mutex<Vec<String>>,
    messages: AtomicU64,
    cancels: AtomicU64,
    refused: AtomicU64,
}

impl Seen {
    fn random_acked(&self, rng: &mut Rng) -> Option<String> {
        let acked = self.acked.lock().ok()?;
        if acked.is_empty() {
            return None;
        }
        Some(acked[rng.below(acked.len() as u64) as usize].clone())
    }
}

/// One keep-alive HTTP/1.1 connection to the relay.
struct Conn {
    authority: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    fn new(base: &str) -> Conn {
        Conn {
            authority: base.trim_start_matches("http://").to_owned(),
            sender: None,
        }
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let result = tokio::time::timeout(
            REQUEST_TIMEOUT,
            self.send_inner(method, path, headers, body),
        )
        .await
        .with_context(|| format!("{path}: no answer within {REQUEST_TIMEOUT:?}"))
        .and_then(|r| r);
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn send_inner(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            let stream = TcpStream::connect(&self.authority)
                .await
                .with_context(|| format!("connecting to {}", self.authority))?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .context("http handshake")?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.sender = Some(sender);
        }
        let Some(sender) = self.sender.as_mut() else {
            bail!("no connection");
        };
        sender.ready().await.context("connection")?;
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.authority);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let bytes = match body {
            Some(v) => {
                builder = builder.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let res = sender
            .send_request(builder.body(Full::new(bytes))?)
            .await
            .with_context(|| path.to_owned())?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .with_context(|| format!("{path}: body"))?
            .to_bytes();
        Ok((status, body))
    }

    async fn get_json(&mut self, path: &str, bearer: &str) -> anyhow::Result<(StatusCode, Value)> {
        let auth = format!("Bearer {bearer}");
        let (status, body) = self
            .send(Method::GET, path, &[("authorization", &auth)], None)
            .await?;
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok((status, value))
    }
}

/// The relay's process and files.
struct Site {
    binary: PathBuf,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
}

impl Site {
    fn start(&self, key: Option<&str>) -> anyhow::Result<crate::relay::StartedRelay> {
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
    fn kill_while_starting(&self, after: Duration) -> anyhow::Result<()> {
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

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let opts = parse(args)?;
    let profile = if opts.debug { "debug" } else { "release" };
    let mut build = crate::cmd::cargo();
    build.args(["build", "-p", "relay"]);
    if !opts.debug {
        build.arg("--release");
    }
    crate::cmd::run(&format!("cargo build -p relay ({profile})"), &mut build)?;
    let work = crate::cmd::target_dir().join("crash");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let site = Site {
        binary: crate::cmd::target_dir().join(profile).join("relay"),
        config: work.join("relay.toml"),
        data: work.join("data"),
        log: work.join("relay.log"),
    };
    std::fs::write(&site.config, CONFIG)?;
    eprintln!(
        "xtask: crash: seed {} ({} cycles, {} connections, {profile} binary; repeat with --seed {})",
        opts.seed, opts.cycles, opts.workers, opts.seed
    );
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = campaign(&rt, &opts, &site);
    let elapsed = started.elapsed();
    match outcome {
        Ok(summary) => {
            eprintln!(
                "xtask: crash: {} cycles ({} killed while starting), {} acknowledged ({} cancels, {} messages answered, {} refused), {} tasks stored, {} final, {} ledger entries ({} charges), balance {} of {}, seed {}, {:.0?}",
                opts.cycles,
                summary.startup_kills,
                summary.acknowledged,
                summary.cancels,
                summary.messages,
                summary.refused,
                summary.stored,
                summary.finals,
                summary.entries,
                summary.charges,
                summary.balance,
                QUOTA,
                opts.seed,
                elapsed
            );
            if summary.violations.is_empty() {
                let _ = std::fs::remove_dir_all(&site.data);
                eprintln!("xtask: crash: passed");
                return Ok(());
            }
            for v in &summary.violations {
                eprintln!("VIOLATION {v}");
            }
            bail!(
                "{} violations (seed {}; the data directory is kept: {})",
                summary.violations.len(),
                opts.seed,
                site.data.display()
            )
        }
        Err(e) => Err(e.context(format!(
            "seed {}; the data directory is kept: {}; the relay's last log lines:\n{}",
            opts.seed,
            site.data.display(),
            site.log_tail()
        ))),
    }
}

#[derive(Default)]
struct Summary {
    startup_kills: u32,
    acknowledged: usize,
    cancels: u64,
    messages: u64,
    refused: u64,
    stored: usize,
    finals: usize,
    entries: usize,
    charges: usize,
    balance: i64,
    violations: Vec<String>,
}

fn campaign(rt: &tokio::runtime::Runtime, opts: &Options, site: &Site) -> anyhow::Result<Summary> {
    let mut summary = Summary::default();
    let seen = Arc::new(Seen::default());
    let mut rng = Rng::new(opts.seed);
    let mut key: Option<(String, String)> = None;
    for cycle in 0..opts.cycles {
        // Now and then a kill during start-up too (never the first start: it makes the key).
        if key.is_some() && rng.below(5) == 0 {
            let after = Duration::from_millis(rng.below(300));
            site.kill_while_starting(after)
                .with_context(|| format!("cycle {cycle}: killed {after:?} into a start"))?;
            summary.startup_kills += 1;
        }
        let mut relay = site
            .start(key.as_ref().map(|k| k.1.as_str()))
            .with_context(|| format!("cycle {cycle}: the relay did not start over its data"))?;
        let (key_id, secret) = match &key {
            Some(k) => k.clone(),
            None => {
                let k = rt.block_on(create_key(&relay.base))?;
                key = Some(k.clone());
                k
            }
        };
        let _ = key_id;
        let kill_after = Duration::from_millis(rng.below(MAX_KILL_DELAY_MS + 1));
        rt.block_on(drive(
            &relay.base,
            &secret,
            opts,
            cycle,
            kill_after,
            &mut relay.child,
            &seen,
        ))?;
        if (cycle + 1) % 10 == 0 || cycle + 1 == opts.cycles {
            eprintln!(
                "xtask: crash: {} cycles, {} acknowledged",
                cycle + 1,
                seen.acked.lock().map(|a| a.len()).unwrap_or(0)
            );
        }
    }
    let (key_id, secret) = key.context("no key was made")?;
    let relay = site
        .start(Some(&secret))
        .context("the last start: the relay did not start over its data")?;
    let acked: Vec<String> = seen
        .acked
        .lock()
        .map_err(|_| anyhow::anyhow!("a load task panicked"))?
        .clone();
    summary.acknowledged = acked.len();
    summary.cancels = seen.cancels.load(Ordering::Relaxed);
    summary.messages = seen.messages.load(Ordering::Relaxed);
    summary.refused = seen.refused.load(Ordering::Relaxed);
    rt.block_on(verify(&relay.base, &key_id, &secret, &acked, &mut summary))?;
    drop(relay);
    if std::fs::read_to_string(&site.log)
        .unwrap_or_default()
        .contains("panicked")
    {
        summary
            .violations
            .push(format!("the relay panicked (see {})", site.log.display()));
    }
    Ok(summary)
}

async fn create_key(base: &str) -> anyhow::Result<(String, String)> {
    let mut conn = Conn::new(base);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let (status, body) = conn
        .send(
            Method::POST,
            "/admin/keys",
            &[("authorization", &auth)],
            Some(&json!({"name": "crash", "group": "gen2", "quota": QUOTA})),
        )
        .await?;
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match (status, v["id"].as_str(), v["key"].as_str()) {
        (StatusCode::OK, Some(id), Some(key)) => Ok((id.to_owned(), key.to_owned())),
        _ => bail!(
            "creating the key: {status} {}",
            String::from_utf8_lossy(&body)
        ),
    }
}

/// Drives load on `workers` connections and SIGKILLs the relay `kill_after` in; returns when
/// every connection has seen the end.
async fn drive(
    base: &str,
    key: &str,
    opts: &Options,
    cycle: u32,
    kill_after: Duration,
    child: &mut std::process::Child,
    seen: &Arc<Seen>,
) -> anyhow::Result<()> {
    let killed = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..opts.workers {
        let rng = Rng::derive(opts.seed, &[u64::from(cycle), u64::from(w) + 1]);
        workers.push(tokio::spawn(worker(
            base.to_owned(),
            key.to_owned(),
            rng,
            cycle,
            Arc::clone(seen),
            Arc::clone(&killed),
        )));
    }
    // The wait is the point: the kill lands at a random moment of the load.
    tokio::time::sleep(kill_after).await;
    child.kill().context("SIGKILL")?;
    killed.store(true, Ordering::SeqCst);
    let _ = child.wait();
    // Every connection now fails at once; wait for the workers to record what they were
    // answered before the kill.
    for w in workers {
        match tokio::time::timeout(REQUEST_TIMEOUT + Duration::from_secs(5), w).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => bail!("a load task failed: {e}"),
            Err(_) => bail!("a load task did not stop after the kill"),
        }
    }
    Ok(())
}

async fn worker(
    base: String,
    key: String,
    mut rng: Rng,
    cycle: u32,
    seen: Arc<Seen>,
    killed: Arc<AtomicBool>,
) {
    let mut conn = Conn::new(&base);
    let bearer = format!("Bearer {key}");
    for op in 0..MAX_OPS_PER_WORKER {
        if killed.load(Ordering::SeqCst) {
            return;
        }
        let roll = rng.below(100);
        let prompt = format!("crash cycle {cycle} op {op}");
        let result = if roll < 45 {
            let format = if roll < 30 {
                Format::Video
            } else {
                Format::Generation
            };
            let scenario = *rng.pick(SCENARIOS);
            let (path, body) = match format {
                Format::Video => (
                    "/v1/videos",
                    json!({"model": "model_h3", "prompt": prompt, "size": "64x64",
                           "duration": 5 + rng.below(3)}),
                ),
                Format::Generation => (
                    "/v1/video/generations",
                    json!({"model": "gen2-lite", "prompt": prompt, "duration": 5,
                           "resolution": "480p", "ratio": "1:1"}),
                ),
            };
            let mut headers = vec![("authorization", bearer.as_str())];
            if !scenario.is_empty() {
                headers.push(("x-relay-sim", scenario));
            }
            conn.send(Method::POST, path, &headers, Some(&body))
                .await
                .map(|(status, body)| {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let id = v["task_id"].as_str().or(v["id"].as_str());
                    match (status, id) {
                        (StatusCode::OK, Some(id)) => {
                            if let Ok(mut acked) = seen.acked.lock() {
                                acked.push(id.to_owned());
                            }
                        }
                        _ => {
                            seen.refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
        } else if roll < 55 {
            match seen.random_acked(&mut rng) {
                Some(id) => {
                    let format = Format::of(&id).unwrap_or(Format::Video);
                    let path = format!("{}/cancel", format.path(&id));
                    let res = conn
                        .send(Method::POST, &path, &[("authorization", &bearer)], None)
                        .await;
                    if matches!(res, Ok((StatusCode::OK, _))) {
                        seen.cancels.fetch_add(1, Ordering::Relaxed);
                    }
                    res.map(drop)
                }
                None => Ok(()),
            }
        } else if roll < 80 {
            let path = match seen.random_acked(&mut rng) {
                Some(id) if roll < 75 => Format::of(&id).unwrap_or(Format::Video).path(&id),
                _ => "/v1/videos?limit=5".to_owned(),
            };
            conn.send(Method::GET, &path, &[("authorization", &bearer)], None)
                .await
                .map(drop)
        } else {
            let stream = roll >= 90;
            let body = json!({"model": "sim-chat", "max_tokens": 16 + rng.below(48), "stream": stream,
                              "messages": [{"role": "user", "content": prompt}]});
            let res = conn
                .send(
                    Method::POST,
                    "/v1/messages",
                    &[
                        ("x-api-key", key.as_str()),
                        ("anthropic-version", "2023-06-01"),
                    ],
                    Some(&body),
                )
                .await;
            if matches!(res, Ok((StatusCode::OK, _))) {
                seen.messages.fetch_add(1, Ordering::Relaxed);
            }
            res.map(drop)
        };
        if result.is_err() {
            // The relay is gone (or going): this connection's part of the cycle is over.
            return;
        }
    }
}

/// What the last start shows of one task, through its own path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    Final(String),
    /// Still not final when the wait ended.
    Unfinished(String),
    /// `404`.
    Lost,
    /// An id of neither format.
    Foreign,
}

/// Everything the checks read, gathered through the APIs after the last start.
#[derive(Debug, Default)]
struct Facts {
    quota: i64,
    acked: BTreeSet<String>,
    /// Every task the load, the admin list or the ledger names.
    tasks: BTreeMap<String, Found>,
    /// `/admin/tasks` of the key: id -> status.
    listed: HashMap<String, String>,
    /// The key's ledger, oldest first.
    entries: Vec<Value>,
    /// `quota_remaining` of the key.
    remaining: Option<i64>,
}

/// The checks after the last start: gathers the facts, then audits them.
async fn verify(
    base: &str,
    key_id: &str,
    secret: &str,
    acked: &[String],
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let mut violations = Vec::new();
    let facts = gather(base, key_id, secret, acked, &mut violations).await?;
    let audit = audit(&facts);
    violations.extend(audit.violations);
    summary.violations.append(&mut violations);
    summary.entries = facts.entries.len();
    summary.charges = audit.charges;
    summary.stored = facts.tasks.len();
    summary.finals = facts
        .tasks
        .values()
        .filter(|f| matches!(f, Found::Final(_)))
        .count();
    summary.balance = facts.remaining.unwrap_or_default();
    Ok(())
}

/// Reads a task through its own path.
async fn find(conn: &mut Conn, secret: &str, id: &str) -> anyhow::Result<Found> {
    let Some(format) = Format::of(id) else {
        return Ok(Found::Foreign);
    };
    let (status, v) = conn.get_json(&format.path(id), secret).await?;
    if status == StatusCode::NOT_FOUND {
        return Ok(Found::Lost);
    }
    if status != StatusCode::OK {
        bail!("GET {}: {status} {v}", format.path(id));
    }
    let s = v["status"].as_str().unwrap_or_default().to_owned();
    Ok(if format.is_final(&s) {
        Found::Final(s)
    } else {
        Found::Unfinished(s)
    })
}

async fn gather(
    base: &str,
    key_id: &str,
    secret: &str,
    acked: &[String],
    violations: &mut Vec<String>,
) -> anyhow::Result<Facts> {
    let mut conn = Conn::new(base);
    let mut facts = Facts {
        quota: QUOTA,
        acked: acked.iter().cloned().collect(),
        ..Facts::default()
    };

    // Wait until every acknowledged task is final (or lost), up to the deadline.
    let mut pending = facts.acked.clone();
    let deadline = Instant::now() + FINAL_DEADLINE;
    loop {
        for id in pending.clone() {
            let found = find(&mut conn, secret, &id).await?;
            if !matches!(found, Found::Unfinished(_)) {
                pending.remove(&id);
            }
            facts.tasks.insert(id, found);
        }
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The admin view: nothing of the key left unfinished; every task of the key, page by page.
    for unfinished in ["queued", "running", "in_progress"] {
        let (status, v) = conn
            .get_json(
                &format!("/admin/tasks?key_id={key_id}&status={unfinished}&limit=1000"),
                ADMIN_TOKEN,
            )
            .await?;
        if status != StatusCode::OK {
            bail!("GET /admin/tasks: {status} {v}");
        }
        let n = v["data"].as_array().map_or(0, Vec::len);
        if n > 0 {
            violations.push(format!(
                "/admin/tasks lists {n} {unfinished} tasks after every acknowledged one ended"
            ));
        }
    }
    let mut after = String::new();
    loop {
        let (status, page) = conn
            .get_json(
                &format!("/admin/tasks?key_id={key_id}&limit=1000&after={after}"),
                ADMIN_TOKEN,
            )
            .await?;
        if status != StatusCode::OK {
            bail!("GET /admin/tasks: {status} {page}");
        }
        let data = page["data"].as_array().cloned().unwrap_or_default();
        for t in &data {
            let (Some(id), Some(s)) = (t["id"].as_str(), t["status"].as_str()) else {
                violations.push(format!("/admin/tasks: an entry without id or status: {t}"));
                continue;
            };
            if facts.listed.insert(id.to_owned(), s.to_owned()).is_some() {
                violations.push(format!("/admin/tasks lists {id} twice"));
            }
            after = id.to_owned();
        }
        if page["has_more"] != true || data.is_empty() {
            break;
        }
    }

    let (status, ledger) = conn
        .get_json(&format!("/admin/keys/{key_id}/ledger"), ADMIN_TOKEN)
        .await?;
    if status != StatusCode::OK {
        bail!("GET /admin/keys/{key_id}/ledger: {status} {ledger}");
    }
    if ledger["has_more"] != false {
        violations.push("the ledger says has_more: the check saw only part of it".to_owned());
    }
    facts.entries = ledger["data"].as_array().cloned().unwrap_or_default();

    // Tasks stored but not acknowledged (their answers were cut off by a kill): read them too.
    let mut others: BTreeSet<String> = facts.listed.keys().cloned().collect();
    others.extend(
        facts
            .entries
            .iter()
            .filter_map(|e| e["task_id"].as_str())
            .filter(|t| !t.starts_with("msg_"))
            .map(str::to_owned),
    );
    for id in others {
        if let std::collections::btree_map::Entry::Vacant(slot) = facts.tasks.entry(id) {
            let found = find(&mut conn, secret, slot.key()).await?;
            slot.insert(found);
        }
    }

    let (status, key) = conn
        .get_json(&format!("/admin/keys/{key_id}"), ADMIN_TOKEN)
        .await?;
    if status != StatusCode::OK {
        bail!("GET /admin/keys/{key_id}: {status} {key}");
    }
    facts.remaining = key["quota_remaining"].as_i64();
    Ok(facts)
}

#[derive(Debug, Default)]
struct Audit {
    violations: Vec<String>,
    charges: usize,
}

/// The invariants, over what the APIs showed: every acknowledged task exists and is final;
/// each task's entries are what its final status implies and no entry names an unknown task;
/// one charge per message; the balance is the quota plus the entries, entry by entry.
fn audit(facts: &Facts) -> Audit {
    let mut out = Audit::default();
    let violations = &mut out.violations;
    let unfinished: Vec<&String> = facts
        .tasks
        .iter()
        .filter(|(_, f)| matches!(f, Found::Unfinished(_)))
        .map(|(id, _)| id)
        .collect();
    if !unfinished.is_empty() {
        violations.push(format!(
            "{} tasks not final after {FINAL_DEADLINE:?}, e.g. {:?}",
            unfinished.len(),
            &unfinished[..unfinished.len().min(5)]
        ));
    }

    // The ledger, entry by entry.
    let mut by_task: BTreeMap<&str, Vec<(&str, i64)>> = BTreeMap::new();
    let mut running = facts.quota;
    let mut sum = 0i64;
    for (n, e) in facts.entries.iter().enumerate() {
        let (Some(task), Some(kind), Some(amount)) = (
            e["task_id"].as_str(),
            e["kind"].as_str(),
            e["amount"].as_i64(),
        ) else {
            violations.push(format!("ledger entry {n} is malformed: {e}"));
            continue;
        };
        sum += amount;
        running += amount;
        if e["balance_after"].as_i64() != Some(running) {
            violations.push(format!(
                "ledger entry {n} ({task} {kind} {amount}): balance_after {} but the quota and the entries up to it make {running}",
                e["balance_after"]
            ));
            // Go on from what the relay says, so one fault is reported once.
            running = e["balance_after"].as_i64().unwrap_or(running);
        }
        by_task.entry(task).or_default().push((kind, amount));
    }
    for (id, list) in &by_task {
        if id.starts_with("msg_") {
            out.charges += list.len();
            if list.len() != 1 || list[0].0 != "charge" {
                violations.push(format!(
                    "message {id}: entries {list:?}, expected one charge"
                ));
            }
            if list.iter().any(|(_, a)| *a > 0) {
                violations.push(format!("message {id}: a charge gives credits: {list:?}"));
            }
        }
    }

    for (id, found) in &facts.tasks {
        let acked = facts.acked.contains(id);
        let status = match found {
            Found::Final(s) => s.as_str(),
            Found::Unfinished(_) => continue,
            Found::Lost if acked => {
                violations.push(format!("acknowledged task {id} was lost (404)"));
                continue;
            }
            Found::Lost => {
                violations.push(format!(
                    "ledger entries or /admin/tasks name {id}, which is not found"
                ));
                continue;
            }
            Found::Foreign => {
                violations.push(format!("{id} is named as a task but is of neither format"));
                continue;
            }
        };
        if let Some(listed) = facts.listed.get(id) {
            if listed != status {
                violations.push(format!(
                    "task {id}: /admin/tasks says {listed}, its own path says {status}"
                ));
            }
        } else {
            violations.push(format!("task {id} ({status}) is missing from /admin/tasks"));
        }
        let list = by_task.get(id.as_str()).cloned().unwrap_or_default();
        let count = |k: &str| list.iter().filter(|(kind, _)| *kind == k).count();
        let amount = |k: &str| list.iter().find(|(kind, _)| *kind == k).map(|e| e.1);
        let expected = match status {
            "completed" | "succeeded" => (1, 1, 0),
            _ => (1, 0, 1),
        };
        let counts = (count("prededuct"), count("settle"), count("refund"));
        if counts != expected || list.len() != 2 {
            violations.push(format!(
                "task {id} is {status}: entries {list:?}, expected a prededuct and a {}",
                if expected.1 == 1 { "settle" } else { "refund" }
            ));
            continue;
        }
        let price = -amount("prededuct").unwrap_or(0);
        if price <= 0 {
            violations.push(format!(
                "task {id}: a pre-deduction that takes nothing: {list:?}"
            ));
        }
        if let Some(refund) = amount("refund")
            && refund != price
        {
            violations.push(format!(
                "task {id} is {status}: refund {refund} of a pre-deduction of {price}"
            ));
        }
        if let Some(settle) = amount("settle")
            && !(0..=price).contains(&settle)
        {
            violations.push(format!(
                "task {id} is {status}: settle {settle} of a pre-deduction of {price}"
            ));
        }
    }

    if facts.remaining != Some(facts.quota + sum) {
        violations.push(format!(
            "quota_remaining {:?} but the starting quota {} plus the ledger's {} entries is {}",
            facts.remaining,
            facts.quota,
            facts.entries.len(),
            facts.quota + sum
        ));
    }
    if let Some(last) = facts.entries.last()
        && last["balance_after"].as_i64() != facts.remaining
    {
        violations.push(format!(
            "quota_remaining {:?} but the last ledger entry's balance_after is {}",
            facts.remaining, last["balance_after"]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_draws() {
        let draws = |seed| {
            let mut rng = Rng::derive(seed, &[3, 1]);
            (0..8).map(|_| rng.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draws(42), draws(42));
        assert_ne!(draws(42), draws(43));
    }

    /// Ledger entries with correct running balances from `quota`.
    fn ledger(quota: i64, moves: &[(&str, &str, i64)]) -> Vec<Value> {
        let mut balance = quota;
        moves
            .iter()
            .map(|(task, kind, amount)| {
                balance += amount;
                json!({"task_id": task, "kind": kind, "amount": amount, "balance_after": balance})
            })
            .collect()
    }

    /// A run that went right: a completed video, a failed generation, a message, and a task
    /// stored but never acknowledged (cancelled).
    fn good() -> Facts {
        let entries = ledger(
            1000,
            &[
                ("video_1", "prededuct", -50),
                ("gen_2", "prededuct", -20),
                ("msg_3", "charge", -1),
                ("video_1", "settle", 0),
                ("video_4", "prededuct", -60),
                ("gen_2", "refund", 20),
                ("video_4", "refund", 60),
            ],
        );
        let task = |s: &str| Found::Final(s.to_owned());
        Facts {
            quota: 1000,
            acked: ["video_1", "gen_2"].map(String::from).into(),
            tasks: [
                ("video_1".to_owned(), task("completed")),
                ("gen_2".to_owned(), task("failed")),
                ("video_4".to_owned(), task("cancelled")),
            ]
            .into(),
            listed: [
                ("video_1", "completed"),
                ("gen_2", "failed"),
                ("video_4", "cancelled"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into(),
            remaining: Some(1000 - 51),
            entries,
        }
    }

    fn violations(facts: &Facts) -> String {
        audit(facts).violations.join("\n")
    }

    #[test]
    fn a_run_that_went_right_passes() {
        let audit = audit(&good());
        assert!(audit.violations.is_empty(), "{:?}", audit.violations);
        assert_eq!(audit.charges, 1);
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let mut f = good();
        f.tasks.insert("video_1".into(), Found::Lost);
        assert!(violations(&f).contains("acknowledged task video_1 was lost"));

        let mut f = good();
        f.tasks
            .insert("gen_2".into(), Found::Unfinished("running".into()));
        assert!(violations(&f).contains("not final"), "{}", violations(&f));

        // A double refund: the balance follows it, the task's entries do not fit.
        let mut f = good();
        f.entries = ledger(
            1000,
            &[
                ("video_1", "prededuct", -50),
                ("video_1", "settle", 0),
                ("gen_2", "prededuct", -20),
                ("gen_2", "refund", 20),
                ("gen_2", "refund", 20),
                ("msg_3", "charge", -1),
                ("video_4", "prededuct", -60),
                ("video_4", "refund", 60),
            ],
        );
        f.remaining = Some(1000 - 31);
        let v = violations(&f);
        assert!(v.contains("task gen_2 is failed"), "{v}");

        // A settle where the status says refund.
        let mut f = good();
        f.tasks
            .insert("video_4".into(), Found::Final("completed".into()));
        f.listed.insert("video_4".into(), "completed".into());
        assert!(violations(&f).contains("expected a prededuct and a settle"));

        // An entry of a task that is not there.
        let mut f = good();
        f.tasks.insert("video_4".into(), Found::Lost);
        assert!(violations(&f).contains("video_4, which is not found"));

        // Two charges of one message.
        let mut f = good();
        let mut moves = vec![("msg_3", "charge", -1)];
        moves.extend([
            ("video_1", "prededuct", -50),
            ("video_1", "settle", 0),
            ("gen_2", "prededuct", -20),
            ("gen_2", "refund", 20),
            ("msg_3", "charge", -1),
            ("video_4", "prededuct", -60),
            ("video_4", "refund", 60),
        ]);
        f.entries = ledger(1000, &moves);
        f.remaining = Some(1000 - 52);
        assert!(violations(&f).contains("message msg_3"));

        // The key's balance off the ledger, and one entry's balance_after off its sum.
        let mut f = good();
        f.remaining = Some(1000);
        assert!(violations(&f).contains("quota_remaining"));
        let mut f = good();
        f.entries[2]["balance_after"] = json!(5);
        assert!(violations(&f).contains("ledger entry 2"));

        // The admin list disagrees or lacks a task.
        let mut f = good();
        f.listed.insert("gen_2".into(), "cancelled".into());
        assert!(violations(&f).contains("/admin/tasks says cancelled"));
        let mut f = good();
        f.listed.remove("video_4");
        assert!(violations(&f).contains("missing from /admin/tasks"));
    }

    #[test]
    fn options_are_checked() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = parse(&args(&["--cycles", "3", "--debug", "--seed", "7"])).unwrap();
        assert_eq!((o.cycles, o.debug, o.seed, o.workers), (3, true, 7, 4));
        assert!(parse(&args(&["--cycles", "0"])).is_err());
        assert!(parse(&args(&["--cycles"])).is_err());
        assert!(parse(&args(&["--frobnicate"])).is_err());
    }
}
