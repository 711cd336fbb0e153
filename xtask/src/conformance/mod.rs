//! `cargo xtask conformance`: a black-box check of a running relay against SPEC.md and
//! CONTRACT.md. One line per check, `ok <section> <name>` or
//! `FAIL <section> <name>: expected X, got Y`, then `N passed, N failed`.

mod checks;
pub mod ci;
pub mod client;
mod flows;

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use checks::Verdict;
use client::{Client, Req, Resp};
use server::router::route_table;

pub const USAGE: &str =
    "cargo xtask conformance --base-url URL --key KEY [--key-group2 KEY] [--admin-token T]
                        [--max-body-bytes N] [--task-timeout-secs N]

  --key                an API key of group gen2 (the relay's first key is one)
  --key-group2         a key of group motion: cross-family and group checks
  --admin-token        the admin token: admin paths, 429 with a rate-limited key
  --max-body-bytes     the relay's [server] max_body_bytes (default 10485760)
  --task-timeout-secs  the relay's [tasks] timeout_secs; the timeout check runs when it is <= 20";

/// A 1x1 PNG.
pub const PNG_1X1: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0x60, 0xf8, 0x5f,
    0x0f, 0x00, 0x02, 0x87, 0x01, 0x80, 0xeb, 0x47, 0xba, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const PUBLIC: &[&str] = &["/healthz", "/readyz", "/openapi.yaml", "/files/{path}"];
const MESSAGES_PATHS: &[&str] = &[
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
    "/v1/models/{model_id}",
];

#[derive(Debug, Clone)]
pub struct Args {
    pub base_url: String,
    pub key: String,
    pub key_group2: Option<String>,
    pub admin_token: Option<String>,
    pub max_body_bytes: usize,
    pub task_timeout_secs: Option<u64>,
}

impl Args {
    pub fn parse(args: &[String]) -> anyhow::Result<Args> {
        let mut out = Args {
            base_url: String::new(),
            key: String::new(),
            key_group2: None,
            admin_token: None,
            max_body_bytes: 10 << 20,
            task_timeout_secs: None,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .with_context(|| format!("{flag} needs a value\n{USAGE}"))
            };
            match flag.as_str() {
                "--base-url" => out.base_url = value()?,
                "--key" => out.key = value()?,
                "--key-group2" => out.key_group2 = Some(value()?),
                "--admin-token" => out.admin_token = Some(value()?),
                "--max-body-bytes" => out.max_body_bytes = value()?.parse()?,
                "--task-timeout-secs" => out.task_timeout_secs = Some(value()?.parse()?),
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if out.base_url.is_empty() || out.key.is_empty() {
            bail!("--base-url and --key are required\n{USAGE}");
        }
        Ok(out)
    }
}

/// Runs the suite; `Ok(true)` when every check passed.
pub fn main(args: &[String]) -> anyhow::Result<bool> {
    let args = Args::parse(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut suite = Suite::new(args)?;
        suite.run().await;
        println!("{} passed, {} failed", suite.passed, suite.failed);
        Ok(suite.failed == 0)
    })
}

pub struct Suite {
    client: Client,
    args: Args,
    passed: usize,
    /// Every line printed, for the suite's own tests.
    lines: Vec<String>,
    failed: usize,
}

impl Suite {
    fn new(args: Args) -> anyhow::Result<Suite> {
        Ok(Suite {
            client: Client::new(&args.base_url)?,
            args,
            passed: 0,
            failed: 0,
            lines: Vec::new(),
        })
    }

    /// Records one check.
    fn check(&mut self, section: &str, name: &str, verdict: Verdict) -> bool {
        match verdict {
            Ok(()) => {
                self.passed += 1;
                self.say(format!("ok {section} {name}"));
                true
            }
            Err(why) => {
                self.failed += 1;
                self.say(format!("FAIL {section} {name}: {why}"));
                false
            }
        }
    }

    fn say(&mut self, line: String) {
        println!("{line}");
        self.lines.push(line);
    }

    fn skip(&mut self, section: &str, name: &str, why: &str) {
        self.say(format!("skip {section} {name}: {why}"));
    }

    /// Sends, waiting out 429s; a transport failure becomes a `599` answer naming it.
    async fn send(&self, req: Req) -> Resp {
        into_resp(self.client.send(req).await)
    }

    async fn send_once(&self, req: Req) -> Resp {
        into_resp(self.client.send_once(req).await)
    }

    async fn run(&mut self) {
        self.public().await;
        self.auth().await;
        self.routing().await;
        flows::first_format_errors(self).await;
        flows::first_format_flows(self).await;
        flows::second_format(self).await;
        flows::messages(self).await;
        flows::billing(self).await;
        self.rate_limits().await;
    }

    async fn public(&mut self) {
        let s = "CONTRACT§0";
        let r = self.send(Req::get("/healthz")).await;
        self.check(s, "healthz needs no key", checks::status(&r, 200));
        let r = self.send(Req::get("/readyz")).await;
        self.check(s, "readyz needs no key", checks::status(&r, 200));
        let r = self.send(Req::get("/openapi.yaml")).await;
        let v = checks::status(&r, 200).and_then(|()| {
            let text = String::from_utf8_lossy(&r.body);
            if !text.starts_with("openapi: 3.1") {
                return Err(format!(
                    "expected an OpenAPI 3.1 document, got {}",
                    r.describe()
                ));
            }
            match route_table()
                .iter()
                .find(|(_, p)| !text.contains(&format!("\n  {p}:\n")))
            {
                Some((m, p)) => Err(format!("expected path {m} {p} in the document, got none")),
                None => Ok(()),
            }
        });
        self.check(s, "openapi.yaml served and lists every route", v);
        let r = self
            .send(Req::get("/files/gen_x/video.mp4?expires=9999999999&sig=00"))
            .await;
        self.check(
            "CONTRACT§2.3",
            "files with a bad signature is 404",
            checks::api_error(&r, 404, "not found"),
        );
        let r = self
            .send(Req::get("/healthz").header("x-request-id", "conformance-req-1"))
            .await;
        let v = checks::header(&r, "x-request-id", "conformance-req-1")
            .and_then(|()| checks::header(&r, "request-id", "conformance-req-1"));
        self.check("CONTRACT§0.1a", "request id echoed", v);
        let r = self
            .send(Req::get("/v1/videos").bearer(&self.args.key.clone()))
            .await;
        let v = match (r.header("x-request-id"), r.header("request-id")) {
            (Some(a), Some(b)) if a == b && !a.is_empty() => Ok(()),
            other => Err(format!(
                "expected equal x-request-id and request-id, got {other:?}"
            )),
        };
        self.check("CONTRACT§0.1a", "request id generated", v);
    }

    async fn auth(&mut self) {
        let s = "SPEC§5";
        for (method, template) in route_table() {
            if PUBLIC.contains(template) {
                continue;
            }
            let path = concrete(template);
            let messages = MESSAGES_PATHS.contains(template);
            let expect = |r: &Resp| {
                if messages {
                    checks::vendor_error(
                        r,
                        401,
                        "authentication_error",
                        |m| m == "unauthorized",
                        "\"unauthorized\"",
                    )
                } else {
                    checks::api_error(r, 401, "unauthorized")
                }
            };
            let req = || {
                let mut r = Req::new(method.parse().unwrap_or_default(), path.clone());
                if *method != "GET" && *method != "DELETE" {
                    r = r.json(&serde_json::json!({}));
                }
                r.header("vendor-version", "2023-06-01")
            };
            let r = self.send(req()).await;
            self.check(
                s,
                &format!("{method} {template} without a key is 401"),
                expect(&r),
            );
            let r = self.send(req().bearer("sk-relay-not-a-key")).await;
            self.check(
                s,
                &format!("{method} {template} with a wrong key is 401"),
                expect(&r),
            );
            if template.starts_with("/admin") {
                let r = self.send(req().bearer(&self.args.key.clone())).await;
                self.check(
                    "CONTRACT§0",
                    &format!("{method} {template} with an API key is 401"),
                    expect(&r),
                );
            } else if let Some(admin) = self.args.admin_token.clone() {
                let r = self.send(req().bearer(&admin)).await;
                self.check(
                    "CONTRACT§0",
                    &format!("{method} {template} with the admin token is 401"),
                    expect(&r),
                );
            }
            if messages {
                let r = self
                    .send(req().header("x-api-key", "sk-relay-not-a-key"))
                    .await;
                self.check(
                    s,
                    &format!("{method} {template} with a wrong x-api-key is 401"),
                    expect(&r),
                );
            } else if !template.starts_with("/admin") {
                // x-api-key is only read on the messages endpoints.
                let r = self
                    .send(req().header("x-api-key", &self.args.key.clone()))
                    .await;
                self.check(
                    s,
                    &format!("{method} {template} with x-api-key only is 401"),
                    expect(&r),
                );
            }
        }
        if let Some(admin) = self.args.admin_token.clone() {
            let r = self.send(Req::get("/admin/keys").bearer(&admin)).await;
            self.check(
                "CONTRACT§5.2",
                "admin token lists keys",
                checks::field(&r, "/object", &serde_json::json!("list")),
            );
        } else {
            self.skip("CONTRACT§5.2", "admin token lists keys", "no --admin-token");
        }
    }

    async fn routing(&mut self) {
        let s = "CONTRACT§0.2";
        let key = self.args.key.clone();
        let r = self.send(Req::get("/v1/no-such-route").bearer(&key)).await;
        self.check(
            s,
            "unknown route is 404 not found",
            checks::api_error(&r, 404, "not found"),
        );
        let r = self
            .send(Req::new(http::Method::PUT, "/v1/videos").bearer(&key))
            .await;
        let v = checks::api_error(&r, 405, "method not allowed")
            .and_then(|()| checks::header(&r, "allow", "GET, POST"));
        self.check(s, "wrong method is 405 with Allow", v);
        let r = self
            .send(Req::get("/v1/videos/video_nope").bearer(&key))
            .await;
        self.check(
            s,
            "unknown task is 404 not found",
            checks::api_error(&r, 404, "not found"),
        );
    }

    async fn rate_limits(&mut self) {
        let s = "SPEC§7";
        let Some(admin) = self.args.admin_token.clone() else {
            self.skip(
                s,
                "429 rate limited",
                "no --admin-token to make a rate-limited key",
            );
            return;
        };
        let r = self
            .send(
                Req::post("/admin/keys")
                    .bearer(&admin)
                    .json(&serde_json::json!({
                        "name": "conformance-limited", "group": "gen2",
                        "rate_limit": {"rps": 1, "burst": 2}
                    })),
            )
            .await;
        let (Some(id), Some(key)) = (
            r.json()["id"].as_str().map(str::to_owned),
            r.json()["key"].as_str().map(str::to_owned),
        ) else {
            self.check(
                s,
                "create a rate-limited key",
                Err(format!("expected a key, got {}", r.describe())),
            );
            return;
        };
        let mut limited = None;
        for _ in 0..6 {
            let r = self.send_once(Req::get("/v1/videos").bearer(&key)).await;
            if r.status == StatusCode::TOO_MANY_REQUESTS {
                limited = Some(r);
                break;
            }
        }
        let v = match &limited {
            Some(r) => checks::api_error(r, 429, "rate limited").and_then(|()| {
                match r.header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
                    Some(n) if (1..120).contains(&n) && r.header("retry-after-ms").is_some() => {
                        Ok(())
                    }
                    other => Err(format!(
                        "expected retry-after 1..119 seconds and retry-after-ms, got {other:?}"
                    )),
                }
            }),
            None => Err("expected 429 rate limited within 6 requests at burst 2, got none".into()),
        };
        self.check(s, "429 rate limited with retry-after", v);
        let r = self
            .send_once(
                Req::post("/v1/messages")
                    .header("x-api-key", &key)
                    .header("vendor-version", "2023-06-01")
                    .json(&serde_json::json!({"model": "sim-chat", "max_tokens": 5,
                        "messages": [{"role": "user", "content": "hi"}]})),
            )
            .await;
        self.check(
            "CONTRACT§0.1",
            "429 on messages in the vendor shape",
            checks::vendor_error(
                &r,
                429,
                "rate_limit_error",
                |m| m == "rate limited",
                "\"rate limited\"",
            ),
        );
        let r = self
            .send(Req::new(http::Method::DELETE, format!("/admin/keys/{id}")).bearer(&admin))
            .await;
        self.check("CONTRACT§5.2", "revoke a key", checks::status(&r, 200));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let r = self.send(Req::get("/v1/videos").bearer(&key)).await;
        self.check(
            "CONTRACT§0",
            "a revoked key is 401",
            checks::api_error(&r, 401, "unauthorized"),
        );
    }
}

