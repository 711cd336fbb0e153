//! The `abuse` section: one key floods status polls of made-up ids at the default limits while
//! another key's requests are timed, alone and during the flood, in turns.
//!
//! Both loads are paced (`bench-load --rate`), each from a process of its own: the flood at
//! [`FLOOD_RATE`] polls a second over [`SECS`] seconds (30,000 polls), the other key listing
//! its tasks at [`VICTIM_RATE`] a second. Paced, the other key's rate says whether the relay
//! kept up with it and its p50 whether the flood slowed it; an unpaced flood would measure
//! only how the two cores are shared between the parties.

use std::process::Stdio;

use anyhow::{Context, bail};
use bytes::Bytes;

use super::generator::{Gen, Load};
use super::load::{Call, call_once};
use super::loadgen::{Outcome, parse_result};
use super::relays::{ADMIN, Ctx, SUBMISSION, start_in_temp};
use super::report::{Report, thousands};

/// Seconds of one timed run.
const SECS: u64 = 10;
/// The flood's polls a second, from one key at the default limits.
const FLOOD_RATE: u32 = 3000;
/// The other key's connections and requests a second.
const VICTIM_CONNS: usize = 8;
const VICTIM_RATE: u32 = 1000;
/// Alone-then-flood turns; the median turn is kept.
const TURNS: usize = 3;

/// A relay at the default `[limits]` whose `model_h3` runs on the fake video upstream (tasks
/// held there, nothing rendered).
fn config(upstream: std::net::SocketAddr) -> String {
    format!(
        "[models.model_h3]\nkind = \"video\"\nprice_per_second = 10\n\
         [tasks]\npoll_interval_min_ms = 60000\npoll_interval_max_ms = 60000\n\
         [[channels]]\nname = \"fake\"\nkind = \"openai-videos\"\nbase_url = \"http://{upstream}\"\n\
         api_key = \"{}\"\nmodels = [\"model_h3\"]\n",
        crate::fake_video::FAKE_KEY
    )
}

/// A request of the bench's own; its status and body as JSON.
fn call(
    ctx: &Ctx,
    addr: std::net::SocketAddr,
    method: &'static str,
    path: &str,
    bearer: &str,
    body: &str,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let call = Call {
        method,
        path: path.into(),
        headers: vec![
            ("authorization", format!("Bearer {bearer}")),
            ("content-type", "application/json".into()),
        ],
        body: Bytes::copy_from_slice(body.as_bytes()),
    };
    let (status, body) = ctx.runtime.block_on(call_once(addr, &call))?;
    Ok((status, serde_json::from_slice(&body).unwrap_or_default()))
}

/// One turn: the other key alone, then again during the flood.
struct Turn {
    alone: Outcome,
    during: Outcome,
    flood: Outcome,
}

