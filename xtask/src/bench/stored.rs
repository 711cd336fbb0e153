//! The `stored` section: reading tasks and starting up over stores of 10,000 and 1,000,000
//! finished tasks of one key.
//!
//! The stores are seeded through the store crate (`Store::create_key`, `Store::create_task`
//! from many threads) into `target/bench/seed-10k` and `seed-1m`, kept there and reused; each
//! run starts the release relay on a copy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use store::{Key, KeyStatus, Outputs, SledStore, Store, Task, TaskKind, TaskStatus};

use super::generator::{Gen, Generators, Load};
use super::load::{Call, call_once, mib, proc_stats};
use super::loadgen::mix;
use super::measure::{ATTEMPTS, Run, Watch, measured};
use super::relays::{ADMIN, RelayProc, relay_proc};
use super::report::{Report, thousands};

/// Threads creating tasks while seeding.
const SEED_THREADS: usize = 16;

/// A seeded store.
struct Seed {
    /// The relay's data directory.
    data: PathBuf,
    /// The secret of the key that owns every task.
    key: String,
    ids: Vec<String>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A finished first-format task of `owner`, like the simulator leaves them.
fn finished_task(owner: &str, i: usize, now: u64) -> Task {
    let id = format!("video_{}", ulid::Ulid::new());
    Task {
        outputs: Outputs {
            video: Some(format!("{id}/video.mp4")),
            thumbnail: Some(format!("{id}/thumbnail.png")),
            last_frame: None,
            spritesheet: None,
            video_bytes: Some(1_843_200),
        },
        id,
        kind: TaskKind::Video,
        owner: owner.to_owned(),
        model: "model_h3".into(),
        status: TaskStatus::Succeeded,
        progress: 100,
        created_at: now,
        updated_at: now,
        completed_at: Some(now),
        expires_at: Some(now + 365 * 86_400),
        deadline_ms: now * 1000 + 600_000,
        next_poll_ms: None,
        params: store::Params::new(&serde_json::json!({
            "prompt": format!("stored task {i}: a paper boat drifting on a pond at dawn"),
            "width": 1280, "height": 720, "aspect_ratio": "16:9", "duration": 8,
            "first_frame": null, "last_frame": null, "audio": null, "reference_video": null,
            "reference_video_audio": false, "sim": {}
        }))
        .expect("a JSON value always serializes"),
        channel: Some("simulator".into()),
        upstream_id: None,
        submitted_ms: Some(now * 1000),
        polled_ms: None,
        attempts: 0,
        sim: None,
        error: None,
        warnings: Vec::new(),
        price: 80,
        callback_url: None,
    }
}

/// The seeded store in `dir` with `n` tasks, seeded now unless a complete one is there: the
/// seed, and how long seeding took (zero when reused).
async fn seed(dir: &Path, n: usize) -> anyhow::Result<(Seed, Duration)> {
    let done = dir.join("complete");
    let mut took = Duration::ZERO;
    if !done.exists() {
        let started = Instant::now();
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("data"))?;
        eprintln!("bench: seeding {n} tasks into {}", dir.display());
        let store = Arc::new(
            SledStore::open(&dir.join("data").join("store"))
                .with_context(|| format!("opening a store in {}", dir.display()))?,
        );
        let secret = format!("sk-relay-bench-{}", ulid::Ulid::new());
        let hash: String = Sha256::digest(secret.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let now = now_secs();
        let key = Key {
            id: format!("key_{}", ulid::Ulid::new()),
            name: "bench".into(),
            group: "gen2".into(),
            hash,
            prefix: secret.chars().take(14).collect(),
            quota: None,
            quota_used: 0,
            rate_limit: None,
            models: None,
            expires_at: None,
            status: KeyStatus::Active,
            created_at: now,
            webhook_url: None,
            webhook_secret: None,
        };
        store.create_key(&key).await?;
        let next = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for _ in 0..SEED_THREADS {
            let (store, next, owner) = (store.clone(), next.clone(), key.id.clone());
            threads.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return anyhow::Ok(ids);
                    }
                    let task = finished_task(&owner, i, now);
                    store.create_task(&task, &[]).await?;
                    ids.push(task.id);
                    if (i + 1) % 50_000 == 0 {
                        eprintln!(
                            "bench: seeded {} of {n} ({:.0}/s)",
                            i + 1,
                            (i + 1) as f64 / started.elapsed().as_secs_f64()
                        );
                    }
                }
            }));
        }
        let mut ids = Vec::with_capacity(n);
        for t in threads {
            ids.extend(
                t.await
                    .map_err(|_| anyhow::anyhow!("a seeding task panicked"))??,
            );
        }
        // A clean stop: the store leaves its task counts for the next opening.
        store.close().await?;
        drop(store);
        std::fs::write(dir.join("ids"), ids.join("\n"))?;
        std::fs::write(dir.join("key"), &secret)?;
        took = started.elapsed();
        std::fs::write(
            &done,
            format!(
                "{n} tasks seeded in {:.0} s through Store::create_task, {SEED_THREADS} threads\n",
                took.as_secs_f64()
            ),
        )?;
        eprintln!(
            "bench: seeded {n} tasks in {:.0} s ({:.0}/s)",
            took.as_secs_f64(),
            n as f64 / took.as_secs_f64()
        );
    }
    let key = std::fs::read_to_string(dir.join("key"))?.trim().to_owned();
    let ids: Vec<String> = std::fs::read_to_string(dir.join("ids"))?
        .lines()
        .map(str::to_owned)
        .collect();
    if ids.len() != n {
        bail!("{}: {} ids, not {n}", dir.display(), ids.len());
    }
    Ok((
        Seed {
            data: dir.join("data"),
            key,
            ids,
        },
        took,
    ))
}

