//! The `messages` and `rss` sections: `/v1/messages` through the relay against the floor (a
//! bare hyper reverse proxy) and the direct path to the fake native upstream, whole answers and
//! streams, at 32 connections and at one; then the relay's memory over 60 s at full load.

use std::net::SocketAddr;

use super::generator::{Gen, Load};
use super::load::{mib, proc_stats};
use super::measure::{
    ATTEMPTS, RssTrace, Run, TURNS, Watch, measured, measured_pair, measured_turns, median_pair,
};
use super::party::Party;
use super::relays::{Ctx, messages_config, start_in_temp};
use super::report::{Report, conns, thousands};

const REQUEST: &str =
    r#"{"model":"bench-chat","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}"#;

/// Ours must reach this share of `wrk`'s rate on the direct path to be used.
const OURS_WITHIN: f64 = 0.9;

/// Connections of the loaded runs.
const CONNS: usize = 32;

fn messages_load(key: &str, stream: bool, addr: SocketAddr, secs: u64) -> Load {
    let body = if stream {
        REQUEST.replacen('{', "{\"stream\":true,", 1)
    } else {
        REQUEST.to_owned()
    };
    Load {
        addr,
        conns: CONNS,
        secs,
        method: "POST",
        path: "/v1/messages".into(),
        headers: vec![
            ("x-api-key", key.to_owned()),
            ("anthropic-version", "2023-06-01".into()),
            ("content-type", "application/json".into()),
        ],
        body,
        paths_file: None,
    }
}

/// The three paths of one kind of answer, measured the same way.
struct Paths {
    direct: Run,
    floor: Run,
    relay: Run,
    /// Each turn of the floor and the relay: relay ÷ floor in requests a second, and relay p50
    /// − floor p50 in µs (the pair kept is the median turn of the one the targets read).
    turns: Vec<(f64, f64)>,
}

impl Paths {
    /// "in its N turns: ..." with each turn as `show` writes it.
    fn listed(&self, show: impl Fn(&(f64, f64)) -> String) -> String {
        let each: Vec<String> = self.turns.iter().map(show).collect();
        format!("in its {} turns: {}", self.turns.len(), each.join(", "))
    }
}

/// What picks the turn kept: the throughput ratio under load, the latency at one connection.
fn turn_key(pair: &[Run; 2], conns: usize) -> f64 {
    let [floor, relay] = pair;
    if conns > 1 {
        relay.rps() / floor.rps()
    } else {
        relay.out.p50_us - floor.out.p50_us
    }
}

