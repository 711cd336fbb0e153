//! Who may call what: the public paths and the OpenAPI document, a key on every route of
//! the server's route table (none, wrong, the admin token, `x-api-key`), routing faults, rate
//! limits and a revoked key.

use std::time::Duration;

use http::StatusCode;
use server::router::route_table;

use crate::conformance::checks;
use crate::conformance::client::{Req, Resp};
use crate::conformance::suite::Suite;

const PUBLIC: &[&str] = &[
    "/healthz",
    "/readyz",
    "/openapi.yaml",
    "/files/{path}",
    "/console",
    "/console/",
    "/console/{file}",
    // An upstream's callback: its own token, not a key (tests/it/upstreams/ark.rs,
    // tests/it/kling.rs, tests/it/minimax.rs, tests/it/vidu.rs).
    "/callbacks/ark/{channel}",
    "/callbacks/kling/{channel}",
    "/callbacks/minimax/{channel}",
    "/callbacks/vidu/{channel}",
];
const MESSAGES_PATHS: &[&str] = &[
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/models",
    "/v1/models/{model_id}",
    "/v1/messages/batches",
    "/v1/messages/batches/{message_batch_id}",
    "/v1/messages/batches/{message_batch_id}/cancel",
    "/v1/messages/batches/{message_batch_id}/results",
];

pub async fn public(suite: &mut Suite) {
    let s = "CONTRACT§0";
    let r = suite.send(Req::get("/healthz")).await;
    suite.check(s, "healthz needs no key", checks::status(&r, 200));
    let r = suite.send(Req::get("/readyz")).await;
    suite.check(s, "readyz needs no key", checks::status(&r, 200));
    let r = suite.send(Req::get("/openapi.yaml")).await;
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
    suite.check(s, "openapi.yaml served and lists every route", v);
    for path in ["/console", "/console/"] {
        let r = suite.send(Req::get(path)).await;
        let v = checks::status(&r, 200).and_then(|()| {
            match (
                r.header("content-type"),
                r.header("content-security-policy"),
            ) {
                (Some(t), Some(csp))
                    if t.starts_with("text/html") && csp.contains("default-src 'none'") =>
                {
                    Ok(())
                }
                other => Err(format!(
                    "expected an HTML page with a strict Content-Security-Policy, got {other:?}"
                )),
            }
        });
        suite.check(s, &format!("{path}: the console's page needs no key"), v);
    }
    let r = suite.send(Req::get("/console/no-such-file.js")).await;
    suite.check(
        s,
        "an unknown console file is 404",
        checks::api_error(&r, 404, "not found"),
    );
    let r = suite
        .send(Req::get("/files/gen_x/video.mp4?expires=9999999999&sig=00"))
        .await;
    suite.check(
        "CONTRACT§2.3",
        "files with a bad signature is 404",
        checks::api_error(&r, 404, "not found"),
    );
    let r = suite
        .send(Req::get("/healthz").header("x-request-id", "conformance-req-1"))
        .await;
    let v = checks::header(&r, "x-request-id", "conformance-req-1")
        .and_then(|()| checks::header(&r, "request-id", "conformance-req-1"));
    suite.check("CONTRACT§0.1a", "request id echoed", v);
    let r = suite
        .send(Req::get("/v1/videos").bearer(&suite.args.key.clone()))
        .await;
    let v = match (r.header("x-request-id"), r.header("request-id")) {
        (Some(a), Some(b)) if a == b && !a.is_empty() => Ok(()),
        other => Err(format!(
            "expected equal x-request-id and request-id, got {other:?}"
        )),
    };
    suite.check("CONTRACT§0.1a", "request id generated", v);
}

