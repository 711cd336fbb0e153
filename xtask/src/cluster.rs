//! `cargo xtask cluster`: three relay processes on one PostgreSQL store, one Redis and one
//! S3-compatible object store (moto's server), behind no balancer: each client picks an
//! instance and moves to another when its instance stops answering. Under mixed load (video
//! tasks on a fake upstream, messages, polls, downloads) one instance is SIGKILLed and started
//! again. Then, through the public and admin APIs of the instances and the fake's own counts:
//! every acknowledged task is final, none was submitted upstream twice, the key's ledger
//! balances entry by entry, a file written through one instance downloads through the others,
//! and a key's rate limit held across the three (the requests admitted in a burst are what one
//! bucket allows, not three).
//!
//! It needs PostgreSQL on 127.0.0.1:5432 (`psql` to make a scratch database) and Redis on
//! 127.0.0.1:6379 (a missing one fails the run, naming it); moto is pip-installed into
//! `target/moto-venv` when missing, as for the blob tests.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::crash::audit::audit;
use crate::crash::conn::Conn;
use crate::crash::facts::gather;
use crate::crash::site::{ADMIN_TOKEN, QUOTA};
use crate::crash::workload::{Format, Rng, Seen};
use crate::fake_video::{FAKE_KEY, FakeVideo};
use crate::relay::{StartedRelay, relay_command, spawn_started};

pub const USAGE: &str = "cargo xtask cluster [--debug] [--local-files] [--seed S] [--secs N]

  --debug  run the debug binary (the one `cargo build` makes) instead of the release one
  --local-files  each relay keeps its files in its own data directory (no object store, no
           moto): every check but the cross-instance download, which is reported as not made
  --seed   the seed of every random choice (printed; default from the clock)
  --secs   how long the load runs (default 12; the kill comes in its first half)";

const INSTANCES: usize = 3;
/// Clients of the load, spread over the instances.
const CLIENTS: usize = 6;
/// The rate limit of the key that checks the shared limit: burst and refill.
const LIMIT_BURST: u64 = 20;
const LIMIT_RPS: u64 = 2;
const PG: &str = "127.0.0.1:5432";
const REDIS: &str = "127.0.0.1:6379";

