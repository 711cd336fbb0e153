//! The upstream connections of one client, kept for reuse: per lane (a thread that runs a
//! runtime of its own, see [`set_lane`]) and per origin (scheme and authority), the idle
//! HTTP/1.1 connections and the HTTP/2 connections that requests share.
//!
//! A request takes an idle HTTP/1.1 connection (the most recently used first) or opens one;
//! the connection comes back when its answer's body has been read to the end (see
//! [`Lease`]), and one whose body was dropped half-read is closed. Nothing runs per request
//! besides the exchange itself: HTTP/1.1 is spoken by the request's own future and body
//! ([`h1`]), no task drives the connection beside them, no hash of the origin is taken; a
//! lane's origins are few and compared as they are. HTTP/2 (by ALPN, over TLS) is hyper's.
//!
//! An HTTP/2 connection carries at most [`STREAMS_PER_H2`] of a lane's streams at once; a
//! stream past that goes on another, opened then. While a TLS connection is being opened to
//! an origin not known to speak HTTP/1.1 only, the requests that come meanwhile (up to a
//! connection's streams) wait for it instead of each opening one: if ALPN chose HTTP/2 they
//! share it, else they open their own at once (and so does every later burst); if it failed,
//! each tries on its own and fails, or not, with its own error.
//!
//! An idle connection is let go as soon as the upstream closes it (or sends bytes nobody asked
//! for), and once it has been idle for longer than [`IDLE_TIMEOUT`]: the most recently used are
//! taken first, so the connections a burst opened beyond what the load since needs age and go.
//! Both are the work of a lane's sweeper ([`Sweeper`]), a task that the reactor wakes when an
//! idle connection's socket has something, and its own timer when the oldest idle connection
//! expires: a request's only part in it is that the return of its connection leaves the
//! sweeper's waker on the socket, and a quiet lane never wakes it. A shared HTTP/2 connection
//! goes once no stream has begun on it for [`IDLE_TIMEOUT`] and none is open: while one is
//! open, the sweeper looks at it again an idle timeout later. A request passes over
//! expired connections, and finds one closed meanwhile before it writes a byte (then it goes
//! on to the next: nothing was sent).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use ::h2::RecvStream;
use ::h2::client::SendRequest;
use bytes::Bytes;
use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

pub(crate) mod h1;
mod h2;
mod sweeper;

pub(crate) use self::h2::Stream;
use self::h2::{Closed, Failure, Opener, Opening, Pending, STREAMS_PER_H2};
use self::sweeper::{Sweeper, Swept};

/// How the pool reaches an origin: TLS (ALPN picks HTTP/2 or HTTP/1.1) or plain TCP, through
/// the SSRF guard or a proxy's tunnel.
pub(crate) type Connector = HttpsConnector<crate::http::network::Dial>;

/// An upstream connection's bytes, as HTTP/1.1 and HTTP/2 read and write them.
pub(crate) type Io = TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>;

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
    /// The HTTP/2 handshake on a new connection, or an exchange on one.
    H2(::h2::Error),
    /// An HTTP/1.1 exchange.
    H1(h1::Error),
    /// No answer's head within the first-byte time.
    FirstByte,
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
    /// Boxed: a TLS connection's state is over a kilobyte, moved at every take and return.
    conn: Box<h1::Conn<Io>>,
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
    /// The HTTP/2 connections that requests share, the first with room taken first.
    shared: Vec<Shared>,
    /// TLS connections being opened while the origin may speak HTTP/2: the requests that come
    /// meanwhile wait for one (to share it) rather than each open a connection of its own.
    opening: Vec<Pending>,
    /// The origin's TLS connections chose HTTP/1.1: a burst opens as many as it needs at once.
    speaks_h1: bool,
}

