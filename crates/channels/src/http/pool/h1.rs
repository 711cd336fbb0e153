//! HTTP/1.1 on one upstream connection, run by the request that uses it: the request written
//! while the answer is read (an early answer, such as a 413 to a large body, stops the write),
//! the answer's head parsed (httparse), its body read as it comes (a length, chunks, or until
//! the connection closes), each piece handed out as the bytes it was read into.
//!
//! What an exchange's failure says about the request: whether no byte of it was written (the
//! connection turned out closed first), which makes it safe to send anywhere again, and
//! otherwise whether the request may be repeated on another connection at all (only a `GET` or
//! `HEAD`: an upstream may have acted on anything else).
//!
//! hyper's client connection runs as a task of its own beside the request: the request is
//! handed to it through a channel, it wakes to write it and to read the answer, and every
//! piece of the body crosses another channel to the reader. Here nothing runs beside the
//! request: the future that sends it writes and reads the socket itself, and the body's reader
//! reads the socket when it wants more. A connection is used by one exchange at a time and
//! kept by the pool between them.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use tokio::time::Instant;

use crate::http::deadline::Deadline;
use crate::http::together::together;

/// Headers an answer may have.
const MAX_HEADERS: usize = 100;
/// The largest answer head read.
const MAX_HEAD: usize = 64 * 1024;
/// What the first read of a connection asks for; doubled after each read that filled it, up
/// to [`MAX_READ`].
const FIRST_READ: usize = 8 * 1024;
const MAX_READ: usize = 256 * 1024;
/// The longest chunk-size line (with its extensions).
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// The most trailer bytes read after the last chunk.
const MAX_TRAILERS: usize = 16 * 1024;
/// A request body up to this size goes out in the head's write, copied after it; a larger one
/// in a write of its own.
const INLINE_BODY: usize = 16 * 1024;

/// Why an exchange failed before its answer's head was read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The connection had ended (or sent bytes nobody asked for) before any byte of the request
    /// was written: the request never left.
    #[error("the connection closed before the request was written")]
    Stale,
    #[error("writing the request: {source}")]
    Write {
        source: io::Error,
        /// Whether the connection had taken any byte of the request.
        sent: bool,
    },
    #[error("reading the answer: {0}")]
    Read(io::Error),
    #[error("the connection closed before the answer's head")]
    Closed {
        /// Whether any byte of an answer had arrived.
        partial: bool,
    },
    #[error("invalid answer head: {0}")]
    Head(&'static str),
    #[error("answer head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("no answer in time")]
    TimedOut,
}

impl Error {
    /// Whether it is certain that no byte of the request was written.
    pub(crate) fn is_unsent(&self) -> bool {
        matches!(self, Error::Stale | Error::Write { sent: false, .. })
    }

    /// Whether the request can go out again on another connection when this one had been used
    /// before: nothing of it was written, or it is a `GET` or `HEAD` (which an upstream does not
    /// act on) that the connection failed before any answer.
    pub(crate) fn may_retry(&self, method: &Method) -> bool {
        let repeatable = *method == Method::GET || *method == Method::HEAD;
        self.is_unsent()
            || repeatable && matches!(self, Error::Write { .. } | Error::Closed { partial: false })
    }
}

/// Why a body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("reading: {0}")]
    Read(io::Error),
    #[error("the connection closed before the body's end")]
    Closed,
    #[error("invalid chunked body: {0}")]
    Chunked(&'static str),
}

/// How an answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (a `HEAD`, a 204, a 304, or a length of 0).
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// An answer's head.
#[derive(Debug)]
pub(crate) struct Head {
    pub status: StatusCode,
    /// Its text, from the status line to the empty line: [`header_map`] reads its headers.
    pub head: Bytes,
    pub framing: Framing,
    /// Whether the connection may carry another request once the body has been read.
    pub keep_alive: bool,
}

