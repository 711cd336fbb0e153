//! Rate limits: per key over all routes, per task for status polls; 429 with retry headers.

use http::Method;
use serde_json::json;

use crate::harness::{Body, Relay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_gets_429_with_retry_after_and_other_keys_are_unaffected() {
    let relay = Relay::start("[limits]\nrps = 10\nburst = 20\npoll_rps_per_task = 2\n").await;
    let (_, other) = relay.new_key("other", None).await;
    let mut ok = 0;
    let mut limited = 0;
    for _ in 0..100 {
        let res = relay.get("/v1/videos").await;
        match res.status {
            200 => ok += 1,
            429 => {
                limited += 1;
                res.assert_error(429, "rate limited", None);
                assert_eq!(res.json()["error"]["type"], "rate_limit_error");
                let secs: u64 = res.header("retry-after").unwrap().parse().unwrap();
                let ms: u64 = res.header("retry-after-ms").unwrap().parse().unwrap();
                assert!((1..120).contains(&secs), "{secs}");
                assert!((1..=1000).contains(&ms), "{ms}");
            }
            other => panic!("unexpected status {other}: {}", res.text()),
        }
    }
    // The burst, plus what refilled while the loop ran (well under 8 s on any machine).
    assert!((20..=100).contains(&ok), "{ok} allowed");
    assert!(limited > 0, "no 429 in a burst of 100");
    let res = relay
        .call_as(&other, Method::GET, "/v1/videos", Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "another key is unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_override_and_per_task_poll_bucket() {
    let relay = Relay::start("[limits]\npoll_rps_per_task = 1\n").await;
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "slow", "rate_limit": {"rps": 1, "burst": 2}})),
        )
        .await;
    let slow = res.json()["key"].as_str().unwrap().to_owned();
    let get = |key: String| {
        let relay = &relay;
        async move {
            relay
                .call_as(&key, Method::GET, "/v1/videos", Body::Empty, &[])
                .await
                .status
        }
    };
    assert_eq!(get(slow.clone()).await, 200);
    assert_eq!(get(slow.clone()).await, 200);
    assert_eq!(get(slow.clone()).await, 429);

    // Status polls of one task have their own bucket (burst 2 x rps): the key's own
    // bucket is untouched by them.
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(relay.get(&format!("/v1/videos/{id}")).await.status);
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert_eq!(relay.get("/v1/videos").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_the_vendor_rate_limit_headers_and_429_in_vendor_shape() {
    let relay = Relay::start("[limits]\nrps = 1\nburst = 3\n").await;
    let body = json!({"model": "sim-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]});
    let send = || {
        let relay = &relay;
        let body = body.clone();
        async move {
            relay
                .client
                .send(
                    Method::POST,
                    &relay.url("/v1/messages"),
                    Body::Json(body),
                    &[
                        ("x-api-key", relay.key.clone()),
                        ("anthropic-version", "2023-06-01".into()),
                    ],
                )
                .await
        }
    };
    let first = send().await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(
        first.header("anthropic-ratelimit-requests-limit"),
        Some("3")
    );
    assert_eq!(
        first.header("anthropic-ratelimit-requests-remaining"),
        Some("2")
    );
    let reset = first.header("anthropic-ratelimit-requests-reset").unwrap();
    assert!(reset.ends_with('Z') && reset.contains('T'), "{reset}");
    send().await;
    send().await;
    let limited = send().await;
    assert_eq!(limited.status, 429, "{}", limited.text());
    let v = limited.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert_eq!(v["error"]["message"], "rate limited");
    assert!(limited.header("retry-after").is_some());
    assert_eq!(
        limited.header("anthropic-ratelimit-requests-remaining"),
        Some("0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_on_messages_paths_answers_in_the_vendor_shape() {
    let relay = Relay::start("").await;
    let res = relay.get("/v1/messages").await;
    assert_eq!(res.status, 405);
    assert_eq!(res.header("allow"), Some("POST"));
    let v = res.json();
    assert_eq!(v["type"], "error", "{v}");
    assert!(v["request_id"].as_str().is_some(), "{v}");
}