/// An HTTP/2 connection that requests share.
struct Shared {
    send: SendRequest<Bytes>,
    /// Set once the connection has closed (its task has ended).
    closed: Closed,
    /// Its streams open: each answer holds a [`Stream`] until its body ends or is dropped.
    open: Arc<AtomicUsize>,
    /// When a stream last began on it: one with none open is closed once it has been unused
    /// for the idle timeout, so a burst's extra connections go once the load is back down.
    used: Instant,
}

#[derive(Default)]
struct Lane {
    /// In the order they were first met.
    origins: Vec<OriginConns>,
    /// What wakes the lane's sweeper task, once one runs.
    sweeper: Option<Arc<Sweeper>>,
    /// Whether the sweeper's timer waits for the lane's oldest idle connection to expire.
    timed: bool,
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
                    self.origins.retain(|o| {
                        !o.idle.is_empty() || !o.shared.is_empty() || !o.opening.is_empty()
                    });
                    if self.origins.len() >= ORIGINS_PER_LANE {
                        self.origins.remove(0);
                    }
                }
                self.origins.push(OriginConns {
                    origin: origin.clone(),
                    idle: Vec::new(),
                    shared: Vec::new(),
                    opening: Vec::new(),
                    speaks_h1: false,
                });
                self.origins.len() - 1
            }
        };
        &mut self.origins[at]
    }

    /// The lane's sweeper, started on this thread's runtime if none runs (none outside one).
    fn sweeper(&mut self, pool: &Arc<Pool>, at: usize) -> Option<Arc<Sweeper>> {
        if self.sweeper.is_none() {
            self.sweeper = Sweeper::start(pool, at);
        }
        self.sweeper.clone()
    }

    /// Has `sweeper` time the lane's connections, if its timer is not set yet.
    fn time(&mut self, sweeper: &Arc<Sweeper>) {
        if !self.timed {
            self.timed = true;
            sweeper.wake_by_ref();
        }
    }
}

enum Taken {
    One(One),
    Shared(SendRequest<Bytes>, Stream),
    /// A connection that may speak HTTP/2 is being opened: wait for it.
    Wait(tokio::sync::watch::Receiver<Opening>),
    /// Nothing to take: open a connection, which others wait on if an opener comes with it.
    Open(Option<Opener>),
}

/// One client's connections.
pub(crate) struct Pool {
    lanes: Box<[Mutex<Lane>]>,
    connector: Connector,
    /// The longest a new connection's set-up (TCP, a proxy's tunnel, TLS) may take.
    connect_timeout: Duration,
    /// An idle connection older than this is closed rather than reused.
    idle_timeout: Duration,
}

impl Pool {
    pub(crate) fn new(connector: Connector, connect_timeout: Duration) -> Pool {
        Pool {
            lanes: (0..LANES).map(|_| Mutex::new(Lane::default())).collect(),
            connector,
            connect_timeout,
            idle_timeout: IDLE_TIMEOUT,
        }
    }

    /// Closes idle connections after `idle_timeout` instead.
    #[cfg(test)]
    pub(crate) fn set_idle_timeout(&mut self, idle_timeout: Duration) {
        self.idle_timeout = idle_timeout;
    }

