//! The HTTP/1.1 reader run over an answer held in memory, for the `upstream_answer` fuzz target:
//! a request is written (to nowhere), then the answer is read as a socket would give it, in
//! pieces of the sizes asked for, its head and then its body to the end, and what the reader
//! made of it is told: the status, where the head ended, the framing, the body and where the
//! message ended.
//!
//! Nothing here waits: the connection always has bytes or its end ready, so the exchange is
//! polled to completion without a runtime; one that still asked to wait would be a fault.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{HeaderMap, Method};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Body, Conn, Framing, Limit};

/// How an answer's body is delimited, as the reader decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerFraming {
    Empty,
    Length(u64),
    Chunked,
    Close,
}

/// What the reader made of an answer whose head it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Where the final head ends in the input (past any informational answers before it).
    pub head_end: usize,
    pub framing: AnswerFraming,
    /// Whether the connection would be kept for another request.
    pub keep_alive: bool,
    /// The body's bytes as handed out, as far as it was read.
    pub body: Vec<u8>,
    /// Where the message ended in the input, or why its body failed.
    pub end: Result<usize, String>,
}

/// A connection in memory: reads nothing until the request has been written, then `data` in
/// pieces of the `sizes` given (in turn, again and again; a 0 counts as 1), then its end.
struct Memory<'a> {
    data: &'a [u8],
    at: usize,
    sizes: &'a [usize],
    turn: usize,
    written: bool,
}

impl AsyncRead for Memory<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.written {
            // The answer comes after the request: the exchange writes it, then reads again.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let size = match this.sizes {
            [] => usize::MAX,
            sizes => sizes[this.turn % sizes.len()].max(1),
        };
        this.turn += 1;
        let n = size.min(buf.remaining()).min(this.data.len() - this.at);
        buf.put_slice(&this.data[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Memory<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().written = true;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Polls `fut` until it is ready, at most `polls` times: it never waits on anything but the
/// connection in memory, which always has something.
fn finish<F: Future>(fut: F, polls: usize) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..polls {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

/// Reads `data` as the answer to a `GET` (or a `HEAD` when `head` is true), given by the
/// connection in pieces of `sizes` bytes: `Err` with the reader's reason when it refused the
/// head (or the connection ended before one), else what it made of the answer.
///
/// # Panics
///
/// When the reader asks to wait with bytes or the end ready, which is a fault of the reader.
pub fn read_answer(data: &[u8], head: bool, sizes: &[usize]) -> Result<Answer, String> {
    let method = if head { Method::HEAD } else { Method::GET };
    let mut conn = Conn::new(Memory {
        data,
        at: 0,
        sizes,
        turn: 0,
        written: false,
    });
    // Every poll reads at least a byte or meets the end: a bound above the input's length.
    let polls = data.len() * 2 + 64;
    let headers = HeaderMap::new();
    let exchange = conn.exchange(
        &method,
        "/v1/videos",
        &headers,
        None,
        b"",
        Limit::after(Duration::from_secs(3600)),
    );
    let answer = finish(exchange, polls).expect("the exchange waited with bytes ready");
    let answer = answer.map_err(|e| e.to_string())?;
    let unread = |conn: &Conn<Memory<'_>>| conn.io.data.len() - conn.io.at + conn.buf.len();
    let head_end = data.len() - unread(&conn);
    let framing = match answer.framing {
        Framing::Empty => AnswerFraming::Empty,
        Framing::Length(n) => AnswerFraming::Length(n),
        Framing::Chunked => AnswerFraming::Chunked,
        Framing::Close => AnswerFraming::Close,
    };
    let mut body = Body::new(Box::new(conn), answer.framing, answer.keep_alive);
    let mut bytes = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    let end = loop {
        match body.poll_chunk(&mut cx) {
            Poll::Ready(Ok(Some(piece))) => bytes.extend_from_slice(&piece),
            Poll::Ready(Ok(None)) => {
                let conn = body
                    .conn
                    .as_ref()
                    .expect("a body read to its end has its connection");
                break Ok(data.len() - unread(conn));
            }
            Poll::Ready(Err(e)) => break Err(e.to_string()),
            Poll::Pending => panic!("the body waited with bytes ready"),
        }
    };
    Ok(Answer {
        status: answer.status.as_u16(),
        head_end,
        framing,
        keep_alive: answer.keep_alive,
        body: bytes,
        end,
    })
}
