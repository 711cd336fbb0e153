//! Upstreams reached through a CONNECT proxy that the tests run on 127.0.0.1, in front of a
//! TLS upstream whose certificate is signed by a CA the tests make: trusted with a CA file,
//! refused without, the SSRF guard still applied to the upstream.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Network, NetworkSettings, ProxyChoice, Roots};
use crate::http::client::{UpstreamError, UpstreamHttp, UpstreamTimeouts};

/// The name the upstream's certificate is for; only the proxy knows where it is.
const UPSTREAM: &str = "upstream.relay.test";

/// A CA (its certificate as PEM) and a TLS upstream on 127.0.0.1 whose certificate it signed,
/// answering every request with `ok`.
async fn tls_upstream() -> (String, SocketAddr) {
    let (ca, config) = crate::http::test_tls::signed_server(UPSTREAM);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut more = [0u8; 1024];
                    match tls.read(&mut more).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&more[..n]),
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = tls.write_all(answer).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (ca, addr)
}

/// What the proxy was asked: each CONNECT's head.
type Asked = Arc<Mutex<Vec<String>>>;

/// A CONNECT proxy on 127.0.0.1 that tunnels `UPSTREAM` (any port) to `upstream`, and any
/// other target to where it names; it refuses any CONNECT without `Basic user:pass` (407).
async fn connect_proxy(upstream: SocketAddr) -> (SocketAddr, Asked) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let asked: Asked = Arc::default();
    let noted = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let noted = noted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut more = [0u8; 1];
                    match client.read(&mut more).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&more[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                noted.lock().unwrap().push(head.clone());
                // "user:pass" in base64.
                if !head.contains("proxy-authorization: Basic dXNlcjpwYXNz\r\n") {
                    let _ = client
                        .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                        .await;
                    return;
                }
                let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let to = if target.starts_with(UPSTREAM) {
                    upstream.to_string()
                } else {
                    target
                };
                let Ok(mut server) = TcpStream::connect(to).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (addr, asked)
}

fn timeouts() -> UpstreamTimeouts {
    UpstreamTimeouts {
        connect: Duration::from_secs(5),
        first_byte: Duration::from_secs(10),
        idle: Duration::from_secs(10),
    }
}

async fn get(http: &UpstreamHttp, url: &str) -> Result<(u16, Bytes), UpstreamError> {
    let req = Request::get(url).body(Bytes::new()).unwrap();
    let res = http.send(req).await?;
    let status = res.status.as_u16();
    Ok((status, res.body.collect(1024).await?))
}

/// The network of a client that goes through `proxy` (with `userinfo`), trusting the CA in
/// `ca` if given.
fn network(proxy: SocketAddr, userinfo: &str, ca: Option<&tempfile::NamedTempFile>) -> Network {
    Network::build(&NetworkSettings {
        roots: Roots::Webpki,
        ca_file: ca.map(|f| f.path().to_owned()),
        proxy: ProxyChoice::Url(format!("http://{userinfo}{proxy}")),
    })
    .unwrap()
}

fn ca_file(pem: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, pem.as_bytes()).unwrap();
    file
}

#[tokio::test]
async fn through_a_proxy_to_an_upstream_signed_by_the_operators_ca() {
    let (ca, upstream) = tls_upstream().await;
    let (proxy, asked) = connect_proxy(upstream).await;
    let ca = ca_file(&ca);
    let http = UpstreamHttp::reaching(timeouts(), None, &network(proxy, "user:pass@", Some(&ca)));
    let url = format!("https://{UPSTREAM}/v1/videos");
    assert_eq!(get(&http, &url).await.unwrap(), (200, Bytes::from("ok")));
    // The tunnel was asked for by name (the proxy looks it up), with the credentials.
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].starts_with(&format!("CONNECT {UPSTREAM}:443 HTTP/1.1\r\n")),
        "{asked:?}"
    );
}

#[tokio::test]
async fn without_the_ca_the_upstream_is_refused_naming_why() {
    let (_, upstream) = tls_upstream().await;
    let (proxy, _) = connect_proxy(upstream).await;
    let http = UpstreamHttp::reaching(timeouts(), None, &network(proxy, "user:pass@", None));
    let err = get(&http, &format!("https://{UPSTREAM}/v1/videos"))
        .await
        .unwrap_err();
    assert!(err.is_unsent(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("invalid peer certificate"), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
}

#[tokio::test]
async fn a_proxy_that_refuses_the_credentials_is_named_with_its_answer() {
    let (_, upstream) = tls_upstream().await;
    let (proxy, _) = connect_proxy(upstream).await;
    let http = UpstreamHttp::reaching(timeouts(), None, &network(proxy, "me:secret@", None));
    let err = get(&http, &format!("https://{UPSTREAM}/v1/videos"))
        .await
        .unwrap_err();
    assert!(err.is_unsent(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("proxy {proxy}")), "{text}");
    assert!(text.contains("407"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

#[tokio::test]
async fn the_guard_still_refuses_a_private_upstream_behind_a_proxy() {
    let (_, upstream) = tls_upstream().await;
    let (proxy, asked) = connect_proxy(upstream).await;
    let guarded = UpstreamHttp::reaching(
        timeouts(),
        Some(fetch::GuardPolicy::new(false)),
        &network(proxy, "user:pass@", None),
    );
    let err = get(&guarded, &format!("https://{upstream}/result.mp4"))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Blocked { .. }), "{err:?}");
    assert!(asked.lock().unwrap().is_empty(), "no tunnel asked for");
    // With private addresses allowed, the tunnel goes to the address checked, not a name.
    let (ca, upstream) = tls_upstream().await;
    let (proxy, asked) = connect_proxy(upstream).await;
    let ca = ca_file(&ca);
    let allowed = UpstreamHttp::reaching(
        timeouts(),
        Some(fetch::GuardPolicy::new(true)),
        &network(proxy, "user:pass@", Some(&ca)),
    );
    let err = get(&allowed, "http://localhost:9/result.mp4")
        .await
        .unwrap_err();
    assert!(err.is_unsent(), "{err:?}");
    let asked = asked.lock().unwrap().clone();
    assert!(
        asked.iter().all(|a| !a.contains("localhost")),
        "the name was looked up by the relay: {asked:?}"
    );
    assert!(!asked.is_empty(), "{asked:?}");
}
