//! The HTTP/2 connections a lane's requests share: at most [`super::STREAMS_PER_H2`] streams on
//! each, counted by the [`Stream`] each answer holds, and the connections being opened that a
//! burst's requests wait on ([`Pending`], [`Opener`]) rather than each opening one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http2;

use super::{Answer, AnswerBody, Body, Headers, Origin, Pool};

/// An HTTP/2 connection that requests share.
pub(super) struct Shared {
    pub(super) send: http2::SendRequest<Body>,
    /// Its streams open: each answer holds a [`Stream`] until its body ends or is dropped.
    pub(super) open: Arc<AtomicUsize>,
    /// When a stream last began on it: one with none open is closed once it has been unused
    /// for the idle timeout, so a burst's extra connections go once the load is back down.
    pub(super) used: Instant,
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

impl Pool {
    /// Offers `send`, a new HTTP/2 connection, to the requests to `origin` on `lane`, with one
    /// stream of it taken (the opener's), and has the lane's sweeper close it once unused.
    pub(super) fn share(
        self: &Arc<Self>,
        lane_at: usize,
        origin: &Origin,
        send: http2::SendRequest<Body>,
    ) -> Stream {
        let open = Arc::new(AtomicUsize::new(1));
        let mut lane = self.lane(lane_at);
        lane.entry(origin).shared.push(Shared {
            send,
            open: open.clone(),
            used: Instant::now(),
        });
        if let Some(sweeper) = lane.sweeper(self, lane_at) {
            lane.time(&sweeper);
        }
        Stream(open)
    }

    /// Stops offering the shared connection that `stream` was taken from, which failed.
    pub(super) fn unshare(&self, lane: usize, origin: &Origin, stream: &Stream) {
        if let Some(conns) = self.lane(lane).find(origin) {
            conns
                .shared
                .retain(|shared| !Arc::ptr_eq(&shared.open, &stream.0));
        }
    }
}

/// The request for an HTTP/2 connection: the whole URI, the same method, headers and body.
pub(super) fn h2_request(parts: &Parts, uri: &Uri, body: &Bytes) -> Request<Body> {
    let mut req = Request::new(Full::new(body.clone()));
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri.clone();
    *req.headers_mut() = parts.headers.clone();
    req
}

pub(super) fn h2_answer(res: hyper::Response<Incoming>, stream: Stream) -> Answer {
    use hyper::body::Body as _;
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
