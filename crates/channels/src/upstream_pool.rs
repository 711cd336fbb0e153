//! The upstream connections of one client, kept for reuse: per lane (a thread that runs a
//! runtime of its own, see [`set_lane`]) and per origin (scheme and authority), the idle
//! HTTP/1.1 connections and the one HTTP/2 connection that requests share.
//!
//! A request takes an idle HTTP/1.1 connection (the most recently used first) or opens one;
//! the connection comes back when its answer's body has been read to the end (see
//! [`Lease`]), and one whose body was dropped half-read is closed. Nothing runs per request
//! besides the exchange itself: no task waits for a connection to become ready again, no
//! hash of the origin is taken; a lane's origins are few and compared as they are.
//!
//! An idle connection is let go when a request or a return to its origin finds it idle for
//! longer than [`IDLE_TIMEOUT`], or when the upstream closes it; no timer sweeps the pool.

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

/// How the pool reaches an origin: TLS (ALPN picks HTTP/2 or HTTP/1.1) or plain TCP, through
/// the SSRF guard.
pub(crate) type Connector = HttpsConnector<fetch::GuardedConnector>;

type Body = Full<Bytes>;

/// How many pools a client keeps: one per lane (see [`set_lane`]).
pub const LANES: usize = 64;

/// Idle connections kept per origin and lane. Every connection a burst opened stays open for
/// the next one (until it has been idle for [`IDLE_TIMEOUT`]): a cap below the clients'
/// concurrency would close and reopen upstream connections on every request past it.
const IDLE_PER_ORIGIN: usize = 1024;

/// Origins a lane keeps connections for; past it, origins with nothing kept are forgotten,
/// then the one met first. A client that fetches result files meets a new host now and then;
/// a channel's own client, one.
const ORIGINS_PER_LANE: usize = 64;

/// An idle connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Puts this thread's upstream calls into pool `lane` (0, the default, is every thread not
/// given one; lanes past the last share it). A server that runs a single-threaded runtime on
/// each of its threads gives each its own lane: a connection is then opened, driven and
/// reused on one thread, and an upstream call wakes no other thread.
pub fn set_lane(lane: usize) {
    LANE.with(|l| l.set(lane.min(LANES - 1)));
}

/// Why an exchange failed, for the client above to word.
#[derive(Debug)]
pub(crate) enum ExchangeError {
    /// The URI has no scheme or authority.
    Uri,
    /// Opening the connection (TCP, the guard, TLS).
    Connect(Box<dyn std::error::Error + Send + Sync>),
    /// The HTTP handshake on a new connection, or the exchange itself.
    Http(hyper::Error),
}

/// Where a request goes: compared in full, never hashed.
#[derive(Clone, PartialEq, Eq)]
struct Origin {
    scheme: Scheme,
    authority: Authority,
}

impl Origin {
    fn of(uri: &Uri) -> Option<Origin> {
        Some(Origin {
            scheme: uri.scheme()?.clone(),
            authority: uri.authority()?.clone(),
        })
    }
}

/// An HTTP/1.1 connection with the `Host` its requests carry (made once, when it opened).
struct One {
    conn: http1::SendRequest<Body>,
    host: Option<HeaderValue>,
}

struct Idle {
    one: One,
    since: Instant,
}

struct OriginConns {
    origin: Origin,
    /// Oldest first: taken from the end, expired from the front.
    idle: Vec<Idle>,
    shared: Option<http2::SendRequest<Body>>,
}

#[derive(Default)]
struct Lane {
    /// In the order they were first met.
    origins: Vec<OriginConns>,
}

impl Lane {
    fn find(&mut self, origin: &Origin) -> Option<&mut OriginConns> {
        self.origins.iter_mut().find(|o| o.origin == *origin)
    }

