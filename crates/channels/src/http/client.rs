//! A small pooled HTTP client for upstream APIs: http and https (rustls with the ring provider;
//! the webpki roots or the system's, and an operator's CA, see [`Network`]), directly or
//! through an HTTP proxy's tunnel, HTTP/1.1 and HTTP/2 by ALPN, with a connect timeout (the
//! whole set-up: lookup, TCP, tunnel, TLS), a first-byte timeout (until the answer's head
//! arrives) and an idle timeout (the longest silence inside a streamed body). Bodies are
//! streamed, never buffered unless asked.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, StatusCode};
use tokio::time::Instant;

use crate::http::deadline::Deadline;
use crate::http::network::{Dial, Network};
use crate::http::pool::{AnswerBody, Connector, ExchangeError, Headers, Pool};
pub use crate::http::pool::{LANES, set_lane};

/// The time limits of one channel's upstream calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    /// TCP (and TLS) connection set-up.
    pub connect: Duration,
    /// From sending the request to the answer's status line and headers.
    pub first_byte: Duration,
    /// The longest silence between two pieces of an answer's body.
    pub idle: Duration,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        UpstreamTimeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        }
    }
}

/// Failure of an upstream call. The text is for logs: it may name the upstream host, so it
/// never goes to a client.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream request {url}: {message}")]
    Send {
        url: String,
        message: String,
        /// Whether it is certain that no byte of the request reached the upstream.
        unsent: bool,
    },
    #[error("upstream request {url}: no answer within {after:?}")]
    FirstByteTimeout { url: String, after: Duration },
    #[error("upstream body: {0}")]
    Body(String),
    #[error("upstream body: silent for {0:?}")]
    IdleTimeout(Duration),
    #[error("upstream body: larger than {0} bytes")]
    TooLarge(usize),
    #[error("upstream request: {0}")]
    Build(String),
    /// The SSRF guard refused the URL's host: it is, or resolves to, a private address.
    #[error("upstream request {url}: {host} resolves to an address the relay does not fetch from")]
    Blocked { url: String, host: String },
}

impl UpstreamError {
    /// Whether a timeout caused it.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            UpstreamError::FirstByteTimeout { .. } | UpstreamError::IdleTimeout(_)
        )
    }

    /// Whether it is certain that no byte of the request reached the upstream, so that sending
    /// it again (to this upstream or another) cannot make an upstream act on it twice. Any
    /// failure after a byte may have left is ambiguous: the upstream may have acted on it.
    pub fn is_unsent(&self) -> bool {
        match self {
            UpstreamError::Build(_) | UpstreamError::Blocked { .. } => true,
            UpstreamError::Send { unsent, .. } => *unsent,
            UpstreamError::FirstByteTimeout { .. }
            | UpstreamError::Body(_)
            | UpstreamError::IdleTimeout(_)
            | UpstreamError::TooLarge(_) => false,
        }
    }
}

/// One pooled client with one set of timeouts: a pool per lane (see [`set_lane`]). Cheap to
/// clone (the clones share the pools).
#[derive(Clone)]
pub struct UpstreamHttp {
    pool: Arc<Pool>,
    timeouts: UpstreamTimeouts,
}