pub fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let fake = Party::start(&ctx.xtask, "fake-messages", &[])?;
    let floor = Party::start(&ctx.xtask, "floor", &["--upstream", &fake.addr.to_string()])?;
    let relay = start_in_temp(&ctx.relay, &messages_config(fake.addr))?;
    let own = [fake.pid(), floor.pid(), relay.pid()];
    let measure = |what: &str, generator: Gen, load: &Load, server: u32| {
        let watch = Watch { server, own: &own };
        let label = format!("{what}, {}, {}", conns(load.conns), generator.name());
        let run = measured(&ctx.gens, generator, load, &watch, ATTEMPTS, &label)?;
        anyhow::Ok(run)
    };
    // The floor and the relay, after the direct path, in turns: the median turn is kept.
    let behind = |kind: &str, load: &Load, generator: Gen, direct: Run| {
        let floor_watch = Watch {
            server: floor.pid(),
            own: &own,
        };
        let relay_watch = Watch {
            server: relay.pid(),
            own: &own,
        };
        let label = format!(
            "{kind}: floor, relay, {}, {}",
            conns(load.conns),
            generator.name()
        );
        let pairs = measured_turns(
            &ctx.gens,
            generator,
            [
                (&load.at(floor.addr), &floor_watch),
                (&load.at(relay.addr), &relay_watch),
            ],
            TURNS,
            ATTEMPTS,
            &label,
        )?;
        let turns = pairs
            .iter()
            .map(|[f, r]| (r.rps() / f.rps(), r.out.p50_us - f.out.p50_us))
            .collect();
        let ([f, r], _) = median_pair(pairs, |pair| turn_key(pair, load.conns))
            .ok_or_else(|| anyhow::anyhow!("{label}: no turn"))?;
        anyhow::Ok(Paths {
            direct,
            floor: f,
            relay: r,
            turns,
        })
    };
    let three = |kind: &str, load: &Load, generator: Gen| {
        let direct = measure(&format!("{kind}: direct"), generator, load, fake.pid())?;
        behind(kind, load, generator, direct)
    };
    // Both generators on the direct path, in turns.
    let both = |load: &Load| {
        let watch = Watch {
            server: fake.pid(),
            own: &own,
        };
        let label = format!("whole answers: direct, {}", conns(load.conns));
        measured_pair(
            &ctx.gens,
            [Gen::Wrk, Gen::Ours],
            load,
            &watch,
            ATTEMPTS,
            &label,
        )
    };

    let whole = messages_load(&relay.key, false, fake.addr, ctx.secs);
    let stream = messages_load(&relay.key, true, fake.addr, ctx.secs);

    // Whole answers, 32 connections, with both generators on the direct path first.
    let [wrk, ours] = both(&whole)?;
    let w32 = behind("whole answers", &whole, Gen::Wrk, wrk)?;
    rows(report, "whole answers", &w32, Some(&ours));
    let share = ours.rps() / w32.direct.rps();
    let ours_ok = share >= OURS_WITHIN;
    report.generators(format!(
        "whole answers, {CONNS} conns, in turns: wrk {} req/s, ours {} req/s ({share:.2} of wrk; p50 {:.0} / {:.0} µs): ours is {}",
        thousands(w32.direct.rps()),
        thousands(ours.rps()),
        w32.direct.out.p50_us,
        ours.out.p50_us,
        if ours_ok {
            "within 10%, used for the streams at one connection (time to first byte)"
        } else {
            "not within 10%: not used"
        }
    ));
    let [wrk1, ours1] = both(&whole.conns(1))?;
    let w1 = behind("whole answers", &whole.conns(1), Gen::Wrk, wrk1)?;
    rows(report, "whole answers", &w1, Some(&ours1));
    report.generators(format!(
        "whole answers, 1 conn, in turns: wrk {} req/s, p50 {:.0} µs; ours {} req/s, p50 {:.0} µs",
        thousands(w1.direct.rps()),
        w1.direct.out.p50_us,
        thousands(ours1.rps()),
        ours1.out.p50_us
    ));
    loaded_lines(report, "whole answers", &w32, 0.85);
    latency_lines(report, "whole answers", &w1);

    // Streams.
    let s32 = three("streams", &stream, Gen::Wrk)?;
    rows(report, "streams", &s32, None);
    let gen1 = if ours_ok { Gen::Ours } else { Gen::Wrk };
    let s1 = three("streams", &stream.conns(1), gen1)?;
    rows(report, "streams", &s1, None);
    loaded_lines(report, "streams", &s32, 0.9);
    latency_lines(report, "streams", &s1);
    Ok(())
}

/// The table rows of `p`, with a run of the other generator on the direct path.
fn rows(report: &mut Report, kind: &str, p: &Paths, other: Option<&Run>) {
    let direct = format!("`/v1/messages` {kind}: direct to the fake");
    report.run(&direct, &p.direct);
    if let Some(other) = other {
        report.run(&direct, other);
    }
    report.run(&format!("`/v1/messages` {kind}: floor proxy"), &p.floor);
    report.run(&format!("`/v1/messages` {kind}: relay"), &p.relay);
}

/// The ratio, CPU and memory lines and targets of the loaded runs of `kind`.
fn loaded_lines(report: &mut Report, kind: &str, p: &Paths, target: f64) {
    let ratio = p.relay.rps() / p.floor.rps();
    report.ratio(format!(
        "{kind}, {CONNS} conns: relay ÷ floor = {ratio:.2} ({} ÷ {} req/s; direct to the fake {} req/s); {}",
        thousands(p.relay.rps()),
        thousands(p.floor.rps()),
        thousands(p.direct.rps()),
        p.listed(|(r, _)| format!("{r:.2}"))
    ));
    report.target(
        ratio >= target,
        format!(
            "{kind}: relay ÷ floor >= {target} at {CONNS} conns: {ratio:.2} ({} ÷ {} req/s)",
            thousands(p.relay.rps()),
            thousands(p.floor.rps())
        ),
    );
    report.ratio(format!(
        "{kind}, CPU per request: relay {:.1} µs, floor {:.1} µs (relay − floor = {:+.1} µs), fake {:.1} µs; \
         relay RSS {:.1} MiB at the end, peak {:.1} MiB",
        p.relay.cpu_us,
        p.floor.cpu_us,
        p.relay.cpu_us - p.floor.cpu_us,
        p.direct.cpu_us,
        mib(p.relay.rss_end_kib),
        mib(p.relay.rss_peak_kib)
    ));
    report.target(
        p.relay.cpu_us <= p.floor.cpu_us + 15.0,
        format!(
            "{kind}: relay CPU per message <= floor + 15 µs: relay {:.1} µs, floor {:.1} µs ({:+.1} µs)",
            p.relay.cpu_us,
            p.floor.cpu_us,
            p.relay.cpu_us - p.floor.cpu_us
        ),
    );
}

