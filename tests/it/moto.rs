//! A real S3-compatible server for the S3 tests: moto's server mode, started on a free
//! loopback port for one test and stopped when it is dropped.
//!
//! The Python that runs it is `RELAY_TEST_MOTO_PYTHON` (`cargo xtask ci` sets it to the
//! virtualenv it installs moto into), else `target/moto-venv/bin/python` when it exists, else
//! `python3`. Without moto the S3 tests fail, saying so: they never pass silently.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use http::Method;
use tokio::process::{Child, Command};

use crate::harness::{Body, Http, poll_until};

/// The credentials the tests give the store (moto accepts any).
pub const ACCESS_KEY_ID: &str = "relay-test-key";
pub const SECRET_ACCESS_KEY: &str = "relay-test-secret";
pub const REGION: &str = "us-east-1";

const MISSING: &str = "moto (pip install 'moto[server]') is required for the S3 tests";

/// A moto server; killed on drop.
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    pub client: Http,
    _child: Child,
}

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("RELAY_TEST_MOTO_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/moto-venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

impl Moto {
    /// Starts moto on a free loopback port and waits (with a deadline) until it answers.
    pub async fn start() -> Moto {
        let python = python();
        let probe = Command::new(&python)
            .args(["-c", "import moto.server"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .await;
        match probe {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "{MISSING}: {} cannot import moto.server: {}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("{MISSING}: cannot run {}: {e}", python.display()),
        }
        // A port the system just handed out and took back; moto binds it next.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut child = Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{MISSING}: starting {}: {e}", python.display()));
        let endpoint = format!("http://127.0.0.1:{port}");
        let client = Http::new();
        let ready = poll_until(Duration::from_secs(60), || {
            let (client, url) = (client.clone(), format!("{endpoint}/moto-api/"));
            async move {
                let connects = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok();
                if !connects {
                    return None;
                }
                let res = client.send(Method::GET, &url, Body::Empty, &[]).await;
                (res.status == 200).then_some(())
            }
        })
        .await;
        if ready.is_none() {
            let exited = child.try_wait().ok().flatten();
            panic!("moto did not answer on {endpoint} within 60 s (exited: {exited:?})");
        }
        Moto {
            endpoint,
            client,
            _child: child,
        }
    }

    /// Creates bucket `name` (moto takes unsigned requests).
    pub async fn create_bucket(&self, name: &str) {
        let res = self.raw(Method::PUT, &format!("/{name}")).await;
        assert_eq!(res.status, 200, "creating bucket {name}: {}", res.text());
    }

    /// An unsigned request to the server itself, e.g. `GET /bucket/key` to look behind the
    /// relay's back.
    pub async fn raw(&self, method: Method, path: &str) -> crate::harness::Answer {
        self.client
            .send(
                method,
                &format!("{}{path}", self.endpoint),
                Body::Empty,
                &[],
            )
            .await
    }

    /// The settings of an `S3Blobs` on `bucket` of this server.
    pub fn settings(&self, bucket: &str, prefix: &str, part_bytes: usize) -> store::S3Settings {
        store::S3Settings {
            bucket: bucket.to_owned(),
            endpoint: Some(self.endpoint.clone()),
            region: REGION.to_owned(),
            prefix: prefix.to_owned(),
            access_key_id: ACCESS_KEY_ID.to_owned(),
            secret_access_key: SECRET_ACCESS_KEY.to_owned(),
            session_token: None,
            part_bytes,
        }
    }

    /// The `[blobs]` section of a relay on `bucket` of this server.
    pub fn relay_toml(&self, bucket: &str, prefix: &str, presign: bool) -> String {
        format!(
            "[blobs]\nbackend = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{}\"\nregion = \"{REGION}\"\nprefix = \"{prefix}\"\npresign = {presign}\n",
            self.endpoint
        )
    }

    /// The environment a relay on this server reads its credentials from.
    pub fn relay_env(&self) -> std::collections::HashMap<String, String> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }
}
