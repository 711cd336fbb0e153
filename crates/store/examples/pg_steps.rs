//! What the PostgreSQL store's hot steps cost, counted on the wire and timed.
//!
//! A small proxy between the store and the server reads every message the store sends and
//! counts, per step: the requests the store waits on (a simple query, or a `Sync` that ends
//! an extended-protocol request), the statements the server parses (`Parse`), and the
//! prepared statements closed again (`Close`, sent without waiting). The counts do not depend
//! on the machine's load; the times do (run it several times and take the median).
//!
//! ```text
//! cargo run -p store --example pg_steps [-- ROUNDS]
//! ```
//!
//! It runs on `RELAY_TEST_POSTGRES_URL` (by default `postgres://postgres@127.0.0.1:5432/test`)
//! in a schema of its own, dropped at the end. Each round: a task created with its
//! pre-deduction, moved to running (no ledger entry), claimed and moved again (a step starting
//! from the row its claim returned), read, moved to succeeded with its settlement, then one
//! chat charge and one key lookup by hash.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use store::{
    Charge, Key, KeyStatus, LedgerDraft, LedgerKind, Outputs, Params, PgStore, Store, Task,
    TaskKind, TaskStatus,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Rounds timed unless the first argument says otherwise.
const ROUNDS: usize = 2000;
/// Rounds run first, untimed, so that connections and caches are warm.
const WARM_UP: usize = 50;

/// What the store sent through the proxy.
#[derive(Default)]
struct Counters {
    /// Requests the store waits on: simple queries and `Sync`s not right after a `Close`.
    requests: AtomicU64,
    /// Statements the server parses.
    parses: AtomicU64,
    /// Prepared statements closed.
    closes: AtomicU64,
}

#[derive(Clone, Copy, Default)]
struct Count {
    requests: u64,
    parses: u64,
    closes: u64,
}

impl Counters {
    fn now(&self) -> Count {
        Count {
            requests: self.requests.load(Ordering::SeqCst),
            parses: self.parses.load(Ordering::SeqCst),
            closes: self.closes.load(Ordering::SeqCst),
        }
    }
}

/// One step's totals over the timed rounds.
#[derive(Default)]
struct Step {
    name: &'static str,
    time: Duration,
    requests: u64,
    parses: u64,
    closes: u64,
}

impl Step {
    fn add(&mut self, before: Count, after: Count, time: Duration) {
        self.time += time;
        self.requests += after.requests - before.requests;
        self.parses += after.parses - before.parses;
        self.closes += after.closes - before.closes;
    }
}

/// Reads the store's messages from `from`, counts them, and passes them on to `to`.
async fn count_frontend(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    counters: Arc<Counters>,
) -> Res<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    // Until the startup message, messages have no type byte (an SSL or GSS request may come
    // first).
    let mut started = false;
    let mut last = 0u8;
    loop {
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&chunk[..n]).await?;
        buf.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            if !started {
                let Some(len) = rest.get(..4) else { break };
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                if rest.len() < len || len < 8 {
                    break;
                }
                let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                // 3.0 startup; the SSL (80877103) and GSS (80877104) requests precede it.
                started = code == 196_608;
                at += len;
                continue;
            }
            let Some(head) = rest.get(..5) else { break };
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if rest.len() < 1 + len {
                break;
            }
            let kind = head[0];
            match kind {
                b'Q' => {
                    counters.requests.fetch_add(1, Ordering::SeqCst);
                }
                b'S' if last != b'C' => {
                    counters.requests.fetch_add(1, Ordering::SeqCst);
                }
                b'P' => {
                    counters.parses.fetch_add(1, Ordering::SeqCst);
                }
                b'C' => {
                    counters.closes.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
            last = kind;
            at += 1 + len;
        }
        buf.drain(..at);
    }
}

/// A proxy on a loopback port of its own to `server`, counting what goes through.
async fn proxy(server: String, counters: Arc<Counters>) -> Res<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = server.clone();
            let counters = counters.clone();
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(&server).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                let (client_read, mut client_write) = client.into_split();
                let (mut upstream_read, upstream_write) = upstream.into_split();
                let up = tokio::spawn(count_frontend(client_read, upstream_write, counters));
                let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
                up.abort();
            });
        }
    });
    Ok(port)
}

fn key(id: &str) -> Key {
    Key {
        id: id.to_owned(),
        name: "bench".to_owned(),
        group: "default".to_owned(),
        hash: format!("hash_{id}"),
        prefix: "sk-".to_owned(),
        quota: Some(i64::MAX / 2),
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: 1,
        webhook_url: None,
        webhook_secret: None,
    }
}

