//! HTTP/1.1 as the channels speak it, through [`UpstreamHttp`], to an upstream of our own on
//! 127.0.0.1 that writes answers byte for byte as each test scripts them (pieces written one at
//! a time, so that every boundary a reader can meet is met) and keeps what it was sent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::http::client::{UpstreamError, UpstreamHttp, UpstreamTimeouts};

/// What the fake writes for one request.
struct Reply {
    /// Written one after another, each flushed on its own.
    pieces: Vec<Vec<u8>>,
    /// Closes the connection after them.
    close: bool,
}

impl Reply {
    fn whole(text: &str) -> Reply {
        Reply {
            pieces: vec![text.as_bytes().to_vec()],
            close: false,
        }
    }

    /// `text` one byte at a time.
    fn bytewise(text: &str) -> Reply {
        Reply {
            pieces: text.bytes().map(|b| vec![b]).collect(),
            close: false,
        }
    }

    fn closing(mut self) -> Reply {
        self.close = true;
        self
    }
}

#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    /// Connections the fake has closed.
    closed: AtomicUsize,
    /// Every request as it arrived: head and body.
    requests: Mutex<Vec<Vec<u8>>>,
}

impl Seen {
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Until the fake has closed `n` connections and this runtime's reactor has seen it.
    async fn wait_closed(&self, n: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.closed.load(Ordering::SeqCst) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the fake never closed"
            );
            tokio::task::yield_now().await;
        }
        // A yield lets the runtime look at its sockets before it runs the caller again.
        tokio::task::yield_now().await;
    }

    fn request(&self, i: usize) -> String {
        String::from_utf8_lossy(&self.requests.lock().unwrap()[i]).into_owned()
    }

    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

type Script = dyn Fn(usize, &str) -> Reply + Send + Sync;

/// The fake upstream: `script` is given each request's number (from 0, over all connections)
/// and its head, and says what to write back.
async fn fake(
    script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static,
) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let script: Arc<Script> = Arc::new(script);
    let shared = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            let (seen, script) = (shared.clone(), script.clone());
            tokio::spawn(async move {
                serve(stream, seen.clone(), script).await;
                seen.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

async fn serve(mut stream: TcpStream, seen: Arc<Seen>, script: Arc<Script>) {
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&request).into_owned();
        let n = {
            let mut requests = seen.requests.lock().unwrap();
            requests.push(request);
            requests.len() - 1
        };
        let reply = script(n, &head);
        for piece in &reply.pieces {
            if stream.write_all(piece).await.is_err() || stream.flush().await.is_err() {
                return;
            }
        }
        if reply.close {
            return;
        }
    }
}

/// One request (its head, and a body of the length it names), or `None` at the end.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse::<usize>().unwrap());
            let total = end + 4 + length;
            while buf.len() < total {
                let mut more = [0u8; 65536];
                let n = stream.read(&mut more).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&more[..n]);
            }
            return Some(buf.drain(..total).collect());
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
        first_byte: Duration::from_secs(10),
        idle: Duration::from_secs(10),
    })
}

fn request(method: Method, addr: SocketAddr, path: &str, body: &'static [u8]) -> Request<Bytes> {
    let mut req = Request::new(Bytes::from_static(body));
    *req.method_mut() = method;
    *req.uri_mut() = format!("http://{addr}{path}").parse().unwrap();
    req
}

/// The status and whole body of a `GET` of `path`.
async fn get(
    http: &UpstreamHttp,
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, Bytes), UpstreamError> {
    let res = http.send(request(Method::GET, addr, path, b"")).await?;
    let status = res.status.as_u16();
    Ok((status, res.body.collect(16 << 20).await?))
}

const HELLO: &str = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";

#[tokio::test]
async fn a_chunked_body_read_across_every_boundary_and_its_connection_kept() {
    let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-a: 1\r\n\r\n\
                  5;ext=1\r\nhello\r\n7 \r\n, world\r\n0\r\nx-trailer: t\r\n\r\n";
    let (addr, seen) = fake(move |_, _| Reply::bytewise(answer)).await;
    let http = client();
    for _ in 0..3 {
        let (status, body) = get(&http, addr, "/").await.unwrap();
        assert_eq!((status, &body[..]), (200, &b"hello, world"[..]));
    }
    assert_eq!(seen.accepted(), 1, "one connection for the three");
}

