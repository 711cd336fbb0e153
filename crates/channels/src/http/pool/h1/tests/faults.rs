//! An upstream that misbehaves while a request is on its way: it answers before the body's end,
//! closes halfway through a body, or was gone before the request was written. Raw sockets on
//! 127.0.0.1 whose every connection runs a script of its own, and connections in memory whose
//! ends the tests hold.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::super::{Conn, Error, Limit};
use crate::http::client::{UpstreamHttp, UpstreamTimeouts};

/// What a connection's script is given: its number (from 0) and the socket.
type Script =
    Arc<dyn Fn(usize, TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// An upstream on 127.0.0.1 that runs `script` on every connection it accepts.
async fn upstream<F, Fut>(script: F) -> SocketAddr
where
    F: Fn(usize, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let script: Script = Arc::new(move |n, stream| Box::pin(script(n, stream)));
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(script(n, stream));
            n += 1;
        }
    });
    addr
}

/// Reads up to the end of a request head (and whatever came with it); `None` at the end.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(String::from_utf8_lossy(&buf[..end + 4]).into_owned());
        }
        let mut more = [0u8; 4096];
        match stream.read(&mut more).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&more[..n]),
        }
    }
}

/// Reads one whole request (a head, and a body of the length it names); `None` at the end.
async fn read_request(stream: &mut TcpStream) -> Option<(String, usize)> {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse::<usize>().unwrap());
            let mut body = buf.len() - end - 4;
            while body < length {
                let mut more = vec![0u8; 65536];
                let n = stream.read(&mut more).await.ok()?;
                if n == 0 {
                    return None;
                }
                body += n;
            }
            return Some((head, length));
        }
        let mut more = [0u8; 4096];
        let n = stream.read(&mut more).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&more[..n]);
    }
}

fn client() -> UpstreamHttp {
    UpstreamHttp::new(UpstreamTimeouts {
        connect: Duration::from_secs(5),
        first_byte: Duration::from_secs(30),
        idle: Duration::from_secs(30),
    })
}

fn post(addr: SocketAddr, body: Bytes) -> Request<Bytes> {
    let mut req = Request::new(body);
    *req.method_mut() = Method::POST;
    *req.uri_mut() = format!("http://{addr}/v1/videos").parse().unwrap();
    req
}

fn get(addr: SocketAddr) -> Request<Bytes> {
    let mut req = Request::new(Bytes::new());
    *req.uri_mut() = format!("http://{addr}/v1/videos/1").parse().unwrap();
    req
}

/// 15 MB: more than loopback's socket buffers hold, so its write waits for the upstream to
/// read.
fn large_body() -> Bytes {
    Bytes::from(vec![b'z'; 15_000_000])
}

/// A result that must come well within the client's own timeouts (30 s).
async fn soon<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(10), f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within 10 s"),
    }
}

const TOO_LARGE: &str = "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\n\
                         x-request-id: r1\r\ncontent-length: 27\r\n\r\n{\"error\":\"body too large\"}\n";