impl std::fmt::Debug for UpstreamHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamHttp")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl UpstreamHttp {
    /// Builds the client for a configured upstream's own API: every address allowed, the
    /// built-in roots, no proxy. Needs a tokio runtime when used, not when built.
    pub fn new(timeouts: UpstreamTimeouts) -> UpstreamHttp {
        UpstreamHttp::reaching(timeouts, None, &Network::default())
    }

    /// Builds a client whose every connection goes through the SSRF guard with `policy`: for
    /// URLs an upstream hands over (result downloads), which are no more trusted than a
    /// client's. The built-in roots, no proxy.
    pub fn guarded(timeouts: UpstreamTimeouts, policy: fetch::GuardPolicy) -> UpstreamHttp {
        UpstreamHttp::reaching(timeouts, Some(policy), &Network::default())
    }

    /// Builds a client that reaches its upstreams as `network` says (roots, proxy), through
    /// the SSRF guard with `guard` if one is given.
    pub fn reaching(
        timeouts: UpstreamTimeouts,
        guard: Option<fetch::GuardPolicy>,
        network: &Network,
    ) -> UpstreamHttp {
        let dial = Dial::new(guard.map(Arc::new), timeouts.connect, network);
        let connector: Connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*network.tls).clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(dial);
        UpstreamHttp {
            pool: Arc::new(Pool::new(connector, timeouts.connect)),
            timeouts,
        }
    }

    pub fn timeouts(&self) -> UpstreamTimeouts {
        self.timeouts
    }

    /// Sends `req` and waits (at most the first-byte timeout) for the answer's head.
    pub async fn send(&self, req: Request<Bytes>) -> Result<UpstreamResponse, UpstreamError> {
        // Where the pool sends it, and what an error's message names (written only for one).
        let uri = req.uri().clone();
        let url = || redact(&uri.to_string());
        let answer = self
            .pool
            .exchange(req, &uri, self.timeouts.first_byte)
            .await;
        let answer = match answer {
            Err(ExchangeError::FirstByte) => {
                return Err(UpstreamError::FirstByteTimeout {
                    url: url(),
                    after: self.timeouts.first_byte,
                });
            }
            Err(ExchangeError::Uri) => {
                return Err(UpstreamError::Build(format!(
                    "{}: not an absolute URL",
                    url()
                )));
            }
            Err(ExchangeError::Connect(e)) => {
                let url = url();
                if let Some(blocked) = find_blocked(&*e) {
                    return Err(UpstreamError::Blocked {
                        url,
                        host: blocked.host.clone(),
                    });
                }
                return Err(UpstreamError::Send {
                    url,
                    message: format!("connecting: {}", error_chain(&*e)),
                    unsent: true,
                });
            }
            Err(ExchangeError::H2(e)) => {
                return Err(UpstreamError::Send {
                    url: url(),
                    message: error_chain(&e),
                    unsent: false,
                });
            }
            Err(ExchangeError::H1(e)) => {
                return Err(UpstreamError::Send {
                    url: url(),
                    message: error_chain(&e),
                    unsent: e.is_unsent(),
                });
            }
            Ok(answer) => answer,
        };
        Ok(UpstreamResponse {
            status: answer.status,
            headers: answer.headers,
            body: UpstreamBody::new(answer.body, self.timeouts.idle),
        })
    }
}

#[cfg(test)]
impl UpstreamHttp {
    /// The client, its idle connections closed after `idle` instead.
    pub(crate) fn with_pool_idle_timeout(mut self, idle: Duration) -> UpstreamHttp {
        if let Some(pool) = Arc::get_mut(&mut self.pool) {
            pool.set_idle_timeout(idle);
        }
        self
    }

    /// How many idle connections this thread's lane of the pool keeps.
    pub(crate) fn idle_connections(&self) -> usize {
        self.pool.idle()
    }
}

/// The URL without its query (which may carry a key).
fn redact(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

/// The guard's refusal in an error's source chain, if it is there.
fn find_blocked<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e fetch::BlockedError> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(blocked) = s.downcast_ref::<fetch::BlockedError>() {
            return Some(blocked);
        }
        source = s.source();
    }
    None
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// An answer whose body has not been read yet.
#[derive(Debug)]
pub struct UpstreamResponse {
    pub status: StatusCode,
    headers: Headers,
    pub body: UpstreamBody,
}

impl UpstreamResponse {
    /// The answer's headers (read from its head now: a call needs them at most once).
    pub fn headers(&self) -> HeaderMap {
        self.headers.map()
    }
}

