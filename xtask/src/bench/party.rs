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
//! [`Party`] is the bench's handle on one.

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::cmd::{drain, stdout_lines};
use crate::fake_video::{FakeVideo, Switches};

pub const USAGE: &str =
    "usage: xtask bench-party fake-messages|fake-video|hello|floor --upstream IP:PORT
        [--port N] [--workers N] [--cert FILE --key FILE [--stats FILE]] [--slow N]
        [--event-ms MS] [--ca FILE]

  A server of cargo xtask bench in a process of its own: prints its port, serves on
  127.0.0.1 until stdin closes. --port 0 (the default) takes a free port; --workers 1 (the
  default) runs it on one thread. --cert/--key: fake-messages serves HTTPS (h2 or HTTP/1.1 by
  ALPN), its handshakes and requests counted into --stats. --slow N: its streams send N deltas,
  one every --event-ms. --ca: the floor's upstream is HTTPS, signed by this CA.";

/// The fake upstream's whole answer.
pub const MESSAGE: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"bench-chat","content":[{"type":"text","text":"Hello from the bench upstream."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}"#;

/// The hello server's answer.
pub const HELLO: &str = r#"{"hello":true}"#;

/// The fake upstream's stream: 8 events, as the vendor sends them.
pub fn stream_body() -> String {
    let events = [
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench-chat","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        ("ping", r#"{"type":"ping"}"#),
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

pub(super) type Body = BoxBody<Bytes, hyper::Error>;

pub(super) fn full(bytes: Bytes, content_type: &'static str) -> Response<Body> {
    let mut res = Response::new(Full::new(bytes).map_err(|n| match n {}).boxed());
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    res
}

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

/// Serves HTTP/1.1 on `listener` with `answer`, a task per connection, until the process ends.
pub(super) async fn serve<F, Fut>(listener: TcpListener, answer: Arc<F>)
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, most likely: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let answer = answer.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let res = answer(req);
                async move { Ok::<_, Infallible>(res.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// The TLS and pacing flags of a party.
#[derive(Default)]
pub struct TlsArgs {
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    pub stats: Option<std::path::PathBuf>,
    pub ca: Option<std::path::PathBuf>,
    /// Text deltas of a slow stream (0: the stream goes in one piece).
    pub slow: u32,
    pub event_ms: u64,
}

/// The fake native upstream: the whole message, or the stream when the body asks for one.
pub(super) async fn fake_messages(req: Request<Incoming>) -> Response<Body> {
    static STREAM: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    // With or without a space after the colon: gateways in front of it re-serialize the body.
    if body.windows(13).any(|w| w == b"\"stream\":true")
        || body.windows(14).any(|w| w == b"\"stream\": true")
    {
        let stream = STREAM.get_or_init(|| Bytes::from(stream_body())).clone();
        full(stream, "text/event-stream")
    } else {
        full(Bytes::from_static(MESSAGE.as_bytes()), "application/json")
    }
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

/// A party started by the bench from the release xtask; stopped when dropped.
pub struct Party {
    child: Child,
    /// Held open: the party serves until it closes.
    _stdin: ChildStdin,
    pub addr: SocketAddr,
}

impl Party {
    /// Starts `xtask bench-party KIND ARGS...` and reads its port.
    pub fn start(xtask: &Path, kind: &str, args: &[&str]) -> anyhow::Result<Party> {
        let mut child = Command::new(xtask)
            .arg("bench-party")
            .arg(kind)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} bench-party {kind}", xtask.display()))?;
        let stdin = child.stdin.take().context("bench-party stdin")?;
        let lines = stdout_lines(&mut child, kind)?;
        let port = match lines.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => line.trim().parse::<u16>().ok(),
            Err(_) => None,
        };
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("bench-party {kind} did not print its port");
        };
        drain(lines);
        Ok(Party {
            child,
            _stdin: stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Party {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
