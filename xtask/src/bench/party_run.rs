//! `xtask bench-party KIND`: the bench's servers other than the relay, each run in a process of
//! its own (a release build) with one worker thread, so that none shares a runtime, a thread
//! or a process with what it measures or with the load generator:
//!
//! - `fake-messages`: a native (Anthropic) messages upstream answering at once, a whole message
//!   or, when the request says `"stream":true`, a stream of 8 events in one piece;
//! - `fake-video`: the integration tests' fake video upstream (`openai-videos` and `ark`), its
//!   tasks running for an hour, so nothing is rendered or downloaded;
//! - `floor --upstream ADDR`: a bare hyper reverse proxy (pooled client, no parsing), the
//!   floor of the relay's `/v1/messages`;
//! - `hello`: a bare hyper server answering a fixed small JSON, the floor of a task read.
//!
//! With `--cert FILE --key FILE` the fake messages upstream serves HTTPS (HTTP/2 or HTTP/1.1 by
//! ALPN) and counts its handshakes into `--stats FILE` ([`super::tls`]); with `--slow N` its
//! streams send N text deltas, one every `--event-ms` (1000), between their first two events
//! and their last three ([`super::open_streams`]). With `--ca FILE` the floor calls its
//! upstream over TLS, trusting that CA. Every party raises its soft open-file limit to the hard
//! one.
//!
//! Each prints its bound port on stdout, then serves until its stdin closes (so that a bench
//! that dies takes its parties with it) or it is killed.
//!
//! What they serve and [`Party`](super::party::Party), the bench's handle on one, are in
//! [`super::party`].

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

use crate::fake_video::{FakeVideo, Switches};

use super::party::{Body, HELLO, TlsArgs, fake_messages, full, serve};

pub const USAGE: &str =
    "usage: xtask bench-party fake-messages|fake-video|hello|floor --upstream IP:PORT
        [--port N] [--workers N] [--cert FILE --key FILE [--stats FILE]] [--slow N]
        [--event-ms MS] [--ca FILE]

  A server of cargo xtask bench in a process of its own: prints its port, serves on
  127.0.0.1 until stdin closes. --port 0 (the default) takes a free port; --workers 1 (the
  default) runs it on one thread. --cert/--key: fake-messages serves HTTPS (h2 or HTTP/1.1 by
  ALPN), its handshakes and requests counted into --stats. --slow N: its streams send N deltas,
  one every --event-ms. --ca: the floor's upstream is HTTPS, signed by this CA.";

#[derive(Clone)]
enum Kind {
    FakeMessages,
    FakeVideo,
    Floor(SocketAddr),
    Hello,
}

pub fn run(args: &[String]) -> anyhow::Result<()> {
    let (mut kind, mut port, mut workers, mut upstream) = (None, 0u16, 1usize, None);
    let mut tls = TlsArgs::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--port" => port = value()?.parse().context("--port: not a port")?,
            "--workers" => workers = value()?.parse().context("--workers: not a number")?,
            "--upstream" => {
                upstream = Some(
                    value()?
                        .parse::<SocketAddr>()
                        .context("--upstream: not IP:PORT")?,
                )
            }
            "--cert" => tls.cert = Some(value()?.into()),
            "--key" => tls.key = Some(value()?.into()),
            "--stats" => tls.stats = Some(value()?.into()),
            "--ca" => tls.ca = Some(value()?.into()),
            "--slow" => tls.slow = value()?.parse().context("--slow: not a number")?,
            "--event-ms" => tls.event_ms = value()?.parse().context("--event-ms: not a number")?,
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            k @ ("fake-messages" | "fake-video" | "floor" | "hello") if kind.is_none() => {
                kind = Some(k.to_owned())
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let kind = match kind.as_deref() {
        Some("fake-messages") => Kind::FakeMessages,
        Some("fake-video") => Kind::FakeVideo,
        Some("hello") => Kind::Hello,
        Some("floor") => {
            Kind::Floor(upstream.with_context(|| format!("floor needs --upstream\n{USAGE}"))?)
        }
        _ => bail!("which party?\n{USAGE}"),
    };
    let runtime = match workers {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
    .context("starting tokio")?;
    // Every party may hold thousands of connections (the open-streams run).
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("binding 127.0.0.1:{port}"))?;
        println!("{}", listener.local_addr()?.port());
        // Until stdin closes: the bench holds its end for as long as it needs the party.
        std::thread::spawn(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            std::process::exit(0);
        });
        match kind {
            Kind::FakeVideo => {
                let switches = Arc::new(Switches::default());
                switches.run_ms.store(3_600_000, Ordering::SeqCst);
                let _fake = FakeVideo::serve(listener, switches);
                std::future::pending::<()>().await;
            }
            Kind::FakeMessages if tls.cert.is_some() || tls.slow > 0 => {
                super::open_streams::serve_fake(listener, &tls).await?
            }
            Kind::FakeMessages => serve(listener, Arc::new(fake_messages)).await,
            Kind::Hello => {
                serve(
                    listener,
                    Arc::new(|_req: Request<Incoming>| async {
                        full(Bytes::from_static(HELLO.as_bytes()), "application/json")
                    }),
                )
                .await
            }
            Kind::Floor(upstream) if tls.ca.is_some() => {
                let ca = tls.ca.clone().unwrap_or_default();
                let client = super::tls::floor_client(&ca)?;
                let base: Arc<str> = format!("https://{upstream}").into();
                serve(
                    listener,
                    Arc::new(move |req: Request<Incoming>| {
                        proxy(client.clone(), base.clone(), req)
                    }),
                )
                .await
            }
            Kind::Floor(upstream) => {
                let base: Arc<str> = format!("http://{upstream}").into();
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                let client: Client<HttpConnector, Incoming> =
                    Client::builder(TokioExecutor::new()).build(connector);
                serve(
                    listener,
                    Arc::new(move |req: Request<Incoming>| {
                        proxy(client.clone(), base.clone(), req)
                    }),
                )
                .await
            }
        }
        Ok(())
    })
}

/// The floor: the request as it came, to `base` (scheme and authority) over pooled
/// connections.
async fn proxy<C>(
    client: Client<C, Incoming>,
    base: Arc<str>,
    mut req: Request<Incoming>,
) -> Response<Body>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    match format!("{base}{path}").parse() {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => return status(StatusCode::BAD_REQUEST),
    }
    match client.request(req).await {
        Ok(res) => res.map(|b| b.boxed()),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
    *res.status_mut() = code;
    res
}