#[tokio::test]
async fn a_chunked_body_in_one_piece_comes_out_whole() {
    let answer = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
    let (addr, seen) = fake(move |_, _| Reply::whole(answer)).await;
    let http = client();
    for _ in 0..2 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "abcdef");
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn a_length_body_read_across_every_boundary() {
    let (addr, seen) = fake(|_, _| Reply::bytewise(HELLO)).await;
    let http = client();
    for _ in 0..2 {
        let res = http
            .send(request(Method::GET, addr, "/", b""))
            .await
            .unwrap();
        assert_eq!(res.headers()["content-length"], "5");
        assert_eq!(res.body.collect(1024).await.unwrap(), "hello");
    }
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn a_body_to_the_close_is_read_to_the_end_and_its_connection_not_kept() {
    let (addr, seen) =
        fake(|_, _| Reply::whole("HTTP/1.1 200 OK\r\n\r\nuntil the end").closing()).await;
    let http = client();
    for i in 1..=2 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "until the end");
        assert_eq!(seen.accepted(), i);
    }
}

#[tokio::test]
async fn connection_close_and_http_1_0_are_not_kept() {
    let (addr, seen) = fake(|n, _| match n % 3 {
        0 => Reply::whole("HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 2\r\n\r\nok"),
        1 => Reply::whole("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        // HTTP/1.0 that asks to keep the connection: kept.
        _ => {
            Reply::whole("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok")
        }
    })
    .await;
    let http = client();
    for _ in 0..4 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "ok");
    }
    // Requests 0 and 1 each on their own; 2 kept its connection for 3.
    assert_eq!(seen.accepted(), 3);
}

