//! What the fakes of real video vendors share: a small hyper server on loopback that hands each
//! whole request to its vendor's handler (which may hang up without an answer), JSON answers, query
//! parameters, switches that count down, the two ways a fake starts (one server that knows its own
//! address, or an API beside a file host), what the shared flows need of a fake that takes
//! submissions, and the playable MP4 their result URLs serve (a real H.264 video rendered once by
//! the relay's own renderer).

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A fake vendor's server; it stops when dropped.
pub struct FakeServer {
    pub base: String,
    _stop: oneshot::Sender<()>,
}

/// Why a fake hung up: hyper closes the connection without writing an answer.
#[derive(Debug)]
struct HungUp;

impl std::fmt::Display for HungUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hung up without an answer")
    }
}

impl std::error::Error for HungUp {}

/// Serves `handler` on a fresh loopback port: each request is read whole, then handed over.
/// A handler's `None` closes the connection without an answer (as a vendor that took a task
/// and then lost the connection).
pub async fn serve<F, Fut>(handler: F) -> FakeServer
where
    F: Fn(Request<Bytes>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Response<Full<Bytes>>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let handler = Arc::new(handler);
    let (stop, mut stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let handler = handler.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req: Request<Incoming>| {
                            let handler = handler.clone();
                            async move {
                                let (parts, body) = req.into_parts();
                                let bytes = match body.collect().await {
                                    Ok(b) => b.to_bytes(),
                                    Err(_) => Bytes::new(),
                                };
                                handler(Request::from_parts(parts, bytes)).await.ok_or(HungUp)
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            }
        }
    });
    FakeServer { base, _stop: stop }
}

/// A fake's answer to one request; `None` hangs up without one.
pub type Answer = Option<Response<Full<Bytes>>>;

/// Serves `answer` over `state` on a fresh loopback port, handing it the server's own base
/// URL (the fake's result URLs point back at it).
pub async fn serve_knowing_base<S, F>(state: Arc<S>, answer: F) -> FakeServer
where
    S: Send + Sync + 'static,
    F: Fn(&Arc<S>, &str, Request<Bytes>) -> Answer + Send + Sync + 'static,
{
    let base = Arc::new(OnceLock::<String>::new());
    let (answer, b) = (Arc::new(answer), base.clone());
    let server = serve(move |req| {
        let (st, b, answer) = (state.clone(), b.clone(), answer.clone());
        async move { answer(&st, b.get().map_or("", String::as_str), req) }
    })
    .await;
    let _ = base.set(server.base.clone());
    server
}

/// Serves `file` over `state` as a file host, then `answer` as the API, handing it the file
/// host's base URL (a vendor whose results live on a host of their own): (API, file host).
pub async fn serve_with_file_host<S, F, G>(
    state: Arc<S>,
    file: G,
    answer: F,
) -> (FakeServer, FakeServer)
where
    S: Send + Sync + 'static,
    G: Fn(&Arc<S>, &Request<Bytes>) -> Response<Full<Bytes>> + Send + Sync + 'static,
    F: Fn(&Arc<S>, &str, Request<Bytes>) -> Answer + Send + Sync + 'static,
{
    let (st, file) = (state.clone(), Arc::new(file));
    let files = serve(move |req| {
        let (st, file) = (st.clone(), file.clone());
        async move { Some(file(&st, &req)) }
    })
    .await;
    let (files_base, answer) = (files.base.clone(), Arc::new(answer));
    let server = serve(move |req| {
        let (st, fb, answer) = (state.clone(), files_base.clone(), answer.clone());
        async move { answer(&st, &fb, req) }
    })
    .await;
    (server, files)
}

/// What the shared flows need of a fake that takes submissions: its switches for the next
/// submissions, and the prompts it was sent, read from its own wire.
pub trait TakesSubmissions {
    /// The next this many submissions are taken and their connection closed unanswered.
    fn hang_up_submissions(&self) -> &AtomicU32;
    /// The next this many submissions are taken and answered as accepted, without an id.
    fn no_id_submissions(&self) -> &AtomicU32;
    /// The prompt of each accepted submission, oldest first, as the vendor's wire carries it.
    fn prompts(&self) -> Vec<Value>;
}

/// Implements [`TakesSubmissions`] for fake `$fake`, whose `state` holds the two switches and
/// whose `submissions()` it reads each prompt from with `$prompt`.
macro_rules! takes_submissions {
    ($fake:ty, $prompt:expr) => {
        impl $crate::fake_vendor::TakesSubmissions for $fake {
            fn hang_up_submissions(&self) -> &std::sync::atomic::AtomicU32 {
                &self.state.hang_up_submissions
            }

            fn no_id_submissions(&self) -> &std::sync::atomic::AtomicU32 {
                &self.state.no_id_submissions
            }

            fn prompts(&self) -> Vec<serde_json::Value> {
                self.submissions().iter().map($prompt).collect()
            }
        }
    };
}
pub(crate) use takes_submissions;

/// Takes one from `counter` when it is above 0: whether a switch for the next so many
/// requests applies to this one.
pub fn take_one(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A JSON answer.
pub fn json(status: u16, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).expect("status"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

/// An answer of `content_type` with `body`.
pub fn bytes(status: u16, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).expect("status"))
        .header("content-type", content_type)
        .body(Full::new(body))
        .expect("response")
}

/// The value of query parameter `name` of `req`, percent-decoded.
pub fn query(req: &Request<Bytes>, name: &str) -> Option<String> {
    req.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The request's header `name`, when it is text.
pub fn header<'a>(req: &'a Request<Bytes>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A short playable H.264 MP4 (64x64, 1 s), rendered once per test binary.
pub fn playable_mp4() -> Bytes {
    static MP4: OnceLock<Bytes> = OnceLock::new();
    MP4.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let (video, thumb, last) = (
            dir.path().join("v.mp4"),
            dir.path().join("t.png"),
            dir.path().join("l.png"),
        );
        let spec = channels::sim::render::RenderSpec {
            width: 64,
            height: 64,
            duration_secs: 1,
            fps: 6,
            text: "vendor".into(),
            first_frame: None,
        };
        channels::sim::render::render(&spec, &video, &thumb, &last).expect("render an MP4");
        Bytes::from(std::fs::read(&video).expect("read the MP4"))
    })
    .clone()
}

/// Whether `s` is a `data:` URI, an http(s) URL, or neither.
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// Decodes standard base64 (with or without padding); `None` when it is not.
pub fn unbase64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(s))
        .ok()
}

/// Whether `bytes` start like a PNG or a JPEG.
pub fn is_image(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x89PNG\r\n\x1a\n") || bytes.starts_with(&[0xFF, 0xD8, 0xFF])
}
