//! Keys through the admin API: create, list, get, revoke.

use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::harness::{Body, Relay, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_lifecycle() {
    let relay = Relay::start("").await;
    let (id, secret) = relay.new_key("alice", Some(500)).await;
    assert!(secret.starts_with("sk-relay-"));
    let got = relay
        .admin(Method::GET, &format!("/admin/keys/{id}"), Body::Empty)
        .await;
    assert_eq!(got.status, 200);
    let v = got.json();
    assert_eq!(v["name"], "alice");
    assert_eq!(v["quota"], 500);
    assert_eq!(v["quota_used"], 0);
    assert_eq!(v["status"], "active");
    assert!(
        v.get("key").is_none(),
        "the secret is shown only at creation"
    );
    assert!(!got.text().contains(&secret));

    let list = relay
        .admin(Method::GET, "/admin/keys", Body::Empty)
        .await
        .json();
    assert_eq!(list["data"].as_array().unwrap().len(), 2);

    let ok = relay
        .call_as(&secret, Method::GET, "/v1/videos", Body::Empty, &[])
        .await;
    assert_eq!(ok.status, 200);
    let revoked = relay
        .admin(Method::DELETE, &format!("/admin/keys/{id}"), Body::Empty)
        .await;
    assert_eq!(revoked.status, 200);
    assert_eq!(revoked.json()["deleted"], true);
    let res = relay
        .call_as(&secret, Method::GET, "/v1/videos", Body::Empty, &[])
        .await;
    res.assert_error(401, "unauthorized", None);

    let bad = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "x", "quota": -5})),
        )
        .await;
    bad.assert_error(400, "invalid request", Some("quota"));
    let missing = relay
        .admin(Method::GET, "/admin/keys/key_nope", Body::Empty)
        .await;
    missing.assert_error(404, "not found", None);

    // An expired key is refused.
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "old", "expires_at": 1})),
        )
        .await;
    let old = res.json()["key"].as_str().unwrap().to_owned();
    let res = relay
        .call_as(&old, Method::GET, "/v1/videos", Body::Empty, &[])
        .await;
    res.assert_error(401, "unauthorized", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_keys_tasks_and_channels() {
    let relay = Relay::start("").await;
    let (id, secret) = relay.new_key("bob", Some(100)).await;
    let patch = |body: serde_json::Value| {
        let relay = &relay;
        let path = format!("/admin/keys/{id}");
        async move { relay.admin(Method::PATCH, &path, Body::Json(body)).await }
    };
    let v = patch(json!({"quota_add": 50})).await.json();
    assert_eq!(v["quota"], 150);
    let v =
        patch(json!({"quota": 10, "rate_limit": {"rps": 5, "burst": 5}, "models": ["model_h3"]}))
            .await
            .json();
    assert_eq!(v["quota"], 10);
    assert_eq!(v["rate_limit"]["rps"], 5);
    assert_eq!(v["models"], json!(["model_h3"]));
    let v = patch(json!({"quota": null})).await.json();
    assert_eq!(v["quota"], serde_json::Value::Null);
    patch(json!({"quota": -1}))
        .await
        .assert_error(400, "invalid request", Some("quota"));
    patch(json!({"quota_add": 0}))
        .await
        .assert_error(400, "invalid request", Some("quota_add"));
    patch(json!({"status": "gone"}))
        .await
        .assert_error(400, "invalid request", Some("status"));
    patch(json!({"colour": "red"}))
        .await
        .assert_error(400, "invalid request", Some("colour"));
    let missing = relay
        .admin(
            Method::PATCH,
            "/admin/keys/key_nope",
            Body::Json(json!({"quota": 1})),
        )
        .await;
    missing.assert_error(404, "not found", None);

    // Revoke and restore through status.
    patch(json!({"status": "revoked"})).await;
    let res = relay
        .call_as(&secret, Method::GET, "/v1/videos", Body::Empty, &[])
        .await;
    res.assert_error(401, "unauthorized", None);
    patch(json!({"status": "active"})).await;
    let res = relay
        .call_as(
            &secret,
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
            &[("x-relay-sim", "stuck")],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let task = res.json()["id"].as_str().unwrap().to_owned();

    let tasks = relay
        .admin(
            Method::GET,
            &format!("/admin/tasks?key_id={id}"),
            Body::Empty,
        )
        .await
        .json();
    let data = tasks["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{tasks}");
    assert_eq!(data[0]["id"], task.as_str());
    let none = relay
        .admin(
            Method::GET,
            &format!("/admin/tasks?key_id={id}&status=completed"),
            Body::Empty,
        )
        .await
        .json();
    assert_eq!(none["data"].as_array().unwrap().len(), 0);

    // The engine picks the task up in the background: wait until the channel counts it.
    let relay_ref = &relay;
    let channels = poll_until(Duration::from_secs(10), || async move {
        let res = relay_ref
            .admin(Method::GET, "/admin/channels", Body::Empty)
            .await;
        assert_eq!(res.status, 200);
        let channels = res.json();
        (channels["data"][0]["in_flight"].as_u64() >= Some(1)).then_some(channels)
    })
    .await
    .expect("the simulator channel counts the task in flight");
    let sim = &channels["data"][0];
    assert_eq!(sim["name"], "simulator");
    assert_eq!(sim["healthy"], true);
}

/// `/admin/tasks` pages: `has_more` is true while more tasks match past `limit`, and `after`
/// (the last id of a page) continues with the older ones, filters still applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_tasks_page_with_has_more_and_after() {
    let relay = Relay::start("").await;
    let (id, secret) = relay.new_key("pages", Some(10_000)).await;
    let mut created = Vec::new();
    for i in 0..5 {
        let res = relay
            .call_as(
                &secret,
                Method::POST,
                "/v1/videos",
                Body::Json(
                    json!({"model": "model_h3", "prompt": format!("p{i}"), "size": "64x64"}),
                ),
                &[("x-relay-sim", "stuck")],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        created.push(res.json()["id"].as_str().unwrap().to_owned());
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    let page = |query: String| {
        let relay = &relay;
        async move {
            let res = relay
                .admin(Method::GET, &format!("/admin/tasks?{query}"), Body::Empty)
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            let v = res.json();
            let ids: Vec<String> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .collect();
            (ids, v["has_more"].as_bool().unwrap())
        }
    };
    let (first, more) = page(format!("key_id={id}&limit=2")).await;
    assert_eq!((first.as_slice(), more), (&newest_first[..2], true));
    let (second, more) = page(format!("key_id={id}&limit=2&after={}", first[1])).await;
    assert_eq!((second.as_slice(), more), (&newest_first[2..4], true));
    let (last, more) = page(format!("key_id={id}&limit=2&after={}", second[1])).await;
    assert_eq!((last.as_slice(), more), (&newest_first[4..], false));
    // Exactly `limit` left: no more.
    let (all, more) = page(format!("key_id={id}&limit=5")).await;
    assert_eq!((all, more), (newest_first.clone(), false));
    // Filters apply to what has_more counts.
    let (none, more) = page(format!("key_id={id}&limit=1&status=completed")).await;
    assert_eq!((none.len(), more), (0, false));
}
