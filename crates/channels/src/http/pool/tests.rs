//! The pool as the channels use it: through [`UpstreamHttp`], against an upstream of our own
//! on 127.0.0.1 that counts the connections it accepts and notes every request's head.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Response, body::Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::http::client::{UpstreamHttp, UpstreamTimeouts};

/// What the fake upstream saw.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    /// Connections ended (the TLS upstream's).
    closed: AtomicUsize,
    /// "METHOD target host" of every request.
    heads: Mutex<Vec<String>>,
}

/// An upstream answering `GET /big` with 4 MiB, `GET /empty` with no body and anything else
/// with `hello`; every connection kept alive unless `keep_alive` is false.
async fn upstream(keep_alive: bool) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            let seen = shared.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let host = req
                        .headers()
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .unwrap_or("-")
                        .to_owned();
                    seen.heads.lock().unwrap().push(format!(
                        "{} {} {host}",
                        req.method(),
                        req.uri()
                    ));
                    let body = match req.uri().path() {
                        "/big" => Bytes::from(vec![b'x'; 4 << 20]),
                        "/empty" => Bytes::new(),
                        _ => Bytes::from_static(b"hello"),
                    };
                    async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(keep_alive)
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn client() -> UpstreamHttp {
    UpstreamHttp::new(UpstreamTimeouts {
        connect: Duration::from_secs(5),
        first_byte: Duration::from_secs(10),
        idle: Duration::from_secs(10),
    })
}

async fn get(http: &UpstreamHttp, addr: SocketAddr, path: &str) -> Bytes {
    get_from(http, &format!("http://{addr}{path}")).await
}

/// `GET url`, answered 200: its body, up to 8 MiB.
async fn get_from(http: &UpstreamHttp, url: &str) -> Bytes {
    let req = Request::get(url).body(Bytes::new()).unwrap();
    let res = http.send(req).await.unwrap();
    assert_eq!(res.status, 200);
    res.body.collect(8 << 20).await.unwrap()
}

#[tokio::test]
async fn a_read_answer_gives_its_connection_back() {
    let (addr, seen) = upstream(true).await;
    let http = client();
    for _ in 0..5 {
        assert_eq!(get(&http, addr, "/v1/messages?beta=true").await, "hello");
    }
    assert_eq!(
        seen.accepted.load(Ordering::SeqCst),
        1,
        "one connection, reused"
    );
    // Origin form on the request line, the origin in Host.
    let heads = seen.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 5);
    assert!(
        heads
            .iter()
            .all(|h| *h == format!("GET /v1/messages?beta=true {addr}")),
        "{heads:?}"
    );
}

#[tokio::test]
async fn a_half_read_answer_closes_its_connection() {
    let (addr, seen) = upstream(true).await;
    let http = client();
    let req = Request::get(format!("http://{addr}/big"))
        .body(Bytes::new())
        .unwrap();
    let mut res = http.send(req).await.unwrap();
    assert!(res.body.chunk().await.unwrap().is_some());
    drop(res);
    // The rest of that answer is not taken for the next one's.
    assert_eq!(get(&http, addr, "/").await, "hello");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    assert_eq!(get(&http, addr, "/").await, "hello");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_without_a_body_gives_its_connection_back_unread() {
    let (addr, seen) = upstream(true).await;
    let http = client();
    for _ in 0..3 {
        let req = Request::get(format!("http://{addr}/empty"))
            .body(Bytes::new())
            .unwrap();
        let res = http.send(req).await.unwrap();
        assert_eq!(res.status, 200);
        drop(res);
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_is_not_reused() {
    let (addr, seen) = upstream(false).await;
    let http = client();
    for i in 1..=3 {
        assert_eq!(get(&http, addr, "/").await, "hello");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), i);
    }
}

#[tokio::test]
async fn a_burst_keeps_its_connections_for_the_next() {
    let (addr, seen) = upstream(true).await;
    let http = client();
    let burst = |n: usize| {
        let calls = (0..n).map(|_| {
            let http = http.clone();
            tokio::spawn(async move { get(&http, addr, "/").await })
        });
        futures_util::future::join_all(calls)
    };
    for answer in burst(8).await {
        assert_eq!(answer.unwrap(), "hello");
    }
    let opened = seen.accepted.load(Ordering::SeqCst);
    assert!((1..=8).contains(&opened), "{opened}");
    for answer in burst(8).await {
        assert_eq!(answer.unwrap(), "hello");
    }
    for _ in 0..8 {
        assert_eq!(get(&http, addr, "/").await, "hello");
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), opened);
}

