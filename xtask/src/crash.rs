//! `cargo xtask crash`: SIGKILLs the relay binary at random moments under load, cycle after
//! cycle over one data directory, then checks through the public and admin APIs that no
//! acknowledged task was lost, that every task ended final, and that the key's ledger balances.
//!
//! Each cycle starts the relay (now and then it is also killed while it starts up), drives
//! submissions of both formats, cancels, polls and `/v1/messages` calls (whole and streamed) on
//! several connections at once, and SIGKILLs it after a random delay. A submission answered
//! `200` is acknowledged: the relay promised to keep it. A seed makes the random choices
//! (delays, operations, scenarios) repeatable; timing on a shared machine is not.
//!
//! With `--chaos` the video tasks go to a fake vendor that misbehaves at random, and what it
//! saw is checked too (`chaos`).
//!
//! This file holds the kill cycles and the verdict; the load is `workload`, what is read
//! after the last start `facts`, the invariants over it `audit`.

pub(crate) mod audit;
mod chaos;
pub(crate) mod conn;
pub(crate) mod facts;
mod options;
pub(crate) mod site;
pub(crate) mod workload;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use audit::audit;
use conn::Conn;
use facts::{Found, gather};
pub use options::USAGE;
use options::{Options, parse};
use site::{ADMIN_TOKEN, CONFIG, QUOTA, Site};
use workload::{Rng, Seen, drive};

use crate::fake_video::FakeVideo;

/// The longest a cycle runs before its SIGKILL.
const MAX_KILL_DELAY_MS: u64 = 1500;
/// The same with `--chaos`, whose tasks take longer (a vendor's run, polls, a download).
const MAX_CHAOS_KILL_DELAY_MS: u64 = 2500;

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let opts = parse(args)?;
    let profile = if opts.debug { "debug" } else { "release" };
    let mut build = crate::cmd::cargo();
    build.args(["build", "-p", "relay"]);
    if !opts.debug {
        build.arg("--release");
    }
    crate::cmd::run(&format!("cargo build -p relay ({profile})"), &mut build)?;
    let name = if opts.chaos { "crash --chaos" } else { "crash" };
    let work = crate::cmd::target_dir().join(if opts.chaos { "crash-chaos" } else { "crash" });
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let site = Site {
        binary: crate::cmd::target_dir().join(profile).join("relay"),
        config: work.join("relay.toml"),
        data: work.join("data"),
        log: work.join("relay.log"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // The fake vendor lives in this process, across every start of the relay.
    let fake = opts
        .chaos
        .then(|| rt.block_on(chaos::start_fake(opts.seed)));
    match &fake {
        Some(fake) => std::fs::write(&site.config, chaos::config(fake))?,
        None => std::fs::write(&site.config, CONFIG)?,
    }
    eprintln!(
        "xtask: {name}: seed {} ({} cycles, {} connections, {profile} binary; repeat with --seed {})",
        opts.seed, opts.cycles, opts.workers, opts.seed
    );
    let started = Instant::now();
    let outcome = campaign(&rt, &opts, &site, fake.as_ref());
    let elapsed = started.elapsed();
    match outcome {
        Ok(summary) => {
            if let Some(c) = &summary.chaos {
                eprintln!(
                    "xtask: {name}: the vendor received {} submissions and made {} tasks ({} closed unanswered, {} read and dropped, {} answered late; {} 429s, {} 500s, {} errors inside a 200); of its tasks {} failed, {} lost, {} completed ({} delivered whole), {} downloads cut off; at the relay {} completed ({} served during the load, {} checked whole after), {} failed, {} cancelled; {} tasks submitted again after a submission the vendor may have taken",
                    c.received,
                    c.made,
                    c.closed,
                    c.dropped,
                    c.late,
                    c.rate_limited,
                    c.server_errors,
                    c.errors_in_200,
                    c.vendor_failed,
                    c.lost,
                    c.vendor_completed,
                    c.delivered,
                    c.resets,
                    c.completed,
                    c.served,
                    c.checked,
                    c.failed,
                    c.cancelled,
                    c.resent,
                );
            }
            eprintln!(
                "xtask: {name}: {} cycles ({} killed while starting), {} acknowledged ({} cancels, {} messages answered, {} refused), {} tasks stored, {} final, {} ledger entries ({} charges), balance {} of {}, seed {}, {:.0?}",
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
                eprintln!("xtask: {name}: passed");
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
    /// With `--chaos`: what the vendor saw and what became of it.
    chaos: Option<chaos::Counts>,
}

fn campaign(
    rt: &tokio::runtime::Runtime,
    opts: &Options,
    site: &Site,
    fake: Option<&FakeVideo>,
) -> anyhow::Result<Summary> {
    let mut summary = Summary::default();
    let seen = Arc::new(Seen::default());
    let mut rng = Rng::new(opts.seed);
    let mut key: Option<(String, String)> = None;
    let seed = opts.seed;
    let chaos_load = move |w| chaos::start(seed, w);
    let start: &dyn Fn(workload::Worker) -> tokio::task::JoinHandle<()> = if opts.chaos {
        &chaos_load
    } else {
        &workload::start
    };
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
        let max_delay = if opts.chaos {
            MAX_CHAOS_KILL_DELAY_MS
        } else {
            MAX_KILL_DELAY_MS
        };
        let kill_after = Duration::from_millis(rng.below(max_delay + 1));
        rt.block_on(drive(
            &relay.base,
            &secret,
            opts,
            cycle,
            kill_after,
            &mut relay.child,
            &seen,
            start,
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
    rt.block_on(verify(
        &relay.base,
        &key_id,
        &secret,
        &acked,
        fake.map(|f| (f, &*seen)),
        &mut summary,
    ))?;
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

/// The checks after the last start: gathers the facts, then audits them; with `--chaos`
/// (`chaos`: the fake vendor and what the load saw) the vendor's side too.
async fn verify(
    base: &str,
    key_id: &str,
    secret: &str,
    acked: &[String],
    chaos: Option<(&FakeVideo, &Seen)>,
    summary: &mut Summary,
) -> anyhow::Result<()> {
    let mut violations = Vec::new();
    let facts = gather(base, key_id, secret, acked, &mut violations).await?;
    let audit = audit(&facts);
    violations.extend(audit.violations);
    if let Some((fake, seen)) = chaos {
        let counts = chaos::verify(base, secret, &facts, fake, seen, &mut violations).await?;
        summary.chaos = Some(counts);
    }
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