fn task(id: &str, owner: &str, params: &Params) -> Task {
    Task {
        id: id.to_owned(),
        kind: TaskKind::Video,
        owner: owner.to_owned(),
        model: "model_h3".to_owned(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: 1,
        updated_at: 1,
        completed_at: None,
        expires_at: None,
        deadline_ms: 10_000_000,
        next_poll_ms: Some(5),
        params: params.clone(),
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        polled_ms: None,
        attempts: 0,
        sim: None,
        outputs: Outputs::default(),
        error: None,
        warnings: Vec::new(),
        price: 30,
        callback_url: None,
    }
}

fn draft(key_id: &str, task_id: &str, kind: LedgerKind, amount: i64) -> LedgerDraft {
    LedgerDraft {
        key_id: key_id.to_owned(),
        task_id: task_id.to_owned(),
        kind,
        amount,
    }
}

async fn run(url: &str, counters: &Counters, rounds: usize) -> Res<Vec<Step>> {
    let store = PgStore::connect(url, 1).await?;
    let key_id = "key_bench";
    let hash = format!("hash_{key_id}");
    store.create_key(&key(key_id)).await?;
    let params = Params::new(&serde_json::json!({"prompt": "a cat", "seconds": 5}))?;
    let mut steps: Vec<Step> = [
        "create_task (1 ledger entry)",
        "transition (no ledger entry)",
        "claim_due (1 task)",
        "transition after its claim",
        "task",
        "transition (1 ledger entry)",
        "charges (1 charge)",
        "key_by_hash",
    ]
    .into_iter()
    .map(|name| Step {
        name,
        ..Step::default()
    })
    .collect();
    let running = |t: &mut Task| t.progress = 10;
    let done = |t: &mut Task| t.progress = 100;
    for round in 0..WARM_UP + rounds {
        let id = format!("video_{}", ulid::Ulid::new());
        let timed = round >= WARM_UP;
        let mut step = 0;
        macro_rules! measure {
            ($call:expr) => {{
                let before = counters.now();
                let start = Instant::now();
                let out = $call.await?;
                let time = start.elapsed();
                if timed {
                    steps[step].add(before, counters.now(), time);
                }
                step += 1;
                out
            }};
        }
        let prededuct = [draft(key_id, &id, LedgerKind::Prededuct, -30)];
        measure!(store.create_task(&task(&id, key_id, &params), &prededuct));
        measure!(store.transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &running,
            &[]
        ));
        let claimed = measure!(store.claim_due(10, 60_000, 1));
        if claimed.len() != 1 {
            return Err(format!("task {id} not claimed").into());
        }
        measure!(store.transition(
            &id,
            &[TaskStatus::Running],
            TaskStatus::Running,
            &running,
            &[]
        ));
        let read = measure!(store.task(&id));
        if read.is_none() {
            return Err(format!("task {id} not found").into());
        }
        let settle = [draft(key_id, &id, LedgerKind::Settle, 5)];
        measure!(store.transition(
            &id,
            &[TaskStatus::Running],
            TaskStatus::Succeeded,
            &done,
            &settle
        ));
        let charge = [Charge {
            key_id: key_id.to_owned(),
            task_id: format!("msg_{}", ulid::Ulid::new()),
            amount: 3,
        }];
        measure!(store.charges(&charge));
        let found = measure!(store.key_by_hash(&hash));
        if found.is_none() {
            return Err("key not found by hash".into());
        }
        let _ = step;
    }
    Ok(steps)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let rounds = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => ROUNDS,
    };
    let server = std::env::var("RELAY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let config: tokio_postgres::Config = server.parse()?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => return Err("the server must be reached over TCP".into()),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);

    let (admin, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let schema = format!("bench_{}", ulid::Ulid::new().to_string().to_lowercase());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await?;

    let counters = Arc::new(Counters::default());
    let proxy_port = proxy(format!("{host}:{port}"), counters.clone()).await?;
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = format!(
        "{}{sep}options=-c%20search_path%3D{schema}",
        with_port(&server, proxy_port)?
    );

    let result = run(&url, &counters, rounds).await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    let steps = result?;

    println!("{rounds} rounds, one connection, after {WARM_UP} untimed rounds");
    println!(
        "{:<30} {:>9} {:>9} {:>9} {:>10}",
        "step", "requests", "parses", "closes", "µs/step"
    );
    let per = |n: u64| n as f64 / rounds as f64;
    for step in &steps {
        println!(
            "{:<30} {:>9.2} {:>9.2} {:>9.2} {:>10.1}",
            step.name,
            per(step.requests),
            per(step.parses),
            per(step.closes),
            step.time.as_secs_f64() * 1e6 / rounds as f64
        );
    }
    Ok(())
}

/// `url` (`postgres://[user@]host[:port]/...`) with its port replaced by `port`.
fn with_port(url: &str, port: u16) -> Res<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("not a postgres:// URL: {url}").into());
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((user, hostport)) => (format!("{user}@"), hostport),
        None => (String::new(), authority),
    };
    let host = match hostport.rsplit_once(':') {
        Some((host, p)) if p.chars().all(|c| c.is_ascii_digit()) => host,
        _ => hostport,
    };
    Ok(format!("{scheme}://{user}{host}:{port}{tail}"))
}