#[tokio::test]
async fn a_refused_connection_is_an_error_that_names_the_url() {
    // A port that was free a moment ago: nothing listens there now.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let req = Request::get(format!("http://{addr}/v1/x?key=secret"))
        .body(Bytes::new())
        .unwrap();
    let err = client().send(req).await.unwrap_err().to_string();
    assert!(err.contains(&format!("http://{addr}/v1/x")), "{err}");
    assert!(!err.contains("secret"), "{err}");
    assert!(err.contains("connecting"), "{err}");
}

#[tokio::test]
async fn tls_to_a_plain_upstream_fails_in_the_connect() {
    // The TLS branch of the connector: the upstream answers a ClientHello with plain HTTP.
    let (addr, seen) = upstream(true).await;
    let req = Request::get(format!("https://{addr}/v1/x"))
        .body(Bytes::new())
        .unwrap();
    let err = client().send(req).await.unwrap_err();
    assert!(matches!(err, crate::UpstreamError::Send { .. }), "{err:?}");
    assert!(err.to_string().contains("connecting"), "{err}");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    assert!(seen.heads.lock().unwrap().is_empty());
}

/// An upstream that answers one request on its one connection, then (once `close` is
/// notified, if given) closes its side, and notes when the relay's side has closed too.
async fn answers_once(close: Option<Arc<tokio::sync::Notify>>) -> (SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let relay_closed = Arc::new(AtomicUsize::new(0));
    let noted = relay_closed.clone();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut more = [0u8; 1024];
            let n = stream.read(&mut more).await.unwrap();
            assert!(n > 0, "the request never came");
            buf.extend_from_slice(&more[..n]);
        }
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        stream.write_all(answer).await.unwrap();
        if let Some(close) = close {
            close.notified().await;
            // The upstream's side closed: the relay's sits in CLOSE-WAIT until it closes too.
            stream.shutdown().await.unwrap();
        }
        let mut rest = [0u8; 64];
        while let Ok(n) = stream.read(&mut rest).await {
            if n == 0 {
                break;
            }
        }
        noted.fetch_add(1, Ordering::SeqCst);
    });
    (addr, relay_closed)
}

