//! Fetches against small hyper servers on 127.0.0.1, port 0.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Response, StatusCode};
use http_body_util::Full;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::*;

type TestBody = BoxBody<Bytes, Infallible>;

/// The test server: what it answers for a path, and how many requests reached it.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    /// Bytes the endless bodies produced so far.
    streamed: Arc<AtomicU64>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// An endless body of 16 KiB chunks, counting what it hands out.
struct Endless(Arc<AtomicU64>);

impl Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let chunk = Bytes::from_static(&[b'x'; 16 * 1024]);
        self.0.fetch_add(chunk.len() as u64, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }
}

/// A body that never sends a byte.
struct Stalled;

impl Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Pending
    }
}

fn text(status: u16, body: &'static str) -> Response<TestBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}

fn redirect(status: u16, location: &str) -> Response<TestBody> {
    let mut response = text(status, "");
    response
        .headers_mut()
        .insert(LOCATION, location.parse().unwrap());
    response
}

/// The routes every test server has.
async fn route(
    req: Request<Incoming>,
    own: SocketAddr,
    streamed: Arc<AtomicU64>,
) -> Response<TestBody> {
    let path = req.uri().path().to_owned();
    match path.as_str() {
        "/hello" => text(200, "hello"),
        "/ua" => {
            let ua = req.headers().get(USER_AGENT).cloned();
            let ua = ua
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            Response::new(Full::new(Bytes::from(ua)).boxed())
        }
        "/missing" => text(404, "no such thing"),
        "/redirect/relative" => redirect(302, "../hello"),
        "/redirect/sibling" => redirect(302, "hello"),
        "/redirect/hello" => text(200, "sibling"),
        "/redirect/absolute-path" => redirect(301, "/hello?x=1"),
        "/redirect/full" => redirect(307, &format!("http://{own}/hello")),
        "/redirect/chain" => redirect(308, "/redirect/relative"),
        "/redirect/loop" => redirect(302, "/redirect/loop"),
        "/redirect/no-location" => text(302, ""),
        "/redirect/file" => redirect(302, "file:///etc/passwd"),
        "/redirect/data" => redirect(302, "data:,hello"),
        "/redirect/loopback" => redirect(302, &format!("http://127.0.0.2:{}/hello", own.port())),
        "/redirect/ipv6-loopback" => redirect(302, &format!("http://[::1]:{}/hello", own.port())),
        "/redirect/metadata" => redirect(302, "http://169.254.169.254/latest/meta-data/"),
        "/redirect/private" => redirect(303, "https://10.0.0.1/x"),
        "/big-declared" => Response::new(Full::new(Bytes::from_static(&[b'y'; 4096])).boxed()),
        "/endless" => Response::new(Endless(streamed).boxed()),
        "/stalled-body" => Response::new(Stalled.boxed()),
        "/stalled-headers" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            text(200, "too late")
        }
        _ => text(404, ""),
    }
}

