//! A paying tenant trying to hurt the others, as an abuser would: polls of made-up ids,
//! guessed keys and admin tokens, a weak admin token, thousands of file parts in one upload,
//! and an oversized request head.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

use crate::harness::{ADMIN_TOKEN, Body, Relay};

/// The contract's default limits (the test harness lifts them).
const DEFAULT_LIMITS: &str = "[limits]\nrps = 10\nburst = 20\npoll_rps_per_task = 2\n";

fn addr(relay: &Relay) -> SocketAddr {
    relay
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the relay's address")
}

/// A connection to `to` from the loopback address `from` (a client of its own).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(to).await.expect("connect")
}

/// An answer read off a raw connection.
#[derive(Debug)]
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Everything `conn` receives until it is closed (at most 10 s), as an answer.
async fn read_answer(mut conn: TcpStream) -> Raw {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 8192];
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection stayed open");
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    Raw {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// One request from the loopback address `from`, on a connection of its own.
async fn send_from(
    from: [u8; 4],
    relay: &Relay,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Raw {
    let mut conn = connect_from(from, addr(relay)).await;
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: relay\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method == "POST" {
        request.push_str("content-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
    } else {
        request.push_str("\r\n");
    }
    conn.write_all(request.as_bytes()).await.expect("send");
    read_answer(conn).await
}

fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

/// A wrong key whose first 14 characters (its prefix scope) differ for every `n`.
fn wrong_key(n: usize) -> String {
    format!("sk-relay-{n:05}{}", "0".repeat(59))
}

/// 300 polls of made-up ids from one key at the default limits: its first 20 (the burst) and
/// what refills at 10/s are looked up (404), the rest are 429; no bucket is made per id; and
/// another key is served meanwhile and after, as is the same key's other work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_made_up_ids_spend_the_keys_budget_and_make_nothing_per_id() {
    let relay = Relay::start(DEFAULT_LIMITS).await;
    let (_, other) = relay.new_key("bystander", None).await;
    let routes = [
        "/v1/videos/video_",
        "/v1/video/generations/cgt-",
        "/v1/assets/asset-",
    ];
    let start = Instant::now();
    let (mut looked_up, mut refused) = (0u32, 0u32);
    let mut first_refused = None;
    for n in 0..300usize {
        let path = format!("{}madeup{n:05}", routes[n % routes.len()]);
        let res = relay.get(&path).await;
        match res.status {
            404 => looked_up += 1,
            429 => {
                refused += 1;
                first_refused.get_or_insert(n);
                res.assert_error(429, "rate limited", None);
                let secs: u64 = res.header("retry-after").unwrap().parse().unwrap();
                assert!((1..120).contains(&secs), "{secs}");
            }
            other => panic!("unexpected {other} for {path}: {}", res.text()),
        }
        if n % 50 == 0 {
            // Another key is served all along.
            let res = relay
                .call_as(&other, Method::GET, "/v1/videos", Body::Empty, &[])
                .await;
            assert_eq!(res.status, 200, "another key: {}", res.text());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // The key's poll burst, plus what refilled while the loop ran.
    let budget = 20 + (elapsed * 10.0).ceil() as u32;
    assert!(
        (20..=budget).contains(&looked_up),
        "{looked_up} made-up polls looked up in {elapsed:.2} s; the key's budget is {budget}"
    );
    assert!(
        first_refused.is_some_and(|n| (20..=budget as usize).contains(&n)),
        "the first 429 at poll {first_refused:?}"
    );
    assert_eq!(looked_up + refused, 300);
    // Nothing was made per id: the flooder's poll bucket and the bystander's request bucket
    // (fewer if the timed sweep forgot the bystander's, full again, meanwhile).
    let (keys, tasks) = relay.app.limiter.buckets();
    assert!(
        keys <= 2 && tasks == 0,
        "buckets after 300 made-up ids: {keys}, {tasks}"
    );

    // The flooding key's other requests have a budget of their own.
    assert_eq!(relay.get("/v1/videos").await.status, 200);
    // The bystander's own task: its polls pass, and make one task bucket.
    let res = relay
        .call_as(
            &other,
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let res = relay
        .call_as(
            &other,
            Method::GET,
            &format!("/v1/videos/{id}"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(relay.app.limiter.buckets().1, 1);

    let metrics = relay.admin(Method::GET, "/metrics", Body::Empty).await;
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    let line = format!("relay_rate_limited_total{{scope=\"key_poll\"}} {refused}");
    assert!(text.contains(&line), "{line} not in\n{text}");
    assert!(
        text.contains("relay_rate_limit_buckets{kind=\"task\"}"),
        "{text}"
    );
}

/// 25 wrong keys from one address: 401 for the first 20 (the default threshold), 429 with
/// `retry-after` after it, for any credential from that address, on every path that takes
/// one; another address is served; the failures are counted in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_from_one_address_get_429_after_the_threshold() {
    let relay = Relay::start("").await;
    let guesser = [127, 0, 0, 1];
    let mut statuses = Vec::new();
    for n in 0..25 {
        let res = send_from(
            guesser,
            &relay,
            "GET",
            "/v1/videos",
            &[("authorization", &bearer(&wrong_key(n)))],
        )
        .await;
        if res.status == 429 {
            let v = res.json();
            assert_eq!(v["error"]["message"], "rate limited", "{}", res.body);
            assert_eq!(v["error"]["type"], "rate_limit_error", "{}", res.body);
            let secs: u64 = res.header("retry-after").unwrap().parse().unwrap();
            // One try comes back every 6 s (10 a minute).
            assert!((1..=6).contains(&secs), "retry-after {secs}");
            assert!(res.header("retry-after-ms").is_some());
        }
        statuses.push(res.status);
    }
    assert_eq!(statuses[..20], [401; 20], "{statuses:?}");
    assert_eq!(statuses[20..], [429; 5], "{statuses:?}");
    // The address has no tries left: its requests are refused before their credential is
    // read, the right key's too, and on the messages path in the vendor's shape.
    let right = send_from(
        guesser,
        &relay,
        "GET",
        "/v1/videos",
        &[("authorization", &bearer(&relay.key))],
    )
    .await;
    assert_eq!(right.status, 429, "{}", right.body);
    let messages = send_from(
        guesser,
        &relay,
        "POST",
        "/v1/messages",
        &[
            ("x-api-key", &wrong_key(99)),
            ("anthropic-version", "2023-06-01"),
        ],
    )
    .await;
    assert_eq!(messages.status, 429, "{}", messages.body);
    let v = messages.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
    assert_eq!(v["error"]["message"], "rate limited", "{v}");
    assert!(messages.header("retry-after").is_some());

    // Another address is unaffected: its right key is served, its wrong one is a 401.
    let other = [127, 0, 0, 2];
    let res = send_from(
        other,
        &relay,
        "GET",
        "/v1/videos",
        &[("authorization", &bearer(&relay.key))],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.body);
    let res = send_from(
        other,
        &relay,
        "GET",
        "/v1/videos",
        &[("authorization", &bearer(&wrong_key(500)))],
    )
    .await;
    assert_eq!(res.status, 401, "{}", res.body);

    // Wrong admin tokens alike, from a third address.
    let admin_guesser = [127, 0, 0, 3];
    let mut statuses = Vec::new();
    for n in 0..22 {
        let guess = format!("adm-relay-{n:04}-guess-0123456789abcdef");
        let res = send_from(
            admin_guesser,
            &relay,
            "GET",
            "/admin/keys",
            &[("authorization", &bearer(&guess))],
        )
        .await;
        statuses.push(res.status);
    }
    assert_eq!(statuses[..20], [401; 20], "{statuses:?}");
    assert_eq!(statuses[20..], [429; 2], "{statuses:?}");
    let res = send_from(
        admin_guesser,
        &relay,
        "GET",
        "/metrics",
        &[("authorization", &bearer(ADMIN_TOKEN))],
    )
    .await;
    assert_eq!(res.status, 429, "{}", res.body);

    // Counted: 21 API keys (20 and the other address's one), 20 admin tokens; 5 + 1 + 1 + 2
    // + 1 requests refused for their source's failures.
    let res = send_from(
        [127, 0, 0, 4],
        &relay,
        "GET",
        "/metrics",
        &[("authorization", &bearer(ADMIN_TOKEN))],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.body);
    for line in [
        "relay_auth_failures_total{credential=\"api_key\"} 21",
        "relay_auth_failures_total{credential=\"admin\"} 20",
        "relay_rate_limited_total{scope=\"auth_failures\"} 10",
    ] {
        assert!(res.body.contains(line), "{line} not in\n{}", res.body);
    }
}

/// One credential prefix guessed from many addresses runs out of tries too; another prefix
/// from the same address does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_prefix_guessed_from_many_addresses_gets_429() {
    let relay = Relay::start("[limits]\nauth_failures_burst = 5\n").await;
    let prefix = "sk-relay-7f3a9";
    for n in 0..5u8 {
        let guess = format!("{prefix}{n:060}");
        let res = send_from(
            [127, 0, 1, n + 1],
            &relay,
            "GET",
            "/v1/videos",
            &[("authorization", &bearer(&guess))],
        )
        .await;
        assert_eq!(res.status, 401, "{}", res.body);
    }
    let fresh = [127, 0, 2, 1];
    let same = format!("{prefix}{}", "1".repeat(60));
    let res = send_from(
        fresh,
        &relay,
        "GET",
        "/v1/videos",
        &[("authorization", &bearer(&same))],
    )
    .await;
    assert_eq!(res.status, 429, "{}", res.body);
    let res = send_from(
        fresh,
        &relay,
        "GET",
        "/v1/videos",
        &[("authorization", &bearer(&wrong_key(4242)))],
    )
    .await;
    assert_eq!(res.status, 401, "{}", res.body);
}

/// The relay binary on port 0 over `data`, with `admin_token` and `RELAY_LOG=warn`, its
/// stderr piped.
fn relay_binary(data: &std::path::Path, admin_token: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"));
    command
        .arg("--data-dir")
        .arg(data)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env("RELAY_ADMIN_TOKEN", admin_token)
        .env("RELAY_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// `RELAY_ADMIN_TOKEN=admin`: the relay refuses to start, saying why and how to make one,
/// before it touches its data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_with_a_weak_admin_token_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    for weak in ["admin", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"] {
        let out = tokio::time::timeout(Duration::from_secs(30), relay_binary(&data, weak).output())
            .await
            .expect("the relay exits at once")
            .expect("run the relay");
        assert!(
            !out.status.success(),
            "a relay started with the token {weak:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("RELAY_ADMIN_TOKEN is too weak")
                && stderr.contains("at least 32 characters")
                && stderr.contains("openssl rand -hex 32"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("aaaaaaaaaa"),
            "the token is shown: {stderr}"
        );
        assert!(!data.exists(), "the data directory was made");
    }
}

/// Failed authentications are logged at WARN with the address and a short prefix of the
/// credential, at most once every 10 s (the others at DEBUG).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_authentications_are_logged_with_the_address_and_rate_limited() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = relay_binary(
        &dir.path().join("data"),
        "log-test-admin-token-5f0c9e2b7a1d4386",
    )
    .spawn()
    .expect("start the relay binary");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let base = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(base) = line.strip_prefix("relay listening on ") {
                return base.to_owned();
            }
        }
        panic!("the relay did not start");
    })
    .await
    .expect("the relay starts");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let to: SocketAddr = base.trim_start_matches("http://").parse().expect("address");
    let secret = "sk-relay-deadbeefcafe0123456789abcdef0123456789abcdef0123456789abcd";
    for _ in 0..3 {
        let mut conn = connect_from([127, 0, 0, 9], to).await;
        let request = format!(
            "GET /v1/videos HTTP/1.1\r\nhost: relay\r\nconnection: close\r\nauthorization: Bearer {secret}\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.expect("send");
        assert_eq!(read_answer(conn).await.status, 401);
    }
    child.start_kill().expect("stop the relay");
    let mut stderr = String::new();
    let mut err = child.stderr.take().expect("stderr");
    tokio::time::timeout(Duration::from_secs(10), err.read_to_string(&mut stderr))
        .await
        .expect("stderr ends")
        .expect("read stderr");
    let logged: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("authentication failed"))
        .collect();
    assert_eq!(
        logged.len(),
        1,
        "one WARN line for three failures: {stderr}"
    );
    let line = logged[0];
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("127.0.0.9"), "{line}");
    assert!(line.contains("\"sk-relay\""), "{line}");
    assert!(
        !line.contains("deadbeef"),
        "more than a short prefix: {line}"
    );
    let _ = child.wait().await;
}