#[tokio::test]
async fn an_answer_before_the_body_is_written_reaches_the_caller_as_given() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let seen = accepted.clone();
    let addr = upstream(move |n, mut stream| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                // The head only, then the answer at once; the body is never read, and the
                // connection stays open until the client closes it.
                read_head(&mut stream).await;
                stream.write_all(TOO_LARGE.as_bytes()).await.unwrap();
                // Held open, never read, until the test's end drops it.
                std::future::pending::<()>().await;
                drop(stream);
            } else {
                while read_request(&mut stream).await.is_some() {
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if stream.write_all(ok.as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    let http = client();
    let res = soon("the early answer", http.send(post(addr, large_body())))
        .await
        .unwrap();
    assert_eq!(res.status, 413);
    let headers = res.headers();
    assert_eq!(headers["x-request-id"], "r1");
    assert_eq!(headers["content-type"], "application/json");
    let body = soon("its body", res.body.collect(1024)).await.unwrap();
    assert_eq!(body, "{\"error\":\"body too large\"}\n");
    // Its connection, whose request was cut short, is not used again.
    let res = soon("the next", http.send(get(addr))).await.unwrap();
    assert_eq!(res.body.collect(16).await.unwrap(), "ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_then_a_close_before_the_body_is_written_is_still_the_answer() {
    // The upstream answers and closes with the body unread: its side resets the connection,
    // and the write fails; the answer it sent first is what the caller gets.
    let addr = upstream(|_, mut stream| async move {
        read_head(&mut stream).await;
        let answer =
            "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbad";
        stream.write_all(answer.as_bytes()).await.unwrap();
        drop(stream);
    })
    .await;
    let res = soon("the early answer", client().send(post(addr, large_body())))
        .await
        .unwrap();
    assert_eq!(res.status, 400);
    assert_eq!(res.body.collect(16).await.unwrap(), "bad");
}

#[tokio::test]
async fn a_post_cut_off_halfway_on_a_reused_connection_is_not_sent_again() {
    // The first connection answers a GET, then reads part of the next request and closes:
    // the POST's write fails after some of it left. Every other connection answers all.
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    let addr = upstream(move |n, mut stream| {
        let posts = counted.clone();
        async move {
            if n == 0 {
                read_request(&mut stream).await;
                let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                stream.write_all(ok.as_bytes()).await.unwrap();
                if let Some(head) = read_head(&mut stream).await
                    && head.starts_with("POST")
                {
                    posts.fetch_add(1, Ordering::SeqCst);
                }
                // Closed with the body unread: a reset.
                return;
            }
            while let Some((head, _)) = read_request(&mut stream).await {
                if head.starts_with("post") {
                    posts.fetch_add(1, Ordering::SeqCst);
                }
                let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(ok.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let http = client();
    let res = soon("the first", http.send(get(addr))).await.unwrap();
    assert_eq!(res.body.collect(16).await.unwrap(), "ok");
    let err = soon("the POST", http.send(post(addr, large_body())))
        .await
        .unwrap_err();
    assert!(!err.is_unsent(), "part of it was written: {err:?}");
    assert_eq!(
        posts.load(Ordering::SeqCst),
        1,
        "the POST reached the upstream once"
    );
    // The pool goes on with a new connection.
    let res = soon("the next", http.send(get(addr))).await.unwrap();
    assert_eq!(res.body.collect(16).await.unwrap(), "ok");
    assert_eq!(posts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_get_cut_off_on_a_reused_connection_goes_out_again() {
    let gets = Arc::new(AtomicUsize::new(0));
    let counted = gets.clone();
    let addr = upstream(move |n, mut stream| {
        let gets = counted.clone();
        async move {
            let mut served = 0;
            while read_request(&mut stream).await.is_some() {
                gets.fetch_add(1, Ordering::SeqCst);
                if n == 0 && served == 1 {
                    // The second request on the first connection: closed, unanswered.
                    return;
                }
                served += 1;
                let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(ok.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let http = client();
    for _ in 0..2 {
        let res = soon("a GET", http.send(get(addr))).await.unwrap();
        assert_eq!(res.body.collect(16).await.unwrap(), "ok");
    }
    assert_eq!(gets.load(Ordering::SeqCst), 3, "the second went out twice");
}

/// A connection in memory: what it reads is given, and its writes are taken up to a count of
/// bytes, then refused.
struct Scripted {
    incoming: Vec<u8>,
    /// After `incoming`: the end (`true`) or nothing yet.
    eof: bool,
    accepts: usize,
    written: usize,
}

impl AsyncRead for Scripted {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.incoming.is_empty() {
            let n = this.incoming.len().min(buf.remaining());
            buf.put_slice(&this.incoming[..n]);
            this.incoming.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if this.eof {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = buf.len().min(this.accepts - this.written);
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        this.written += n;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn exchange(io: Scripted, method: Method) -> (Result<super::super::Head, Error>, usize) {
    let mut conn = Conn::new(io);
    let out = conn
        .exchange(
            &method,
            "/v1/videos",
            &HeaderMap::new(),
            None,
            b"{\"prompt\":\"a cat\"}",
            Limit::after(Duration::from_millis(50)),
        )
        .await;
    (out, conn.io.written)
}

#[tokio::test]
async fn a_connection_found_ended_before_the_write_sent_nothing() {
    let cases = [
        // Closed while idle.
        (Vec::new(), true),
        // Bytes nobody asked for.
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec(),
            false,
        ),
    ];
    for (incoming, eof) in cases {
        let io = Scripted {
            incoming,
            eof,
            accepts: usize::MAX,
            written: 0,
        };
        let (out, written) = exchange(io, Method::POST).await;
        let err = out.unwrap_err();
        assert!(matches!(err, Error::Stale), "{err:?}");
        assert_eq!(written, 0);
        assert!(err.is_unsent() && err.may_retry(&Method::POST), "{err:?}");
    }
}

#[tokio::test]
async fn a_write_refused_at_its_first_byte_sent_nothing_and_one_refused_later_did() {
    for (accepts, unsent) in [(0, true), (10, false)] {
        let io = Scripted {
            incoming: Vec::new(),
            eof: false,
            accepts,
            written: 0,
        };
        let (out, _) = exchange(io, Method::POST).await;
        let err = out.unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err:?}");
        assert_eq!(err.is_unsent(), unsent, "{accepts}: {err:?}");
        assert_eq!(err.may_retry(&Method::POST), unsent, "{accepts}: {err:?}");
        assert!(err.may_retry(&Method::GET), "{err:?}");
    }
}
