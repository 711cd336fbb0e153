//! Answers at the edges of RFC 9112 that upstreams do send: lengths written oddly, HTTP/1.0
//! with a transfer coding, folded header lines, long runs of leading zeros; and a TLS
//! handshake that never ends.

use std::time::Duration;

use http::Method;

use super::{Reply, client, fake, get, request};
use crate::http::client::{UpstreamHttp, UpstreamTimeouts};

#[tokio::test]
async fn a_length_is_digits_alone_and_a_repeated_one_is_taken_once() {
    // (the answer's length fields, what comes of it)
    let cases: [(&str, Result<&str, &str>); 8] = [
        ("content-length: 2", Ok("ok")),
        ("content-length: 2, 2", Ok("ok")),
        ("content-length: 2\r\ncontent-length: 2", Ok("ok")),
        ("content-length: 2 ,2\r\ncontent-length: 2", Ok("ok")),
        ("content-length: +2", Err("invalid content-length")),
        ("content-length: 2, 3", Err("disagree")),
        ("content-length: 2\r\ncontent-length: 3", Err("disagree")),
        ("content-length: 2,", Err("invalid content-length")),
    ];
    for (fields, expected) in cases {
        let answer = format!("HTTP/1.1 200 OK\r\n{fields}\r\n\r\nok");
        let (addr, seen) = fake(move |_, _| Reply::whole(&answer)).await;
        let http = client();
        match expected {
            Ok(body) => {
                for _ in 0..2 {
                    assert_eq!(get(&http, addr, "/").await.unwrap().1, body, "{fields:?}");
                }
                assert_eq!(seen.accepted(), 1, "{fields:?}: the connection kept");
            }
            Err(message) => {
                let err = get(&http, addr, "/").await.unwrap_err();
                assert!(err.to_string().contains(message), "{fields:?}: {err}");
            }
        }
    }
}

#[tokio::test]
async fn a_coded_answer_of_http_1_0_or_that_closes_is_read_and_its_connection_not_kept() {
    let answers = [
        "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n\
         2\r\nok\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n\
         2\r\nok\r\n0\r\n\r\n",
    ];
    for answer in answers {
        let (addr, seen) = fake(move |_, _| Reply::whole(answer)).await;
        let http = client();
        for i in 1..=2 {
            assert_eq!(get(&http, addr, "/").await.unwrap().1, "ok", "{answer:?}");
            assert_eq!(seen.accepted(), i, "{answer:?}");
        }
    }
}

#[tokio::test]
async fn a_folded_header_value_reads_as_one_line() {
    let answer = "HTTP/1.1 200 OK\r\nx-folded: first\r\n  second\r\n\tthird\r\n\
                  content-length: 2,\r\n 2\r\nx-after: a\r\n\r\nok";
    let (addr, _) = fake(move |_, _| Reply::whole(answer)).await;
    let res = client()
        .send(request(Method::GET, addr, "/", b""))
        .await
        .unwrap();
    let headers = res.headers();
    assert_eq!(headers["x-folded"], "first second third");
    assert_eq!(headers["content-length"], "2, 2");
    assert_eq!(headers["x-after"], "a");
    assert_eq!(res.body.collect(16).await.unwrap(), "ok");
}

#[tokio::test]
async fn leading_zeros_in_a_chunk_size_are_as_many_as_come() {
    let answer = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  000000000000000000000a\r\n0123456789\r\n\
                  00000000000000000000000000000000000000\r\n\r\n";
    let (addr, seen) = fake(move |_, _| Reply::whole(answer)).await;
    let http = client();
    for _ in 0..2 {
        assert_eq!(get(&http, addr, "/").await.unwrap().1, "0123456789");
    }
    assert_eq!(seen.accepted(), 1);
    // Past the zeros, a size that does not fit in 64 bits is still refused.
    let answer = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  0010000000000000000\r\n";
    let (addr, _) = fake(move |_, _| Reply::whole(answer)).await;
    let err = get(&client(), addr, "/").await.unwrap_err();
    assert!(err.to_string().contains("invalid chunk size"), "{err}");
}

#[tokio::test]
async fn a_tls_handshake_that_never_ends_is_bounded_by_the_connect_time() {
    // Accepts, reads the ClientHello, and says nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let http = UpstreamHttp::new(UpstreamTimeouts {
        connect: Duration::from_millis(300),
        first_byte: Duration::from_secs(60),
        idle: Duration::from_secs(60),
    });
    let mut req = request(Method::POST, addr, "/", b"{}");
    *req.uri_mut() = format!("https://{addr}/v1/videos").parse().unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), http.send(req))
        .await
        .expect("ended by the connect time, well before the first-byte time")
        .unwrap_err();
    assert!(err.is_unsent(), "{err:?}");
    assert!(
        err.to_string().contains("no connection within 300ms"),
        "{err}"
    );
}
