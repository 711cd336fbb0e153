//! The `peers` section (`cargo xtask bench --peers`, or `--only peers`): the relay beside other
//! gateways a user could pick instead, each in front of the same fake Anthropic messages
//! upstream as the `messages` section and sent the same `POST /v1/messages`, with the floor
//! proxy for scale: requests a second at 32 connections, p50 and p99 at one, CPU per request and
//! memory, whole answers and streams.
//!
//! The peers (see [`install`]) live under `target/bench/peers`: litellm-rs built from crates.io
//! with `cargo install --root`, the Portkey gateway from npm (its `hono` and `@hono/node-server`
//! held back by npm overrides) run with the machine's `node`, and the LiteLLM proxy in a
//! virtualenv. With `--peers` the section installs what is missing first; otherwise (a whole
//! run, `--only peers`) it measures those installed and names the others as skipped.

mod start;

use std::path::Path;

use anyhow::bail;

use self::start::{MODEL, Peer, PeerKind, request};
use super::generator::{Gen, Load};
use super::load::mib;
use super::measure::{ATTEMPTS, Run, Watch, measured};
use super::party::Party;
use super::relays::{Ctx, messages_config, start_in_temp};
use super::report::{Report, conns, thousands};

/// Connections of the loaded runs.
const CONNS: usize = 32;

/// The relay must use at most this share of the leanest peer's CPU per request.
const CPU_TIMES: f64 = 10.0;

/// What one party gave: whole answers and streams, at [`CONNS`] connections and at one.
struct Rows {
    name: String,
    whole: Run,
    whole1: Run,
    stream: Run,
    stream1: Run,
}

