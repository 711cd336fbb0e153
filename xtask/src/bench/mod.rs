//! `cargo xtask bench`: the relay against a bare hyper reverse proxy (the floor) and the
//! direct path, on loopback, with our own fixed-connection load generator; then its memory
//! while videos are downloaded, its poller with many tasks in flight against the fake video
//! upstream, and its reads and start-up over large stores. It reports ratios rather than
//! absolute times where it can, and writes BENCHMARKS.md.
//!
//! Sections (each can run alone with `--only`): `messages`, `submissions` and `polling` share
//! one relay; `downloads`, `poller` and `stored` start their own.
mod load;
pub mod loadgen;
mod messages;
pub mod party;
mod relays;
mod report;
mod stored;
mod tasks;
mod video;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use self::load::{mib, proc_stats};
use self::relays::start_relay;
use self::report::{Report, render};

/// Every section, in the order a whole run takes them.
pub const SECTIONS: [&str; 6] = [
    "messages",
    "submissions",
    "polling",
    "downloads",
    "poller",
    "stored",
];

pub const USAGE: &str = "usage: cargo xtask bench [--only SECTION[,SECTION...]]

  sections: messages, submissions, polling (one shared relay), downloads, poller, stored
  A whole run writes BENCHMARKS.md; with --only the rows are printed, BENCHMARKS.md is left as
  it is. `stored` seeds target/bench/seed-10k and seed-1m through the store crate on its first
  run (minutes) and reuses them later; delete them after a change to the store's layout.";

/// Which sections `args` asks for.
fn sections(args: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let mut it = args.iter();
    let mut only: Option<Vec<&'static str>> = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--only" => {
                let value = it.next().context("--only needs a section")?;
                let mut chosen = only.take().unwrap_or_default();
                for name in value.split(',') {
                    let Some(section) = SECTIONS.iter().find(|s| **s == name.trim()) else {
                        bail!("unknown section {name:?}\n{USAGE}");
                    };
                    chosen.push(section);
                }
                only = Some(chosen);
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(Vec::new());
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(match only {
        Some(chosen) => SECTIONS
            .iter()
            .copied()
            .filter(|s| chosen.contains(s))
            .collect(),
        None => SECTIONS.to_vec(),
    })
}

pub fn bench(root: &Path, target: &Path, args: &[String]) -> anyhow::Result<()> {
    let chosen = sections(args)?;
    if chosen.is_empty() {
        return Ok(());
    }
    let whole = chosen.len() == SECTIONS.len();
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args(["build", "--release", "-p", "relay"])
        .status()?;
    if !status.success() {
        bail!("cargo build --release -p relay failed");
    }
    let binary = target.join("release").join("relay");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(&binary, &target.join("bench"), &chosen))?;
    println!("{report}");
    if whole {
        std::fs::write(root.join("BENCHMARKS.md"), report)?;
        eprintln!("xtask: wrote BENCHMARKS.md");
    } else {
        eprintln!("xtask: --only: BENCHMARKS.md left as it is");
    }
    Ok(())
}

async fn run(binary: &Path, work: &Path, chosen: &[&str]) -> anyhow::Result<String> {
    let secs = Duration::from_secs(5);
    let mut report = Report::default();
    let mut times: Vec<(&str, Duration)> = Vec::new();
    let has = |s: &str| chosen.contains(&s);

    if has("messages") || has("submissions") || has("polling") {
        let upstream = messages::fake_upstream().await?;
        let relay = start_relay(binary, &work.join("relay"), upstream)?;
        if has("messages") {
            let started = Instant::now();
            messages::run(&mut report, &relay, upstream, secs).await?;
            times.push(("messages", started.elapsed()));
        }
        if has("submissions") {
            let started = Instant::now();
            tasks::submissions(&mut report, &relay, secs).await?;
            times.push(("submissions", started.elapsed()));
        }
        if has("polling") {
            let started = Instant::now();
            tasks::polling(&mut report, &relay, secs).await?;
            times.push(("polling", started.elapsed()));
        }
        let (_, _, peak) = proc_stats(relay.pid());
        report.check(
            "relay peak RSS over the run",
            format!("{:.1} MiB", mib(peak)),
            "report",
            true,
        );
    }
    if has("downloads") {
        let started = Instant::now();
        video::downloads(&mut report, binary, &work.join("downloads")).await?;
        times.push(("downloads", started.elapsed()));
    }
    if has("poller") {
        let started = Instant::now();
        video::poller(&mut report, binary, &work.join("poller")).await?;
        times.push(("poller", started.elapsed()));
    }
    let mut seeding = None;
    if has("stored") {
        let started = Instant::now();
        let seeded = stored::run(&mut report, binary, work).await?;
        times.push(("stored", started.elapsed().saturating_sub(seeded)));
        seeding = Some(seeded);
    }
    for (section, took) in &times {
        eprintln!("bench: section {section}: {:.0} s", took.as_secs_f64());
    }
    if let Some(seeded) = seeding.filter(|s| !s.is_zero()) {
        eprintln!(
            "bench: seeding (not counted above): {:.0} s",
            seeded.as_secs_f64()
        );
    }
    Ok(render(&report, secs))
}