    /// The origin's entry, made (and the lane kept within its bound) when missing.
    fn entry(&mut self, origin: &Origin) -> &mut OriginConns {
        let at = match self.origins.iter().position(|o| o.origin == *origin) {
            Some(at) => at,
            None => {
                if self.origins.len() >= ORIGINS_PER_LANE {
                    self.origins
                        .retain(|o| !o.idle.is_empty() || o.shared.is_some());
                    if self.origins.len() >= ORIGINS_PER_LANE {
                        self.origins.remove(0);
                    }
                }
                self.origins.push(OriginConns {
                    origin: origin.clone(),
                    idle: Vec::new(),
                    shared: None,
                });
                self.origins.len() - 1
            }
        };
        &mut self.origins[at]
    }
}

enum Taken {
    One(One),
    Shared(http2::SendRequest<Body>),
}

/// One client's connections.
pub(crate) struct Pool {
    lanes: Box<[Mutex<Lane>]>,
    connector: Connector,
}

impl Pool {
    pub(crate) fn new(connector: Connector) -> Pool {
        Pool {
            lanes: (0..LANES).map(|_| Mutex::new(Lane::default())).collect(),
            connector,
        }
    }

    fn lane(&self, lane: usize) -> MutexGuard<'_, Lane> {
        // A panic while the lock was held leaves at worst a connection too few in the pool.
        self.lanes[lane]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An open connection to `origin` on `lane`: the shared HTTP/2 one, or the most recently
    /// used idle HTTP/1.1 one (closed and expired ones are dropped on the way).
    fn take(&self, lane: usize, origin: &Origin) -> Option<Taken> {
        let mut lane = self.lane(lane);
        let conns = lane.find(origin)?;
        if let Some(shared) = &conns.shared {
            if !shared.is_closed() {
                return Some(Taken::Shared(shared.clone()));
            }
            conns.shared = None;
        }
        let now = Instant::now();
        while let Some(idle) = conns.idle.pop() {
            if !idle.one.conn.is_closed() && now.duration_since(idle.since) < IDLE_TIMEOUT {
                return Some(Taken::One(idle.one));
            }
        }
        None
    }

    /// Keeps `conn` for the next request to `origin` on `lane`.
    fn put(&self, lane: usize, origin: &Origin, one: One) {
        if one.conn.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut lane = self.lane(lane);
        let conns = lane.entry(origin);
        let expired = conns
            .idle
            .iter()
            .take_while(|i| now.duration_since(i.since) >= IDLE_TIMEOUT)
            .count();
        conns.idle.drain(..expired);
        if conns.idle.len() < IDLE_PER_ORIGIN {
            conns.idle.push(Idle { one, since: now });
        }
    }

    fn share(&self, lane: usize, origin: &Origin, conn: http2::SendRequest<Body>) {
        self.lane(lane).entry(origin).shared = Some(conn);
    }

    /// Stops offering the origin's shared connection, which failed (at worst a newer one put
    /// in its place meanwhile goes too: the next request opens another).
    fn unshare(&self, lane: usize, origin: &Origin) {
        if let Some(conns) = self.lane(lane).find(origin) {
            conns.shared = None;
        }
    }