    fn lane(&self, lane: usize) -> MutexGuard<'_, Lane> {
        // A panic while the lock was held leaves at worst a connection too few in the pool.
        self.lanes[lane]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An open connection to `origin` on `lane`: the shared HTTP/2 one, or the most recently
    /// used idle HTTP/1.1 one (expired ones are dropped on the way); else the one being opened
    /// to wait for, or leave to open one (the opener of a TLS connection to an origin not known
    /// to speak HTTP/1.1 only, whose HTTP/2 the requests that come meanwhile would share).
    fn take(&self, lane: usize, origin: &Origin) -> Taken {
        let mut lane = self.lane(lane);
        let conns = lane.entry(origin);
        let now = Instant::now();
        if !conns.shared.is_empty() {
            conns.shared.retain(|shared| !shared.closed.get());
            let room = conns
                .shared
                .iter_mut()
                .find(|shared| shared.open.load(Ordering::Relaxed) < STREAMS_PER_H2);
            if let Some(shared) = room {
                shared.open.fetch_add(1, Ordering::Relaxed);
                shared.used = now;
                return Taken::Shared(shared.send.clone(), Stream(shared.open.clone()));
            }
        }
        while let Some(idle) = conns.idle.pop() {
            // One the upstream closed since the sweeper last looked is found so by the
            // exchange, before it writes anything, and the request goes on to the next.
            if now.duration_since(idle.since) < self.idle_timeout {
                return Taken::One(idle.one);
            }
        }
        if !conns.opening.is_empty() {
            // A sender is gone once its connection is up (or failed).
            conns
                .opening
                .retain(|pending| pending.opening.has_changed().is_ok());
            let room = conns
                .opening
                .iter_mut()
                .find(|pending| pending.waiting < STREAMS_PER_H2 - 1);
            if let Some(pending) = room {
                pending.waiting += 1;
                return Taken::Wait(pending.opening.clone());
            }
        }
        if conns.speaks_h1 || origin.scheme != Scheme::HTTPS {
            return Taken::Open(None);
        }
        let (opener, opening) = tokio::sync::watch::channel(Opening::Pending);
        conns.opening.push(Pending {
            opening,
            waiting: 0,
        });
        Taken::Open(Some(Opener(opener)))
    }

    /// Keeps `conn` for the next request to `origin` on `lane`, watched by the lane's sweeper.
    fn put(self: &Arc<Self>, lane_at: usize, origin: &Origin, mut one: One) {
        let now = Instant::now();
        let mut lane = self.lane(lane_at);
        let Some(sweeper) = lane.sweeper(self, lane_at) else {
            // No runtime to sweep on: kept unwatched.
            return self.keep(&mut lane, origin, one, now);
        };
        // From now on the socket wakes the sweeper when the upstream closes it.
        if one
            .conn
            .is_closed(&mut Context::from_waker(&Waker::from(sweeper.clone())))
        {
            return;
        }
        lane.time(&sweeper);
        self.keep(&mut lane, origin, one, now);
    }

    /// Puts `one` among `origin`'s idle connections (unless they are as many as kept), those
    /// expired by `now` let go first.
    fn keep(&self, lane: &mut Lane, origin: &Origin, one: One, now: Instant) {
        let conns = lane.entry(origin);
        let expired = conns
            .idle
            .iter()
            .take_while(|i| now.duration_since(i.since) >= self.idle_timeout)
            .count();
        conns.idle.drain(..expired);
        if conns.idle.len() < IDLE_PER_ORIGIN {
            conns.idle.push(Idle { one, since: now });
        }
    }

