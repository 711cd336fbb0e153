//! The `submissions` and `polling` sections: durable `POST /v1/videos` on an `openai-videos`
//! channel to the fake video upstream (which holds its tasks, so nothing is rendered), and
//! `GET /v1/videos/{id}` against the bare hyper hello server.

use anyhow::bail;
use bytes::Bytes;

use super::generator::{Gen, Load};
use super::load::{Call, call_once};
use super::measure::{ATTEMPTS, Watch, measured};
use super::party::Party;
use super::relays::{Ctx, RelayProc, SUBMISSION, start_in_temp, videos_config};
use super::report::{Report, thousands};

fn submit_load(relay: &RelayProc, secs: u64) -> Load {
    Load {
        addr: relay.addr,
        conns: 16,
        secs,
        method: "POST",
        path: "/v1/videos".into(),
        headers: vec![
            ("authorization", format!("Bearer {}", relay.key)),
            ("content-type", "application/json".into()),
        ],
        body: SUBMISSION.into(),
        paths_file: None,
    }
}

/// Durable submissions, 16 connections.
pub fn submissions(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let fake = Party::start(&ctx.xtask, "fake-video", &[])?;
    let relay = start_in_temp(&ctx.relay, &videos_config(fake.addr))?;
    let own = [fake.pid(), relay.pid()];
    let watch = Watch {
        server: relay.pid(),
        own: &own,
    };
    let load = submit_load(&relay, ctx.secs);
    let run = measured(
        &ctx.gens,
        Gen::Wrk,
        &load,
        &watch,
        ATTEMPTS,
        "durable POST /v1/videos, 16 conns, wrk",
    )?;
    report.run("durable `POST /v1/videos`: relay", &run);
    report.target(
        run.rps() >= 2000.0 && run.out.p99_us <= 20_000.0 && run.out.errors == 0,
        format!(
            "durable POST /v1/videos >= 2,000/s at 16 conns with p99 <= 20 ms: {}/s, p99 {:.1} ms{}",
            thousands(run.rps()),
            run.out.p99_us / 1000.0,
            if run.out.errors > 0 {
                format!(", {} errors", run.out.errors)
            } else {
                String::new()
            }
        ),
    );
    Ok(())
}

/// Submits one task to `relay`; its id.
fn one_task(ctx: &Ctx, relay: &RelayProc) -> anyhow::Result<String> {
    let submit = Call {
        method: "POST",
        path: "/v1/videos".into(),
        headers: vec![
            ("authorization", format!("Bearer {}", relay.key)),
            ("content-type", "application/json".into()),
        ],
        body: Bytes::from_static(SUBMISSION.as_bytes()),
    };
    let (status, body) = ctx.runtime.block_on(call_once(relay.addr, &submit))?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    match v["id"].as_str().filter(|_| status == 200) {
        Some(id) => Ok(id.to_owned()),
        None => bail!("POST /v1/videos answered {status}: {v}"),
    }
}

/// Polling one task vs the bare hyper hello server, 32 connections.
pub fn polling(ctx: &Ctx, report: &mut Report) -> anyhow::Result<()> {
    let fake = Party::start(&ctx.xtask, "fake-video", &[])?;
    let hello = Party::start(&ctx.xtask, "hello", &[])?;
    let relay = start_in_temp(&ctx.relay, &videos_config(fake.addr))?;
    let own = [fake.pid(), hello.pid(), relay.pid()];
    let id = one_task(ctx, &relay)?;
    let poll = Load {
        addr: relay.addr,
        conns: 32,
        secs: ctx.secs,
        method: "GET",
        path: format!("/v1/videos/{id}"),
        headers: vec![("authorization", format!("Bearer {}", relay.key))],
        body: String::new(),
        paths_file: None,
    };
    let watch = |server| Watch { server, own: &own };
    let r = measured(
        &ctx.gens,
        Gen::Wrk,
        &poll,
        &watch(relay.pid()),
        ATTEMPTS,
        "GET /v1/videos/{id}, 32 conns, wrk",
    )?;
    let h = measured(
        &ctx.gens,
        Gen::Wrk,
        &poll.at(hello.addr),
        &watch(hello.pid()),
        ATTEMPTS,
        "hello, 32 conns, wrk",
    )?;
    report.run("`GET /v1/videos/{id}`: relay", &r);
    report.run("`GET /v1/videos/{id}`: hello server", &h);
    let ratio = r.rps() / h.rps();
    report.ratio(format!(
        "GET /v1/videos/{{id}}, 32 conns: relay ÷ hello = {ratio:.2} ({} ÷ {} req/s; p50 {:.0} vs {:.0} µs; CPU per request {:.1} vs {:.1} µs)",
        thousands(r.rps()),
        thousands(h.rps()),
        r.out.p50_us,
        h.out.p50_us,
        r.cpu_us,
        h.cpu_us
    ));
    report.target(
        ratio >= 0.8,
        format!(
            "GET /v1/videos/{{id}} >= 0.8 of hello at 32 conns: {ratio:.2} ({} ÷ {} req/s)",
            thousands(r.rps()),
            thousands(h.rps())
        ),
    );
    // The same relay with one connection thread, as the hello server has: the shape of the
    // runtime, apart from the request path (the target above is the default's).
    drop(relay);
    let one = start_in_temp(
        &ctx.relay,
        &format!("[server]\nworkers = 1\n{}", videos_config(fake.addr)),
    )?;
    let own = [fake.pid(), hello.pid(), one.pid()];
    let id = one_task(ctx, &one)?;
    let poll = Load {
        addr: one.addr,
        path: format!("/v1/videos/{id}"),
        headers: vec![("authorization", format!("Bearer {}", one.key))],
        ..poll
    };
    let o = measured(
        &ctx.gens,
        Gen::Wrk,
        &poll,
        &Watch {
            server: one.pid(),
            own: &own,
        },
        ATTEMPTS,
        "GET /v1/videos/{id}, one connection thread, 32 conns, wrk",
    )?;
    report.run("`GET /v1/videos/{id}`: relay, `workers = 1`", &o);
    report.ratio(format!(
        "GET /v1/videos/{{id}}, 32 conns, the relay on one connection thread (`[server] workers = 1`): relay ÷ hello = {:.2} ({} ÷ {} req/s; CPU per request {:.1} vs {:.1} µs)",
        o.rps() / h.rps(),
        thousands(o.rps()),
        thousands(h.rps()),
        o.cpu_us,
        h.cpu_us
    ));
    Ok(())
}