/// A multipart body of 10,000 file parts: refused `413` at the 17th part (the default
/// `server.max_upload_files`), which the relay answers before the client has sent the rest,
/// so the parts after it are never even received; nothing is left in the temporary files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_file_parts_are_refused_without_making_them() {
    let relay = Relay::start("").await;
    let part = |n: usize| {
        format!(
            "--b0undary\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"{n}.png\"\r\n\
             Content-Type: image/png\r\n\r\nnot a png {n}\r\n"
        )
    };
    let all: String = (0..10_000).map(part).collect();
    let total = all.len() + "--b0undary--\r\n".len();
    // The head and the first 20 parts; the other 9,980 are held back.
    let sent: String = (0..20).map(part).collect();
    let mut conn = TcpStream::connect(addr(&relay)).await.expect("connect");
    let head = format!(
        "POST /v1/videos HTTP/1.1\r\nhost: relay\r\nauthorization: Bearer {}\r\n\
         content-type: multipart/form-data; boundary=b0undary\r\ncontent-length: {total}\r\n\r\n",
        relay.key
    );
    conn.write_all(head.as_bytes())
        .await
        .expect("send the head");
    conn.write_all(sent.as_bytes())
        .await
        .expect("send 20 parts");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&got).contains("}}") {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "no answer while the rest of the body is held back"
    );
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["error"]["message"], "Payload Too Large", "{v}");
    assert_eq!(v["error"]["param"], "input_reference", "{v}");
    let detail = v["error"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("at most 16 file parts (server.max_upload_files)"),
        "{detail}"
    );
    let tmp = relay.dir.path().join("files").join("tmp");
    let left = std::fs::read_dir(&tmp).map_or(0, |d| d.count());
    assert_eq!(left, 0, "temporary files left in {}", tmp.display());
}