#[tokio::test]
async fn answers_without_a_body_give_their_connection_back_at_once() {
    let (addr, seen) = fake(|n, _| match n {
        0 => Reply::whole("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n"),
        1 => Reply::whole("HTTP/1.1 204 No Content\r\n\r\n"),
        2 => Reply::whole("HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\n\r\n"),
        _ => Reply::whole(HELLO),
    })
    .await;
    let http = client();
    let res = http
        .send(request(Method::HEAD, addr, "/", b""))
        .await
        .unwrap();
    assert_eq!(res.headers()["content-length"], "1000");
    assert_eq!(res.body.collect(10).await.unwrap(), "");
    for status in [204, 304] {
        let (got, body) = get(&http, addr, "/").await.unwrap();
        assert_eq!((got, &body[..]), (status, &b""[..]));
    }
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn an_informational_answer_is_passed_over() {
    let (addr, _) = fake(|_, _| Reply {
        pieces: vec![
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
            b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\n".to_vec(),
            b"content-length: 4\r\n\r\ndone".to_vec(),
        ],
        close: false,
    })
    .await;
    let (status, body) = get(&client(), addr, "/").await.unwrap();
    assert_eq!((status, &body[..]), (201, &b"done"[..]));
}

#[tokio::test]
async fn a_request_goes_out_as_written() {
    let (addr, seen) = fake(|_, _| Reply::whole(HELLO)).await;
    let http = client();
    let mut req = request(Method::POST, addr, "/v1/messages?beta=true", br#"{"a":1}"#);
    req.headers_mut()
        .insert("x-api-key", http::HeaderValue::from_static("k"));
    // A length the caller set is replaced by the body's own.
    req.headers_mut()
        .insert("content-length", http::HeaderValue::from_static("99"));
    http.send(req)
        .await
        .unwrap()
        .body
        .collect(100)
        .await
        .unwrap();
    assert_eq!(
        seen.request(0),
        format!(
            "POST /v1/messages?beta=true HTTP/1.1\r\nhost: {addr}\r\nx-api-key: k\r\n\
             content-length: 7\r\n\r\n{{\"a\":1}}"
        )
    );
    // A POST without a body says so; a GET without one says nothing.
    http.send(request(Method::POST, addr, "/", b""))
        .await
        .unwrap();
    assert!(
        seen.request(1).ends_with("content-length: 0\r\n\r\n"),
        "{}",
        seen.request(1)
    );
    get(&http, addr, "/").await.unwrap();
    assert_eq!(
        seen.request(2),
        format!("GET / HTTP/1.1\r\nhost: {addr}\r\n\r\n")
    );
}

#[tokio::test]
async fn a_large_request_body_arrives_whole() {
    static BIG: [u8; 300_000] = [b'z'; 300_000];
    let (addr, seen) = fake(|_, _| Reply::whole(HELLO)).await;
    let res = client()
        .send(request(Method::PUT, addr, "/upload", &BIG))
        .await
        .unwrap();
    assert_eq!(res.body.collect(100).await.unwrap(), "hello");
    let sent = seen.requests.lock().unwrap()[0].clone();
    assert!(sent.ends_with(&BIG), "the body as sent");
    assert!(String::from_utf8_lossy(&sent).contains("content-length: 300000\r\n"));
}

#[tokio::test]
async fn a_large_answer_streams_in_pieces() {
    let body = "x".repeat(3 << 20);
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (addr, seen) = fake(move |_, _| Reply::whole(&answer)).await;
    let http = client();
    let mut res = http
        .send(request(Method::GET, addr, "/", b""))
        .await
        .unwrap();
    let (mut pieces, mut total) = (0, 0);
    while let Some(piece) = res.body.chunk().await.unwrap() {
        assert!(piece.len() <= 256 * 1024, "{}", piece.len());
        pieces += 1;
        total += piece.len();
    }
    assert_eq!(total, 3 << 20);
    assert!(pieces > 1);
    assert_eq!(get(&http, addr, "/").await.unwrap().1.len(), 3 << 20);
    assert_eq!(seen.accepted(), 1);
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closed_is_not_used() {
    // Every answer closes its connection after it, without saying so.
    let (addr, seen) = fake(|_, _| Reply::whole(HELLO).closing()).await;
    let http = client();
    for i in 1..=3 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
        // The connection is back in the pool; the upstream closes it.
        seen.wait_closed(2 * i - 1).await;
        let res = http.send(request(Method::POST, addr, "/", b"x")).await;
        assert_eq!(res.unwrap().body.collect(10).await.unwrap(), "hello");
        seen.wait_closed(2 * i).await;
    }
    assert_eq!(seen.accepted(), 6);
    assert_eq!(seen.count(), 6, "no request went out twice");
}

#[tokio::test]
async fn a_get_on_a_connection_closed_before_its_answer_goes_out_again() {
    // The second request on the first connection finds it closed with no answer.
    let (addr, seen) = fake(|n, _| match n {
        1 => Reply {
            pieces: vec![],
            close: true,
        },
        _ => Reply::whole(HELLO),
    })
    .await;
    let http = client();
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    assert_eq!((seen.count(), seen.accepted()), (3, 2));
}

#[tokio::test]
async fn a_post_on_a_connection_closed_before_its_answer_is_not_repeated() {
    let (addr, seen) = fake(|n, _| match n {
        1 => Reply {
            pieces: vec![],
            close: true,
        },
        _ => Reply::whole(HELLO),
    })
    .await;
    let http = client();
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    let err = http
        .send(request(Method::POST, addr, "/v1/videos", b"{}"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Send { .. }), "{err:?}");
    assert!(
        err.to_string().contains("closed before the answer"),
        "{err}"
    );
    assert_eq!(seen.count(), 2, "the POST went out once");
    // The pool opens a new connection for the next.
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_its_connection_closed() {
    let (addr, seen) = fake(|n, _| match n {
        0 => Reply::whole("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello").closing(),
        1 => Reply::whole("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nA\r\nhello")
            .closing(),
        _ => Reply::whole(HELLO),
    })
    .await;
    let http = client();
    for _ in 0..2 {
        let err = get(&http, addr, "/").await.unwrap_err();
        assert!(matches!(err, UpstreamError::Body(_)), "{err:?}");
        assert!(
            err.to_string().contains("closed before the body's end"),
            "{err}"
        );
    }
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    assert_eq!(seen.accepted(), 3);
}

#[tokio::test]
async fn malformed_answers_are_errors_that_say_what_is_wrong() {
    let cases = [
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 12x\r\n\r\n",
            "invalid content-length",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nab",
            "disagree",
        ),
        ("SMTP ready\r\n\r\n", "not an HTTP/1.x status line"),
        ("HTTP/1.1 101 Switching Protocols\r\n\r\n", "upgrade"),
    ];
    for (answer, expected) in cases {
        let (addr, _) = fake(move |_, _| Reply::whole(answer)).await;
        let err = get(&client(), addr, "/").await.unwrap_err();
        assert!(
            matches!(err, UpstreamError::Send { .. }),
            "{answer:?}: {err:?}"
        );
        assert!(err.to_string().contains(expected), "{answer:?}: {err}");
    }
    let head = format!("HTTP/1.1 200 OK\r\nx-big: {}\r\n", "a".repeat(70 * 1024));
    let (addr, _) = fake(move |_, _| Reply::whole(&head)).await;
    let err = get(&client(), addr, "/").await.unwrap_err();
    assert!(err.to_string().contains("head larger than"), "{err}");
    let many: String = (0..120).map(|i| format!("x-{i}: v\r\n")).collect();
    let head = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
    let (addr, _) = fake(move |_, _| Reply::whole(&head)).await;
    let err = get(&client(), addr, "/").await.unwrap_err();
    assert!(err.to_string().contains("too many headers"), "{err}");
}

#[tokio::test]
async fn malformed_chunks_are_body_errors() {
    let cases = [
        ("zz\r\nhello\r\n0\r\n\r\n", "invalid chunk size"),
        ("5\r\nhello!!\r\n0\r\n\r\n", "longer than its size"),
        ("5\r\nhello\rX0\r\n\r\n", "without its line end"),
        ("11111111111111111\r\n", "invalid chunk size"),
        // Line ends are CRLF: a bare LF may end a line for one reader and not for another.
        ("5\r\nhello\n0\r\n\r\n", "ended by a bare LF"),
        (
            "5\nhello\r\n0\r\n\r\n",
            "a chunk-size line ended by a bare LF",
        ),
        (
            "5;a\rb\r\nhello\r\n0\r\n\r\n",
            "a control byte in a chunk-size line",
        ),
        (
            "5\x0c\r\nhello\r\n0\r\n\r\n",
            "a control byte in a chunk-size line",
        ),
        ("5\r\nhello\r\n0\r\nx y\r\n\r\n", "invalid trailer fields"),
    ];
    for (chunks, expected) in cases {
        let answer = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{chunks}");
        let (addr, _) = fake(move |_, _| Reply::whole(&answer)).await;
        let err = get(&client(), addr, "/").await.unwrap_err();
        assert!(matches!(err, UpstreamError::Body(_)), "{chunks:?}: {err:?}");
        assert!(err.to_string().contains(expected), "{chunks:?}: {err}");
    }
}

#[tokio::test]
async fn bytes_past_the_body_close_the_connection() {
    let (addr, seen) = fake(|n, _| match n {
        0 => Reply::whole("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA"),
        _ => Reply::whole(HELLO),
    })
    .await;
    let http = client();
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "ok");
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    assert_eq!(seen.accepted(), 2);
}

#[tokio::test]
async fn a_coding_beside_a_length_is_read_as_chunks_and_not_kept() {
    let answer = "HTTP/1.1 200 OK\r\ncontent-length: 100\r\ntransfer-encoding: chunked\r\n\r\n\
                  2\r\nok\r\n0\r\n\r\n";
    let (addr, seen) = fake(move |_, _| Reply::whole(answer)).await;
    let http = client();
    for i in 1..=2 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "ok");
        assert_eq!(seen.accepted(), i);
    }
}

