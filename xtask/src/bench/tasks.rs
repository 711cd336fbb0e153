//! The `submissions` and `polling` sections: durable `POST /v1/videos` (held by the simulator,
//! so rendering is not measured) and `GET /v1/videos/{id}` against a bare hyper hello.

use std::time::Duration;

use anyhow::bail;
use bytes::Bytes;

use super::load::{Call, call_once, hello, load};
use super::relays::RelayProc;
use super::report::Report;

/// A submission the simulator holds (`stuck`), so that it stays in flight.
fn submit_call(key: &str) -> Call {
    Call {
        method: "POST",
        path: "/v1/videos".into(),
        headers: vec![
            ("authorization", format!("Bearer {key}")),
            ("content-type", "application/json".into()),
            ("x-relay-sim", "stuck".into()),
        ],
        body: Bytes::from_static(br#"{"model":"model_h3","prompt":"bench","size":"64x64"}"#),
    }
}

/// Durable submissions, 16 connections.
pub async fn submissions(
    report: &mut Report,
    relay: &RelayProc,
    secs: Duration,
) -> anyhow::Result<()> {
    let s = load(relay.addr, 16, secs, submit_call(&relay.key), 200).await;
    report.check(
        "durable POST /v1/videos, 16 conns",
        format!(
            "{:.0} submissions/s (p99 {} µs, errors {})",
            s.rps(),
            s.pct(0.99),
            s.errors
        ),
        ">= 2000/s",
        s.rps() >= 2000.0,
    );
    Ok(())
}

/// Polling one task vs a bare hyper hello, 32 connections.
pub async fn polling(report: &mut Report, relay: &RelayProc, secs: Duration) -> anyhow::Result<()> {
    let hello = hello().await?;
    // A task of its own, held by the simulator, so that the section also runs alone.
    let (status, body) = call_once(relay.addr, &submit_call(&relay.key)).await?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(id) = v["id"].as_str().filter(|_| status == 200) else {
        bail!("POST /v1/videos answered {status}: {v}");
    };
    let poll = Call {
        method: "GET",
        path: format!("/v1/videos/{id}"),
        headers: vec![("authorization", format!("Bearer {}", relay.key))],
        body: Bytes::new(),
    };
    let p = load(relay.addr, 32, secs, poll.clone(), 200).await;
    let h = load(hello, 32, secs, poll, 200).await;
    let ratio = p.rps() / h.rps();
    report.check(
        "GET /v1/videos/{id} polling, 32 conns: relay / bare hyper hello",
        format!("{ratio:.2} ({:.0} / {:.0} req/s)", p.rps(), h.rps()),
        ">= 0.7",
        ratio >= 0.7,
    );
    Ok(())
}