fn into_resp(result: anyhow::Result<Resp>) -> Resp {
    result.unwrap_or_else(|e| Resp {
        status: StatusCode::from_u16(599).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        headers: HeaderMap::new(),
        body: Bytes::from(format!("(no answer: {e:#})")),
    })
}

/// A path template with its parameters filled in.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|s| {
            if s.starts_with('{') {
                "conformance_x"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    /// A fake relay on loopback whose every answer is `status` with `body`.
    async fn fake(status: u16, body: impl Into<Bytes>) -> String {
        let body: Bytes = body.into();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let body = body.clone();
                        async move {
                            let mut res = http::Response::new(Full::new(body));
                            *res.status_mut() = StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(res)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn suite(base: String) -> Suite {
        Suite::new(Args {
            base_url: base,
            key: "sk-relay-test".into(),
            key_group2: None,
            admin_token: None,
            max_body_bytes: 1024,
            task_timeout_secs: None,
        })
        .unwrap()
    }

    const UNAUTHORIZED: &str = r#"{"error":{"code":"unauthorized","message":"unauthorized","param":null,"detail":"no key","type":"authentication_error"}}"#;

    #[tokio::test]
    async fn a_wrong_message_fails_with_a_clear_line() {
        // The rule: a missing key is `401 unauthorized`. This relay says "Unauthorized".
        let wrong = UNAUTHORIZED.replace(
            "\"message\":\"unauthorized\"",
            "\"message\":\"Unauthorized\"",
        );
        let mut s = suite(fake(401, wrong).await);
        s.auth().await;
        assert_eq!(s.passed, 0);
        assert!(s.failed > 0);
        let line = s
            .lines
            .iter()
            .find(|l| l.starts_with("FAIL SPEC§5 POST /v1/videos without a key is 401: "))
            .expect("a FAIL line for POST /v1/videos");
        assert!(
            line.contains(r#"expected 401 "unauthorized", got 401 {"#)
                && line.contains("Unauthorized"),
            "{line}"
        );
    }

    #[tokio::test]
    async fn a_wrong_status_fails_and_a_right_answer_passes() {
        let mut s = suite(fake(403, UNAUTHORIZED).await);
        s.routing().await;
        assert_eq!((s.passed, s.failed), (0, 3), "{:?}", s.lines);
        assert!(s.lines[0].starts_with(
            "FAIL CONTRACT§0.2 unknown route is 404 not found: expected 404 \"not found\", got 403"
        ));

        let mut s = suite(fake(401, UNAUTHORIZED).await);
        let r = s.send(Req::post("/v1/videos")).await;
        let verdict = checks::api_error(&r, 401, "unauthorized");
        assert!(s.check("SPEC§5", "right answer", verdict));
        assert_eq!(s.lines, ["ok SPEC§5 right answer"]);
    }
}