/// Copies the directory tree `from` to `to` (files and directories only).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<u64> {
    std::fs::create_dir_all(to)?;
    let mut bytes = 0;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            bytes += copy_tree(&entry.path(), &target)?;
        } else {
            bytes += std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(bytes)
}

/// A relay started on a copy of a seed.
struct Running {
    seed: Seed,
    config: PathBuf,
    data: PathBuf,
    relay: RelayProc,
    /// Spawn to the first answered task read of the first start, and of a restart after a
    /// clean stop, in ms.
    first_ms: f64,
    restart_ms: f64,
    rss_start_kib: u64,
}

fn read_call(seed: &Seed, id: &str) -> Call {
    Call {
        method: "GET",
        path: format!("/v1/videos/{id}"),
        headers: vec![("authorization", format!("Bearer {}", seed.key))],
        body: Bytes::new(),
    }
}

/// Starts the relay on `data`: the relay, and ms from spawning it to its first answered task
/// read.
async fn start(
    binary: &Path,
    config: &Path,
    data: &Path,
    seed: &Seed,
) -> anyhow::Result<(RelayProc, f64)> {
    let first = read_call(seed, &seed.ids[seed.ids.len() / 2]);
    let spawned = Instant::now();
    let relay =
        crate::relay::start_relay_keyed(binary, config, data, ADMIN, "error", Some(&seed.key))?;
    let relay = relay_proc(relay)?;
    let deadline = spawned + Duration::from_secs(60);
    loop {
        match call_once(relay.addr, &first).await {
            Ok((200, _)) => break,
            Ok((status, body)) if Instant::now() > deadline => bail!(
                "GET {} answered {status}: {}",
                first.path,
                String::from_utf8_lossy(&body)
            ),
            Err(e) if Instant::now() > deadline => return Err(e),
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    Ok((relay, spawned.elapsed().as_secs_f64() * 1000.0))
}

/// Copies `seed` to `work` and starts a relay on the copy.
async fn start_on_copy(binary: &Path, work: &Path, seed: Seed) -> anyhow::Result<Running> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work)?;
    let data = work.join("data");
    let copied = Instant::now();
    {
        let (from, to) = (seed.data.clone(), data.clone());
        tokio::task::spawn_blocking(move || copy_tree(&from, &to)).await??;
    }
    eprintln!(
        "bench: copied {} in {:.1} s",
        seed.data.display(),
        copied.elapsed().as_secs_f64()
    );
    let config = work.join("relay.toml");
    std::fs::write(
        &config,
        "[limits]\nrps = 1000000\nburst = 1000000\npoll_rps_per_task = 1000000\n",
    )?;
    let (relay, first_ms) = start(binary, &config, &data, &seed).await?;
    let (_, rss_start_kib, _) = proc_stats(relay.pid());
    Ok(Running {
        seed,
        config,
        data,
        relay,
        first_ms,
        restart_ms: 0.0,
        rss_start_kib,
    })
}

