//! The contract of the messages endpoints: every validation rule a 400 naming the field, the
//! version header, keys, body size, quotas, token counting, the model list and unrouted paths,
//! all answered in the vendor's shape.

use http::Method;
use serde_json::{Value, json};

use super::{VERSION, assert_vendor, ledger, message, post, setup};
use crate::fake_chat::Switches;
use crate::harness::{Body, Relay};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_of_the_table_is_a_400_naming_the_field() {
    let relay = Relay::start("").await;
    let ok = json!({"model": "sim-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        if v == json!("<remove>") {
            b.as_object_mut().unwrap().remove(k);
        } else {
            b[k] = v;
        }
        b
    };
    let cases = [
        (
            with("max_tokens", json!("<remove>")),
            "max_tokens: is required",
        ),
        (
            with("max_tokens", json!(0)),
            "max_tokens: must be an integer >= 1",
        ),
        (
            with("max_tokens", json!("16")),
            "max_tokens: must be an integer >= 1",
        ),
        (
            with("temperature", json!(1.5)),
            "temperature: must be a number from 0 to 1",
        ),
        (
            with("temperature", json!("warm")),
            "temperature: must be a number from 0 to 1",
        ),
        (with("messages", json!({})), "messages: must be an array"),
        (
            with("messages", json!([])),
            "messages: must contain at least one message",
        ),
        (with("messages", json!("<remove>")), "messages: is required"),
        (
            with(
                "messages",
                json!([{"role": "system", "content": "be nice"}]),
            ),
            "messages.0.role: must be \"user\" or \"assistant\"",
        ),
        (
            with("messages", json!([{"role": "user", "content": 7}])),
            "messages.0.content: must be a string or an array",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": [{"type": "text"}]}]),
            ),
            "messages.0.content.0.text: is required",
        ),
        (
            with("stop_sequences", json!("x")),
            "stop_sequences: must be an array of strings",
        ),
        (
            with("stop_sequences", json!([1])),
            "stop_sequences.0: must be a string",
        ),
        (with("model", json!("<remove>")), "model: is required"),
        (with("model", json!(5)), "model: must be a string"),
        (
            with("system", json!(5)),
            "system: must be a string or an array",
        ),
        (with("top_p", json!("x")), "top_p: must be a number"),
        (
            with("top_k", json!("x")),
            "top_k: must be a non-negative integer",
        ),
        (with("stream", json!("yes")), "stream: must be a boolean"),
        (with("tools", json!({})), "tools: must be an array"),
        (
            with("tools", json!([{"name": "f"}])),
            "tools.0.input_schema: is required",
        ),
        (
            with("tool_choice", json!("auto")),
            "tool_choice: must be an object",
        ),
        (
            with("tool_choice", json!({"type": "tool"})),
            "tool_choice.name: is required",
        ),
        (with("thinking", json!(5)), "thinking: must be an object"),
        (with("metadata", json!([])), "metadata: must be an object"),
    ];
    for (body, message) in cases {
        let res = self::message(&relay, body.clone()).await;
        assert_vendor(&res, 400, "invalid_request_error", message);
    }
    // Not JSON at all.
    let res = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/messages",
            Body::Raw("application/json".into(), b"{nope".to_vec()),
            &[VERSION],
        )
        .await;
    assert_vendor(&res, 400, "invalid_request_error", "body: not valid JSON");
    // A model that is not a chat model, or not in the catalog.
    for model in ["model_h3", "no-such-model"] {
        let res = self::message(&relay, with("model", json!(model))).await;
        assert_vendor(&res, 400, "invalid_request_error", "invalid model");
    }
    // Nothing was billed for any of it.
    assert!(ledger(&relay).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_header_key_and_body_size_give_the_contracts_errors() {
    let relay = Relay::start("").await;
    let body = json!({"model": "sim-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    // No version header.
    let res = post(&relay, "/v1/messages", body.clone(), &[]).await;
    assert_vendor(
        &res,
        400,
        "invalid_request_error",
        "vendor-version: header is required",
    );
    // Either name of the header, any value.
    for header in [
        ("vendor-version", "v9"),
        ("anthropic-version", "2026-10-21"),
    ] {
        let res = post(&relay, "/v1/messages", body.clone(), &[header]).await;
        assert_eq!(res.status, 200, "{}", res.text());
    }
    // No key, a wrong key, x-api-key.
    let version = ("anthropic-version", "2023-06-01".to_owned());
    let res = relay
        .send(
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            std::slice::from_ref(&version),
        )
        .await;
    assert_vendor(&res, 401, "authentication_error", "unauthorized");
    assert_eq!(res.json()["error"]["message"], "unauthorized");
    let res = relay
        .send(
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            &[version.clone(), ("x-api-key", "sk-relay-wrong".into())],
        )
        .await;
    assert_vendor(&res, 401, "authentication_error", "unauthorized");
    let res = relay
        .send(
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            &[
                version.clone(),
                ("x-api-key", relay.key.clone()),
                ("x-request-id", "my-req-1".into()),
            ],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("x-request-id"), Some("my-req-1"));
    assert_eq!(res.header("request-id"), Some("my-req-1"));
    // A 20 MB body.
    let mut big = body.clone();
    big["messages"][0]["content"] = json!("x".repeat(20 * 1024 * 1024));
    let res = message(&relay, big).await;
    assert_vendor(&res, 413, "request_too_large", "Payload Too Large");
    // Errors carry the client's request id too.
    let res = relay
        .send(
            Method::POST,
            "/v1/messages",
            Body::Json(body),
            &[("x-request-id", "abc".into())],
        )
        .await;
    assert_eq!(res.json()["request_id"], "abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_cannot_cover_the_estimate_gets_402() {
    let relay = Relay::start("").await;
    let (_, poor) = relay.new_key("poor", Some(0)).await;
    let res = relay
        .call_as(
            &poor,
            Method::POST,
            "/v1/messages",
            Body::Json(json!({"model": "sim-chat", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]})),
            &[VERSION],
        )
        .await;
    assert_vendor(&res, 402, "billing_error", "this message may cost");
}

/// A key whose quota covers one message's estimate but not two, sending its messages one after
/// another: each is admitted, whether or not the charge of the one before is written yet (its
/// estimate is held until it is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_one_after_another_are_not_refused_for_the_last_ones_estimate() {
    let relay = Relay::start("").await;
    // An estimate of about 61 credits (max_tokens 20,000 at 3,000 per million), a cost of 1.
    let (_, key) = relay.new_key("tight", Some(100)).await;
    for n in 0..10 {
        let res = relay
            .call_as(
                &key,
                Method::POST,
                "/v1/messages",
                Body::Json(json!({"model": "sim-chat", "max_tokens": 20000, "messages": [{"role": "user", "content": format!("hi {n}")}]})),
                &[VERSION],
            )
            .await;
        assert_eq!(res.status, 200, "message {n}: {}", res.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_and_the_model_list() {
    let (relay, fake) = setup(Switches::default()).await;
    let body =
        json!({"model": "sim-chat", "messages": [{"role": "user", "content": "Hello, world!"}]});
    let res = post(
        &relay,
        "/v1/messages/count_tokens",
        body.clone(),
        &[VERSION],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json(), json!({"input_tokens": 7}));
    let res = post(&relay, "/v1/messages/count_tokens", body.clone(), &[]).await;
    assert_vendor(&res, 400, "invalid_request_error", "vendor-version");
    // The native upstream counts for itself.
    let mut native = body.clone();
    native["model"] = json!("native-chat");
    let res = post(&relay, "/v1/messages/count_tokens", native, &[VERSION]).await;
    assert_eq!(res.json(), json!({"input_tokens": 42}));
    assert_eq!(fake.last().path, "/v1/messages/count_tokens");

    let res = relay.get("/v1/models").await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["conv-chat", "native-chat", "sim-chat"]);
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["has_more"], false);
    assert_eq!(v["first_id"], "conv-chat");
    let page = relay
        .get("/v1/models?limit=1&after_id=conv-chat")
        .await
        .json();
    assert_eq!(page["data"][0]["id"], "native-chat");
    assert_eq!(page["has_more"], true);
    assert_eq!(
        relay.get("/v1/models/sim-chat").await.json()["id"],
        "sim-chat"
    );
    let res = relay.get("/v1/models/nope").await;
    assert_vendor(&res, 404, "not_found_error", "model: nope not found");

    // A key limited to some models sees only those, and may use only those.
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "one", "models": ["sim-chat"]})),
        )
        .await;
    let one = res.json()["key"].as_str().unwrap().to_owned();
    let res = relay
        .send(
            Method::GET,
            "/v1/models",
            Body::Empty,
            &[("x-api-key", one.clone())],
        )
        .await;
    assert_eq!(res.json()["data"].as_array().unwrap().len(), 1);
    let res = relay
        .call_as(&one, Method::POST, "/v1/messages",
            Body::Json(json!({"model": "native-chat", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})),
            &[VERSION])
        .await;
    assert_vendor(&res, 400, "invalid_request_error", "invalid model");
}

/// A path under the messages endpoints that routes nowhere (a model id no model can have, a
/// path below them the relay does not serve) is a 404 in the vendor's shape, like every other
/// answer there; the video paths keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrouted_messages_paths_answer_in_the_vendor_shape() {
    let relay = Relay::start("").await;
    for path in [
        "/v1/models/%F2%83%23",
        "/v1/messages/nope",
        "/v1/models/a/b",
    ] {
        let res = relay.get(path).await;
        assert_vendor(&res, 404, "not_found_error", "no route GET /v1/");
    }
    let res = relay.get("/v1/videos/%23").await;
    res.assert_error(404, "not found", None);
}
