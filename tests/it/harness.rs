//! Starting relays, talking HTTP to them, and serving test media.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use server::{App, Config};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Child;
use tokio::sync::oneshot;

pub const ADMIN_TOKEN: &str = "test-admin-token-5f0c9e2b7a1d4386";

/// Test defaults: fast simulated tasks, small frames, local media allowed.
pub const FAST: &str = r#"
[server]
listen = "127.0.0.1:0"
[security]
allow_private_urls = true
url_fetch_timeout_secs = 2
[simulator]
task_secs = 0.3
fps = 6
[limits]
rps = 10000
burst = 10000
poll_rps_per_task = 10000
"#;

/// A relay running in this process.
pub struct Relay {
    pub base: String,
    pub key: String,
    pub client: Http,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub dir: tempfile::TempDir,
    /// The relay's state, for tests that look behind its HTTP API.
    pub app: Arc<App>,
}

impl Relay {
    /// Starts a relay with the test defaults plus `extra` TOML (later keys win).
    pub async fn start(extra: &str) -> Relay {
        let dir = tempfile::tempdir().expect("temp dir");
        Relay::start_in(dir, None, extra).await
    }

    /// Starts a relay on an existing data directory; `key` is its known key (a store that
    /// has keys prints none).
    pub async fn start_in(dir: tempfile::TempDir, key: Option<String>, extra: &str) -> Relay {
        Relay::start_with_env(dir, key, extra, HashMap::new()).await
    }

