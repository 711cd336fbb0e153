//! What the bench's servers other than the relay serve (the fake upstream's answers, the hello
//! server's, how a party serves HTTP/1.1) and [`Party`], the bench's handle on one: a process
//! of its own, `xtask bench-party KIND` (the `party_run` module).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::cmd::{drain, stdout_lines};

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

/// What the fake counts for any message, as Anthropic's `count_tokens` answers.
const COUNT: &str = r#"{"input_tokens":12}"#;

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

/// The fake native upstream: the whole message, or the stream when the body asks for one; and
/// `POST /v1/messages/count_tokens` (Anthropic's token counting, which a peer asks before each
/// message), a count.
pub(super) async fn fake_messages(req: Request<Incoming>) -> Response<Body> {
    static STREAM: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    if req.uri().path().ends_with("/count_tokens") {
        return full(Bytes::from_static(COUNT.as_bytes()), "application/json");
    }
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