/// The latency lines of the one-connection runs of `kind` (the target on whole answers).
fn latency_lines(report: &mut Report, kind: &str, p: &Paths) {
    let diff = p.relay.out.p50_us - p.floor.out.p50_us;
    let ttfb = match (
        p.relay.out.ttfb_us,
        p.floor.out.ttfb_us,
        p.direct.out.ttfb_us,
    ) {
        (Some(r), Some(f), Some(d)) => format!(
            "; first byte p50 relay {:.0} µs, floor {:.0} µs, direct {:.0} µs",
            r.0, f.0, d.0
        ),
        _ => String::new(),
    };
    report.ratio(format!(
        "{kind}, 1 conn: relay p50 − floor p50 = {diff:+.0} µs (p50 / p99: relay {:.0} / {:.0} µs, floor {:.0} / {:.0} µs, direct {:.0} / {:.0} µs){ttfb}; {}",
        p.relay.out.p50_us,
        p.relay.out.p99_us,
        p.floor.out.p50_us,
        p.floor.out.p99_us,
        p.direct.out.p50_us,
        p.direct.out.p99_us,
        p.listed(|(_, d)| format!("{d:+.0} µs"))
    ));
    if kind == "whole answers" {
        report.target(
            diff <= 20.0,
            format!(
                "{kind}, 1 conn: relay p50 − floor p50 <= 20 µs: {diff:+.0} µs ({:.0} − {:.0} µs)",
                p.relay.out.p50_us, p.floor.out.p50_us
            ),
        );
    }
}

/// The relay's RSS over 60 s of whole answers at full load: steady or climbing.
pub fn rss(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    const SECS: u64 = 60;
    let fake = Party::start(&ctx.xtask, "fake-messages", &[])?;
    let relay = start_in_temp(&ctx.relay, &messages_config(fake.addr))?;
    let own = [fake.pid(), relay.pid()];
    let (_, idle, _) = proc_stats(relay.pid());
    let load = messages_load(&relay.key, false, relay.addr, SECS);
    let trace = RssTrace::start(relay.pid());
    let watch = Watch {
        server: relay.pid(),
        own: &own,
    };
    let run = measured(&ctx.gens, Gen::Wrk, &load, &watch, 1, "rss, 32 conns, wrk")?;
    let samples = trace.stop();
    report.run("`/v1/messages` whole answers for 60 s: relay", &run);
    // The samples from the end of the warm-up on.
    let start = samples.first().map(|s| s.0).unwrap_or(0.0) + super::measure::WARMUP_SECS as f64;
    let at = |secs: f64| {
        samples
            .iter()
            .rev()
            .find(|(t, _)| *t <= start + secs)
            .map(|s| s.1)
            .unwrap_or(0)
    };
    let marks: Vec<String> = (1..=6)
        .map(|i| format!("{:.1}", mib(at(f64::from(i) * 10.0))))
        .collect();
    let (mid, end) = (at(30.0), run.rss_end_kib);
    let growth = end as i64 - mid as i64;
    let steady = growth <= (1024).max(mid as i64 * 3 / 100);
    report.memory(format!(
        "{SECS} s of whole answers at {CONNS} conns ({} req/s): relay RSS idle {:.1} MiB; after 10, 20, ... 60 s: {} MiB; \
         peak {:.1} MiB; {:+.1} MiB over the last 30 s: {}",
        thousands(run.rps()),
        mib(idle),
        marks.join(", "),
        mib(run.rss_peak_kib),
        growth as f64 / 1024.0,
        if steady { "steady" } else { "climbing" }
    ));
    report.target(
        end <= 24 * 1024 && steady,
        format!(
            "relay RSS <= 24 MiB after 60 s at full load, steady: {:.1} MiB, {:+.1} MiB over the last 30 s ({})",
            mib(end),
            growth as f64 / 1024.0,
            if steady { "steady" } else { "climbing" }
        ),
    );
    Ok(())
}