/// One HTTP/1.1 connection: its socket and the bytes read from it that nobody took yet.
pub(crate) struct Conn<T> {
    io: T,
    buf: BytesMut,
    read_size: usize,
    /// The request's head as it is written (its capacity kept for the next).
    out: Vec<u8>,
    /// The timer of an exchange's [`Limit`], kept for the next (moved, not made again).
    timer: Deadline,
}

/// When an exchange must have its answer's head: by an instant, or a time after its first
/// wait (the clock is read only if it waits at all).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limit {
    at: Option<Instant>,
    after: Duration,
}

impl Limit {
    pub(crate) fn at(at: Instant) -> Limit {
        Limit {
            at: Some(at),
            after: Duration::ZERO,
        }
    }

    pub(crate) fn after(after: Duration) -> Limit {
        Limit { at: None, after }
    }

    fn at_instant(&mut self) -> Instant {
        let after = self.after;
        *self.at.get_or_insert_with(|| Instant::now() + after)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    pub(crate) fn new(io: T) -> Conn<T> {
        Conn {
            io,
            buf: BytesMut::new(),
            read_size: FIRST_READ,
            out: Vec::new(),
            timer: Deadline::default(),
        }
    }

    /// Whether the upstream closed the connection (or sent bytes nobody asked for) while it
    /// was idle: looked at without waiting, and without a read when nothing arrived. Until
    /// something arrives, `cx`'s waker is woken when it does.
    pub(crate) fn is_closed(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        let mut probe = [0u8; 1];
        let mut probe = ReadBuf::new(&mut probe);
        // Ready means the end, an error or unasked bytes: the connection is done with.
        Pin::new(&mut self.io).poll_read(cx, &mut probe).is_ready()
    }

    /// Sends a request (`path` on its request line, `host` as its `Host` unless its headers
    /// name one) and reads its answer's head, which may come before the request is written
    /// whole: the write stops then, and the connection is not kept after the answer.
    /// The write and the wait for the head end at `limit` ([`Error::TimedOut`] then).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exchange(
        &mut self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        host: Option<&HeaderValue>,
        body: &[u8],
        mut limit: Limit,
    ) -> Result<Head, Error> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        encode_head(&mut out, method, path, headers, host, body.len());
        let inline = body.len() <= INLINE_BODY;
        if inline {
            out.extend_from_slice(body);
        }
        // The other requests this turn of the runtime has begun reach their writes too before
        // this one goes out: the upstream is woken once for them all, not once each.
        together().await;
        let rest = if inline { &[][..] } else { body };
        let mut outgoing = Outgoing {
            parts: [&out, rest],
            taken: 0,
            state: Writing::On,
        };
        let answered =
            std::future::poll_fn(|cx| self.poll_exchange(&mut outgoing, method, &mut limit, cx))
                .await;
        self.out = out;
        answered
    }

    /// Writes as much of the request as the connection takes and reads what has come back,
    /// until the answer's head is there or the exchange has failed. What came in is looked at
    /// first: bytes (or the end) before anything was written mean the connection was done with
    /// before the request.
    fn poll_exchange(
        &mut self,
        outgoing: &mut Outgoing<'_>,
        method: &Method,
        limit: &mut Limit,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Head, Error>> {
        loop {
            // Everything the connection has, and the head if it is there.
            loop {
                if !self.buf.is_empty() {
                    if outgoing.taken == 0 {
                        return Poll::Ready(Err(Error::Stale));
                    }
                    match parse_head(&mut self.buf, method)? {
                        Some(mut head) => {
                            if outgoing.state != Writing::Done {
                                // An answer before the request's end: the rest is not sent, and
                                // the connection is not in a state to carry another request.
                                head.keep_alive = false;
                            }
                            return Poll::Ready(Ok(head));
                        }
                        None if self.buf.len() > MAX_HEAD => {
                            return Poll::Ready(Err(Error::HeadTooLarge));
                        }
                        None => {}
                    }
                }
                match self.poll_fill(cx) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(self.ended(outgoing, None))),
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(self.ended(outgoing, Some(e)))),
                    Poll::Pending => break,
                }
            }
            if outgoing.state != Writing::On {
                break;
            }
            match outgoing.poll_write(&mut self.io, cx) {
                // Written, or failed (an answer may be on its way: the upstream may have answered
                // and closed): what came in is looked at again.
                Poll::Ready(Ok(())) => outgoing.state = Writing::Done,
                Poll::Ready(Err(e)) => outgoing.state = Writing::Failed(e.kind()),
                Poll::Pending => break,
            }
        }
        match self.timer.poll_until(limit.at_instant(), cx) {
            Poll::Ready(()) => Poll::Ready(Err(match outgoing.state {
                Writing::Failed(kind) => Error::Write {
                    source: kind.into(),
                    sent: outgoing.taken > 0,
                },
                _ => Error::TimedOut,
            })),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Why an exchange failed whose connection ended (or failed to read, `read`) before the
    /// answer's head.
    fn ended(&self, outgoing: &Outgoing<'_>, read: Option<io::Error>) -> Error {
        if outgoing.taken == 0 {
            return Error::Stale;
        }
        if let Writing::Failed(kind) = outgoing.state {
            return Error::Write {
                source: kind.into(),
                sent: true,
            };
        }
        match read {
            // Reset before any answer: as good as closed.
            Some(e) if e.kind() != io::ErrorKind::ConnectionReset || !self.buf.is_empty() => {
                Error::Read(e)
            }
            _ => Error::Closed {
                partial: !self.buf.is_empty(),
            },
        }
    }

    /// Reads what the socket has into the buffer: the count read, 0 at the connection's end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.buf.reserve(self.read_size);
        let n = std::task::ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut (&mut self.buf).limit(self.read_size)
        ))?;
        if n == self.read_size && self.read_size < MAX_READ {
            self.read_size *= 2;
        }
        Poll::Ready(Ok(n))
    }
}

