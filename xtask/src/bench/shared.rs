//! The `postgres` section: durable `POST /v1/videos` and `GET /v1/videos/{id}` with the store
//! on PostgreSQL (a scratch database on 127.0.0.1:5432), one relay against three sharing it.
//! Three relays get the same load as one, spread over them (a wrk per relay, the connections
//! split between them); their CPU per request is the three together. PostgreSQL's own
//! processes are part of what is measured (not foreign), and their CPU per request is shown
//! apart, with the WAL it wrote. On a machine of two cores three relays measure what sharing
//! costs, not what scaling to more machines gives. One relay also runs with the connections
//! each of three gets: a relay batches what waits at once, so a task's cost depends on how
//! much load one relay carries, and that run says what a third of the load costs alone.
//! Three relays also run each on a database of its own (nothing shared but the server): what
//! three relay processes cost on this machine, against which sharing one database is measured.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;

use super::generator::{Gen, Generators, Load};
use super::load::{Call, TICKS_PER_SEC, call_once, cpu_ticks, proc_stats};
use super::loadgen::Outcome;
use super::measure::{MachineTicks, Run, pct_of_core};
use super::party::Party;
use super::relays::{ADMIN, Ctx, RelayProc, SUBMISSION, relay_proc, videos_config};
use super::report::{Report, thousands};
use crate::cluster::Database;

/// Ticks of every process named `postgres` (the server and its backends).
fn postgres_ticks() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| cpu_ticks(pid).0)
        .sum()
}

/// The server's WAL position in bytes (`psql`, run by the caller before and after a load:
/// what the load wrote, exactly, where the statistics views lag by up to a second).
fn wal_lsn() -> anyhow::Result<u64> {
    let text = crate::cluster::psql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")?;
    text.trim()
        .parse()
        .with_context(|| format!("the WAL position psql gave: {text:?}"))
}

/// Ticks of this process and the children it waited for (the load generators).
fn own_ticks() -> u64 {
    cpu_ticks(std::process::id()).0 + {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        stat.rsplit(") ")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(13)
            .take(2)
            .filter_map(|f| f.parse::<u64>().ok())
            .sum::<u64>()
    }
}

/// A measured spread load: the outcome summed over the relays, and CPU per request.
struct Spread {
    run: Run,
    pg_cpu_us: f64,
    /// WAL PostgreSQL wrote a request, in bytes.
    wal_bytes: f64,
}

impl Spread {
    /// Prints the run's line: `relays` says which, `what` the load.
    fn print(&self, relays: &str, what: &str) {
        eprintln!(
            "bench: PostgreSQL, {relays}: {what}: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs (wrk's, corrected), slowest {:.0} µs, relays {:.1} µs CPU/request, PostgreSQL {:.1} µs and {:.0} bytes of WAL, foreign CPU {:.1}% of a core, stolen {:.1}%",
            self.run.rps(),
            self.run.out.p50_us,
            self.run.out.p99_us,
            self.run.out.max_us,
            self.run.cpu_us,
            self.pg_cpu_us,
            self.wal_bytes,
            self.run.foreign_pct,
            self.run.stolen_pct
        );
    }
}