pub fn run(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let fake = super::party::Party::start(&ctx.xtask, "fake-video", &[])?;
    let relay = start_in_temp(&ctx.relay, &config(fake.addr))?;
    // The other key: its own rate limit out of the way, a few tasks to list.
    let (status, created) = call(
        ctx,
        relay.addr,
        "POST",
        "/admin/keys",
        ADMIN,
        r#"{"name":"other","rate_limit":{"rps":1000000,"burst":1000000}}"#,
    )?;
    let Some(other) = created["key"].as_str().filter(|_| status == 200) else {
        bail!("POST /admin/keys answered {status}: {created}");
    };
    for _ in 0..5 {
        let (status, body) = call(ctx, relay.addr, "POST", "/v1/videos", other, SUBMISSION)?;
        if status != 200 {
            bail!("POST /v1/videos answered {status}: {body}");
        }
    }
    // Made-up ids over the three kinds of status poll, in the shape real ids have.
    let mut paths = String::new();
    for n in 0..30_000u64 {
        let id = format!("{:026X}", super::loadgen::mix(n) as u128 * 7919);
        let route = match n % 3 {
            0 => "/v1/videos/video_",
            1 => "/v1/video/generations/",
            _ => "/v1/assets/asset_",
        };
        paths.push_str(&format!("{route}{}\n", &id[..26]));
    }
    let paths_file = ctx.gens.dir().join("abuse-paths.txt");
    std::fs::write(&paths_file, paths).context("writing the flood's paths")?;
    let flood = Load {
        addr: relay.addr,
        conns: 16,
        secs: SECS,
        method: "GET",
        path: "/".into(),
        headers: vec![("authorization", format!("Bearer {}", relay.key))],
        body: String::new(),
        paths_file: Some(paths_file),
    };
    let victim = Load {
        addr: relay.addr,
        conns: VICTIM_CONNS,
        secs: SECS,
        method: "GET",
        path: "/v1/videos?limit=10".into(),
        headers: vec![("authorization", format!("Bearer {other}"))],
        body: String::new(),
        paths_file: None,
    };
    let paced = |load: &Load, rate: u32, expect: u16| -> anyhow::Result<std::process::Command> {
        let mut cmd = ctx.gens.command(Gen::Ours, load)?;
        cmd.args(["--rate", &rate.to_string(), "--expect", &expect.to_string()]);
        Ok(cmd)
    };
    let finish = |child: std::process::Child| -> anyhow::Result<Outcome> {
        let out = child.wait_with_output().context("waiting for bench-load")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!("bench-load failed ({}): {text}", out.status);
        }
        parse_result(&text).with_context(|| format!("bench-load: {text}"))
    };
    let spawn = |mut cmd: std::process::Command| {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting bench-load")
    };
    let mut turns = Vec::new();
    for turn in 0..TURNS {
        let alone = finish(spawn(paced(&victim, VICTIM_RATE, 200)?)?)?;
        // Wait out the key's poll budget of the turn before, so every flood starts full.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let flooding = spawn(paced(&flood, FLOOD_RATE, 429)?)?;
        let during = finish(spawn(paced(&victim, VICTIM_RATE, 200)?)?)?;
        let flood = finish(flooding)?;
        eprintln!(
            "bench: abuse turn {}: other key alone {:.0}/s p50 {:.0} µs, during the flood {:.0}/s p50 {:.0} µs; flood {} answered 429, {} otherwise",
            turn + 1,
            alone.rps(),
            alone.p50_us,
            during.rps(),
            during.p50_us,
            flood.requests,
            flood.errors
        );
        turns.push(Turn {
            alone,
            during,
            flood,
        });
    }
    let p50_ratio = |t: &Turn| t.during.p50_us / t.alone.p50_us.max(1.0);
    turns.sort_by(|a, b| p50_ratio(a).total_cmp(&p50_ratio(b)));
    let every = turns
        .iter()
        .map(|t| format!("{:.2}", p50_ratio(t)))
        .collect::<Vec<_>>()
        .join(", ");
    let t = &turns[turns.len() / 2];
    let rate_ratio = t.during.rps() / t.alone.rps().max(1e-9);
    let p50 = p50_ratio(t);
    report.ratio(format!(
        "another key's `GET /v1/videos?limit=10` paced at {VICTIM_RATE}/s on {VICTIM_CONNS} conns, during a flood of made-up-id status polls from a key at the default limits ({FLOOD_RATE}/s on 16 conns, {} polls in {SECS} s: {} answered 429, {} not): rate {rate_ratio:.2} of alone ({} ÷ {} req/s), p50 {p50:.2} of alone ({:.0} vs {:.0} µs); p50 ratio of each turn {every}",
        thousands((t.flood.requests + t.flood.errors) as f64),
        thousands(t.flood.requests as f64),
        thousands(t.flood.errors as f64),
        thousands(t.during.rps()),
        thousands(t.alone.rps()),
        t.during.p50_us,
        t.alone.p50_us,
    ));
    // The flooding key's budget: `limits.burst` at once, then `limits.rps` a second (the
    // defaults 20 and 10), with a second of slack.
    let budget = 20 + 10 * (SECS + 1);
    report.target(
        rate_ratio >= 0.8 && p50 <= 1.2 && t.flood.errors <= budget,
        format!(
            "a flood of made-up-id polls from one key at the default limits is refused past the key's budget ({} of {} polls not 429, at most {budget}) and another key's rate and p50 stay within 20% (rate {rate_ratio:.2}, p50 {p50:.2} of alone)",
            thousands(t.flood.errors as f64),
            thousands((t.flood.requests + t.flood.errors) as f64),
        ),
    );
    Ok(())
}