/// A streamed answer body. Dropping it before its end closes the connection, which cancels
/// the upstream request.
pub struct UpstreamBody {
    body: AnswerBody,
    idle: Duration,
    /// When the current silence becomes too long: `idle` after the first poll that found no
    /// piece since the last one (read then, so a body whose pieces are there when asked for
    /// never reads the clock).
    deadline: Option<Instant>,
    /// The idle timer, for the waits between pieces.
    timer: Deadline,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    fn new(body: AnswerBody, idle: Duration) -> UpstreamBody {
        UpstreamBody {
            body,
            idle,
            deadline: None,
            timer: Deadline::default(),
        }
    }

    /// The next piece of the body; `None` at its end. Fails when the upstream stays silent
    /// longer than the idle timeout. Cancel-safe: dropping the future loses nothing, and the
    /// silence keeps counting from when it was first waited on.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// [`UpstreamBody::chunk`] as a poll, for a caller that is a future or a body itself.
    pub fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, UpstreamError>> {
        let polled = match &mut self.body {
            AnswerBody::Empty => return Poll::Ready(Ok(None)),
            AnswerBody::H1 { body, lease } => match body.poll_chunk(cx) {
                Poll::Ready(Ok(None)) => {
                    if let Some(conn) = body.take_reusable()
                        && let Some(lease) = lease.take()
                    {
                        lease.release(conn);
                    }
                    Poll::Ready(Ok(None))
                }
                Poll::Ready(Ok(Some(data))) => Poll::Ready(Ok(Some(data))),
                Poll::Ready(Err(e)) => Poll::Ready(Err(error_chain(&e))),
                Poll::Pending => Poll::Pending,
            },
            AnswerBody::H2 { body, .. } => poll_h2(body, cx),
        };
        match polled {
            Poll::Ready(Ok(Some(data))) => {
                self.deadline = None;
                Poll::Ready(Ok(Some(data)))
            }
            Poll::Ready(Ok(None)) => {
                self.body = AnswerBody::Empty;
                Poll::Ready(Ok(None))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(UpstreamError::Body(e))),
            Poll::Pending => {
                let idle = self.idle;
                let deadline = *self.deadline.get_or_insert_with(|| Instant::now() + idle);
                std::task::ready!(self.timer.poll_until(deadline, cx));
                Poll::Ready(Err(UpstreamError::IdleTimeout(self.idle)))
            }
        }
    }

    /// The whole body, at most `max` bytes.
    pub async fn collect(mut self, max: usize) -> Result<Bytes, UpstreamError> {
        let Some(first) = self.chunk().await? else {
            return Ok(Bytes::new());
        };
        if first.len() > max {
            return Err(UpstreamError::TooLarge(max));
        }
        // A body that came in one piece is handed out as it is.
        let Some(second) = self.chunk().await? else {
            return Ok(first);
        };
        let mut buf = BytesMut::with_capacity(first.len() + second.len());
        buf.extend_from_slice(&first);
        let mut next = Some(second);
        while let Some(chunk) = next {
            if buf.len() + chunk.len() > max {
                return Err(UpstreamError::TooLarge(max));
            }
            buf.extend_from_slice(&chunk);
            next = self.chunk().await?;
        }
        Ok(buf.freeze())
    }
}

/// The next piece of data of an HTTP/2 body; `None` at its end. What is read is given back to
/// the upstream's window at once, as hyper does: the relay holds no more than the piece.
fn poll_h2(
    body: &mut ::h2::RecvStream,
    cx: &mut Context<'_>,
) -> Poll<Result<Option<Bytes>, String>> {
    loop {
        match std::task::ready!(body.poll_data(cx)) {
            None => return Poll::Ready(Ok(None)),
            Some(Err(e)) => return Poll::Ready(Err(error_chain(&e))),
            Some(Ok(data)) => {
                // The stream is still open while its data is read; giving back can only fail
                // once it is reset, which the next poll reports.
                let _ = body.flow_control().release_capacity(data.len());
                if !data.is_empty() {
                    return Poll::Ready(Ok(Some(data)));
                }
            }
        }
    }
}