    /// [`Relay::start_in`] with `env` as the environment variables the relay reads.
    pub async fn start_with_env(
        dir: tempfile::TempDir,
        key: Option<String>,
        extra: &str,
        env: HashMap<String, String>,
    ) -> Relay {
        let text = merge_toml(FAST, extra);
        let data = dir.path().to_owned();
        // A store a test filled and dropped just before may still be locked for a moment by
        // the background flush of the handle it dropped: opening it is tried again until then.
        let end = Instant::now() + Duration::from_secs(10);
        let (app, bootstrap) = loop {
            let config = Config::from_toml(Some(&text), "test config").expect("test config");
            match App::open_with_env(config, &data, Some(ADMIN_TOKEN), &|name| {
                env.get(name).cloned()
            })
            .await
            {
                Ok(opened) => break opened,
                Err(e) if Instant::now() < end && format!("{e:#}").contains("acquire lock") => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("open relay: {e:?}"),
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(server::serve(app.clone(), listener, async {
            let _ = stopped.await;
        }));
        Relay {
            base: format!("http://{addr}"),
            key: key
                .or(bootstrap.first_key)
                .expect("a first key on a new store"),
            client: Http::new(),
            stop: Some(stop),
            done: Some(done),
            dir,
            app,
        }
    }

    /// Stops the relay gracefully and hands back its data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            done.await.expect("serve task").expect("serve result");
        }
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with this relay's key.
    pub async fn call(&self, method: Method, path: &str, body: Body) -> Answer {
        self.call_as(&self.key.clone(), method, path, body, &[])
            .await
    }

    pub async fn call_as(
        &self,
        key: &str,
        method: Method,
        path: &str,
        body: Body,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut all = vec![("authorization", format!("Bearer {key}"))];
        all.extend(headers.iter().map(|(k, v)| (*k, v.to_string())));
        self.client.send(method, &self.url(path), body, &all).await
    }

    /// A request with only `headers`: no key unless they carry one.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Body,
        headers: &[(&str, String)],
    ) -> Answer {
        self.client
            .send(method, &self.url(path), body, headers)
            .await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, Body::Empty).await
    }

    pub async fn post_json(&self, path: &str, json: Value) -> Answer {
        self.call(Method::POST, path, Body::Json(json)).await
    }

    /// Creates a key through the admin API and returns (id, secret).
    pub async fn new_key(&self, name: &str, quota: Option<i64>) -> (String, String) {
        let body = serde_json::json!({"name": name, "group": "gen2", "quota": quota});
        let res = self
            .client
            .send(
                Method::POST,
                &self.url("/admin/keys"),
                Body::Json(body),
                &[("authorization", format!("Bearer {ADMIN_TOKEN}"))],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        let v = res.json();
        (
            v["id"].as_str().unwrap().to_owned(),
            v["key"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn admin(&self, method: Method, path: &str, body: Body) -> Answer {
        self.client
            .send(
                method,
                &self.url(path),
                body,
                &[("authorization", format!("Bearer {ADMIN_TOKEN}"))],
            )
            .await
    }

    /// The entries of the key `key_id`'s ledger, oldest first.
    pub async fn ledger(&self, key_id: &str) -> Vec<Value> {
        let res = self
            .admin(
                Method::GET,
                &format!("/admin/keys/{key_id}/ledger"),
                Body::Empty,
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        match res.json()["data"].as_array() {
            Some(entries) => entries.clone(),
            None => panic!("a ledger without data: {}", res.text()),
        }
    }

    /// Polls a video task until `done(status)` or the deadline.
    pub async fn wait_video(&self, id: &str, deadline: Duration) -> Value {
        self.wait_video_as(&self.key.clone(), id, deadline).await
    }

    pub async fn wait_video_as(&self, key: &str, id: &str, deadline: Duration) -> Value {
        let path = format!("/v1/videos/{id}");
        poll_until(deadline, || async {
            let res = self
                .call_as(key, Method::GET, &path, Body::Empty, &[])
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            let v = res.json();
            let status = v["status"].as_str().unwrap_or_default().to_owned();
            matches!(status.as_str(), "completed" | "failed" | "cancelled").then_some(v)
        })
        .await
        .unwrap_or_else(|| panic!("task {id} did not end within {deadline:?}"))
    }

    /// Polls a second-format task until it is final, as `key`.
    pub async fn wait_generation_as(&self, key: &str, id: &str, deadline: Duration) -> Value {
        let path = format!("/v1/video/generations/{id}");
        poll_until(deadline, || async {
            let res = self
                .call_as(key, Method::GET, &path, Body::Empty, &[])
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            let v = res.json();
            let status = v["status"].as_str().unwrap_or_default().to_owned();
            matches!(status.as_str(), "succeeded" | "failed" | "cancelled").then_some(v)
        })
        .await
        .unwrap_or_else(|| panic!("generation {id} did not end within {deadline:?}"))
    }

    pub async fn wait_generation(&self, id: &str, deadline: Duration) -> Value {
        self.wait_generation_as(&self.key.clone(), id, deadline)
            .await
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Later TOML wins, table by table (tests only use simple tables).
fn merge_toml(base: &str, extra: &str) -> String {
    let mut base: toml_edit_free::Table = toml_edit_free::parse(base);
    let extra = toml_edit_free::parse(extra);
    toml_edit_free::merge(&mut base, extra);
    toml_edit_free::render(&base)
}

/// A tiny table merge over `toml` values, enough for the tests' configs.
mod toml_edit_free {
    pub type Table = toml::Table;

    pub fn parse(text: &str) -> Table {
        toml::from_str(text).expect("test TOML")
    }

    pub fn merge(base: &mut Table, extra: Table) {
        for (k, v) in extra {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(b)), toml::Value::Table(e)) => merge(b, e),
                (_, v) => {
                    base.insert(k, v);
                }
            }
        }
    }

    pub fn render(table: &Table) -> String {
        toml::to_string(table).expect("render TOML")
    }
}

/// Sends `POST /v1/messages` with `body` on a raw connection and returns the connection
/// without reading the answer: the message stays under way until the connection is dropped.
pub async fn message_held_open(
    base: &str,
    secret: &str,
    body: &serde_json::Value,
) -> tokio::net::TcpStream {
    let text = body.to_string();
    let host = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(host)
        .await
        .expect("connect to the relay");
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {secret}\r\n\
         anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{text}",
        text.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut conn, request.as_bytes())
        .await
        .expect("send the message");
    conn
}

/// Polls `f` until it yields a value or `deadline` passes (no sleeps as synchronisation:
/// a short pause between looks only).
pub async fn poll_until<T, F, Fut>(deadline: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub enum Body {
    Empty,
    Json(Value),
    /// A body with this Content-Type (none when empty).
    Raw(String, Vec<u8>),
}

/// A multipart body builder.
pub struct Multipart {
    boundary: String,
    buf: Vec<u8>,
}

impl Multipart {
    pub fn new() -> Multipart {
        Multipart {
            boundary: "relaytestboundary7MA4YWxkTrZu0gW".into(),
            buf: Vec::new(),
        }
    }

    pub fn text(mut self, name: &str, value: &str) -> Multipart {
        self.buf.extend_from_slice(
            format!(
                "--{}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n",
                self.boundary
            )
            .as_bytes(),
        );
        self
    }

    pub fn file(
        mut self,
        name: &str,
        filename: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Multipart {
        self.buf.extend_from_slice(
            format!(
                "--{}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: {content_type}\r\n\r\n",
                self.boundary
            )
            .as_bytes(),
        );
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
        self
    }

    pub fn build(mut self) -> (String, Vec<u8>) {
        self.buf
            .extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        (
            format!("multipart/form-data; boundary={}", self.boundary),
            self.buf,
        )
    }
}

/// A finished answer.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the contract's error shape: status, exact message, code and param.
    pub fn assert_error(&self, status: u16, message: &str, param: Option<&str>) {
        assert_eq!(self.status, status, "{}", self.text());
        let v = self.json();
        assert_eq!(v["error"]["message"], message, "{}", self.text());
        assert_eq!(
            v["error"]["code"],
            message.to_ascii_lowercase().replace(' ', "_"),
            "{}",
            self.text()
        );
        if let Some(param) = param {
            assert_eq!(v["error"]["param"], param, "{}", self.text());
        }
        assert!(
            v["error"]["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{}",
            self.text()
        );
    }
}

/// A pooled HTTP/1 client.
#[derive(Clone)]
pub struct Http {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl Http {
    pub fn new() -> Http {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Body,
        headers: &[(&str, String)],
    ) -> Answer {
        let mut req = Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let bytes = match body {
            Body::Empty => Bytes::new(),
            Body::Json(v) => {
                req = req.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            Body::Raw(ct, bytes) => {
                if !ct.is_empty() {
                    req = req.header("content-type", ct.as_str());
                }
                Bytes::from(bytes)
            }
        };
        let req = req.body(Full::new(bytes)).expect("request");
        let res = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .expect("answer within 30 s")
            .expect("request sent");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        Answer {
            status,
            headers,
            body,
        }
    }
}

/// A local server handing out fixed files by path, for image/audio/video references.
pub struct MediaServer {
    pub base: String,
    _stop: oneshot::Sender<()>,
}

impl MediaServer {
    pub async fn start(files: HashMap<&'static str, (&'static str, Vec<u8>)>) -> MediaServer {
        let files = Arc::new(files);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let (stop, mut stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let files = files.clone();
                        tokio::spawn(async move {
                            let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                                let files = files.clone();
                                async move {
                                    let res = match files.get(req.uri().path()) {
                                        Some((ct, bytes)) => hyper::Response::builder()
                                            .header("content-type", *ct)
                                            .body(Full::new(Bytes::from(bytes.clone()))),
                                        None => hyper::Response::builder()
                                            .status(StatusCode::NOT_FOUND)
                                            .body(Full::new(Bytes::new())),
                                    };
                                    Ok::<_, Infallible>(res.expect("response"))
                                }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
        });
        MediaServer {
            base: format!("http://{addr}"),
            _stop: stop,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// A PNG of the given size.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().expect("png header");
        let data: Vec<u8> = (0..width * height * 3).map(|i| (i % 251) as u8).collect();
        w.write_image_data(&data).expect("png data");
    }
    out
}

/// A minimal WAV header plus silence.
pub fn wav() -> Vec<u8> {
    let mut v = b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x08\x00\x00".to_vec();
    v.extend(std::iter::repeat_n(0u8, 2048));
    v
}

/// The first bytes of an MP4 (an ftyp box) and some padding.
pub fn mp4_head() -> Vec<u8> {
    let mut v = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isommp41".to_vec();
    v.extend(b"\x00\x00\x00\x08free");
    v
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The relay binary, started by [`start_binary`].
pub struct Running {
    pub child: Child,
    pub base: String,
    /// What it printed to stdout up to its bootstrap lines.
    pub lines: Vec<String>,
}

/// Starts the relay binary on port 0 and reads its start-up lines.
pub async fn start_binary(data: &std::path::Path, config: &std::path::Path) -> Running {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .env("RELAY_ADMIN_TOKEN", "restart-admin-token-5f0c9e2b7a1d4386")
        .env("RELAY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start the relay binary");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout).lines();
    let mut lines = Vec::new();
    let mut base = None;
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = reader.next_line().await {
            let done = line.starts_with("relay listening on ");
            if done {
                base = line.strip_prefix("relay listening on ").map(str::to_owned);
            }
            lines.push(line);
            if done {
                // The bootstrap lines follow the listening line; give them a moment to arrive.
                while let Ok(Ok(Some(line))) =
                    tokio::time::timeout(Duration::from_millis(300), reader.next_line()).await
                {
                    lines.push(line);
                }
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the relay did not start: {lines:?}");
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = reader.next_line().await {} });
    Running {
        child,
        base: base.expect("a listening line"),
        lines,
    }
}