/// Where a request's write stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writing {
    On,
    Done,
    /// The connection refused the rest (the error's kind: the error itself is not `Copy`).
    Failed(io::ErrorKind),
}

/// A request on its way out: its head (with a small body copied in) and a large body after it.
struct Outgoing<'a> {
    parts: [&'a [u8]; 2],
    /// How many of their bytes the connection has taken.
    taken: usize,
    state: Writing,
}

impl Outgoing<'_> {
    /// Writes what the connection takes, then flushes (through TLS the bytes may wait in its
    /// buffer until then): ready once all is written.
    fn poll_write<T: AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let [head, body] = self.parts;
            let rest = match head.get(self.taken..) {
                Some(rest) if !rest.is_empty() => rest,
                _ => &body[self.taken - head.len()..],
            };
            if rest.is_empty() {
                return Pin::new(&mut *io).poll_flush(cx);
            }
            let n = std::task::ready!(Pin::new(&mut *io).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.taken += n;
        }
    }
}

/// The request line and headers, and the empty line after them. `Content-Length` is the
/// body's (any the caller set is left out, as is `Transfer-Encoding`: the body is whole).
fn encode_head(
    out: &mut Vec<u8>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    host: Option<&HeaderValue>,
    body_len: usize,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = host
        && !headers.contains_key(header::HOST)
    {
        line(out, b"host", host.as_bytes());
    }
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let carries_body = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if body_len > 0 || carries_body {
        let mut digits = [0u8; 20];
        line(
            out,
            b"content-length",
            decimal(body_len as u64, &mut digits),
        );
    }
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, in the end of `digits`.
fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[at..];
        }
    }
}