/// A head of `len` bytes (one long header) on a raw connection: the answer's status line.
async fn head_of(relay: &Relay, len: usize) -> String {
    let mut conn = TcpStream::connect(addr(relay)).await.expect("connect");
    let start = "GET /healthz HTTP/1.1\r\nhost: relay\r\nx-padding: ";
    let pad = len - start.len() - 4;
    let head = format!("{start}{}\r\n\r\n", "a".repeat(pad));
    // Written in a task of its own: the relay may answer (and close) before it took it all.
    let (mut read, mut write) = conn.split();
    let (_, answer) = tokio::join!(
        async move {
            let _ = write.write_all(head.as_bytes()).await;
        },
        async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(10), async {
                while !got.windows(2).any(|w| w == b"\r\n") {
                    match read.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
            })
            .await;
            String::from_utf8_lossy(&got).into_owned()
        }
    );
    answer.lines().next().unwrap_or_default().to_owned()
}

/// A 100 KiB request head is answered `431` (the default `server.max_head_bytes` is 64 KiB);
/// a 60 KiB one is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_limit_gets_431() {
    let relay = Relay::start("").await;
    let status = head_of(&relay, 100 * 1024).await;
    assert!(status.starts_with("HTTP/1.1 431"), "{status:?}");
    let status = head_of(&relay, 60 * 1024).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    // A relay with a larger limit takes the 100 KiB head.
    let large = Relay::start("[server]\nmax_head_bytes = 262144\n").await;
    let status = head_of(&large, 100 * 1024).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
}

/// Over HTTP/2, a header list over `server.max_head_bytes` is refused on its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_header_list_over_the_limit_is_refused() {
    let relay = Relay::start("").await;
    let stream = TcpStream::connect(addr(&relay)).await.expect("connect");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    let request = |padding: usize| {
        http::Request::get(format!("{}/healthz", relay.base))
            .header("x-padding", "a".repeat(padding))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request")
    };
    let small = sender
        .send_request(request(1024))
        .await
        .expect("a small head");
    assert_eq!(small.status(), 200);
    match sender.send_request(request(100 * 1024)).await {
        Ok(res) => assert_eq!(res.status(), 431),
        Err(e) => panic!("{e:?}"),
    }
}
