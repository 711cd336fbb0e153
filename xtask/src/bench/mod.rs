//! `cargo xtask bench`: the relay against a bare hyper reverse proxy (the floor), the direct
//! path and a bare hello server, every party in an OS process of its own and the load from
//! `wrk` (and our own generator where it is proven as fast), reporting rates, latencies, CPU per
//! request, memory and the foreign and stolen CPU of every run; then its memory while videos are
//! downloaded, its poller with many tasks in flight against the fake video upstream, and its
//! reads and start-up over large stores. It writes BENCHMARKS.md.
//!
//! Sections (each can run alone with `--only`, each starts what it needs): `messages`, `rss`,
//! `submissions`, `polling`, `abuse`, `downloads`, `poller`, `stored`, `postgres`, `tls`,
//! `streams10k`, `peers` (`--peers` alone: other gateways beside the relay; see `peers`).
mod abuse;
pub mod generator;
mod load;
pub mod loadgen;
mod measure;
mod messages;
pub mod open_streams;
pub mod party;
pub mod party_run;
mod peers;
pub mod relays;
mod report;
mod shared;
mod stored;
mod tasks;
pub mod tls;
mod video;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};

use self::generator::Generators;
use self::relays::Ctx;
use self::report::{Report, render};

/// Every section, in the order a whole run takes them.
pub const SECTIONS: [&str; 12] = [
    "messages",
    "rss",
    "submissions",
    "polling",
    "abuse",
    "downloads",
    "poller",
    "stored",
    "postgres",
    "tls",
    "streams10k",
    "peers",
];

/// Seconds of one measured run.
const SECS: u64 = 5;

pub const USAGE: &str = "usage: cargo xtask bench [--only SECTION[,SECTION...]] [--peers]

  sections: messages (whole answers and streams: relay, floor proxy, direct; 32 conns and 1),
  rss (the relay's memory over 60 s of messages), submissions (durable POST /v1/videos),
  polling (GET /v1/videos/{id} against a hello server; the relay as configured by default and
  with one connection thread), abuse (another key's requests, paced, alone and during a flood of
  made-up-id status polls from a key at the default limits), downloads, poller, stored,
  postgres (durable submissions and polls with the store on PostgreSQL at 127.0.0.1:5432: one
  relay, then three sharing it), tls (the messages rows with the fake upstream on HTTPS,
  trusted by the relay through the channel's ca_file; TLS handshakes per 1,000 requests),
  streams10k (10,000 slow streams open at once through the relay and the floor: memory per
  open stream, CPU per event, every stream whole and in order, time to first byte),
  peers (litellm-rs, the Portkey gateway and the LiteLLM proxy
  beside the relay and the floor on /v1/messages, each one installed under target/bench/peers
  measured, the others named as skipped)
  --peers: --only peers, installing the peers that are missing first (litellm-rs builds for
  many minutes).
  A whole run writes BENCHMARKS.md; with --only the report is printed, BENCHMARKS.md is left
  as it is. Load comes from wrk (installed with apt-get when missing). `stored` seeds
  target/bench/seed-10k and seed-1m through the store crate on its first run (minutes) and
  reuses them later; delete them after a change to the store's layout.";

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
            "--peers" => only.get_or_insert_with(Vec::new).push("peers"),
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
    let status = crate::cmd::cargo()
        .current_dir(root)
        .args(["build", "--release", "-p", "relay", "-p", "xtask"])
        .status()?;
    if !status.success() {
        bail!("cargo build --release -p relay -p xtask failed");
    }
    let release = target.join("release");
    let scratch = tempfile::Builder::new()
        .prefix("relay-bench-load-")
        .tempdir()
        .context("creating a temporary directory")?;
    let needs_load = chosen.iter().any(|s| !matches!(*s, "downloads" | "poller"));
    let ctx = Ctx {
        relay: release.join("relay"),
        xtask: release.join("xtask"),
        gens: Generators::new(&release.join("xtask"), scratch.path(), needs_load)?,
        secs: SECS,
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
    };
    let install_peers = args.iter().any(|a| a == "--peers");
    let report = run(&ctx, &target.join("bench"), &chosen, install_peers)?;
    println!("{report}");
    if whole {
        std::fs::write(root.join("BENCHMARKS.md"), report)?;
        eprintln!("xtask: wrote BENCHMARKS.md");
    } else {
        eprintln!("xtask: --only: BENCHMARKS.md left as it is");
    }
    Ok(())
}

fn run(ctx: &Ctx, work: &Path, chosen: &[&str], install_peers: bool) -> anyhow::Result<String> {
    let mut report = Report::default();
    let mut times: Vec<(&str, f64)> = Vec::new();
    let mut seeding = 0.0;
    for section in chosen {
        let started = Instant::now();
        match *section {
            "messages" => messages::run(ctx, &mut report)?,
            "rss" => messages::rss(ctx, &mut report)?,
            "submissions" => tasks::submissions(ctx, &mut report)?,
            "polling" => tasks::polling(ctx, &mut report)?,
            "abuse" => abuse::run(ctx, &mut report)?,
            "postgres" => shared::run(ctx, &mut report)?,
            "tls" => tls::run(ctx, &mut report)?,
            "streams10k" => open_streams::run(ctx, &mut report)?,
            // With --peers it installs the peers that are missing; else it skips them.
            "peers" => peers::run(ctx, work, &mut report, install_peers)?,
            "downloads" => ctx.runtime.block_on(video::downloads(
                &mut report,
                &ctx.relay,
                &work.join("downloads"),
            ))?,
            "poller" => ctx.runtime.block_on(video::poller(
                &mut report,
                &ctx.relay,
                &work.join("poller"),
            ))?,
            "stored" => {
                seeding = ctx
                    .runtime
                    .block_on(stored::run(
                        &mut report,
                        &ctx.relay,
                        work,
                        &ctx.gens,
                        ctx.secs,
                    ))?
                    .as_secs_f64();
            }
            other => bail!("unknown section {other}"),
        }
        let took = started.elapsed().as_secs_f64();
        times.push((
            section,
            if *section == "stored" {
                took - seeding
            } else {
                took
            },
        ));
    }
    for (section, took) in &times {
        eprintln!("bench: section {section}: {took:.0} s");
    }
    if seeding > 0.0 {
        eprintln!("bench: seeding (not counted above): {seeding:.0} s");
    }
    Ok(render(&report, ctx.secs))
}