/// Runs `loads` (one per relay) at once with wrk and measures the relays (`pids`) together.
fn spread(
    gens: &Generators,
    loads: &[Load],
    pids: &[u32],
    fake: u32,
    conns: usize,
) -> anyhow::Result<Spread> {
    // The relays' CPU ticks, user + system and system alone, summed.
    let relay_ticks = || {
        pids.iter()
            .map(|p| cpu_ticks(*p))
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y))
    };
    let wal0 = wal_lsn()?;
    let started = Instant::now();
    let ((relays0, kernel0), machine0, pg0, own0, fake0) = (
        relay_ticks(),
        MachineTicks::now(),
        postgres_ticks(),
        own_ticks(),
        cpu_ticks(fake).0,
    );
    let outs: Vec<anyhow::Result<Outcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = loads
            .iter()
            .map(|load| s.spawn(move || gens.run(Gen::Wrk, load)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a load thread panicked")))
            })
            .collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let ((relays1, kernel1), machine1, pg1, own1, fake1) = (
        relay_ticks(),
        MachineTicks::now(),
        postgres_ticks(),
        own_ticks(),
        cpu_ticks(fake).0,
    );
    let wal = wal_lsn()?.saturating_sub(wal0);
    let kernel = kernel1.saturating_sub(kernel0);
    let mut out = Outcome::default();
    for o in outs {
        let o = o?;
        out.requests += o.requests;
        out.errors += o.errors;
        out.secs = out.secs.max(o.secs);
        out.p50_us = out.p50_us.max(o.p50_us);
        out.p99_us = out.p99_us.max(o.p99_us);
        out.max_us = out.max_us.max(o.max_us);
    }
    let tick_us = 1_000_000.0 / TICKS_PER_SEC;
    let requests = out.requests.max(1) as f64;
    let relays = relays1.saturating_sub(relays0);
    let pg = pg1.saturating_sub(pg0);
    let ours = relays + pg + own1.saturating_sub(own0) + fake1.saturating_sub(fake0);
    let foreign = machine1
        .busy
        .saturating_sub(machine0.busy)
        .saturating_sub(ours);
    let stolen = machine1.stolen.saturating_sub(machine0.stolen);
    let rss: u64 = pids.iter().map(|p| proc_stats(*p).1).sum();
    Ok(Spread {
        run: Run {
            generator: Gen::Wrk,
            conns,
            cpu_us: relays as f64 * tick_us / requests,
            kernel_us: kernel as f64 * tick_us / requests,
            out,
            rss_end_kib: rss,
            rss_peak_kib: rss,
            foreign_pct: pct_of_core(foreign, secs),
            niced_pct: 0.0,
            stolen_pct: pct_of_core(stolen, secs),
            attempts: 1,
            threads: Vec::new(),
        },
        pg_cpu_us: pg as f64 * tick_us / requests,
        wal_bytes: wal as f64 / requests,
    })
}

/// A relay over each of `configs`, each over a data directory of its own under `work`. Relays
/// of one database share its first key (printed by the first of them); a relay of a database
/// of its own has its own.
fn start_relays(
    binary: &Path,
    work: &Path,
    configs: &[String],
    shared: bool,
) -> anyhow::Result<Vec<RelayProc>> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work)?;
    let mut relays: Vec<RelayProc> = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let path = work.join(format!("relay-{i}.toml"));
        std::fs::write(&path, config)?;
        let key = relays.first().filter(|_| shared).map(|r| r.key.clone());
        let relay = crate::relay::start_relay_keyed(
            binary,
            &path,
            &work.join(format!("data-{i}")),
            ADMIN,
            "error",
            key.as_deref(),
        )?;
        relays.push(relay_proc(relay)?);
    }
    Ok(relays)
}

/// How the section's relays meet PostgreSQL.
#[derive(Clone, Copy, PartialEq)]
enum Setup {
    /// `n` relays sharing one database.
    Shared(usize),
    /// Three relays, each on a database of its own: nothing shared but the server and the
    /// machine, the measure of what three relay processes cost here without sharing.
    Apart,
}

impl Setup {
    fn relays(self) -> usize {
        match self {
            Setup::Shared(n) => n,
            Setup::Apart => 3,
        }
    }
}

/// `total` connections split over `n` loads.
fn split(total: usize, n: usize, i: usize) -> usize {
    total / n + usize::from(i < total % n)
}