    /// Sends `req` (to `uri`, its URI) on a pooled connection or a new one and waits for the
    /// answer's head. An
    /// HTTP/1.1 connection comes back to the pool through the returned [`Lease`] once the
    /// body has been read; a request that a reused connection closed under before sending
    /// it goes out again.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        mut req: Request<Body>,
        uri: &Uri,
    ) -> Result<(Response<Incoming>, Option<Lease>), ExchangeError> {
        let origin = Origin::of(uri).ok_or(ExchangeError::Uri)?;
        let lane = LANE.with(Cell::get);
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        loop {
            match self.take(lane, &origin) {
                Some(Taken::One(mut one)) => {
                    if one.conn.ready().await.is_err() {
                        continue;
                    }
                    one_form(&mut req, one.host.as_ref(), &path);
                    match one.conn.try_send_request(req).await {
                        Ok(res) => return Ok(self.lease(res, lane, origin, one)),
                        Err(mut e) => match e.take_message() {
                            // Closed before the request went out: another connection.
                            Some(back) => req = back,
                            None => return Err(ExchangeError::Http(e.into_error())),
                        },
                    }
                }
                Some(Taken::Shared(mut conn)) => {
                    *req.uri_mut() = uri.clone();
                    if conn.ready().await.is_err() {
                        self.unshare(lane, &origin);
                        continue;
                    }
                    match conn.try_send_request(req).await {
                        Ok(res) => return Ok((res, None)),
                        Err(mut e) => match e.take_message() {
                            // The connection is going away: not offered again.
                            Some(back) => {
                                self.unshare(lane, &origin);
                                req = back;
                            }
                            None => return Err(ExchangeError::Http(e.into_error())),
                        },
                    }
                }
                None => return self.fresh(req, lane, origin, uri, &path).await,
            }
        }
    }

    /// Opens a connection to `origin` and sends `req` on it.
    async fn fresh(
        self: &Arc<Self>,
        mut req: Request<Body>,
        lane: usize,
        origin: Origin,
        uri: &Uri,
        path: &PathAndQuery,
    ) -> Result<(Response<Incoming>, Option<Lease>), ExchangeError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(ExchangeError::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(ExchangeError::Connect)?;
        if io.connected().is_negotiated_h2() {
            let (mut conn, driver) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(ExchangeError::Http)?;
            drive(driver, "upstream HTTP/2 connection");
            self.share(lane, &origin, conn.clone());
            *req.uri_mut() = uri.clone();
            let res = conn.send_request(req).await.map_err(ExchangeError::Http)?;
            return Ok((res, None));
        }
        let (mut conn, driver) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(ExchangeError::Http)?;
        drive(driver, "upstream connection");
        let host = host_value(&origin);
        one_form(&mut req, host.as_ref(), path);
        let res = conn.send_request(req).await.map_err(ExchangeError::Http)?;
        Ok(self.lease(res, lane, origin, One { conn, host }))
    }

    /// The answer with the lease of its connection; an answer without a body gives the
    /// connection back at once.
    fn lease(
        self: &Arc<Self>,
        res: Response<Incoming>,
        lane: usize,
        origin: Origin,
        one: One,
    ) -> (Response<Incoming>, Option<Lease>) {
        use hyper::body::Body as _;
        if res.body().is_end_stream() {
            self.put(lane, &origin, one);
            return (res, None);
        }
        let lease = Lease {
            pool: self.clone(),
            lane,
            origin,
            one,
        };
        (res, Some(lease))
    }
}

/// Runs a new connection's I/O on this thread's runtime until it closes.
fn drive(
    driver: impl Future<Output = Result<(), hyper::Error>> + Send + 'static,
    what: &'static str,
) {
    tokio::spawn(async move {
        if let Err(e) = driver.await {
            tracing::debug!("{what}: {e}");
        }
    });
}

/// An HTTP/1.1 request as it goes on its connection: the path alone on the request line, the
/// origin in `Host` (unless the caller named one).
fn one_form(req: &mut Request<Body>, host: Option<&HeaderValue>, path: &PathAndQuery) {
    *req.uri_mut() = Uri::from(path.clone());
    if let Some(host) = host
        && !req.headers().contains_key(http::header::HOST)
    {
        req.headers_mut().insert(http::header::HOST, host.clone());
    }
}

/// The `Host` of `origin`: its host, with the port unless it is the scheme's own.
fn host_value(origin: &Origin) -> Option<HeaderValue> {
    let authority = &origin.authority;
    let default = if origin.scheme == Scheme::HTTPS {
        443
    } else {
        80
    };
    match authority.port_u16() {
        Some(port) if port != default => {
            // The authority less its user info, if any: host and port.
            let all = authority.as_str();
            HeaderValue::from_str(all.rsplit('@').next().unwrap_or(all)).ok()
        }
        _ => HeaderValue::from_str(authority.host()).ok(),
    }
}

/// An HTTP/1.1 connection lent to one answer: back to the pool when the answer's body has
/// been read to its end ([`Lease::release`]); dropped with a half-read body, it closes.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    lane: usize,
    origin: Origin,
    one: One,
}

impl Lease {
    pub(crate) fn release(self) {
        self.pool.put(self.lane, &self.origin, self.one);
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("lane", &self.lane)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