/// Until `done` holds, looked at every few milliseconds for at most 5 s.
async fn within_5s(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn an_idle_connection_the_upstream_closes_is_closed_without_another_request() {
    let close = Arc::new(tokio::sync::Notify::new());
    let (addr, relay_closed) = answers_once(Some(close.clone())).await;
    let http = client();
    assert_eq!(get(&http, addr, "/").await, "ok");
    assert_eq!(http.idle_connections(), 1);
    close.notify_one();
    within_5s("the relay's side closed", || {
        relay_closed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(http.idle_connections(), 0);
}

#[tokio::test]
async fn an_idle_connection_is_closed_once_it_expires_without_another_request() {
    let (addr, relay_closed) = answers_once(None).await;
    let http = client().with_pool_idle_timeout(Duration::from_millis(200));
    assert_eq!(get(&http, addr, "/").await, "ok");
    assert_eq!(http.idle_connections(), 1);
    within_5s("the relay's side closed", || {
        relay_closed.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(http.idle_connections(), 0);
}

/// A TLS upstream on 127.0.0.1 (its certificate signed by a CA made here, returned as PEM)
/// that offers only `alpn` (`h2` or `http/1.1`), answers every request with `hello` after
/// `delay`, and counts the connections it accepts and those that ended.
async fn tls_upstream(alpn: &[u8], delay: Duration) -> (String, SocketAddr, Arc<Seen>) {
    let (ca, mut config) = crate::http::test_tls::signed_server("127.0.0.1");
    config.alpn_protocols = vec![alpn.to_vec()];
    let h2 = alpn == b"h2";
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            shared.accepted.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let seen = shared.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(move |_req: Request<Incoming>| async move {
                    tokio::time::sleep(delay).await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
                });
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, svc)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                }
                seen.closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (ca, addr, seen)
}

/// A client that trusts the CA `pem` (kept in `file` while the client lives).
fn trusting(pem: &str, file: &mut Option<tempfile::NamedTempFile>) -> UpstreamHttp {
    let mut ca = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut ca, pem.as_bytes()).unwrap();
    let network = crate::http::network::Network::build(&crate::http::network::NetworkSettings {
        ca_file: Some(ca.path().to_owned()),
        ..Default::default()
    })
    .unwrap();
    *file = Some(ca);
    UpstreamHttp::reaching(
        UpstreamTimeouts {
            connect: Duration::from_secs(5),
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(10),
        },
        None,
        &network,
    )
}

/// `n` requests at once on this thread's lane, each answered `hello`.
async fn burst(http: &UpstreamHttp, addr: SocketAddr, n: usize) {
    let url = format!("https://{addr}/v1/messages");
    let answers = futures_util::future::join_all((0..n).map(|_| async {
        let res = http
            .send(Request::get(&url).body(Bytes::new()).unwrap())
            .await
            .unwrap();
        res.body.collect(1024).await.unwrap()
    }))
    .await;
    assert!(answers.iter().all(|a| a == "hello"), "{answers:?}");
}

#[tokio::test]
async fn a_burst_to_an_http2_upstream_shares_the_one_connection_being_opened() {
    let (ca, addr, seen) = tls_upstream(b"h2", Duration::from_millis(20)).await;
    let mut file = None;
    let http = trusting(&ca, &mut file);
    // 50 at once on a cold pool: the first opens, the others wait for it and share it.
    burst(&http, addr, 50).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    burst(&http, addr, 50).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_burst_to_an_http1_tls_upstream_opens_what_it_needs_and_keeps_them() {
    let (ca, addr, seen) = tls_upstream(b"http/1.1", Duration::from_millis(200)).await;
    let mut file = None;
    let http = trusting(&ca, &mut file);
    // The first burst waits on the first connection to learn the upstream's protocol, then
    // opens one a request; the next burst finds them all idle.
    burst(&http, addr, 8).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 8);
    assert_eq!(http.idle_connections(), 8);
    burst(&http, addr, 8).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 8);
}

#[tokio::test]
async fn requests_waiting_on_a_connection_that_fails_each_fail_on_their_own() {
    // Trusted by nobody: the TLS handshake fails, and every request says why, unsent.
    let (_, addr, seen) = tls_upstream(b"h2", Duration::ZERO).await;
    let http = client();
    let url = format!("https://{addr}/v1/messages");
    let errors = futures_util::future::join_all((0..5).map(|_| async {
        http.send(Request::get(&url).body(Bytes::new()).unwrap())
            .await
            .unwrap_err()
    }))
    .await;
    for err in &errors {
        assert!(err.is_unsent(), "{err:?}");
        assert!(
            err.to_string().contains("invalid peer certificate"),
            "{err}"
        );
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn streams_past_a_connections_share_go_on_another_and_the_unused_ones_close() {
    let (ca, addr, seen) = tls_upstream(b"h2", Duration::from_millis(300)).await;
    let mut file = None;
    let http = trusting(&ca, &mut file).with_pool_idle_timeout(Duration::from_millis(300));
    // 250 at once: three connections of at most 100 streams each, opened at once.
    burst(&http, addr, 250).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 3);
    // Unused for the idle timeout, with no stream open: closed without another request.
    within_5s("the unused connections closed", || {
        seen.closed.load(Ordering::SeqCst) == 3
    })
    .await;
    burst(&http, addr, 10).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 4);
}

/// What the HTTP/2 upstream of [`h2_upstream`] saw of a request: its method, path, headers and
/// the length of its body.
struct SeenRequest {
    method: http::Method,
    path: String,
    headers: http::HeaderMap,
    body: usize,
}

/// A TLS upstream speaking only HTTP/2 that notes each request whole and answers `GET /big`
/// with 3 MiB (more than a stream's receive window) and anything else with `hello`.
async fn h2_upstream() -> (String, SocketAddr, Arc<Mutex<Vec<SeenRequest>>>) {
    use http_body_util::BodyExt as _;
    let (ca, mut config) = crate::http::test_tls::signed_server("127.0.0.1");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = shared.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let answer = if parts.uri.path() == "/big" {
                            Bytes::from(vec![b'x'; 3 << 20])
                        } else {
                            Bytes::from_static(b"hello")
                        };
                        seen.lock().unwrap().push(SeenRequest {
                            method: parts.method,
                            path: parts.uri.path().to_owned(),
                            headers: parts.headers,
                            body: body.len(),
                        });
                        Ok::<_, Infallible>(Response::new(Full::new(answer)))
                    }
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
            });
        }
    });
    (ca, addr, seen)
}

