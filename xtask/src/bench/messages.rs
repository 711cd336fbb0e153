//! The `messages` section: `/v1/messages` through the relay against a bare hyper reverse proxy
//! (the floor) and the direct path, over a fake native (Anthropic) upstream.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::load::{Call, load, proc_stats, serve};
use super::relays::RelayProc;
use super::report::Report;

const MESSAGE: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"bench-chat","content":[{"type":"text","text":"Hello from the bench upstream."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}"#;
const REQUEST: &str =
    r#"{"model":"bench-chat","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}"#;

fn stream_body() -> String {
    let events = [
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench-chat","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there."}}"#,
        ),
        (
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];
    events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect()
}

/// The fake native upstream: a fixed message, streamed or not.
pub async fn fake_upstream() -> anyhow::Result<SocketAddr> {
    let stream = Bytes::from(stream_body());
    serve(move |req| {
        let stream = stream.clone();
        Box::pin(async move {
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let streaming = body.windows(13).any(|w| w == b"\"stream\":true");
            let (ct, bytes) = if streaming {
                ("text/event-stream", stream)
            } else {
                ("application/json", Bytes::from_static(MESSAGE.as_bytes()))
            };
            let mut res = Response::new(Full::new(bytes));
            res.headers_mut()
                .insert("content-type", http::HeaderValue::from_static(ct));
            res
        })
    })
    .await
}

/// The floor: a bare reverse proxy with a pooled client, no parsing.
async fn floor_proxy(upstream: SocketAddr) -> anyhow::Result<SocketAddr> {
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build_http();
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let client = client.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |mut req: Request<Incoming>| {
                    let client = client.clone();
                    async move {
                        let path = req
                            .uri()
                            .path_and_query()
                            .map(|p| p.as_str())
                            .unwrap_or("/")
                            .to_owned();
                        *req.uri_mut() = format!("http://{upstream}{path}").parse().expect("uri");
                        let res = client.request(req).await;
                        Ok::<_, Infallible>(match res {
                            Ok(res) => res.map(|b| b.boxed()),
                            Err(_) => Response::new(
                                Full::new(Bytes::new()).map_err(|n| match n {}).boxed(),
                            ),
                        })
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

fn messages_call(key: &str, stream: bool) -> Call {
    let body = if stream {
        REQUEST.replacen('{', "{\"stream\":true,", 1)
    } else {
        REQUEST.to_owned()
    };
    Call {
        method: "POST",
        path: "/v1/messages".into(),
        headers: vec![
            ("x-api-key", key.to_owned()),
            ("anthropic-version", "2023-06-01".into()),
            ("content-type", "application/json".into()),
        ],
        body: Bytes::from(body),
    }
}

/// The messages measurements on `relay`, whose `bench-chat` channel is `upstream`.
pub async fn run(
    report: &mut Report,
    relay: &RelayProc,
    upstream: SocketAddr,
    secs: Duration,
) -> anyhow::Result<()> {
    let floor = floor_proxy(upstream).await?;
    let pid = relay.relay.child.id();

    // Warm up every path.
    for addr in [relay.addr, floor, upstream] {
        load(
            addr,
            4,
            Duration::from_millis(500),
            messages_call(&relay.key, false),
            200,
        )
        .await;
    }

    // Messages, non-stream and stream, 32 connections.
    for stream in [false, true] {
        let call = messages_call(&relay.key, stream);
        let (t0, _, _) = proc_stats(pid);
        let r = load(relay.addr, 32, secs, call.clone(), 200).await;
        let (t1, rss, _) = proc_stats(pid);
        let f = load(floor, 32, secs, call.clone(), 200).await;
        let d = load(upstream, 32, secs, call, 200).await;
        let kind = if stream { "stream" } else { "non-stream" };
        let target = if stream { 1.0 } else { 0.85 };
        let ratio = r.rps() / f.rps();
        report.check(
            &format!("messages {kind}, 32 conns: relay / floor throughput"),
            format!(
                "{ratio:.2} ({:.0} / {:.0} req/s; direct {:.0}; relay errors {})",
                r.rps(),
                f.rps(),
                d.rps(),
                r.errors
            ),
            &format!(">= {target}"),
            ratio >= target,
        );
        let tick_us = 1_000_000.0 / 100.0;
        let cpu_us = (t1 - t0) as f64 * tick_us / r.ok.max(1) as f64;
        report.check(
            &format!("messages {kind}: relay CPU per request"),
            format!("{cpu_us:.0} µs"),
            "report",
            true,
        );
        report.check(
            &format!("messages {kind}: relay RSS under load"),
            format!("{:.1} MiB", rss as f64 / 1024.0),
            "<= 24 MiB",
            rss <= 24 * 1024,
        );
    }
    // One connection: latency.
    let call = messages_call(&relay.key, false);
    let r = load(relay.addr, 1, secs, call.clone(), 200).await;
    let f = load(floor, 1, secs, call.clone(), 200).await;
    let d = load(upstream, 1, secs, call, 200).await;
    report.check(
        "messages, 1 conn: p50 / p99 relay, floor, direct",
        format!(
            "{} / {} µs, {} / {} µs, {} / {} µs",
            r.pct(0.5),
            r.pct(0.99),
            f.pct(0.5),
            f.pct(0.99),
            d.pct(0.5),
            d.pct(0.99)
        ),
        "relay p50 <= floor p50 + 20 µs",
        r.pct(0.5) <= f.pct(0.5) + 20,
    );
    let call = messages_call(&relay.key, true);
    let r = load(relay.addr, 1, secs, call.clone(), 200).await;
    let d = load(upstream, 1, secs, call, 200).await;
    report.check(
        "messages stream, 1 conn: time to first byte p50 / p99, relay vs direct",
        format!(
            "{} / {} µs vs {} / {} µs (p50 +{} µs)",
            r.first_byte_pct(0.5),
            r.first_byte_pct(0.99),
            d.first_byte_pct(0.5),
            d.first_byte_pct(0.99),
            r.first_byte_pct(0.5).saturating_sub(d.first_byte_pct(0.5))
        ),
        "p50 within 1 ms of direct",
        r.first_byte_pct(0.5) <= d.first_byte_pct(0.5) + 1000,
    );
    report.check(
        "messages stream, 1 conn: whole-stream p50 relay vs direct",
        format!(
            "{} µs vs {} µs (+{} µs)",
            r.pct(0.5),
            d.pct(0.5),
            r.pct(0.5).saturating_sub(d.pct(0.5))
        ),
        "report",
        true,
    );
    Ok(())
}