/// Parses the answer head at the start of `buf`, taking it off (and any informational answer
/// before it): `None` while it is incomplete. The head is cut off first (at its empty line),
/// then parsed where it lies: the header values are pieces of its bytes, not copies.
fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, Error> {
    loop {
        let Some(end) = head_end(buf) else {
            return Ok(None);
        };
        // However the head arrived (its empty line in one read or after many), one longer
        // than the bound is refused.
        if end > MAX_HEAD {
            return Err(Error::HeadTooLarge);
        }
        let head = buf.split_to(end).freeze();
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        match parser().parse_response_with_uninit_headers(&mut res, &head, &mut slots) {
            Ok(httparse::Status::Complete(_)) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Error::Head("too many headers")),
            Ok(httparse::Status::Partial) | Err(_) => {
                return Err(Error::Head("not an HTTP/1.x status line and headers"));
            }
        }
        let code = res.code.unwrap_or(0);
        let status = StatusCode::from_u16(code).map_err(|_| Error::Head("invalid status code"))?;
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(Error::Head("an upgrade nobody asked for"));
            }
            // 100 Continue, 103 Early Hints: the answer follows.
            continue;
        }
        let version = res.version.unwrap_or(0);
        let (framing, keep_alive) = frame(res.headers, status, version, method)?;
        return Ok(Some(Head {
            status,
            head,
            framing,
            keep_alive,
        }));
    }
}

/// Where the head at the start of `buf` ends: just past its empty line (`\r\n` or a bare
/// `\n`, as the parser takes them).
fn head_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf).find_map(|nl| match &buf[nl + 1..] {
        [b'\n', ..] => Some(nl + 2),
        [b'\r', b'\n', ..] => Some(nl + 3),
        _ => None,
    })
}

