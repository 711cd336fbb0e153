//! HTTP/2 as the pool speaks it (the `h2` crate, from each request's own task): a connection's
//! handshake and settings, a request's exchange, the [`Stream`] each answer holds (at most
//! [`STREAMS_PER_H2`] on a connection), and the connections being opened that a burst's
//! requests wait on ([`Pending`], [`Opener`]) rather than each opening one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use ::h2::RecvStream;
use ::h2::client::SendRequest;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderName, TE, TRANSFER_ENCODING, UPGRADE};
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, Uri};

use tokio::io::{AsyncRead, AsyncWrite};

/// Whether an HTTP/2 connection has closed: set by the task that drives it when it ends.
#[derive(Clone, Default)]
pub(super) struct Closed(Arc<AtomicBool>);

impl Closed {
    pub(super) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// One stream of a shared HTTP/2 connection, counted while its answer lasts.
pub(crate) struct Stream(pub(super) Arc<AtomicUsize>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection being opened that requests wait on.
pub(super) struct Pending {
    pub(super) opening: tokio::sync::watch::Receiver<Opening>,
    /// The requests waiting on it: no more than one connection's streams, the rest wait on
    /// (or open) another.
    pub(super) waiting: usize,
}

/// How the opening of a connection that others wait on went, as far as they need to know.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening {
    /// Still connecting; once it is up (and shared if HTTP/2) the sender goes.
    Pending,
    /// It failed: each waiting request opens its own, to fail (or not) with its own error.
    Failed,
}

/// Held by the request that opens a connection others wait on: they go on when it is dropped
/// (the connection is up) or says it failed.
pub(super) struct Opener(pub(super) tokio::sync::watch::Sender<Opening>);

impl Opener {
    pub(super) fn failed(&self) {
        self.0.send_replace(Opening::Failed);
    }
}

/// Opens HTTP/2 on `io`, a new connection whose ALPN chose it, with hyper's client settings
/// (2 MiB a stream and 5 MiB the connection to receive, no server push), its I/O driven by a
/// task of this thread's runtime until it closes.
pub(super) async fn handshake<T>(io: T) -> Result<(SendRequest<Bytes>, Closed), ::h2::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = ::h2::client::Builder::new()
        .initial_max_send_streams(STREAMS_PER_H2)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .enable_push(false)
        .handshake(io)
        .await?;
    let closed = Closed::default();
    let ended = closed.clone();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream HTTP/2 connection: {e}");
        }
        ended.0.store(true, Ordering::Release);
    });
    Ok((send, closed))
}

/// Streams a lane opens at once on one HTTP/2 connection before it opens another: the fewest
/// a server should allow (RFC 9113, 6.5.2). More would wait in the connection's own queue for
/// one of its streams to end, which a long answer's may not do for minutes.
pub(super) const STREAMS_PER_H2: usize = 100;

/// What a stream may receive before the relay reads it (hyper's client's default).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// What a connection's streams together may receive before the relay reads them.
const CONN_WINDOW: u32 = 5 * 1024 * 1024;
const MAX_FRAME: u32 = 16 * 1024;
const MAX_HEADER_LIST: u32 = 16 * 1024;
const MAX_SEND_BUFFER: usize = 1024 * 1024;

/// How a request on an HTTP/2 connection failed.
pub(super) enum Failure {
    /// Nothing of it left: the connection is closing or closed; another may carry it.
    Unsent,
    /// No answer's head by the first-byte time.
    TimedOut,
    /// It failed once sent, or could not be sent at all (a header HTTP/2 refuses).
    Failed(::h2::Error),
}

/// Sends the request (`parts` to `uri` with `body`) on `send` as soon as the connection has a
/// stream for it, and waits for the answer's head until `until`. The request's own task does
/// it all: hyper's client would hand it to a task of the connection's and spawn another to
/// wait for the answer.
pub(super) async fn exchange(
    send: SendRequest<Bytes>,
    parts: &Parts,
    uri: &Uri,
    body: &Bytes,
    until: Instant,
) -> Result<Response<RecvStream>, Failure> {
    let mut send = match tokio::time::timeout_at(until.into(), send.ready()).await {
        Err(_) => return Err(Failure::TimedOut),
        Ok(Err(_)) => return Err(Failure::Unsent),
        Ok(Ok(send)) => send,
    };
    let (answer, mut out) = send
        .send_request(head(parts, uri, body), body.is_empty())
        .map_err(|e| {
            if e.is_io() || e.is_go_away() || e.reason().is_some() {
                Failure::Unsent
            } else {
                Failure::Failed(e)
            }
        })?;
    if !body.is_empty() {
        // Queued whole (it is in memory already); the connection sends it as the upstream's
        // window allows.
        out.send_data(body.clone(), true).map_err(Failure::Failed)?;
    }
    match tokio::time::timeout_at(until.into(), answer).await {
        Err(_) => Err(Failure::TimedOut),
        Ok(answered) => answered.map_err(Failure::Failed),
    }
}

/// The request's head for HTTP/2: the whole URI, the same method and headers less those
/// HTTP/2 forbids (RFC 9113, 8.2.2), and the body's length when it has one (as hyper sends it).
fn head(parts: &Parts, uri: &Uri, body: &Bytes) -> Request<()> {
    let mut req = Request::new(());
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri.clone();
    let headers = req.headers_mut();
    *headers = parts.headers.clone();
    // The relay's own requests carry none of them: one look at the few names it sends.
    if headers.keys().any(forbidden) {
        if let Some(named) = headers.remove(CONNECTION)
            && let Ok(named) = named.to_str()
        {
            // The headers it names are this connection's too.
            for name in named.split(',') {
                headers.remove(name.trim());
            }
        }
        for name in [KEEP_ALIVE, PROXY_CONNECTION] {
            headers.remove(name);
        }
        headers.remove(TRANSFER_ENCODING);
        headers.remove(UPGRADE);
        if headers.get(TE).is_some_and(|te| te != "trailers") {
            headers.remove(TE);
        }
    }
    let payload = !matches!(
        parts.method,
        Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
    );
    if !body.is_empty() || payload {
        headers
            .entry(CONTENT_LENGTH)
            .or_insert_with(|| HeaderValue::from(body.len()));
    }
    req
}

const KEEP_ALIVE: &str = "keep-alive";
const PROXY_CONNECTION: &str = "proxy-connection";

/// Whether HTTP/2 forbids a request header of this name (or may: `te` is allowed as
/// `trailers`).
fn forbidden(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name == TE
        || name == KEEP_ALIVE
        || name == PROXY_CONNECTION
}
