//! Keys through the admin API: create, list, get, revoke.

use http::Method;
use serde_json::json;

use crate::harness::{Body, Relay};

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