async fn server() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let streamed = Arc::new(AtomicU64::new(0));
    let (task_hits, task_streamed) = (Arc::clone(&hits), Arc::clone(&streamed));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (hits, streamed) = (Arc::clone(&task_hits), Arc::clone(&task_streamed));
            let service = service_fn(move |req| {
                hits.fetch_add(1, Ordering::SeqCst);
                let streamed = Arc::clone(&streamed);
                async move { Ok::<_, Infallible>(route(req, addr, streamed).await) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server {
        addr,
        hits,
        streamed,
    }
}

fn config(allow_private: bool) -> FetchConfig {
    FetchConfig {
        timeout: Duration::from_secs(5),
        allow_private,
        max_redirects: 5,
    }
}

fn open() -> Fetcher {
    Fetcher::new(config(true))
}

fn guarded() -> Fetcher {
    Fetcher::new(config(false))
}

/// Refuses private addresses, except the loopback address the test servers listen on.
fn guarded_but_loopback_server() -> Fetcher {
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    Fetcher::exempting(config(false), &[loopback])
}

fn assert_blocked(result: Result<Bytes, FetchError>, host: &str) {
    match result {
        Err(FetchError::Blocked { host: h }) => assert_eq!(h, host),
        other => panic!("expected Blocked {{ host: {host} }}, got {other:?}"),
    }
}

#[tokio::test]
async fn fetches_when_private_addresses_are_allowed() {
    let s = server().await;
    let fetcher = open();
    assert_eq!(fetcher.fetch(&s.url("/hello"), 100).await.unwrap(), "hello");
    assert_eq!(fetcher.fetch(&s.url("/hello"), 5).await.unwrap(), "hello");
    let ua = fetcher.fetch(&s.url("/ua"), 1000).await.unwrap();
    assert_eq!(ua, FETCH_USER_AGENT.as_bytes());
    assert!(FETCH_USER_AGENT.starts_with("video-relay/"));
    // Clones share the pool and the settings.
    let clone = fetcher.clone();
    assert_eq!(clone.fetch(&s.url("/hello"), 100).await.unwrap(), "hello");
    assert_eq!(s.hits(), 4);
}

#[tokio::test]
async fn refuses_loopback_literals_and_names() {
    let s = server().await;
    let fetcher = guarded();
    assert_blocked(fetcher.fetch(&s.url("/hello"), 100).await, "127.0.0.1");
    let by_name = format!("http://localhost:{}/hello", s.addr.port());
    assert_blocked(fetcher.fetch(&by_name, 100).await, "localhost");
    assert_blocked(fetcher.fetch_prefix(&by_name, 10).await, "localhost");
    let v6 = format!("http://[::1]:{}/hello", s.addr.port());
    assert_blocked(fetcher.fetch(&v6, 100).await, "[::1]");
    let mapped = format!("http://[::ffff:127.0.0.1]:{}/hello", s.addr.port());
    assert_blocked(fetcher.fetch(&mapped, 100).await, "[::ffff:127.0.0.1]");
    assert_blocked(fetcher.fetch("http://0.0.0.0/", 100).await, "0.0.0.0");
    // Spellings that only getaddrinfo reads as 127.0.0.1 are caught at resolution.
    assert_blocked(fetcher.fetch("http://2130706433/", 100).await, "2130706433");
    assert_blocked(fetcher.fetch("http://127.1/", 100).await, "127.1");
    assert_eq!(s.hits(), 0, "no request may reach a refused address");

    // The message names the host, not the address it resolved to.
    let err = fetcher.fetch(&by_name, 100).await.unwrap_err().to_string();
    assert_eq!(
        err,
        "localhost resolves to an address the relay does not fetch from"
    );
}

#[tokio::test]
async fn refuses_redirects_to_private_addresses() {
    let s = server().await;
    let fetcher = guarded_but_loopback_server();
    // The exemption works: the first hop is reachable.
    assert_eq!(fetcher.fetch(&s.url("/hello"), 100).await.unwrap(), "hello");
    for (path, host) in [
        ("/redirect/loopback", "127.0.0.2"),
        ("/redirect/ipv6-loopback", "[::1]"),
        ("/redirect/metadata", "169.254.169.254"),
        ("/redirect/private", "10.0.0.1"),
    ] {
        assert_blocked(fetcher.fetch(&s.url(path), 100).await, host);
    }
    assert_eq!(s.hits(), 5);
}

#[tokio::test]
async fn follows_redirects() {
    let s = server().await;
    let fetcher = open();
    for path in [
        "/redirect/relative",
        "/redirect/absolute-path",
        "/redirect/full",
        "/redirect/chain",
    ] {
        assert_eq!(
            fetcher.fetch(&s.url(path), 100).await.unwrap(),
            "hello",
            "{path}"
        );
    }
    let sibling = fetcher.fetch(&s.url("/redirect/sibling"), 100).await;
    assert_eq!(sibling.unwrap(), "sibling");
    let err = fetcher.fetch(&s.url("/redirect/loop"), 100).await;
    assert!(matches!(err, Err(FetchError::TooManyRedirects)), "{err:?}");
    assert_eq!(s.hits(), 2 + 2 + 2 + 3 + 2 + 6);

    let strict = Fetcher::new(FetchConfig {
        max_redirects: 1,
        ..config(true)
    });
    assert!(
        strict
            .fetch(&s.url("/redirect/relative"), 100)
            .await
            .is_ok()
    );
    let err = strict.fetch(&s.url("/redirect/chain"), 100).await;
    assert!(matches!(err, Err(FetchError::TooManyRedirects)), "{err:?}");

    for path in ["/redirect/file", "/redirect/data"] {
        let err = fetcher.fetch(&s.url(path), 100).await;
        assert!(
            matches!(err, Err(FetchError::InvalidUrl(_))),
            "{path}: {err:?}"
        );
    }
    let err = fetcher.fetch(&s.url("/redirect/no-location"), 100).await;
    assert!(matches!(err, Err(FetchError::Status(302))), "{err:?}");
}

#[tokio::test]
async fn non_2xx_is_a_status_error() {
    let s = server().await;
    let err = open().fetch(&s.url("/missing"), 100).await;
    assert!(matches!(err, Err(FetchError::Status(404))), "{err:?}");
    let err = open().fetch_prefix(&s.url("/missing"), 100).await;
    assert!(matches!(err, Err(FetchError::Status(404))), "{err:?}");
}

#[tokio::test]
async fn times_out_within_the_configured_timeout() {
    let s = server().await;
    let fetcher = Fetcher::new(FetchConfig {
        timeout: Duration::from_millis(300),
        ..config(true)
    });
    for path in ["/stalled-headers", "/stalled-body"] {
        let started = Instant::now();
        let err = fetcher.fetch(&s.url(path), 100).await;
        let elapsed = started.elapsed();
        assert!(matches!(err, Err(FetchError::Timeout)), "{path}: {err:?}");
        assert!(elapsed >= Duration::from_millis(250), "{path}: {elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{path}: {elapsed:?}");
    }
    // A server that accepts and never answers at all.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let started = Instant::now();
    let err = fetcher.fetch_prefix(&url, 100).await;
    assert!(matches!(err, Err(FetchError::Timeout)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(silent);
}

#[tokio::test]
async fn refuses_bodies_over_the_limit_without_reading_them() {
    let s = server().await;
    let fetcher = open();
    // Declared too large: refused on the headers.
    let err = fetcher.fetch(&s.url("/big-declared"), 100).await;
    assert!(matches!(err, Err(FetchError::TooLarge)), "{err:?}");
    // Endless (chunked): refused once past the limit, long before "all of it".
    let err = fetcher.fetch(&s.url("/endless"), 100 * 1024).await;
    assert!(matches!(err, Err(FetchError::TooLarge)), "{err:?}");
    let streamed = s.streamed.load(Ordering::SeqCst);
    assert!(streamed < 64 << 20, "the server streamed {streamed} bytes");
    assert_eq!(err.unwrap_err().to_string(), "response is too large");
}

#[tokio::test]
async fn fetch_prefix_stops_early() {
    let s = server().await;
    let fetcher = open();
    let prefix = fetcher
        .fetch_prefix(&s.url("/endless"), 40_000)
        .await
        .unwrap();
    assert_eq!(prefix.len(), 40_000);
    assert!(prefix.iter().all(|b| *b == b'x'));
    // A shorter body comes back whole; zero bytes asks for nothing.
    assert_eq!(
        fetcher.fetch_prefix(&s.url("/hello"), 1000).await.unwrap(),
        "hello"
    );
    assert_eq!(
        fetcher.fetch_prefix(&s.url("/hello"), 3).await.unwrap(),
        "hel"
    );
    assert_eq!(fetcher.fetch_prefix(&s.url("/hello"), 0).await.unwrap(), "");
}

#[tokio::test]
async fn data_uris_need_no_network() {
    let fetcher = guarded();
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB";
    let bytes = fetcher.fetch(png, 1000).await.unwrap();
    assert_eq!(crate::sniff(&bytes), Some(crate::Format::Png));
    assert_eq!(fetcher.fetch_prefix(png, 4).await.unwrap(), &b"\x89PNG"[..]);
    let err = fetcher.fetch(png, 8).await;
    assert!(matches!(err, Err(FetchError::TooLarge)), "{err:?}");
    let err = fetcher.fetch("data:;base64,!!", 8).await;
    assert!(matches!(err, Err(FetchError::InvalidUrl(_))), "{err:?}");
}

#[tokio::test]
async fn refuses_what_is_not_an_http_url() {
    let fetcher = open();
    for url in [
        "",
        "not a url",
        "/relative/path",
        "example.com/image.png",
        "ftp://example.com/a.png",
        "file:///etc/passwd",
        "gopher://127.0.0.1:6379/_INFO",
        "http://user:secret@example.com/a.png",
        "http:///a.png",
    ] {
        let err = fetcher.fetch(url, 100).await;
        assert!(
            matches!(err, Err(FetchError::InvalidUrl(_))),
            "{url}: {err:?}"
        );
    }
}

#[tokio::test]
async fn connection_failures_name_the_host_only() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let err = open()
        .fetch(&format!("http://127.0.0.1:{port}/"), 100)
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Connect(_)), "{err:?}");
    assert_eq!(err.to_string(), "cannot connect to 127.0.0.1");
}

#[test]
fn resolves_redirect_locations() {
    let base: Uri = "https://cdn.example.com/a/b/c.png?sig=1".parse().unwrap();
    let check = |location: &str, expected: &str| {
        let got = resolve_location(&base, location).map(|u| u.to_string());
        assert_eq!(got.ok().as_deref(), Some(expected), "{location}");
    };
    check("http://other.example/x", "http://other.example/x");
    check("HTTPS://other.example/x", "https://other.example/x");
    check("//other.example/y", "https://other.example/y");
    check("/top?q=1", "https://cdn.example.com/top?q=1");
    check("d.png", "https://cdn.example.com/a/b/d.png");
    check("../d.png", "https://cdn.example.com/a/d.png");
    check(
        "./../../../d.png?x=/../",
        "https://cdn.example.com/d.png?x=/../",
    );
    check("..", "https://cdn.example.com/a/");
    check(".", "https://cdn.example.com/a/b/");
    check("http://h/x/./y/../z", "http://h/x/z");
    check("?sig=2", "https://cdn.example.com/a/b/c.png?sig=2");
    check("/x#frag", "https://cdn.example.com/x");
    for bad in [
        "file:///etc/passwd",
        "data:,x",
        "javascript:alert(1)",
        "http://u:p@h/",
        "http://a b/",
    ] {
        let got = resolve_location(&base, bad);
        assert!(
            matches!(got, Err(FetchError::InvalidUrl(_))),
            "{bad}: {got:?}"
        );
    }
}

#[test]
fn default_config() {
    let config = FetchConfig::default();
    assert_eq!(config.timeout, Duration::from_secs(10));
    assert!(!config.allow_private);
    assert_eq!(config.max_redirects, 5);
    // Building needs no runtime; only fetching does.
    let fetcher = Fetcher::new(config.clone());
    assert_eq!(fetcher.config(), &config);
}