fn load(
    addr: std::net::SocketAddr,
    model: &str,
    stream: bool,
    headers: Vec<(&'static str, String)>,
) -> Load {
    Load {
        addr,
        conns: CONNS,
        secs: 0,
        method: "POST",
        path: "/v1/messages".into(),
        headers,
        body: request(model, stream),
        paths_file: None,
    }
}

/// The four runs of one party asked for `model`, `server` its process (and `own` every process
/// of the bench).
fn measure_party(
    ctx: &Ctx,
    name: &str,
    model: &str,
    addr: std::net::SocketAddr,
    headers: &[(&'static str, String)],
    server: u32,
    own: &[u32],
) -> anyhow::Result<Rows> {
    let watch = Watch { server, own };
    let run = |stream: bool, n: usize| {
        let load = load(addr, model, stream, headers.to_vec())
            .conns(n)
            .secs(ctx.secs);
        let kind = if stream { "streams" } else { "whole answers" };
        let label = format!("peers, {kind}: {name}, {}, wrk", conns(n));
        measured(&ctx.gens, Gen::Wrk, &load, &watch, ATTEMPTS, &label)
    };
    Ok(Rows {
        name: name.to_owned(),
        whole: run(false, CONNS)?,
        whole1: run(false, 1)?,
        stream: run(true, CONNS)?,
        stream1: run(true, 1)?,
    })
}

/// The section: installs the peers that are missing when `install_missing` (else skips
/// them), then measures the floor, the relay and each peer in turn.
pub fn run(
    ctx: &Ctx,
    work: &Path,
    report: &mut Report,
    install_missing: bool,
) -> anyhow::Result<()> {
    let dir = work.join("peers");
    let mut notes = Vec::new();
    let mut kinds = Vec::new();
    for kind in PeerKind::ALL {
        if kind.installed(&dir) {
            kinds.push(kind);
        } else if !install_missing {
            notes.push(format!(
                "{} skipped: not installed under target/bench/peers (`cargo xtask bench --peers` \
                 installs it)",
                kind.label()
            ));
        } else {
            match kind.install(&dir) {
                Ok(()) if kind.installed(&dir) => kinds.push(kind),
                Ok(()) => notes.push(format!(
                    "{} skipped: installed, but not found under target/bench/peers",
                    kind.label()
                )),
                Err(e) => notes.push(format!(
                    "{} skipped: installing it failed: {e:#}",
                    kind.label()
                )),
            }
        }
    }
    if kinds.is_empty() {
        report.table("Peer gateways", format!("{}.\n", notes.join(".\n\n")));
        return Ok(());
    }
    let fake = Party::start(&ctx.xtask, "fake-messages", &[])?;
    let floor = Party::start(&ctx.xtask, "floor", &["--upstream", &fake.addr.to_string()])?;
    let relay = start_in_temp(&ctx.relay, &messages_config(fake.addr))?;
    let own = vec![fake.pid(), floor.pid(), relay.pid()];
    let anthropic = |key: &str| {
        vec![
            ("x-api-key", key.to_owned()),
            ("anthropic-version", "2023-06-01".to_owned()),
            ("content-type", "application/json".to_owned()),
        ]
    };
    let mut all = vec![
        measure_party(
            ctx,
            "floor proxy",
            MODEL,
            floor.addr,
            &anthropic("upstream-key"),
            floor.pid(),
            &own,
        )?,
        measure_party(
            ctx,
            "relay",
            MODEL,
            relay.addr,
            &anthropic(&relay.key),
            relay.pid(),
            &own,
        )?,
    ];
    for kind in kinds {
        // A peer that does not start, or does not pass the fake's answer on, is named, and
        // the others are measured all the same.
        let rows = Peer::start(kind, &dir, fake.addr).and_then(|peer| {
            peer.check()?;
            let tree = peer.tree();
            if tree.len() > 1 {
                notes.push(format!(
                    "{} ran as {} processes: CPU and RSS are its first process's, the others' \
                     CPU counted as the bench's own",
                    kind.label(),
                    tree.len()
                ));
            }
            let mut with = own.clone();
            with.extend(&tree);
            measure_party(
                ctx,
                &kind.label(),
                kind.model(),
                peer.addr,
                &peer.headers(),
                peer.pid(),
                &with,
            )
        });
        match rows {
            Ok(rows) => all.push(rows),
            Err(e) => notes.push(format!("{} not measured: {e:#}", kind.label())),
        }
    }
    lines(report, &all, &notes)
}

/// The rows, the table, the ratio lines and the targets.
fn lines(report: &mut Report, all: &[Rows], notes: &[String]) -> anyhow::Result<()> {
    let [floor, relay, peers @ ..] = all else {
        bail!("peers: no rows");
    };
    if peers.is_empty() {
        report.table("Peer gateways", format!("{}.\n", notes.join(".\n\n")));
        return Ok(());
    }
    for r in all {
        for (kind, run) in [
            ("whole answers", &r.whole),
            ("whole answers", &r.whole1),
            ("streams", &r.stream),
            ("streams", &r.stream1),
        ] {
            report.run(&format!("`/v1/messages` {kind}: {} (peers)", r.name), run);
        }
    }
    report.table("Peer gateways", table(all, notes));
    let leanest = |f: fn(&Rows) -> &Run| {
        peers
            .iter()
            .min_by(|a, b| f(a).cpu_us.total_cmp(&f(b).cpu_us))
            .map(|p| (p.name.as_str(), f(p).cpu_us))
            .unwrap_or(("", 0.0))
    };
    for (kind, f) in [
        ("whole answers", (|r: &Rows| &r.whole) as fn(&Rows) -> &Run),
        ("streams", |r: &Rows| &r.stream),
    ] {
        let (name, cpu) = leanest(f);
        let mine = f(relay).cpu_us;
        let times = cpu / mine.max(1e-9);
        let each: Vec<String> = peers
            .iter()
            .map(|p| {
                format!(
                    "{} {:.1} µs ({:.1} in the kernel; {:.1}×)",
                    p.name,
                    f(p).cpu_us,
                    f(p).kernel_us,
                    f(p).cpu_us / mine.max(1e-9)
                )
            })
            .collect();
        report.ratio(format!(
            "peers, {kind}, CPU per request at {CONNS} conns: relay {mine:.1} µs ({:.1} in the \
             kernel), floor {:.1} µs ({:.1} in the kernel); {}",
            f(relay).kernel_us,
            f(floor).cpu_us,
            f(floor).kernel_us,
            each.join(", ")
        ));
        report.target(
            times >= CPU_TIMES,
            format!(
                "{kind}: relay ÷ fastest peer >= {CPU_TIMES:.0} in CPU per request: {times:.1} \
                 ({name} {cpu:.1} µs ÷ relay {mine:.1} µs)"
            ),
        );
        let rates: Vec<String> = peers
            .iter()
            .map(|p| format!("{} {}", p.name, thousands(f(p).rps())))
            .collect();
        report.ratio(format!(
            "peers, {kind}, {CONNS} conns: relay {} req/s, floor {} req/s; {}",
            thousands(f(relay).rps()),
            thousands(f(floor).rps()),
            rates.join(", ")
        ));
    }
    for (kind, f) in [
        ("whole answers", (|r: &Rows| &r.whole1) as fn(&Rows) -> &Run),
        ("streams", |r: &Rows| &r.stream1),
    ] {
        let mine = f(relay).out.p50_us;
        let fastest = peers
            .iter()
            .min_by(|a, b| f(a).out.p50_us.total_cmp(&f(b).out.p50_us))
            .map(|p| (p.name.as_str(), f(p).out.p50_us))
            .unwrap_or(("", 0.0));
        let each: Vec<String> = peers
            .iter()
            .map(|p| {
                format!(
                    "{} {:.0} / {:.0} µs",
                    p.name,
                    f(p).out.p50_us,
                    f(p).out.p99_us
                )
            })
            .collect();
        report.ratio(format!(
            "peers, {kind}, 1 conn, p50 / p99: relay {mine:.0} / {:.0} µs, floor {:.0} / {:.0} µs; {}",
            f(relay).out.p99_us,
            f(floor).out.p50_us,
            f(floor).out.p99_us,
            each.join(", ")
        ));
        report.target(
            mine < fastest.1,
            format!(
                "{kind}: relay one-connection p50 below every peer's: relay {mine:.0} µs, \
                 fastest peer {} {:.0} µs",
                fastest.0, fastest.1
            ),
        );
    }
    Ok(())
}

/// The section's table: a row a party.
fn table(all: &[Rows], notes: &[String]) -> String {
    let mut out = String::from(
        "Every party in front of the same fake messages upstream, sent the same `POST /v1/messages` \
         by `wrk`; req/s and CPU at 32 connections, p50 / p99 at one; CPU is the party's \
         process's user + system time per request (in brackets the system time: the kernel's work \
         for its sockets, loopback TCP included), RSS its `VmRSS` after the whole answers at 32 \
         connections; foreign CPU the most any of its four runs saw.\n\n\
         | party | whole: req/s | p50 / p99 µs | CPU µs/req (kernel) | streams: req/s | p50 / p99 µs | CPU µs/req (kernel) | RSS MiB | foreign CPU |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in all {
        let foreign = [&r.whole, &r.whole1, &r.stream, &r.stream1]
            .iter()
            .map(|x| x.foreign_pct)
            .fold(0.0, f64::max);
        out.push_str(&format!(
            "| {} | {} | {:.0} / {:.0} | {:.1} ({:.1}) | {} | {:.0} / {:.0} | {:.1} ({:.1}) | {:.1} | {foreign:.1}% |\n",
            r.name,
            thousands(r.whole.rps()),
            r.whole1.out.p50_us,
            r.whole1.out.p99_us,
            r.whole.cpu_us,
            r.whole.kernel_us,
            thousands(r.stream.rps()),
            r.stream1.out.p50_us,
            r.stream1.out.p99_us,
            r.stream.cpu_us,
            r.stream.kernel_us,
            mib(r.whole.rss_end_kib),
        ));
    }
    for note in notes {
        out.push_str(&format!("\n{note}.\n"));
    }
    out
}