    /// How many idle HTTP/1.1 connections this thread's lane keeps.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        let lane = LANE.with(Cell::get);
        self.lane(lane).origins.iter().map(|o| o.idle.len()).sum()
    }

    /// Offers `send`, a new HTTP/2 connection, to the requests to `origin` on `lane`, with one
    /// stream of it taken (the opener's), and has the lane's sweeper close it once unused.
    fn share(
        self: &Arc<Self>,
        lane_at: usize,
        origin: &Origin,
        send: SendRequest<Bytes>,
        closed: Closed,
    ) -> Stream {
        let open = Arc::new(AtomicUsize::new(1));
        let mut lane = self.lane(lane_at);
        lane.entry(origin).shared.push(Shared {
            send,
            closed,
            open: open.clone(),
            used: Instant::now(),
        });
        if let Some(sweeper) = lane.sweeper(self, lane_at) {
            lane.time(&sweeper);
        }
        Stream(open)
    }

    /// Stops offering the shared connection that `stream` was taken from, which failed.
    fn unshare(&self, lane: usize, origin: &Origin, stream: &Stream) {
        if let Some(conns) = self.lane(lane).find(origin) {
            conns
                .shared
                .retain(|shared| !Arc::ptr_eq(&shared.open, &stream.0));
        }
    }

    /// Sends `req` (to `uri`, its URI) on a pooled connection or a new one and waits for the
    /// answer's head. An HTTP/1.1 connection comes back to the pool through the answer's body
    /// once it has been read (or at once when there is none); a request that a reused
    /// connection failed before it reached the upstream (or, for a `GET` or `HEAD`, before
    /// any answer) goes out again on another. The answer's head must come within `first_byte`
    /// ([`ExchangeError::FirstByte`]): of the request's first wait on a pooled connection, or
    /// of the start on a new one, whose opening counts too.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        req: Request<Bytes>,
        uri: &Uri,
        first_byte: Duration,
    ) -> Result<Answer, ExchangeError> {
        let origin = Origin::of(uri).ok_or(ExchangeError::Uri)?;
        let lane = LANE.with(Cell::get);
        let (parts, body) = req.into_parts();
        let path = uri.path_and_query().map_or("/", PathAndQuery::as_str);
        // Since when this request has waited for a connection another one is opening.
        let mut waiting: Option<Instant> = None;
        loop {
            let (opener, until) = match self.take(lane, &origin) {
                Taken::One(mut one) => {
                    let sent = one
                        .conn
                        .exchange(
                            &parts.method,
                            path,
                            &parts.headers,
                            one.host.as_ref(),
                            &body,
                            h1::Limit::after(first_byte),
                        )
                        .await;
                    match sent {
                        Ok(head) => return Ok(self.h1_answer(head, lane, origin, one)),
                        Err(e) if e.may_retry(&parts.method) => continue,
                        Err(h1::Error::TimedOut) => return Err(ExchangeError::FirstByte),
                        Err(e) => return Err(ExchangeError::H1(e)),
                    }
                }
                Taken::Shared(send, stream) => {
                    let until = Instant::now() + first_byte;
                    let sent = h2::exchange(send, &parts, uri, &body, until).await;
                    match h2_outcome(sent) {
                        Ok(res) => return Ok(h2_answer(res, stream)),
                        Err(Some(e)) => return Err(e),
                        // Going away: not offered again, and the request goes on another.
                        Err(None) => {
                            self.unshare(lane, &origin, &stream);
                            continue;
                        }
                    }
                }
                Taken::Wait(mut opening) => {
                    let until = *waiting.get_or_insert_with(Instant::now) + first_byte;
                    let opened = tokio::time::timeout_at(until.into(), opening.changed()).await;
                    match opened {
                        Err(_) => return Err(ExchangeError::Connect(BEFORE_FIRST_BYTE.into())),
                        // It failed: this request finds out with a connection of its own.
                        Ok(Ok(())) if *opening.borrow() == Opening::Failed => (None, until),
                        // It is up (shared, if it speaks HTTP/2): take again.
                        Ok(_) => continue,
                    }
                }
                Taken::Open(opener) => (opener, waiting.unwrap_or_else(Instant::now) + first_byte),
            };
            let fresh = Fresh {
                parts: &parts,
                uri,
                path,
                until,
            };
            return self.fresh(fresh, body, lane, origin, opener).await;
        }
    }

    /// Opens a connection to `origin` and sends the request on it, its answer's head due by
    /// `until`. With an `opener`, the requests waiting on this connection go on once it is up
    /// (after it is shared, if it speaks HTTP/2) or has failed.
    async fn fresh(
        self: &Arc<Self>,
        req: Fresh<'_>,
        body: Bytes,
        lane: usize,
        origin: Origin,
        opener: Option<Opener>,
    ) -> Result<Answer, ExchangeError> {
        let Fresh {
            parts,
            uri,
            path,
            until,
        } = req;
        let failed = |e: ExchangeError| {
            if let Some(opener) = &opener {
                opener.failed();
            }
            e
        };
        let mut connector = self.connector.clone();
        // The whole set-up (the name's lookup, TCP, a proxy's tunnel, TLS) within the connect
        // time, and within the first-byte time, which counts it too. Nothing of the request has
        // left while it lasts.
        let connect_by = Instant::now() + self.connect_timeout;
        let connected = tokio::time::timeout_at(connect_by.min(until).into(), async {
            std::future::poll_fn(|cx| connector.poll_ready(cx)).await?;
            connector.call(uri.clone()).await
        })
        .await;
        let io = match connected {
            Ok(connected) => connected.map_err(|e| failed(ExchangeError::Connect(e)))?,
            Err(_) if connect_by <= until => {
                return Err(failed(ExchangeError::Connect(
                    format!("no connection within {:?}", self.connect_timeout).into(),
                )));
            }
            Err(_) => return Err(failed(ExchangeError::Connect(BEFORE_FIRST_BYTE.into()))),
        };
        if io.connected().is_negotiated_h2() {
            let handshake = tokio::time::timeout_at(until.into(), h2::handshake(TokioIo::new(io)))
                .await
                .map_err(|_| failed(ExchangeError::FirstByte))?;
            // Nothing of the request has left before the handshake is done.
            let (send, closed) =
                handshake.map_err(|e| failed(ExchangeError::Connect(Box::new(e))))?;
            let stream = self.share(lane, &origin, send.clone(), closed);
            // Those waiting take the shared connection now.
            drop(opener);
            let sent = h2::exchange(send, parts, uri, &body, until).await;
            return match h2_outcome(sent) {
                Ok(res) => Ok(h2_answer(res, stream)),
                Err(e) => Err(e.unwrap_or_else(|| {
                    ExchangeError::Connect(
                        "the new HTTP/2 connection closed before the request could be sent".into(),
                    )
                })),
            };
        }
        if opener.is_some() {
            // Those waiting open their own at once, as will the next burst.
            self.lane(lane).entry(&origin).speaks_h1 = true;
            drop(opener);
        }
        let mut one = One {
            conn: Box::new(h1::Conn::new(TokioIo::new(io))),
            host: host_value(&origin),
        };
        let head = one
            .conn
            .exchange(
                &parts.method,
                path,
                &parts.headers,
                one.host.as_ref(),
                &body,
                h1::Limit::at(until.into()),
            )
            .await
            .map_err(|e| match e {
                h1::Error::TimedOut => ExchangeError::FirstByte,
                e => ExchangeError::H1(e),
            })?;
        Ok(self.h1_answer(head, lane, origin, one))
    }

    /// The answer with its body, which holds the lease of its connection; an answer without a
    /// body gives the connection back at once.
    fn h1_answer(
        self: &Arc<Self>,
        head: h1::Head,
        lane: usize,
        origin: Origin,
        one: One,
    ) -> Answer {
        let h1::Head {
            status,
            head,
            framing,
            keep_alive,
        } = head;
        let body = if framing == h1::Framing::Empty {
            if keep_alive {
                self.put(lane, &origin, one);
            }
            AnswerBody::Empty
        } else {
            AnswerBody::H1 {
                body: h1::Body::new(one.conn, framing, keep_alive),
                lease: Some(Lease {
                    pool: self.clone(),
                    lane,
                    origin,
                    host: one.host,
                }),
            }
        };
        Answer {
            status,
            headers: Headers::Head(head),
            body,
        }
    }
}