struct Options {
    debug: bool,
    local_files: bool,
    seed: u64,
    secs: u64,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut opts = Options {
        debug: false,
        local_files: false,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        secs: 12,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
                .cloned()
        };
        match arg.as_str() {
            "--debug" => opts.debug = true,
            "--local-files" => opts.local_files = true,
            "--help" | "-h" => bail!("{USAGE}"),
            "--seed" => {
                opts.seed = value("--seed")?
                    .parse()
                    .with_context(|| format!("--seed must be a whole number\n{USAGE}"))?;
            }
            "--secs" => {
                opts.secs = u64::from(crate::cmd::count_flag(
                    &value("--secs")?,
                    "--secs",
                    4,
                    600,
                    USAGE,
                )?);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(opts)
}

/// The services the run needs, checked before anything starts.
fn require_services() -> anyhow::Result<()> {
    if !crate::cmd::listening(PG) {
        bail!(
            "PostgreSQL is required for the cluster test: start it on {PG} (trust auth, database `test`)"
        );
    }
    if !crate::cmd::listening(REDIS) {
        bail!("Redis is required for the cluster test: start it on {REDIS}");
    }
    Ok(())
}

/// A scratch PostgreSQL database on 127.0.0.1:5432, dropped when this is.
pub(crate) struct Database {
    name: String,
}

impl Database {
    pub(crate) fn create(name: &str) -> anyhow::Result<Database> {
        psql(&format!("CREATE DATABASE {name}"))?;
        Ok(Database {
            name: name.to_owned(),
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@{PG}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = psql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

/// Runs `sql` on the `test` database: what it printed, rows unadorned (`-At`).
pub(crate) fn psql(sql: &str) -> anyhow::Result<String> {
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .context("running psql (Debian package postgresql-client)")?;
    if !out.status.success() {
        bail!("psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// moto's S3 server on a free loopback port, stopped when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start(python: &Path, log: &Path) -> anyhow::Result<Moto> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(log)?;
        let child = Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting moto's server")?;
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() >= deadline {
                bail!("moto's server did not listen on {port} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(moto)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every instance's files: one configuration, a data directory (temporary files) and a log each.
struct Site {
    binary: PathBuf,
    config: PathBuf,
    work: PathBuf,
}

impl Site {
    fn start(&self, n: usize, key: Option<&str>) -> anyhow::Result<StartedRelay> {
        let data = self.work.join(format!("data-{n}"));
        std::fs::create_dir_all(&data)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join(format!("relay-{n}.log")))?;
        let mut command = relay_command(&self.binary, &self.config, &data, ADMIN_TOKEN, "warn");
        // The object store's credentials come from the environment.
        command
            .env("AWS_ACCESS_KEY_ID", "cluster")
            .env("AWS_SECRET_ACCESS_KEY", "cluster");
        spawn_started(command, key, Stdio::from(log))
            .with_context(|| format!("starting instance {n}"))
    }

    fn logs(&self) -> String {
        (0..INSTANCES)
            .map(|n| {
                std::fs::read_to_string(self.work.join(format!("relay-{n}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let opts = parse(args)?;
    require_services()?;
    let profile = if opts.debug { "debug" } else { "release" };
    let mut build = crate::cmd::cargo();
    build.args(["build", "-p", "relay"]);
    if !opts.debug {
        build.arg("--release");
    }
    crate::cmd::run(&format!("cargo build -p relay ({profile})"), &mut build)?;
    let work = crate::cmd::target_dir().join("cluster");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let run_id = format!("relay_cluster_{}", opts.seed % 1_000_000_007);
    let db = Database::create(&run_id)?;
    let moto = if opts.local_files {
        None
    } else {
        // moto's server, from PyPI into target/moto-venv (as for the blob tests).
        let python = crate::cmd::python_with("moto-venv", crate::cmd::MOTO)?;
        Some(Moto::start(&python, &work.join("moto.log"))?)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let fake = rt.block_on(FakeVideo::start());
    fake.switches.run_ms.store(1_500, Ordering::SeqCst);
    let blobs = match &moto {
        Some(moto) => {
            rt.block_on(create_bucket(&moto.endpoint, &run_id.replace('_', "-")))?;
            format!(
                "[blobs]\nbackend = \"s3\"\nbucket = \"{}\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n",
                run_id.replace('_', "-"),
                moto.endpoint
            )
        }
        None => String::new(),
    };
    let config = format!(
        "[store]\nbackend = \"postgres\"\nurl = \"{}\"\npool_size = 8\n\
         [cluster]\nredis_url = \"redis://{REDIS}\"\nprefix = \"{run_id}\"\n{blobs}\
         [tasks]\ntimeout_secs = 60\npoll_interval_min_ms = 100\npoll_interval_max_ms = 500\nclaim_lease_secs = 3\n\
         [limits]\nrps = 100000\nburst = 100000\npoll_rps_per_task = 100000\n\
         [[channels]]\nname = \"fake\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\npriority = 10\n\
         [[channels]]\nname = \"simulator\"\nkind = \"simulator\"\nmodels = [\"sim-chat\"]\n",
        db.url(),
        fake.openai_base(),
    );
    let site = Site {
        binary: crate::cmd::target_dir().join(profile).join("relay"),
        config: work.join("relay.toml"),
        work: work.clone(),
    };
    std::fs::write(&site.config, config)?;
    eprintln!(
        "xtask: cluster: seed {} ({INSTANCES} {profile} relays, {CLIENTS} clients, {} s of load; repeat with --seed {})",
        opts.seed, opts.secs, opts.seed
    );
    let started = Instant::now();
    let outcome = rt.block_on(campaign(&opts, &site, &fake));
    drop(moto);
    drop(db);
    match outcome {
        Ok(violations) if violations.is_empty() => {
            eprintln!("xtask: cluster: passed in {:.0?}", started.elapsed());
            Ok(())
        }
        Ok(violations) => {
            for v in &violations {
                eprintln!("VIOLATION {v}");
            }
            bail!(
                "{} violations (seed {}; logs in {})",
                violations.len(),
                opts.seed,
                work.display()
            )
        }
        Err(e) => Err(e.context(format!("seed {}; logs in {}", opts.seed, work.display()))),
    }
}

async fn create_bucket(endpoint: &str, bucket: &str) -> anyhow::Result<()> {
    let mut conn = Conn::new(endpoint);
    let (status, body) = conn
        .send(Method::PUT, &format!("/{bucket}"), &[], None)
        .await?;
    if !status.is_success() {
        bail!(
            "creating bucket {bucket}: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// What the clients saw.
#[derive(Default)]
struct Load {
    seen: Seen,
    /// Which instance (by index) acknowledged each task.
    by_instance: std::sync::Mutex<Vec<(String, usize)>>,
    stop: AtomicBool,
    moved: AtomicU64,
}

async fn campaign(opts: &Options, site: &Site, fake: &FakeVideo) -> anyhow::Result<Vec<String>> {
    let mut violations = Vec::new();
    // One at a time: the first makes the first key; the others find it in the shared store.
    let first = site.start(0, None)?;
    let mut relays = vec![first];
    let first_key = relays[0].key.clone();
    for n in 1..INSTANCES {
        relays.push(site.start(n, Some(&first_key))?);
    }
    let bases: Vec<String> = relays.iter().map(|r| r.base.clone()).collect();
    let (key_id, secret) = create_key(
        &bases[0],
        json!({"name": "cluster", "group": "gen2", "quota": QUOTA}),
    )
    .await?;

    // The load, spread over the instances; one instance is killed and started again.
    let load = Arc::new(Load::default());
    let alive: Arc<Vec<AtomicBool>> =
        Arc::new((0..INSTANCES).map(|_| AtomicBool::new(true)).collect());
    let shared_bases = Arc::new(std::sync::Mutex::new(bases.clone()));
    let ops = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let rng = Rng::derive(opts.seed, &[c as u64 + 1]);
        clients.push(tokio::spawn(client(
            c % INSTANCES,
            shared_bases.clone(),
            alive.clone(),
            secret.clone(),
            rng,
            load.clone(),
            ops.clone(),
        )));
    }
    let mut rng = Rng::derive(opts.seed, &[0]);
    let victim = 1 + rng.below(INSTANCES as u64 - 1) as usize;
    let kill_at = Duration::from_millis(1_000 + rng.below(opts.secs * 500));
    // The waits are the point: the kill and the restart land at chosen moments of the load.
    tokio::time::sleep(kill_at).await;
    alive[victim].store(false, Ordering::SeqCst);
    relays[victim].child.kill().context("SIGKILL")?;
    let _ = relays[victim].child.wait();
    eprintln!("xtask: cluster: instance {victim} SIGKILLed {kill_at:?} into the load");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let restarted = site.start(victim, Some(&first_key))?;
    if let Ok(mut b) = shared_bases.lock() {
        b[victim] = restarted.base.clone();
    }
    relays[victim] = restarted;
    alive[victim].store(true, Ordering::SeqCst);
    eprintln!("xtask: cluster: instance {victim} started again");
    let left =
        Duration::from_secs(opts.secs).saturating_sub(kill_at + Duration::from_millis(1_500));
    tokio::time::sleep(left.max(Duration::from_secs(2))).await;
    load.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.context("a client panicked")?;
    }
    let bases: Vec<String> = relays.iter().map(|r| r.base.clone()).collect();
    let acked: Vec<String> = load
        .seen
        .acked
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default();
    eprintln!(
        "xtask: cluster: {} operations, {} tasks acknowledged, {} messages, {} cancels, {} client moves",
        ops.load(Ordering::Relaxed),
        acked.len(),
        load.seen.messages.load(Ordering::Relaxed),
        load.seen.cancels.load(Ordering::Relaxed),
        load.moved.load(Ordering::Relaxed),
    );
    if acked.is_empty() {
        violations.push("no task was acknowledged: the load did nothing".to_owned());
    }
    if load.seen.messages.load(Ordering::Relaxed) == 0 {
        violations.push("no message was answered: the load sent none that worked".to_owned());
    }

    // Every task final, the ledger balanced (read through an instance that was never killed).
    let facts = gather(&bases[0], &key_id, &secret, &acked, &mut violations).await?;
    let checked = audit(&facts);
    violations.extend(checked.violations);

    // None submitted upstream twice (every task has a prompt of its own). A submission an
    // instance repeated after taking a dead one's lease carries the same Idempotency-Key and
    // is a replay at the fake, as at an upstream that honours the header.
    eprintln!(
        "xtask: cluster: {} submissions repeated an idempotency key (replays, not new tasks)",
        fake.replays()
    );
    let twice: Vec<(String, u32)> = fake
        .accepted()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    if !twice.is_empty() {
        violations.push(format!(
            "{} tasks were submitted upstream more than once, e.g. {:?}",
            twice.len(),
            &twice[..twice.len().min(5)]
        ));
    }

    // A file written through one instance downloads through the others.
    let completed = completed_videos(&bases[0], &secret, &acked).await?;
    if opts.local_files {
        eprintln!(
            "xtask: cluster: --local-files: each relay keeps its own files; the cross-instance download is not checked"
        );
    }
    let owners = load
        .by_instance
        .lock()
        .map(|o| o.clone())
        .unwrap_or_default();
    let mut downloads = 0;
    for id in completed.iter().take(if opts.local_files { 0 } else { 6 }) {
        let at = owners.iter().find(|(t, _)| t == id).map_or(0, |(_, n)| *n);
        for (n, base) in bases.iter().enumerate().filter(|(n, _)| *n != at) {
            let mut conn = Conn::new(base);
            let auth = format!("Bearer {secret}");
            let (status, body) = conn
                .send(
                    Method::GET,
                    &format!("/v1/videos/{id}/content"),
                    &[("authorization", &auth)],
                    None,
                )
                .await?;
            if status != StatusCode::OK || body.is_empty() {
                violations.push(format!("{id} (acknowledged by instance {at}) does not download through instance {n}: {status}"));
            }
            downloads += 1;
        }
    }
    if completed.is_empty() {
        violations.push("no video completed: nothing to download".to_owned());
    }

    // The shared rate limit: a burst over the three instances admits what one bucket allows.
    let (_, limited) = create_key(
        &bases[0],
        json!({"name": "limited", "group": "gen2", "rate_limit": {"rps": LIMIT_RPS, "burst": LIMIT_BURST}}),
    )
    .await?;
    let burst_started = Instant::now();
    let mut admitted = 0u64;
    let mut refused = 0u64;
    let mut conns: Vec<Conn> = bases.iter().map(|b| Conn::new(b)).collect();
    for i in 0..(LIMIT_BURST * 3) {
        let conn = &mut conns[i as usize % INSTANCES];
        let (status, _) = conn.get_json("/v1/videos?limit=1", &limited).await?;
        match status {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => violations.push(format!("the rate-limited key got {other}")),
        }
    }
    let allowed =
        LIMIT_BURST + (burst_started.elapsed().as_secs_f64() * LIMIT_RPS as f64).ceil() as u64;
    if admitted > allowed {
        violations.push(format!(
            "the shared rate limit did not hold: {admitted} of {} admitted across {INSTANCES} instances, one bucket allows {allowed}",
            LIMIT_BURST * 3
        ));
    }
    eprintln!(
        "xtask: cluster: {} tasks final, {} ledger entries, {} completed videos, {downloads} cross-instance downloads, rate limit {admitted} admitted / {refused} refused (one bucket allows {allowed})",
        facts.tasks.len(),
        facts.entries.len(),
        completed.len(),
    );
    drop(relays);
    if site.logs().contains("panicked") {
        violations.push(format!("a relay panicked (see {})", site.work.display()));
    }
    Ok(violations)
}

async fn create_key(base: &str, body: Value) -> anyhow::Result<(String, String)> {
    let mut conn = Conn::new(base);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let (status, bytes) = conn
        .send(
            Method::POST,
            "/admin/keys",
            &[("authorization", &auth)],
            Some(&body),
        )
        .await?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    match (status, v["id"].as_str(), v["key"].as_str()) {
        (StatusCode::OK, Some(id), Some(key)) => Ok((id.to_owned(), key.to_owned())),
        _ => bail!(
            "creating a key: {status} {}",
            String::from_utf8_lossy(&bytes)
        ),
    }
}

/// The acknowledged first-format tasks that completed.
async fn completed_videos(
    base: &str,
    secret: &str,
    acked: &[String],
) -> anyhow::Result<Vec<String>> {
    let mut conn = Conn::new(base);
    let mut done = Vec::new();
    for id in acked
        .iter()
        .filter(|id| Format::of(id) == Some(Format::Video))
    {
        let (status, v) = conn.get_json(&format!("/v1/videos/{id}"), secret).await?;
        if status == StatusCode::OK && v["status"] == "completed" {
            done.push(id.clone());
        }
    }
    Ok(done)
}

/// One client: submissions, polls, cancels, downloads and messages on its instance, moving to
/// the next live instance when its own stops answering.
async fn client(
    mut at: usize,
    bases: Arc<std::sync::Mutex<Vec<String>>>,
    alive: Arc<Vec<AtomicBool>>,
    key: String,
    mut rng: Rng,
    load: Arc<Load>,
    ops: Arc<AtomicUsize>,
) {
    let base_of = |n: usize| bases.lock().map(|b| b[n].clone()).unwrap_or_default();
    let mut conn = Conn::new(&base_of(at));
    let bearer = format!("Bearer {key}");
    let mut n = 0u64;
    while !load.stop.load(Ordering::SeqCst) {
        n += 1;
        let op = ops.fetch_add(1, Ordering::Relaxed);
        let roll = rng.below(100);
        let result = if roll < 35 {
            let prompt = format!("cluster op {op}");
            let body =
                json!({"model": "model_h3", "prompt": prompt, "size": "64x64", "seconds": "5"});
            conn.send(
                Method::POST,
                "/v1/videos",
                &[("authorization", &bearer)],
                Some(&body),
            )
            .await
            .map(|(status, bytes)| {
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                match (status, v["id"].as_str()) {
                    (StatusCode::OK, Some(id)) => {
                        if let Ok(mut acked) = load.seen.acked.lock() {
                            acked.push(id.to_owned());
                        }
                        if let Ok(mut by) = load.by_instance.lock() {
                            by.push((id.to_owned(), at));
                        }
                    }
                    _ => {
                        load.seen.refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        } else if roll < 40 {
            match load.seen.random_acked(&mut rng) {
                Some(id) => {
                    let res = conn
                        .send(
                            Method::POST,
                            &format!("/v1/videos/{id}/cancel"),
                            &[("authorization", &bearer)],
                            None,
                        )
                        .await;
                    if matches!(res, Ok((StatusCode::OK, _))) {
                        load.seen.cancels.fetch_add(1, Ordering::Relaxed);
                    }
                    res.map(drop)
                }
                None => Ok(()),
            }
        } else if roll < 80 {
            let path = match load.seen.random_acked(&mut rng) {
                Some(id) if roll < 70 => format!("/v1/videos/{id}"),
                Some(id) => format!("/v1/videos/{id}/content"),
                None => "/v1/videos?limit=5".to_owned(),
            };
            conn.send(Method::GET, &path, &[("authorization", &bearer)], None)
                .await
                .map(drop)
        } else {
            let stream = roll >= 90;
            let body = json!({"model": "sim-chat", "max_tokens": 16 + rng.below(48), "stream": stream,
                              "messages": [{"role": "user", "content": format!("cluster message {n}")}]});
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
                load.seen.messages.fetch_add(1, Ordering::Relaxed);
            }
            res.map(drop)
        };
        if result.is_err() {
            // This instance stopped answering: move to the next live one.
            let mut next = (at + 1) % INSTANCES;
            for _ in 0..INSTANCES {
                if alive[next].load(Ordering::SeqCst) {
                    break;
                }
                next = (next + 1) % INSTANCES;
            }
            at = next;
            conn = Conn::new(&base_of(at));
            load.moved.fetch_add(1, Ordering::Relaxed);
        }
    }
}