pub async fn auth(suite: &mut Suite) {
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
        let r = suite.send(req()).await;
        suite.check(
            s,
            &format!("{method} {template} without a key is 401"),
            expect(&r),
        );
        let r = suite.send(req().bearer("sk-relay-not-a-key")).await;
        suite.check(
            s,
            &format!("{method} {template} with a wrong key is 401"),
            expect(&r),
        );
        let admin_only = template.starts_with("/admin") || *template == "/metrics";
        if admin_only {
            let r = suite.send(req().bearer(&suite.args.key.clone())).await;
            suite.check(
                "CONTRACT§0",
                &format!("{method} {template} with an API key is 401"),
                expect(&r),
            );
        } else if let Some(admin) = suite.args.admin_token.clone() {
            let r = suite.send(req().bearer(&admin)).await;
            suite.check(
                "CONTRACT§0",
                &format!("{method} {template} with the admin token is 401"),
                expect(&r),
            );
        }
        if messages {
            let r = suite
                .send(req().header("x-api-key", "sk-relay-not-a-key"))
                .await;
            suite.check(
                s,
                &format!("{method} {template} with a wrong x-api-key is 401"),
                expect(&r),
            );
        } else if !admin_only {
            // x-api-key is only read on the messages endpoints.
            let r = suite
                .send(req().header("x-api-key", &suite.args.key.clone()))
                .await;
            suite.check(
                s,
                &format!("{method} {template} with x-api-key only is 401"),
                expect(&r),
            );
        }
    }
    if let Some(admin) = suite.args.admin_token.clone() {
        let r = suite.send(Req::get("/admin/keys").bearer(&admin)).await;
        suite.check(
            "CONTRACT§5.2",
            "admin token lists keys",
            checks::field(&r, "/object", &serde_json::json!("list")),
        );
    } else {
        suite.skip("CONTRACT§5.2", "admin token lists keys", "no --admin-token");
    }
}

pub async fn routing(suite: &mut Suite) {
    let s = "CONTRACT§0.2";
    let key = suite.args.key.clone();
    let r = suite.send(Req::get("/v1/no-such-route").bearer(&key)).await;
    suite.check(
        s,
        "unknown route is 404 not found",
        checks::api_error(&r, 404, "not found"),
    );
    let r = suite
        .send(Req::new(http::Method::PUT, "/v1/videos").bearer(&key))
        .await;
    let v = checks::api_error(&r, 405, "method not allowed")
        .and_then(|()| checks::header(&r, "allow", "GET, POST"));
    suite.check(s, "wrong method is 405 with Allow", v);
    let r = suite
        .send(Req::get("/v1/videos/video_nope").bearer(&key))
        .await;
    suite.check(
        s,
        "unknown task is 404 not found",
        checks::api_error(&r, 404, "not found"),
    );
}

pub async fn rate_limits(suite: &mut Suite) {
    let s = "SPEC§7";
    let Some(admin) = suite.args.admin_token.clone() else {
        suite.skip(
            s,
            "429 rate limited",
            "no --admin-token to make a rate-limited key",
        );
        return;
    };
    let r = suite
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
        suite.check(
            s,
            "create a rate-limited key",
            Err(format!("expected a key, got {}", r.describe())),
        );
        return;
    };
    let mut limited = None;
    for _ in 0..6 {
        let r = suite.send_once(Req::get("/v1/videos").bearer(&key)).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r);
            break;
        }
    }
    let v = match &limited {
        Some(r) => checks::api_error(r, 429, "rate limited").and_then(|()| {
            match r.header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
                Some(n) if (1..120).contains(&n) && r.header("retry-after-ms").is_some() => Ok(()),
                other => Err(format!(
                    "expected retry-after 1..119 seconds and retry-after-ms, got {other:?}"
                )),
            }
        }),
        None => Err("expected 429 rate limited within 6 requests at burst 2, got none".into()),
    };
    suite.check(s, "429 rate limited with retry-after", v);
    let r = suite
        .send_once(
            Req::post("/v1/messages")
                .header("x-api-key", &key)
                .header("vendor-version", "2023-06-01")
                .json(&serde_json::json!({"model": "sim-chat", "max_tokens": 5,
                    "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    suite.check(
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
    let r = suite
        .send(Req::new(http::Method::DELETE, format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check("CONTRACT§5.2", "revoke a key", checks::status(&r, 200));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = suite.send(Req::get("/v1/videos").bearer(&key)).await;
    suite.check(
        "CONTRACT§0",
        "a revoked key is 401",
        checks::api_error(&r, 401, "unauthorized"),
    );
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
