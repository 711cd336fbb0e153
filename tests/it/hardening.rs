//! Slow and greedy clients: body caps refused before reading, stalled bodies, slow heads, and
//! connection caps in all and per client address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::{ADMIN_TOKEN, Relay};

/// Small limits so that the hard caps (4x) are small too; short timeouts so tests are quick.
const TIGHT: &str = r#"
[server]
max_body_bytes = 1000
max_upload_bytes = 2000
header_read_timeout_secs = 2
body_read_timeout_secs = 2
"#;

fn addr(relay: &Relay) -> SocketAddr {
    relay
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the relay's address")
}

/// A connection to `to` from the loopback address `from` (a client of its own).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

/// Everything `conn` receives until it is closed, or `None` when it is still open at `deadline`.
async fn read_until_closed(conn: &mut TcpStream, deadline: Instant) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, conn.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `head` (a request head declaring a body) and no body byte; answers what comes back
/// within 5 s.
async fn declared_only(relay: &Relay, head: String) -> String {
    let mut conn = TcpStream::connect(addr(relay)).await.expect("connect");
    conn.write_all(head.as_bytes())
        .await
        .expect("send the head");
    let mut buf = vec![0u8; 8192];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
        .await
        .expect("an answer without waiting for the body")
        .expect("read the answer");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_body_reading_path_refuses_an_over_cap_declared_length_at_once() {
    let relay = Relay::start(TIGHT).await;
    let library = relay
        .post_json("/v1/asset-libraries", json!({"name": "caps"}))
        .await;
    assert_eq!(library.status, 200, "{}", library.text());
    let library = library.json()["id"].as_str().unwrap().to_owned();
    let (key_id, _) = relay.new_key("caps", None).await;
    let key = relay.key.clone();
    let json = "application/json";
    let form = "multipart/form-data; boundary=xyz";
    // (method, path, content type, credential, hard cap of the path)
    let paths: Vec<(&str, String, &str, String, u64)> = vec![
        ("POST", "/v1/videos".into(), json, key.clone(), 4000),
        ("POST", "/v1/videos".into(), form, key.clone(), 8000),
        (
            "POST",
            "/v1/video/generations".into(),
            json,
            key.clone(),
            4000,
        ),
        (
            "POST",
            "/api/generation/video/moderation-result".into(),
            json,
            key.clone(),
            4000,
        ),
        ("POST", "/v1/messages".into(), json, key.clone(), 4000),
        (
            "POST",
            "/v1/messages/count_tokens".into(),
            json,
            key.clone(),
            4000,
        ),
        (
            "POST",
            "/v1/asset-libraries".into(),
            json,
            key.clone(),
            4000,
        ),
        (
            "POST",
            format!("/v1/asset-libraries/{library}/assets"),
            json,
            key.clone(),
            4000,
        ),
        (
            "POST",
            format!("/v1/asset-libraries/{library}/assets"),
            form,
            key.clone(),
            8000,
        ),
        ("POST", "/admin/keys".into(), json, ADMIN_TOKEN.into(), 4000),
        (
            "PATCH",
            format!("/admin/keys/{key_id}"),
            json,
            ADMIN_TOKEN.into(),
            4000,
        ),
    ];
    for (method, path, content_type, credential, hard) in paths {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: relay\r\nauthorization: Bearer {credential}\r\n\
             anthropic-version: 2023-06-01\r\ncontent-type: {content_type}\r\n\
             content-length: {}\r\n\r\n",
            hard + 1
        );
        let answer = declared_only(&relay, head).await;
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "{method} {path} ({content_type}): {answer}"
        );
        assert!(
            answer.contains("Payload Too Large"),
            "{method} {path}: {answer}"
        );
        // Just at the cap is not refused before reading: the relay waits for the body.
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: relay\r\nauthorization: Bearer {credential}\r\n\
             anthropic-version: 2023-06-01\r\ncontent-type: {content_type}\r\n\
             content-length: {hard}\r\n\r\n"
        );
        let mut conn = TcpStream::connect(addr(&relay)).await.expect("connect");
        conn.write_all(head.as_bytes())
            .await
            .expect("send the head");
        let mut buf = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(300), conn.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "{method} {path}: answered before the body at the cap was sent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_format_refuses_four_times_its_limit_plus_more_before_reading() {
    // The embedded default limit (10 MiB): a declared 48 MiB is over 4x and refused at once.
    let relay = Relay::start("").await;
    let head = format!(
        "POST /v1/video/generations HTTP/1.1\r\nhost: relay\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        relay.key,
        4 * 10 * 1024 * 1024 + 8 * 1024 * 1024
    );
    let answer = declared_only(&relay, head).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("Payload Too Large"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_and_closed() {
    let relay = Relay::start(TIGHT).await;
    for (path, content_type, vendor) in [
        ("/v1/videos", "application/json", false),
        ("/v1/videos", "multipart/form-data; boundary=xyz", false),
        ("/v1/messages", "application/json", true),
    ] {
        let mut conn = TcpStream::connect(addr(&relay)).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: relay\r\nauthorization: Bearer {}\r\n\
             anthropic-version: 2023-06-01\r\ncontent-type: {content_type}\r\n\
             content-length: 500\r\n\r\n--xyz\r\n",
            relay.key
        );
        let sent = Instant::now();
        conn.write_all(head.as_bytes()).await.expect("send");
        let answer = read_until_closed(&mut conn, sent + Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("{path}: a stalled body held the connection open"));
        let waited = sent.elapsed();
        assert!(waited >= Duration::from_millis(1900), "{path}: {waited:?}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
        let body: Value = serde_json::from_str(body).expect("a JSON error body");
        if vendor {
            assert_eq!(body["error"]["type"], "timeout_error", "{body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("request body"), "{body}");
        } else {
            assert_eq!(body["error"]["message"], "request timeout", "{body}");
            assert_eq!(body["error"]["param"], "body", "{body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_slow_connections_neither_starve_others_nor_stay() {
    let relay = Relay::start(&format!("{TIGHT}max_connections_per_client = 1500\n")).await;
    let to = addr(&relay);
    // 2,000 connections from one address: 1,500 admitted, holding half a request head, no
    // byte at all, or half an HTTP/2 preface; the rest refused at once.
    let opened = Instant::now();
    let mut slow = Vec::new();
    let mut refused = 0;
    for i in 0..2000 {
        let mut conn = connect_from([127, 0, 0, 2], to).await.expect("connect");
        let partial: &[u8] = match i % 3 {
            0 => b"GET /v1/videos HTTP/1.1\r\nhost: relay\r\n",
            1 => b"",
            _ => b"PRI * HTTP/2.0\r\n",
        };
        if i >= 1500 {
            let answer = read_until_closed(&mut conn, Instant::now() + Duration::from_secs(5))
                .await
                .expect("a refused connection is closed at once");
            assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
            assert!(answer.contains("\"unavailable\""), "{answer}");
            refused += 1;
            continue;
        }
        conn.write_all(partial).await.expect("send half a head");
        slow.push(conn);
    }
    assert_eq!(refused, 500);

    // A normal client is served at once, over and over.
    let mut took = Vec::new();
    for _ in 0..11 {
        let started = Instant::now();
        let res = relay.get("/v1/videos?limit=1").await;
        took.push(started.elapsed());
        assert_eq!(res.status, 200, "{}", res.text());
    }
    took.sort();
    assert!(
        took[took.len() / 2] < Duration::from_millis(100),
        "a normal client waited {:?} (median) beside 1,500 slow ones",
        took[took.len() / 2]
    );

    // Every slow connection is closed by the relay soon after the 2 s head timeout.
    let deadline = opened + Duration::from_secs(2 + 8);
    let mut waits = Vec::new();
    for mut conn in slow {
        waits.push(tokio::spawn(async move {
            read_until_closed(&mut conn, deadline).await.is_some()
        }));
    }
    let mut still_open = 0;
    for wait in waits {
        if !wait.await.expect("join") {
            still_open += 1;
        }
    }
    assert_eq!(
        still_open, 0,
        "slow connections still open 10 s after opening"
    );
    assert!(opened.elapsed() >= Duration::from_millis(1900));

    // Once they are gone, the address may connect again.
    let mut conn = connect_from([127, 0, 0, 2], to).await.expect("connect");
    conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: relay\r\nconnection: close\r\n\r\n")
        .await
        .expect("send");
    let answer = read_until_closed(&mut conn, Instant::now() + Duration::from_secs(5))
        .await
        .expect("answered and closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_total_cap_new_connections_are_refused_and_open_ones_served() {
    let relay = Relay::start("[server]\nmax_connections = 4\n").await;
    let to = addr(&relay);
    // Four keep-alive connections from four addresses fill the relay.
    let mut open = Vec::new();
    for i in 0..4u8 {
        open.push(connect_from([127, 0, 1, i + 1], to).await.expect("connect"));
    }
    let mut fifth = connect_from([127, 0, 1, 9], to).await.expect("connect");
    let answer = read_until_closed(&mut fifth, Instant::now() + Duration::from_secs(5))
        .await
        .expect("refused and closed");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // The open ones are still served.
    for conn in &mut open {
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: relay\r\n\r\n")
            .await
            .expect("send");
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    }
    // Closing one makes room for a new one.
    drop(open.pop());
    // (The relay notices the close a moment later: until then a new one is still refused.)
    let res = crate::harness::poll_until(Duration::from_secs(5), || async {
        let mut conn = connect_from([127, 0, 1, 9], to).await.ok()?;
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: relay\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let answer = read_until_closed(&mut conn, Instant::now() + Duration::from_secs(2)).await?;
        answer.starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
    assert!(res.is_some(), "no room after a connection closed");
}

/// The open connections the relay's metrics count.
async fn open_connections(relay: &Relay) -> usize {
    let res = relay
        .admin(http::Method::GET, "/metrics", crate::harness::Body::Empty)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.text()
        .lines()
        .find_map(|l| l.strip_prefix("relay_open_connections "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("relay_open_connections in the metrics") as usize
}

#[tokio::test]
async fn a_connection_that_sent_nothing_does_not_hold_a_stop() {
    // The default head timeout (20 s): only the stop may close the silent connection in time.
    let relay = Relay::start("").await;
    let mut silent = TcpStream::connect(addr(&relay)).await.expect("connect");
    // Accepted (counted beside the connection the metrics are read on) before the stop.
    crate::harness::poll_until(Duration::from_secs(5), || async {
        (open_connections(&relay).await >= 2).then_some(())
    })
    .await
    .expect("the silent connection accepted");
    let stopping = Instant::now();
    relay.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "the stop waited {:?} for a connection that sent nothing",
        stopping.elapsed()
    );
    let got = read_until_closed(&mut silent, Instant::now() + Duration::from_secs(5))
        .await
        .expect("closed by the stop");
    assert_eq!(got, "");
}

/// The process's CPU time so far, in clock ticks (user and system), from `/proc`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are the 14th and 15th fields of the line, the 12th and 13th after it.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[tokio::test]
async fn connection_threads_go_back_to_sleep_after_spinning() {
    // The longest spin there is, on two connection threads: a thread that never stopped
    // looking for work would keep a core busy.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("relay.toml");
    std::fs::write(&config, "[server]\nworkers = 2\nspin_us = 10000\n").unwrap();
    let relay = crate::harness::start_binary(&dir.path().join("data"), &config).await;
    let pid = relay.child.id().expect("the relay's pid");
    let http = crate::harness::Http::new();
    for _ in 0..200 {
        let res = http
            .send(
                http::Method::GET,
                &format!("{}/healthz", relay.base),
                crate::harness::Body::Empty,
                &[],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
    }
    // Quiet now: within a few seconds the relay spends less than a tenth of a core over half a
    // second (a thread spinning on would spend about a whole one).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = Vec::new();
    loop {
        let before = cpu_ticks(pid);
        // A measured interval, not a wait for something to happen.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let spent = cpu_ticks(pid) - before;
        if spent <= 5 {
            break;
        }
        last.push(spent);
        assert!(
            Instant::now() < deadline,
            "the idle relay kept spending CPU: {last:?} ticks every half second"
        );
    }
}