/// A client whose waits end soon.
fn impatient() -> UpstreamHttp {
    UpstreamHttp::new(UpstreamTimeouts {
        connect: Duration::from_secs(5),
        first_byte: Duration::from_millis(300),
        idle: Duration::from_millis(300),
    })
}

#[tokio::test]
async fn no_head_in_time_is_a_first_byte_timeout_on_a_new_connection_and_a_reused_one() {
    // The first request of each connection is answered; every other is read and left.
    let (addr, seen) = fake(|n, _| match n {
        0 => Reply::whole(HELLO),
        _ => Reply {
            pieces: vec![],
            close: false,
        },
    })
    .await;
    let http = impatient();
    assert_eq!(get(&http, addr, "/").await.unwrap().1, "hello");
    for _ in 0..2 {
        let began = std::time::Instant::now();
        let err = get(&http, addr, "/").await.unwrap_err();
        assert!(
            matches!(err, UpstreamError::FirstByteTimeout { .. }),
            "{err:?}"
        );
        let took = began.elapsed();
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
    // The first wait was on the reused connection, the second on a new one.
    assert_eq!(seen.accepted(), 2);
}

#[tokio::test]
async fn a_body_that_stops_is_an_idle_timeout() {
    let (addr, _) =
        fake(|_, _| Reply::whole("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello")).await;
    let http = impatient();
    let mut res = http
        .send(request(Method::GET, addr, "/", b""))
        .await
        .unwrap();
    assert_eq!(res.body.chunk().await.unwrap().unwrap(), "hello");
    let began = std::time::Instant::now();
    let err = res.body.chunk().await.unwrap_err();
    assert!(matches!(err, UpstreamError::IdleTimeout(_)), "{err:?}");
    let took = began.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

mod conformance;
mod faults;
mod framing;