#[tokio::test]
async fn over_http2_a_request_goes_whole_less_the_headers_http2_forbids() {
    let (ca, addr, seen) = h2_upstream().await;
    let mut file = None;
    let http = trusting(&ca, &mut file);
    // A body larger than the upstream's first window (64 KiB): sent as the window opens.
    let body = Bytes::from(vec![b'{'; 300 * 1024]);
    let req = Request::post(format!("https://{addr}/v1/messages?beta=true"))
        .header("x-api-key", "secret-key")
        .header("connection", "keep-alive, x-hop")
        .header("x-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("te", "gzip")
        .header("upgrade", "websocket")
        .body(body.clone())
        .unwrap();
    let res = http.send(req).await.unwrap();
    assert_eq!(res.status, 200);
    assert_eq!(res.body.collect(1024).await.unwrap(), "hello");
    // A GET: no body, no content-length.
    get_tls(&http, addr, "/v1/models").await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let post = &seen[0];
    assert_eq!(post.method, http::Method::POST);
    assert_eq!(post.path, "/v1/messages");
    assert_eq!(post.body, body.len());
    assert_eq!(post.headers["x-api-key"], "secret-key");
    assert_eq!(
        post.headers["content-length"],
        body.len().to_string().as_str()
    );
    for gone in ["connection", "x-hop", "keep-alive", "te", "upgrade"] {
        assert!(
            !post.headers.contains_key(gone),
            "{gone}: {:?}",
            post.headers
        );
    }
    let get = &seen[1];
    assert_eq!(get.method, http::Method::GET);
    assert_eq!(get.body, 0);
    assert!(
        !get.headers.contains_key("content-length"),
        "{:?}",
        get.headers
    );
}

#[tokio::test]
async fn over_http2_an_answer_larger_than_the_window_is_read_whole() {
    let (ca, addr, _) = h2_upstream().await;
    let mut file = None;
    let http = trusting(&ca, &mut file);
    // 3 MiB through a 2 MiB window: what is read is given back as it is read. Twice on the
    // one connection, so the connection's window is given back too.
    for _ in 0..2 {
        let big = get_tls(&http, addr, "/big").await;
        assert_eq!(big.len(), 3 << 20);
        assert!(big.iter().all(|b| *b == b'x'));
    }
}

async fn get_tls(http: &UpstreamHttp, addr: SocketAddr, path: &str) -> Bytes {
    get_from(http, &format!("https://{addr}{path}")).await
}
