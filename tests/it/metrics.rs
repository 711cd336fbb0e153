//! `GET /metrics`: every family the contract and the docs name, with values that follow what
//! was done, after a mixed run on the simulator.

use std::collections::HashMap;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::harness::{Body, Relay, poll_until};

const WAIT: Duration = Duration::from_secs(30);

/// One scrape: each sample's name with its labels, as written, to its value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').expect("a sample line");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
fn sum(samples: &HashMap<String, f64>, name: &str, labels: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| {
            let (n, rest) = k.split_once('{').unwrap_or((k.as_str(), ""));
            n == name && labels.iter().all(|l| rest.contains(l))
        })
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(relay: &Relay) -> HashMap<String, f64> {
    let res = relay.admin(Method::GET, "/metrics", Body::Empty).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(
        res.header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        res.header("content-type")
    );
    samples(&res.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_mixed_run() {
    let relay = Relay::start("").await;

    // The admin token only.
    let anonymous = relay.send(Method::GET, "/metrics", Body::Empty, &[]).await;
    anonymous.assert_error(401, "unauthorized", None);
    let with_a_key = relay.get("/metrics").await;
    assert_eq!(with_a_key.status, 401, "{}", with_a_key.text());

    // Videos: one that succeeds, one that fails, one cancelled while it runs.
    let create = |sim: &'static str| {
        let relay = &relay;
        async move {
            let res = relay
                .call_as(
                    &relay.key.clone(),
                    Method::POST,
                    "/v1/videos",
                    Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
                    &[("x-relay-sim", sim)],
                )
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            res.json()["id"].as_str().unwrap().to_owned()
        }
    };
    let good = create("delay_ms=300").await;
    let bad = create("fail").await;
    let held = create("stuck").await;
    assert_eq!(relay.wait_video(&good, WAIT).await["status"], "completed");
    assert_eq!(relay.wait_video(&bad, WAIT).await["status"], "failed");
    let cancel = relay
        .call(
            Method::POST,
            &format!("/v1/videos/{held}/cancel"),
            Body::Empty,
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text());

    // A message, billed.
    let message = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/messages",
            Body::Json(json!({
                "model": "sim-chat", "max_tokens": 32,
                "messages": [{"role": "user", "content": "hello there"}]
            })),
            &[("anthropic-version", "2023-06-01")],
        )
        .await;
    assert_eq!(message.status, 200, "{}", message.text());

    // A key with a rate limit of one request, refused on its second.
    let (id, limited) = relay.new_key("limited", None).await;
    let patch = relay
        .admin(
            Method::PATCH,
            &format!("/admin/keys/{id}"),
            Body::Json(json!({"rate_limit": {"rps": 1, "burst": 1}})),
        )
        .await;
    assert_eq!(patch.status, 200, "{}", patch.text());
    let mut refused = 0;
    for _ in 0..3 {
        let res = relay
            .call_as(&limited, Method::GET, "/v1/videos", Body::Empty, &[])
            .await;
        refused += u32::from(res.status == 429);
    }
    assert!(
        refused >= 1,
        "a key of 1 request per second was refused none of 3"
    );
    let missing = relay.get("/no/such/route").await;
    assert_eq!(missing.status, 404);

    // Charges are written in batches: wait for the message's to reach the ledger's count.
    let m = poll_until(WAIT, || async {
        let m = scrape(&relay).await;
        (sum(&m, "relay_ledger_entries_total", &["kind=\"charge\""]) >= 1.0).then_some(m)
    })
    .await
    .expect("the message's charge reaches the ledger metrics");

    let requests = |route: &str, status: &str| {
        sum(
            &m,
            "relay_http_requests_total",
            &[
                &format!("route=\"{route}\""),
                &format!("status=\"{status}\""),
            ],
        )
    };
    assert_eq!(requests("POST /v1/videos", "200"), 3.0);
    assert!(requests("GET /v1/videos/{task_id}", "200") >= 2.0);
    assert_eq!(requests("POST /v1/videos/{task_id}/cancel", "200"), 1.0);
    assert_eq!(requests("POST /v1/messages", "200"), 1.0);
    assert!(requests("GET /v1/videos", "429") >= 1.0);
    assert_eq!(requests("unmatched", "404"), 1.0);
    assert_eq!(requests("GET /metrics", "401"), 2.0);
    let latency = &["route=\"POST /v1/videos\""];
    assert_eq!(
        sum(&m, "relay_http_request_duration_seconds_count", latency),
        3.0
    );
    assert!(sum(&m, "relay_http_request_duration_seconds_sum", latency) > 0.0);
    assert_eq!(
        sum(
            &m,
            "relay_http_request_duration_seconds_bucket",
            &["route=\"POST /v1/videos\"", "le=\"+Inf\""]
        ),
        3.0
    );

    let tasks = |status: &str| {
        sum(
            &m,
            "relay_tasks",
            &["format=\"videos\"", &format!("status=\"{status}\"")],
        )
    };
    assert_eq!(
        (tasks("succeeded"), tasks("failed"), tasks("cancelled")),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(tasks("queued") + tasks("running"), 0.0);
    assert_eq!(
        sum(&m, "relay_tasks", &["format=\"generations\""]),
        0.0,
        "no second-format task was made"
    );
    for status in ["succeeded", "failed", "cancelled"] {
        let labels = ["format=\"videos\"", &format!("status=\"{status}\"")];
        assert_eq!(
            sum(&m, "relay_task_duration_seconds_count", &labels),
            1.0,
            "{status}"
        );
    }

    assert!(
        sum(
            &m,
            "relay_upstream_calls_total",
            &["channel=\"simulator\"", "outcome=\"ok\""]
        ) >= 3.0
    );
    assert_eq!(
        sum(&m, "relay_channel_healthy", &["channel=\"simulator\""]),
        1.0
    );
    assert!(sum(&m, "relay_poller_lag_seconds_count", &[]) >= 1.0);
    assert!(
        sum(
            &m,
            "relay_chat_tokens_total",
            &["model=\"sim-chat\"", "kind=\"input\""]
        ) > 0.0
    );
    assert!(
        sum(
            &m,
            "relay_chat_tokens_total",
            &["model=\"sim-chat\"", "kind=\"output\""]
        ) > 0.0
    );
    assert!(sum(&m, "relay_chat_credits_total", &["model=\"sim-chat\""]) >= 1.0);

    // Ledger: three pre-deductions, one settlement, two refunds; the credits balance.
    let entries = |kind: &str| {
        sum(
            &m,
            "relay_ledger_entries_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    let credits = |kind: &str| {
        sum(
            &m,
            "relay_ledger_credits_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    assert_eq!(
        (entries("prededuct"), entries("settle"), entries("refund")),
        (3.0, 1.0, 2.0)
    );
    assert_eq!(credits("refund"), credits("prededuct") * 2.0 / 3.0);
    assert!(credits("charge") >= 1.0);

    assert!(sum(&m, "relay_rate_limited_total", &["scope=\"key\""]) >= 1.0);
    assert_eq!(
        sum(&m, "relay_rate_limited_total", &["scope=\"task_poll\""]),
        0.0
    );
    assert!(sum(&m, "relay_open_connections", &[]) >= 1.0);
}