pub fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    if std::net::TcpStream::connect("127.0.0.1:5432").is_err() {
        bail!(
            "the postgres section needs PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`)"
        );
    }
    let fake = Party::start(&ctx.xtask, "fake-video", &[])?;
    let mut rows: Vec<(Spread, Option<Spread>, Spread)> = Vec::new();
    let mut apart: Option<Spread> = None;
    for setup in [Setup::Shared(1), Setup::Shared(3), Setup::Apart] {
        let n = setup.relays();
        let dbs = (0..if setup == Setup::Apart { n } else { 1 })
            .map(|i| Database::create(&format!("relay_bench_{}_{n}_{i}", std::process::id())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let configs: Vec<String> = (0..n)
            .map(|i| {
                let db = &dbs[i % dbs.len()];
                format!(
                    "{}[store]\nurl = \"{}\"\n",
                    videos_config(fake.addr),
                    db.url()
                )
            })
            .collect();
        let name = match setup {
            Setup::Shared(n) => format!("postgres-{n}"),
            Setup::Apart => "postgres-apart".to_owned(),
        };
        let work = crate::cmd::target_dir().join("bench").join(name);
        let relays = start_relays(&ctx.relay, &work, &configs, dbs.len() == 1)?;
        let pids: Vec<u32> = relays.iter().map(RelayProc::pid).collect();
        let key = relays[0].key.clone();
        let submit_as = |addr: SocketAddr, conns: usize, key: &str| Load {
            addr,
            conns,
            secs: ctx.secs,
            method: "POST",
            path: "/v1/videos".into(),
            headers: vec![
                ("authorization", format!("Bearer {key}")),
                ("content-type", "application/json".into()),
            ],
            body: SUBMISSION.into(),
            paths_file: None,
        };
        let submit = |addr: SocketAddr, conns: usize| submit_as(addr, conns, &key);
        if setup == Setup::Apart {
            // Each relay's load with its own database's key.
            let loads = |secs: Option<u64>| -> Vec<Load> {
                relays
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let load = submit_as(r.addr, split(16, n, i), &r.key);
                        match secs {
                            Some(secs) => load.secs(secs),
                            None => load,
                        }
                    })
                    .collect()
            };
            spread(&ctx.gens, &loads(Some(1)), &pids, fake.pid(), 16)?;
            let s = spread(&ctx.gens, &loads(None), &pids, fake.pid(), 16)
                .context("durable submissions on PostgreSQL, a database per relay")?;
            s.print(
                "3 relays on databases of their own",
                "durable POST /v1/videos, 16 conns",
            );
            report.run(
                "PostgreSQL, 3 relays, a database each: durable `POST /v1/videos`",
                &s.run,
            );
            drop(relays);
            drop(dbs);
            apart = Some(s);
            continue;
        }
        let call = Call {
            method: "POST",
            path: "/v1/videos".into(),
            headers: vec![
                ("authorization", format!("Bearer {key}")),
                ("content-type", "application/json".into()),
            ],
            body: Bytes::from_static(SUBMISSION.as_bytes()),
        };
        let (status, body) = ctx.runtime.block_on(call_once(relays[0].addr, &call))?;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let Some(id) = v["id"].as_str().filter(|_| status == 200) else {
            bail!("POST /v1/videos on PostgreSQL answered {status}: {v}");
        };
        let poll = |addr: SocketAddr, conns: usize| Load {
            addr,
            conns,
            secs: ctx.secs,
            method: "GET",
            path: format!("/v1/videos/{id}"),
            headers: vec![("authorization", format!("Bearer {key}"))],
            body: String::new(),
            paths_file: None,
        };
        let loads = |total: usize, make: &dyn Fn(SocketAddr, usize) -> Load| -> Vec<Load> {
            relays
                .iter()
                .enumerate()
                .map(|(i, r)| make(r.addr, split(total, n, i)))
                .collect()
        };
        // A warm-up of each (pool connections, caches), then the measured runs.
        let warm = |l: Vec<Load>| l.into_iter().map(|l| l.secs(1)).collect::<Vec<_>>();
        spread(&ctx.gens, &warm(loads(16, &submit)), &pids, fake.pid(), 16)?;
        let s = spread(&ctx.gens, &loads(16, &submit), &pids, fake.pid(), 16)
            .context("durable submissions on PostgreSQL")?;
        // One relay again with the connections each of three relays gets: what a task costs
        // at the batch sizes of a third of the load.
        let share = split(16, 3, 1);
        let third = if n == 1 {
            Some(
                spread(&ctx.gens, &loads(share, &submit), &pids, fake.pid(), share)
                    .context("durable submissions on PostgreSQL, a third of the connections")?,
            )
        } else {
            None
        };
        spread(&ctx.gens, &warm(loads(32, &poll)), &pids, fake.pid(), 32)?;
        let p = spread(&ctx.gens, &loads(32, &poll), &pids, fake.pid(), 32)
            .context("polls on PostgreSQL")?;
        let mut measured = vec![("durable POST /v1/videos, 16 conns".to_owned(), &s)];
        if let Some(third) = &third {
            measured.push((format!("durable POST /v1/videos, {share} conns"), third));
        }
        measured.push(("GET /v1/videos/{id}, 32 conns".to_owned(), &p));
        for (what, m) in measured {
            m.print(&format!("{n} relay(s)"), &what);
        }
        report.run(
            &format!("PostgreSQL, {n} relay(s): durable `POST /v1/videos`"),
            &s.run,
        );
        if let Some(third) = &third {
            report.run(
                &format!(
                    "PostgreSQL, {n} relay(s): durable `POST /v1/videos`, a third of the connections"
                ),
                &third.run,
            );
        }
        report.run(
            &format!("PostgreSQL, {n} relay(s): `GET /v1/videos/{{id}}`"),
            &p.run,
        );
        drop(relays);
        drop(dbs);
        rows.push((s, third, p));
    }
    if let [(s1, third, p1), (s3, _, p3)] = rows.as_slice() {
        let shared = s3.run.rps() / s1.run.rps().max(1e-9);
        report.target(
            s1.run.rps() >= 2000.0,
            format!(
                "PostgreSQL, one relay: durable POST /v1/videos at {} a second (target: at least 2,000)",
                thousands(s1.run.rps())
            ),
        );
        report.target(
            s1.pg_cpu_us <= 300.0,
            format!(
                "PostgreSQL, one relay: PostgreSQL's CPU {:.0} µs a durable submission (target: at most 300)",
                s1.pg_cpu_us
            ),
        );
        report.target(
            shared >= 0.95,
            format!(
                "PostgreSQL: durable submissions of three relays sharing the database ÷ one = {shared:.2} (target: at least 0.95)"
            ),
        );
        report.ratio(format!(
            "PostgreSQL, durable POST /v1/videos, 16 conns: three relays ÷ one = {:.2} ({} ÷ {} req/s; p99 {:.1} vs {:.1} ms; relay CPU per request {:.1} vs {:.1} µs, PostgreSQL {:.1} vs {:.1} µs, WAL {:.0} vs {:.0} bytes)",
            s3.run.rps() / s1.run.rps().max(1e-9),
            thousands(s3.run.rps()),
            thousands(s1.run.rps()),
            s3.run.out.p99_us / 1000.0,
            s1.run.out.p99_us / 1000.0,
            s3.run.cpu_us,
            s1.run.cpu_us,
            s3.pg_cpu_us,
            s1.pg_cpu_us,
            s3.wal_bytes,
            s1.wal_bytes
        ));
        if let Some(a) = &apart {
            report.ratio(format!(
                "PostgreSQL, durable POST /v1/videos, 16 conns: three relays sharing one database ÷ three relays on a database each = {:.2}, what sharing costs ({} ÷ {} req/s; relay CPU per request {:.1} vs {:.1} µs, PostgreSQL {:.1} vs {:.1} µs); three relays on a database each ÷ one relay = {:.2}, what three relay processes cost on this machine without sharing",
                s3.run.rps() / a.run.rps().max(1e-9),
                thousands(s3.run.rps()),
                thousands(a.run.rps()),
                s3.run.cpu_us,
                a.run.cpu_us,
                s3.pg_cpu_us,
                a.pg_cpu_us,
                a.run.rps() / s1.run.rps().max(1e-9)
            ));
        }
        if let Some(t) = third {
            report.ratio(format!(
                "PostgreSQL, durable POST /v1/videos: three relays at 16 conns in all ÷ one relay at {} conns (each relay's share) = {:.2} ({} ÷ {} req/s; relay CPU per request {:.1} vs {:.1} µs, PostgreSQL {:.1} vs {:.1} µs, WAL {:.0} vs {:.0} bytes)",
                t.run.conns,
                s3.run.rps() / t.run.rps().max(1e-9),
                thousands(s3.run.rps()),
                thousands(t.run.rps()),
                s3.run.cpu_us,
                t.run.cpu_us,
                s3.pg_cpu_us,
                t.pg_cpu_us,
                s3.wal_bytes,
                t.wal_bytes
            ));
        }
        report.ratio(format!(
            "PostgreSQL, GET /v1/videos/{{id}}, 32 conns: three relays ÷ one = {:.2} ({} ÷ {} req/s; p99 {:.1} vs {:.1} ms, slowest {:.1} vs {:.1} ms; relay CPU per request {:.1} vs {:.1} µs, PostgreSQL {:.1} vs {:.1} µs)",
            p3.run.rps() / p1.run.rps().max(1e-9),
            thousands(p3.run.rps()),
            thousands(p1.run.rps()),
            p3.run.out.p99_us / 1000.0,
            p1.run.out.p99_us / 1000.0,
            p3.run.out.max_us / 1000.0,
            p1.run.out.max_us / 1000.0,
            p3.run.cpu_us,
            p1.run.cpu_us,
            p3.pg_cpu_us,
            p1.pg_cpu_us
        ));
    }
    Ok(())
}