/// What a new connection is opened for: the request, where it goes and when its answer's head
/// is due.
struct Fresh<'a> {
    parts: &'a Parts,
    uri: &'a Uri,
    path: &'a str,
    until: Instant,
}

/// Why a request that has sent nothing gave up on its connection.
const BEFORE_FIRST_BYTE: &str = "no connection before the first-byte time ran out";

/// An upstream's answer: its head, and its body still to be read.
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: Headers,
    pub body: AnswerBody,
}

/// An answer's headers: an HTTP/1.1 head's text, read only when asked for (most answers'
/// headers are never looked at), or HTTP/2's map.
#[derive(Debug)]
pub(crate) enum Headers {
    Head(Bytes),
    Map(HeaderMap),
}

impl Headers {
    pub(crate) fn map(&self) -> HeaderMap {
        match self {
            Headers::Head(head) => h1::header_map(head),
            Headers::Map(map) => map.clone(),
        }
    }
}

pub(crate) enum AnswerBody {
    Empty,
    /// Read from its HTTP/1.1 connection, which goes back to the pool through the lease.
    H1 {
        body: h1::Body<Io>,
        lease: Option<Lease>,
    },
    /// Read from a shared HTTP/2 connection, one of whose streams it holds until it ends.
    H2 {
        body: RecvStream,
        _stream: Stream,
    },
}