/// Stops the relay with SIGTERM (it flushes and exits) and starts it again on the same data.
async fn restart(binary: &Path, run: &mut Running) -> anyhow::Result<()> {
    let pid = run.relay.pid().to_string();
    Command::new("kill").args(["-TERM", &pid]).status()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while run.relay.relay.child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            bail!("the relay did not stop within 30 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (relay, ms) = start(binary, &run.config, &run.data, &run.seed).await?;
    run.relay = relay;
    run.restart_ms = ms;
    Ok(())
}

/// Ids the reads pick from: the store's, at most this many (chosen at random, repeatably).
const READ_IDS: usize = 100_000;

/// Random reads of `run`'s seeded tasks over 16 connections, a warm-up then `secs` measured.
fn reads(run: &Running, gens: &Generators, work: &Path, secs: u64) -> anyhow::Result<Run> {
    let ids = &run.seed.ids;
    let picked: Vec<String> = (0..READ_IDS.min(ids.len()) as u64)
        .map(|n| format!("/v1/videos/{}", ids[(mix(n) % ids.len() as u64) as usize]))
        .collect();
    let paths = work.join(format!("read-paths-{}", ids.len()));
    std::fs::write(&paths, picked.join("\n"))?;
    let load = Load {
        addr: run.relay.addr,
        conns: 16,
        secs,
        method: "GET",
        path: picked[0].clone(),
        headers: vec![("authorization", format!("Bearer {}", run.seed.key))],
        body: String::new(),
        paths_file: Some(paths),
    };
    let pid = run.relay.pid();
    let watch = Watch {
        server: pid,
        own: &[pid],
    };
    let label = format!("stored reads, {} tasks, 16 conns, wrk", ids.len());
    tokio::task::block_in_place(|| measured(gens, Gen::Wrk, &load, &watch, ATTEMPTS, &label))
}

/// Seeds (or reuses) the stores, starts a relay on a copy of each, reads from each with `wrk`
/// (runs disturbed by other processes are run again), and restarts each once: the time spent
/// seeding.
pub async fn run(
    report: &mut Report,
    binary: &Path,
    work: &Path,
    gens: &Generators,
    secs: u64,
) -> anyhow::Result<Duration> {
    let mut seeding = Duration::ZERO;
    let mut runs = Vec::new();
    for (label, n) in [("10k", 10_000), ("1m", 1_000_000)] {
        let dir = work.join(format!("seed-{label}"));
        let (seed, took) = seed(&dir, n).await?;
        seeding += took;
        let run = start_on_copy(binary, &work.join(format!("stored-{label}")), seed).await?;
        runs.push(run);
    }
    let mut reads_of = Vec::new();
    for run in runs.iter_mut() {
        let r = reads(run, gens, work, secs)?;
        report.run(
            &format!(
                "`GET /v1/videos/{{id}}` of random stored tasks, {} stored: relay",
                thousands(run.seed.ids.len() as f64)
            ),
            &r,
        );
        reads_of.push(r);
    }
    let mut rss_after = Vec::new();
    for run in runs.iter_mut() {
        rss_after.push(proc_stats(run.relay.pid()).1);
        restart(binary, run).await?;
    }
    let ([small, large], [small_reads, large_reads]) = (runs.as_slice(), reads_of.as_slice())
    else {
        bail!("two store sizes expected");
    };
    let row = |m: &Running, r: &Run, rss_after: u64| {
        format!(
            "p50 {:.0} / p99 {:.0} µs ({} req/s, errors {}; relay CPU {:.1} µs per read; foreign CPU {:.1}% of a core, stolen {:.1}%); \
             relay RSS {:.1} MiB after start, {:.1} MiB after {} s of reads",
            r.out.p50_us,
            r.out.p99_us,
            thousands(r.rps()),
            r.out.errors,
            r.cpu_us,
            r.foreign_pct,
            r.stolen_pct,
            mib(m.rss_start_kib),
            mib(rss_after),
            super::measure::WARMUP_SECS + secs * u64::from(r.attempts),
        )
    };
    report.check(
        "GET /v1/videos/{id} of random stored tasks, 16 conns, 10k stored",
        row(small, small_reads, rss_after[0]),
        "report",
        true,
    );
    let ratio = large_reads.out.p99_us / small_reads.out.p99_us.max(1.0);
    report.check(
        "GET /v1/videos/{id} of random stored tasks, 16 conns, 1M stored",
        format!(
            "{}; p99 {ratio:.2}x the 10k one",
            row(large, large_reads, rss_after[1])
        ),
        "p99 <= 1.5x p99 at 10k",
        ratio <= 1.5 && large_reads.out.errors == 0,
    );
    let start = |m: &Running| {
        format!(
            "{:.0} ms on the seeded copy, {:.0} ms on restart after a clean stop",
            m.first_ms, m.restart_ms
        )
    };
    report.check(
        "start-up with 10k stored tasks: spawn to first answered task read",
        start(small),
        "report",
        true,
    );
    report.check(
        "start-up with 1M stored tasks: spawn to first answered task read",
        start(large),
        "<= 1 s",
        large.first_ms.max(large.restart_ms) <= 1000.0,
    );
    drop(runs);
    for label in ["10k", "1m"] {
        let _ = std::fs::remove_dir_all(work.join(format!("stored-{label}")));
    }
    Ok(seeding)
}