/// How the body of an answer with these headers is framed, and whether its connection may
/// carry another request after it.
fn frame(
    parsed: &[httparse::Header<'_>],
    status: StatusCode,
    version: u8,
    method: &Method,
) -> Result<(Framing, bool), Error> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut encoded = false;
    let (mut close, mut keep_alive) = (false, false);
    // Only the headers that frame the body are read here; the rest wait in the head's text
    // for a caller that asks ([`header_map`]).
    for h in parsed {
        let (name, value) = (h.name.as_bytes(), h.value);
        if name.eq_ignore_ascii_case(b"content-length") {
            // One length, or a list of the same length repeated (RFC 9112 §6.3), in any number
            // of fields; lengths that differ are refused.
            for item in value.split(|b| *b == b',') {
                let n = content_length(item).ok_or(Error::Head("invalid content-length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Error::Head("content-lengths that disagree"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // Chunked only when it is the last coding; empty list elements do not count
            // (RFC 9110 §5.6.1: `chunked, ` ends with `chunked`), and a field of none leaves
            // the last coding of the fields before it.
            if let Some(last) = value
                .rsplit(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
                .find(|coding| !coding.is_empty())
            {
                chunked = last.eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    // `close` wins over `keep-alive`, in whatever order they come; HTTP/1.0 closes unless it
    // asks to keep the connection.
    let close = close || version == 0 && !keep_alive;
    let bodiless = *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    Ok(if bodiless {
        (Framing::Empty, !close)
    } else if encoded {
        // A length beside a coding is not to be trusted, nor is what follows on the connection;
        // nor is anything after an HTTP/1.0 answer with a coding, which HTTP/1.0 does not have
        // (RFC 9112 §6.1: its framing is faulty, the connection is closed after it).
        let framing = if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        };
        (
            framing,
            !close && chunked && length.is_none() && version == 1,
        )
    } else {
        match length {
            Some(0) => (Framing::Empty, !close),
            Some(n) => (Framing::Length(n), !close),
            None => (Framing::Close, false),
        }
    })
}

/// A `Content-Length` value (or an item of a list of them): decimal digits and nothing else
/// (no sign), around them only spaces and tabs (and a folded line's break, which stands for
/// spaces); `None` when it is anything else or too large.
fn content_length(item: &[u8]) -> Option<u64> {
    let digits = item.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The headers of a head [`parse_head`] took (its text, kept whole): the values are pieces of
/// that text, not copies. The parser accepted the head already, so nothing is refused here.
pub(crate) fn header_map(head: &Bytes) -> HeaderMap {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let parsed = parser().parse_response_with_uninit_headers(&mut res, head, &mut slots);
    let mut headers = HeaderMap::new();
    if parsed.is_err() {
        return headers;
    }
    headers.reserve(res.headers.len());
    for h in res.headers.iter() {
        let value = if h.value.iter().any(|b| matches!(b, b'\r' | b'\n')) {
            HeaderValue::from_bytes(&unfold(h.value))
        } else {
            HeaderValue::from_maybe_shared(head.slice_ref(h.value))
        };
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(h.name.as_bytes()), value) {
            headers.append(name, value);
        }
    }
    headers
}

/// A value continued on folded lines (obs-fold: a line break, then spaces or tabs), as one
/// line: each fold becomes a single space (RFC 9112 §5.2).
fn unfold(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut folding = false;
    for &b in value {
        match b {
            b'\r' | b'\n' => folding = true,
            b' ' | b'\t' if folding => {}
            _ => {
                if folding {
                    out.push(b' ');
                    folding = false;
                }
                out.push(b);
            }
        }
    }
    out
}

/// How answers are parsed: spaces after a header's name and folded lines taken, as some
/// servers write them (a folded value is read as one line, see [`unfold`]).
fn parser() -> httparse::ParserConfig {
    let mut config = httparse::ParserConfig::default();
    config
        .allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true);
    config
}

/// Where a body's reader stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Bytes left of a body of known length.
    Length(u64),
    /// Before a chunk-size line.
    ChunkSize,
    /// Bytes left of the current chunk.
    ChunkData(u64),
    /// The line end after a chunk's data.
    ChunkEnd,
    /// After the last chunk: the trailer section, until its empty line.
    Trailers,
    UntilClose,
    Done,
}

/// An answer's body, read from its connection as the reader asks for it.
pub(crate) struct Body<T> {
    /// None once the body failed.
    conn: Option<Box<Conn<T>>>,
    state: State,
    keep_alive: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Body<T> {
    pub(crate) fn new(conn: Box<Conn<T>>, framing: Framing, keep_alive: bool) -> Body<T> {
        let state = match framing {
            Framing::Empty => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::Close => State::UntilClose,
        };
        Body {
            conn: Some(conn),
            state,
            keep_alive,
        }
    }

    /// The connection, when the body has been read to its end and the connection may carry
    /// another request (nothing past the body arrived on it).
    pub(crate) fn take_reusable(&mut self) -> Option<Box<Conn<T>>> {
        let reusable = self.state == State::Done
            && self.keep_alive
            && self.conn.as_ref().is_some_and(|c| c.buf.is_empty());
        if reusable { self.conn.take() } else { None }
    }

    /// The next piece of the body (the bytes as read, no copy); `None` at its end.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, BodyError>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Err(BodyError::Closed));
        };
        loop {
            let buf = &mut conn.buf;
            match self.state {
                State::Done => return Poll::Ready(Ok(None)),
                State::Length(0) => {
                    self.state = State::Done;
                    continue;
                }
                State::Length(left) if !buf.is_empty() => {
                    let n = take_len(left, buf.len());
                    self.state = State::Length(left - n as u64);
                    return Poll::Ready(Ok(Some(buf.split_to(n).freeze())));
                }
                State::UntilClose if !buf.is_empty() => {
                    return Poll::Ready(Ok(Some(buf.split().freeze())));
                }
                State::ChunkData(left) if !buf.is_empty() => {
                    let n = take_len(left, buf.len());
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                    return Poll::Ready(Ok(Some(buf.split_to(n).freeze())));
                }
                State::ChunkSize => match chunk_line(buf) {
                    Ok(Some((size, end))) => {
                        buf.advance(end);
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::ChunkData(size)
                        };
                        continue;
                    }
                    Ok(None) => {}
                    Err(why) => return self.fail(BodyError::Chunked(why)),
                },
                State::ChunkEnd => match buf.get(..2) {
                    Some(b"\r\n") => {
                        buf.advance(2);
                        self.state = State::ChunkSize;
                        continue;
                    }
                    // Nothing yet, or only the CR.
                    None if b"\r".starts_with(buf) => {}
                    _ => {
                        let why = match buf[0] {
                            b'\r' => "a chunk without its line end",
                            b'\n' => "a chunk's data ended by a bare LF",
                            _ => "a chunk longer than its size",
                        };
                        return self.fail(BodyError::Chunked(why));
                    }
                },
                State::Trailers => match trailers_end(buf) {
                    Ok(Some(end)) => {
                        buf.advance(end);
                        self.state = State::Done;
                        continue;
                    }
                    Ok(None) => {}
                    Err(why) => return self.fail(BodyError::Chunked(why)),
                },
                // Nothing buffered: read below.
                State::Length(_) | State::UntilClose | State::ChunkData(_) => {}
            }
            match std::task::ready!(conn.poll_fill(cx)) {
                Ok(0) if self.state == State::UntilClose => {
                    self.state = State::Done;
                    self.keep_alive = false;
                }
                Ok(0) => return self.fail(BodyError::Closed),
                Ok(_) => {}
                Err(e) => return self.fail(BodyError::Read(e)),
            }
        }
    }

    /// Ends the body with `e`: the connection is closed.
    fn fail(&mut self, e: BodyError) -> Poll<Result<Option<Bytes>, BodyError>> {
        self.conn = None;
        Poll::Ready(Err(e))
    }
}

/// How many of `available` bytes a body with `left` to go takes.
fn take_len(left: u64, available: usize) -> usize {
    usize::try_from(left).map_or(available, |left| left.min(available))
}

/// The chunk-size line at the start of `buf` (RFC 9112 §7.1): the chunk's size and where its
/// data begins; `None` while the line's end has not come.
///
/// The size in hex digits, then optionally spaces or tabs and extensions after a `;`, then
/// CRLF. A bare LF or CR, or any other control byte but a tab, is refused, as hyper refuses
/// it: a reader that takes a line end another reader does not is how a body is made to end
/// elsewhere for one than for the other. Leading zeros are as many as come (the line's own
/// bound holds them); past them at most 16 digits, which fit in 64 bits. A line longer than
/// [`MAX_CHUNK_LINE`] is refused however it arrives.
fn chunk_line(buf: &[u8]) -> Result<Option<(u64, usize)>, &'static str> {
    let too_long = Err("chunk-size line too long");
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        return if buf.len() > MAX_CHUNK_LINE {
            too_long
        } else {
            Ok(None)
        };
    };
    if nl > MAX_CHUNK_LINE {
        return too_long;
    }
    let Some(line) = buf[..nl].strip_suffix(b"\r") else {
        return Err("a chunk-size line ended by a bare LF");
    };
    if line.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
        return Err("a control byte in a chunk-size line");
    }
    let invalid = Err("invalid chunk size");
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return invalid;
    }
    let rest = &line[digits..];
    let rest = &rest[rest
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count()..];
    if !rest.is_empty() && rest[0] != b';' {
        return invalid;
    }
    let zeros = line[..digits].iter().take_while(|b| **b == b'0').count();
    let significant = &line[zeros..digits];
    if significant.len() > 16 {
        return invalid;
    }
    let size = significant.iter().try_fold(0u64, |n, d| {
        let d = (*d as char).to_digit(16)?;
        Some((n << 4) | u64::from(d))
    });
    match size {
        Some(size) => Ok(Some((size, nl + 1))),
        None => invalid,
    }
}

/// Where the trailer section at the start of `buf` ends, just past its empty line; `None`
/// while it has not come. Its fields are read as header fields (httparse), then left unused; a
/// section longer than [`MAX_TRAILERS`] is refused however it arrives.
fn trailers_end(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let too_long = Err("trailers too long");
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((end, _))) if end > MAX_TRAILERS => too_long,
        Ok(httparse::Status::Complete((end, _))) => Ok(Some(end)),
        Ok(httparse::Status::Partial) if buf.len() > MAX_TRAILERS => too_long,
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err("too many trailer fields"),
        Err(_) => Err("invalid trailer fields"),
    }
}

pub mod fuzzing;

#[cfg(test)]
mod tests;