/// An HTTP/2 exchange's failure as the pool's error; `None` when nothing of the request left.
fn h2_outcome(
    sent: Result<Response<RecvStream>, Failure>,
) -> Result<Response<RecvStream>, Option<ExchangeError>> {
    sent.map_err(|failure| match failure {
        Failure::TimedOut => Some(ExchangeError::FirstByte),
        Failure::Failed(e) => Some(ExchangeError::H2(e)),
        Failure::Unsent => None,
    })
}

fn h2_answer(res: Response<RecvStream>, stream: Stream) -> Answer {
    let (parts, body) = res.into_parts();
    let body = if body.is_end_stream() {
        AnswerBody::Empty
    } else {
        AnswerBody::H2 {
            body,
            _stream: stream,
        }
    };
    Answer {
        status: parts.status,
        headers: Headers::Map(parts.headers),
        body,
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

impl Swept for Pool {
    /// Lets go of `lane`'s idle connections that the upstream closed or that expired, each
    /// kept one watched again by `waker`: when the oldest of those left expires, if any.
    fn sweep(&self, lane: usize, waker: &Waker) -> Option<Instant> {
        let now = Instant::now();
        let mut cx = Context::from_waker(waker);
        let mut lane = self.lane(lane);
        let mut next: Option<Instant> = None;
        let mut at = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        for conns in &mut lane.origins {
            conns.idle.retain_mut(|idle| {
                now.duration_since(idle.since) < self.idle_timeout
                    && !idle.one.conn.is_closed(&mut cx)
            });
            if let Some(oldest) = conns.idle.first() {
                at(oldest.since + self.idle_timeout);
            }
            // A shared connection goes once it has had no stream open for the idle timeout;
            // one with streams open is looked at again an idle timeout later.
            conns.shared.retain(|shared| {
                let streams = shared.open.load(Ordering::Relaxed);
                let unused = now.duration_since(shared.used) >= self.idle_timeout;
                !shared.closed.get() && (streams > 0 || !unused)
            });
            for shared in &conns.shared {
                let streams = shared.open.load(Ordering::Relaxed);
                at(if streams > 0 {
                    now + self.idle_timeout
                } else {
                    shared.used + self.idle_timeout
                });
            }
        }
        lane.timed = next.is_some();
        next
    }

    fn stopped(&self, lane: usize) {
        self.lane(lane).sweeper = None;
    }
}

impl Drop for Pool {
    /// Ends the sweepers, which hold the pool only weakly.
    fn drop(&mut self) {
        for lane in &self.lanes {
            let lane = lane
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(sweeper) = &lane.sweeper {
                sweeper.wake_by_ref();
            }
        }
    }
}

/// Where an HTTP/1.1 connection lent to one answer goes back to when the answer's body has
/// been read to its end ([`Lease::release`]); dropped with a half-read body, the connection
/// closes.
pub(crate) struct Lease {
    pool: Arc<Pool>,
    lane: usize,
    origin: Origin,
    host: Option<HeaderValue>,
}

impl Lease {
    pub(crate) fn release(self, conn: Box<h1::Conn<Io>>) {
        let one = One {
            conn,
            host: self.host,
        };
        self.pool.put(self.lane, &self.origin, one);
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
