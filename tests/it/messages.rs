//! The native messages endpoints: validation, auth and errors in the vendor's shape, the
//! simulator, pass-through to a native upstream (byte for byte), conversion to and from chat
//! completions, upstream failures, cancellation and billing.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::fake_chat::{FakeChat, SECRET_HOST, Switches, UPSTREAM_KEY};
use crate::harness::{Answer, Body, Relay, poll_until};

const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

/// The relay's chat catalog: the simulator, a native upstream and a chat completions one.
fn chat_config(native: &str, conv: &str, extra_channel_keys: &str) -> String {
    format!(
        r#"
[models.sim-chat]
kind = "chat"
input_price_per_mtok = 1000
output_price_per_mtok = 3000
[models.native-chat]
kind = "chat"
input_price_per_mtok = 100000
output_price_per_mtok = 300000
[models.conv-chat]
kind = "chat"
input_price_per_mtok = 100000
output_price_per_mtok = 300000

[[channels]]
name = "simulator"
kind = "simulator"
models = ["sim-chat"]

[[channels]]
name = "native"
kind = "anthropic"
models = ["native-chat"]
base_url = "{native}"
api_key = "{UPSTREAM_KEY}"
{extra_channel_keys}

[[channels]]
name = "conv"
kind = "openai-chat"
models = ["conv-chat"]
base_url = "{conv}/v1"
api_key = "{UPSTREAM_KEY}"
model_map = {{ "conv-chat" = "local-model" }}
{extra_channel_keys}
"#
    )
}

const TIMEOUTS: &str = "first_byte_timeout_secs = 1\nidle_timeout_secs = 2";

async fn setup(switches: Switches) -> (Relay, FakeChat) {
    let fake = FakeChat::start(switches).await;
    let relay = Relay::start(&chat_config(&fake.base, &fake.base, TIMEOUTS)).await;
    (relay, fake)
}

async fn post(relay: &Relay, path: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
    relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            path,
            Body::Json(body),
            headers,
        )
        .await
}

async fn message(relay: &Relay, body: Value) -> Answer {
    post(relay, "/v1/messages", body, &[VERSION]).await
}

/// Asserts the vendor's error shape, with the request id in body and headers.
fn assert_vendor(res: &Answer, status: u16, kind: &str, message_starts: &str) {
    assert_eq!(res.status, status, "{}", res.text());
    let v = res.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(message_starts),
        "message {message:?} should start with {message_starts:?}"
    );
    let rid = v["request_id"].as_str().expect("request_id");
    assert_eq!(res.header("x-request-id"), Some(rid));
    assert_eq!(res.header("request-id"), Some(rid));
    assert!(!res.text().contains(SECRET_HOST) && !res.text().contains(UPSTREAM_KEY));
}

/// `(event name, data)` of each SSE event; the relay writes `\n` line ends only.
fn events(body: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8_lossy(body);
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            (name, serde_json::from_str(&data).unwrap_or(Value::Null))
        })
        .collect()
}

/// Rebuilds the message a stream describes, the way the vendor's SDK accumulates it.
fn reassemble(events: &[(String, Value)]) -> Value {
    let mut message = Value::Null;
    let mut partial: Vec<String> = Vec::new();
    for (name, data) in events {
        assert_eq!(name, data["type"].as_str().unwrap_or_default(), "{data}");
        match name.as_str() {
            "message_start" => message = data["message"].clone(),
            "content_block_start" => {
                let index = data["index"].as_u64().unwrap() as usize;
                let blocks = message["content"].as_array_mut().unwrap();
                assert_eq!(index, blocks.len(), "block indexes count up from 0");
                blocks.push(data["content_block"].clone());
                partial.push(String::new());
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap() as usize;
                let block = &mut message["content"][index];
                match data["delta"]["type"].as_str() {
                    Some("text_delta") => {
                        let text = format!(
                            "{}{}",
                            block["text"].as_str().unwrap(),
                            data["delta"]["text"].as_str().unwrap()
                        );
                        block["text"] = json!(text);
                    }
                    Some("input_json_delta") => {
                        partial[index].push_str(data["delta"]["partial_json"].as_str().unwrap())
                    }
                    other => panic!("delta {other:?}"),
                }
            }
            "content_block_stop" => {
                let index = data["index"].as_u64().unwrap() as usize;
                if message["content"][index]["type"] == "tool_use" && !partial[index].is_empty() {
                    message["content"][index]["input"] =
                        serde_json::from_str(&partial[index]).expect("tool input JSON");
                }
            }
            "message_delta" => {
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                message["usage"]["output_tokens"] = data["usage"]["output_tokens"].clone();
                if let Some(n) = data["usage"].get("input_tokens") {
                    message["usage"]["input_tokens"] = n.clone();
                }
            }
            "ping" | "message_stop" => {}
            "error" => panic!("error event: {data}"),
            other => panic!("unknown event {other}"),
        }
    }
    message
}

async fn ledger(relay: &Relay) -> Vec<Value> {
    let keys = relay
        .admin(Method::GET, "/admin/keys", Body::Empty)
        .await
        .json();
    let id = keys["data"]
        .as_array()
        .and_then(|d| d.first())
        .and_then(|k| k["id"].as_str())
        .expect("a key")
        .to_owned();
    let res = relay
        .admin(
            Method::GET,
            &format!("/admin/keys/{id}/ledger"),
            Body::Empty,
        )
        .await;
    res.json()["data"].as_array().cloned().unwrap_or_default()
}

/// Sends one good message with the fake switched back to normal, waits for its charge, and
/// asserts it is the ledger's only entry: nothing before it was charged (charges are written
/// in order, so one that was coming would be there by then).
async fn assert_only_a_good_message_is_charged(relay: &Relay, fake: &FakeChat) {
    fake.set(Switches::default());
    let res = message(relay, json!({"model": "native-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let k = poll_until(Duration::from_secs(5), || async move {
        let k = kinds(&ledger(relay).await);
        (!k.is_empty()).then_some(k)
    })
    .await
    .expect("the good message's charge");
    assert_eq!(k.len(), 1, "{k:?}");
    assert_eq!(k[0].0, "charge", "{k:?}");
}

fn kinds(entries: &[Value]) -> Vec<(String, i64)> {
    entries
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            )
        })
        .collect()
}

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
    let url = relay.url("/v1/messages");
    let version = ("anthropic-version", "2023-06-01".to_owned());
    let res = relay
        .client
        .send(
            Method::POST,
            &url,
            Body::Json(body.clone()),
            std::slice::from_ref(&version),
        )
        .await;
    assert_vendor(&res, 401, "authentication_error", "unauthorized");
    assert_eq!(res.json()["error"]["message"], "unauthorized");
    let res = relay
        .client
        .send(
            Method::POST,
            &url,
            Body::Json(body.clone()),
            &[version.clone(), ("x-api-key", "sk-relay-wrong".into())],
        )
        .await;
    assert_vendor(&res, 401, "authentication_error", "unauthorized");
    let res = relay
        .client
        .send(
            Method::POST,
            &url,
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
        .client
        .send(
            Method::POST,
            &url,
            Body::Json(body),
            &[("x-request-id", "abc".into())],
        )
        .await;
    assert_eq!(res.json()["request_id"], "abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_chat_answers_whole_and_streamed_and_bills_the_usage() {
    let relay = Relay::start("").await;
    let body = json!({"model": "sim-chat", "max_tokens": 100, "system": "terse",
        "messages": [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"},
                     {"role": "user", "content": "Hello there, relay!"}], "extra_field": {"kept": true}});
    let res = message(&relay, body.clone()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "sim-chat");
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "You said Hello there relay"}])
    );
    assert_eq!(v["stop_reason"], "end_turn");
    for k in [
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ] {
        assert!(v["usage"][k].is_u64(), "usage.{k}: {v}");
    }
    assert_eq!(v["usage"]["output_tokens"], 5);

    // Streamed: word by word, the same message once reassembled.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let res = message(&relay, streamed).await;
    assert_eq!(res.status, 200);
    assert!(
        res.header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let evs = events(&res.body);
    assert_eq!(evs.first().unwrap().0, "message_start");
    assert!(evs[0].1["message"]["usage"]["input_tokens"].is_u64());
    assert_eq!(evs.last().unwrap().0, "message_stop");
    let deltas = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .count();
    assert_eq!(deltas, 5, "one delta per word");
    let again = reassemble(&evs);
    assert_eq!(again["content"], v["content"]);
    assert_eq!(again["usage"]["output_tokens"], v["usage"]["output_tokens"]);
    assert_eq!(again["usage"]["input_tokens"], v["usage"]["input_tokens"]);

    // max_tokens, stop_sequences, a forced tool.
    let res = message(
        &relay,
        json!({"model": "sim-chat", "max_tokens": 3,
        "messages": [{"role": "user", "content": "one two three four"}]}),
    )
    .await;
    let v = res.json();
    assert_eq!(
        (
            v["stop_reason"].as_str(),
            v["usage"]["output_tokens"].as_u64()
        ),
        (Some("max_tokens"), Some(3))
    );
    let res = message(
        &relay,
        json!({"model": "sim-chat", "max_tokens": 30, "stop_sequences": ["three"],
        "messages": [{"role": "user", "content": "one two three four"}]}),
    )
    .await;
    let v = res.json();
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["stop_sequence"], "three");
    assert_eq!(v["content"][0]["text"], "You said one two ");
    let res = message(&relay, json!({"model": "sim-chat", "max_tokens": 30,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": "Paris"}]})).await;
    let v = res.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][0]["type"], "tool_use");
    assert_eq!(v["content"][0]["input"], json!({"city": "Paris"}));

    // Billing: each message charged once, under its own id, when it ends.
    let relay_ref = &relay;
    let entries = poll_until(Duration::from_secs(5), || async move {
        let e = ledger(relay_ref).await;
        (e.len() == 5).then_some(e)
    })
    .await
    .expect("five messages, each charged");
    let mut ids = std::collections::BTreeSet::new();
    for e in &entries {
        let id = e["task_id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("msg_"), "{e}");
        assert_eq!(e["kind"], "charge", "{e}");
        assert!(e["amount"].as_i64().unwrap() < 0, "{e}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 5);
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
        .client
        .send(
            Method::GET,
            &relay.url("/v1/models"),
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

/// Sends a streaming request and returns the raw bytes of the answer.
async fn raw_stream(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let res = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("answer in time")
        .expect("answer");
    let status = res.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(20), res.into_body().collect())
        .await
        .expect("body in time")
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_streaming_through_the_relay_is_byte_identical() {
    let (relay, fake) = setup(Switches {
        piece: 7,
        ..Switches::default()
    })
    .await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "stream": true,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": "weather?"}], "future_field": [1, 2]});
    let direct = raw_stream(
        &format!("{}/v1/messages", fake.base),
        &body,
        &[("x-api-key", UPSTREAM_KEY), VERSION],
    )
    .await;
    let key = format!("Bearer {}", relay.key);
    let relayed = raw_stream(
        &relay.url("/v1/messages"),
        &body,
        &[
            ("authorization", &key),
            VERSION,
            ("anthropic-beta", "tools-2024"),
        ],
    )
    .await;
    assert_eq!(direct.0, 200);
    assert_eq!(relayed.0, 200);
    assert!(direct.1.len() > 500);
    assert_eq!(
        String::from_utf8_lossy(&relayed.1),
        String::from_utf8_lossy(&direct.1),
        "relayed stream differs"
    );
    // The upstream got the upstream key (never the client's), the version and beta headers,
    // and the body as the client sent it, unknown fields included.
    let seen = fake.last();
    assert_eq!(seen.headers.get("x-api-key").unwrap(), UPSTREAM_KEY);
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.headers.get("anthropic-version").unwrap(), "2023-06-01");
    assert_eq!(seen.headers.get("anthropic-beta").unwrap(), "tools-2024");
    assert_eq!(seen.body, body);
    // Billed from message_start / message_delta: input 11 + 2 cached, output 7.
    let relay_ref = &relay;
    let entries = poll_until(Duration::from_secs(5), || async move {
        let e = ledger(relay_ref).await;
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("one charge");
    let k = kinds(&entries);
    let cost = (13 * 100_000 + 7 * 300_000_u64).div_ceil(1_000_000) as i64;
    assert_eq!(k, vec![("charge".to_owned(), -cost)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_whole_answers_pass_through() {
    let (relay, fake) = setup(Switches::default()).await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    let direct = raw_stream(&format!("{}/v1/messages", fake.base), &body, &[VERSION]).await;
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.body, direct.1);
    assert_eq!(res.header("content-type"), Some("application/json"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_before_the_first_byte() {
    let (relay, fake) = setup(Switches::default()).await;
    for model in ["native-chat", "conv-chat"] {
        for stream in [false, true] {
            let body = json!({"model": model, "max_tokens": 8, "stream": stream,
                "messages": [{"role": "user", "content": "hi"}]});
            fake.set(Switches {
                fail_status: Some(500),
                ..Switches::default()
            });
            let res = message(&relay, body.clone()).await;
            assert_vendor(&res, 500, "api_error", "upstream error");
            assert_eq!(res.header("x-should-retry"), Some("true"));
            assert!(res.header("retry-after").is_some());

            fake.set(Switches {
                fail_status: Some(429),
                ..Switches::default()
            });
            let res = message(&relay, body.clone()).await;
            assert_vendor(&res, 429, "rate_limit_error", "rate limited");
            assert_eq!(res.header("retry-after"), Some("2"));
            assert_eq!(res.header("retry-after-ms"), Some("2000"));

            fake.set(Switches {
                slow_first_byte: Some(Duration::from_millis(2500)),
                ..Switches::default()
            });
            let res = message(&relay, body.clone()).await;
            assert_vendor(&res, 500, "api_error", "upstream error");
            assert_eq!(res.header("x-should-retry"), Some("true"));
        }
    }
    // An upstream that refuses the request itself: a retry cannot help.
    fake.set(Switches {
        fail_status: Some(400),
        ..Switches::default()
    });
    let res = message(&relay, json!({"model": "native-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_vendor(&res, 500, "api_error", "upstream error");
    assert_eq!(res.header("x-should-retry"), Some("false"));
    assert!(res.header("retry-after").is_none());
    // An upstream that cannot be reached.
    let relay2 = Relay::start(&chat_config(
        "http://127.0.0.1:9",
        &fake.base,
        "connect_timeout_secs = 1",
    ))
    .await;
    let res = message(&relay2, json!({"model": "native-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})).await;
    assert_vendor(&res, 500, "api_error", "upstream error");
    // No failure is charged.
    assert_only_a_good_message_is_charged(&relay, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_429_and_a_broken_sim_stream() {
    let relay = Relay::start("").await;
    let body = json!({"model": "sim-chat", "max_tokens": 8, "messages": [{"role": "user", "content": "a b c d e"}]});
    let res = post(
        &relay,
        "/v1/messages",
        body.clone(),
        &[VERSION, ("x-relay-sim", "error=429")],
    )
    .await;
    assert_vendor(&res, 429, "rate_limit_error", "rate limited");
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let res = post(
        &relay,
        "/v1/messages",
        streamed,
        &[VERSION, ("x-relay-sim", "fail")],
    )
    .await;
    assert_eq!(res.status, 200);
    let evs = events(&res.body);
    let (name, data) = evs.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(data["error"]["type"], "api_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_stream_disconnect_becomes_an_error_event_and_no_charge() {
    let (relay, fake) = setup(Switches {
        disconnect_after: Some(5),
        ..Switches::default()
    })
    .await;
    for model in ["native-chat", "conv-chat"] {
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "one two three four five six seven"}]});
        let res = message(&relay, body).await;
        assert_eq!(res.status, 200, "{}", res.text());
        let evs = events(&res.body);
        assert_eq!(evs[0].0, "message_start");
        let (name, data) = evs.last().unwrap();
        assert_eq!(name, "error", "{model}: {}", res.text());
        assert_eq!(data["type"], "error");
        assert_eq!(data["error"]["type"], "api_error");
        assert!(!evs.iter().any(|(n, _)| n == "message_stop"));
        assert!(!res.text().contains(SECRET_HOST));
    }
    // Neither broken stream is charged.
    assert_only_a_good_message_is_charged(&relay, &fake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_cancels_the_upstream_request() {
    for model in ["native-chat", "conv-chat"] {
        let (relay, fake) = setup(Switches {
            event_pause: Duration::from_millis(150),
            ..Switches::default()
        })
        .await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = json!({"model": model, "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "a b c d e f g h i j k l m n o p q r s t"}]});
        let req = Request::builder()
            .method(Method::POST)
            .uri(relay.url("/v1/messages"))
            .header("authorization", format!("Bearer {}", relay.key))
            .header("anthropic-version", "2023-06-01")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let res = client.request(req).await.expect("answer");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let first = body.frame().await.expect("a first frame").expect("frame");
        assert!(first.into_data().is_ok());
        drop(body);
        drop(client);
        let fake_ref = &fake;
        let cancelled = poll_until(Duration::from_secs(10), || async move {
            fake_ref.cancelled().then_some(())
        })
        .await;
        assert!(
            cancelled.is_some(),
            "{model}: the upstream stream was not cancelled"
        );
        // What was delivered is charged.
        let relay_ref = &relay;
        let k = poll_until(Duration::from_secs(5), || async move {
            let k = kinds(&ledger(relay_ref).await);
            (k.len() == 1).then_some(k)
        })
        .await
        .expect("charged");
        assert_eq!(k[0].0, "charge");
        assert!(k[0].1 < 0, "{k:?}");
    }
}

/// The conversion matrix: each case, whole and streamed, through the chat completions fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversion_channel_matrix() {
    let (relay, fake) = setup(Switches::default()).await;
    let tools = json!([{"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    struct Case {
        name: &'static str,
        body: Value,
        content: Value,
        stop_reason: &'static str,
        stop_sequence: Value,
    }
    let cases = [
        Case {
            name: "text",
            body: json!({"messages": [{"role": "user", "content": "hello there"}]}),
            content: json!([{"type": "text", "text": "Echo hello there"}]),
            stop_reason: "end_turn",
            stop_sequence: Value::Null,
        },
        Case {
            name: "system",
            body: json!({"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}),
            content: json!([{"type": "text", "text": "[be brief] Echo hi"}]),
            stop_reason: "end_turn",
            stop_sequence: Value::Null,
        },
        Case {
            name: "multi-turn",
            body: json!({"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "reply"},
                {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "turn"}]}]}),
            content: json!([{"type": "text", "text": "Echo second turn"}]),
            stop_reason: "end_turn",
            stop_sequence: Value::Null,
        },
        Case {
            name: "tool call",
            body: json!({"tools": tools, "tool_choice": {"type": "any"},
                "messages": [{"role": "user", "content": "weather in Paris?"}]}),
            content: json!([{"type": "tool_use", "id": "call_fake_1", "name": "get_weather", "input": {"city": "Paris"}}]),
            stop_reason: "tool_use",
            stop_sequence: Value::Null,
        },
        Case {
            name: "tool result",
            body: json!({"tools": tools, "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_fake_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_fake_1", "content": "sunny 21C"}]}]}),
            content: json!([{"type": "text", "text": "The tool said sunny 21C"}]),
            stop_reason: "end_turn",
            stop_sequence: Value::Null,
        },
        Case {
            name: "stop sequence",
            body: json!({"stop_sequences": ["STOP"], "messages": [{"role": "user", "content": "go on STOP here"}]}),
            content: json!([{"type": "text", "text": "Echo go on "}]),
            stop_reason: "stop_sequence",
            stop_sequence: json!("STOP"),
        },
        Case {
            name: "max_tokens",
            body: json!({"max_tokens": 3, "messages": [{"role": "user", "content": "a b c d e f"}]}),
            content: json!([{"type": "text", "text": "Echo a b"}]),
            stop_reason: "max_tokens",
            stop_sequence: Value::Null,
        },
    ];
    for case in cases {
        let mut body = case.body.clone();
        body["model"] = json!("conv-chat");
        if body.get("max_tokens").is_none() {
            body["max_tokens"] = json!(100);
        }
        let res = message(&relay, body.clone()).await;
        assert_eq!(res.status, 200, "{}: {}", case.name, res.text());
        let whole = res.json();
        assert_eq!(whole["content"], case.content, "{}", case.name);
        assert_eq!(whole["stop_reason"], case.stop_reason, "{}", case.name);
        assert_eq!(whole["stop_sequence"], case.stop_sequence, "{}", case.name);
        assert_eq!(whole["model"], "conv-chat");
        assert!(whole["usage"]["output_tokens"].as_u64().unwrap() > 0);
        // The upstream saw the mapped model and its own key.
        let seen = fake.last();
        assert_eq!(seen.path, "/v1/chat/completions");
        assert_eq!(seen.body["model"], "local-model");
        assert_eq!(
            seen.headers.get("authorization").unwrap(),
            &format!("Bearer {UPSTREAM_KEY}")
        );

        body["stream"] = json!(true);
        let res = message(&relay, body).await;
        assert_eq!(res.status, 200, "{}", case.name);
        let evs = events(&res.body);
        let streamed = reassemble(&evs);
        assert_eq!(streamed["content"], case.content, "{} streamed", case.name);
        assert_eq!(
            streamed["stop_reason"], case.stop_reason,
            "{} streamed",
            case.name
        );
        assert_eq!(streamed["stop_sequence"], case.stop_sequence);
        assert_eq!(
            streamed["usage"]["output_tokens"], whole["usage"]["output_tokens"],
            "{}",
            case.name
        );
        assert_eq!(
            streamed["usage"]["input_tokens"], whole["usage"]["input_tokens"],
            "{}",
            case.name
        );
        assert_eq!(
            fake.last().body["stream_options"],
            json!({"include_usage": true})
        );
    }
    // The conversions the upstream saw for the tool result turn.
    let seen = fake
        .received()
        .into_iter()
        .find(|r| {
            r.body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
        })
        .expect("a tool turn");
    let msgs = seen.body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "get_weather");
    assert_eq!(
        msgs[2],
        json!({"role": "tool", "tool_call_id": "call_fake_1", "content": "sunny 21C"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_silent_past_the_idle_timeout_ends_the_stream_with_an_error_event() {
    // The fake pauses 3 s between events; the channel's idle timeout is 2 s.
    let (relay, _fake) = setup(Switches {
        event_pause: Duration::from_millis(3000),
        ..Switches::default()
    })
    .await;
    let body = json!({"model": "native-chat", "max_tokens": 8, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200);
    let evs = events(&res.body);
    assert_eq!(evs[0].0, "message_start");
    let (name, data) = evs.last().unwrap();
    assert_eq!(name, "error", "{}", res.text());
    assert_eq!(data["error"]["type"], "timeout_error");
}

/// A key's quota covers one message's estimate but not two: while one message waits on its
/// upstream, a second is refused with 402; when the first client goes away before the answer,
/// nothing is charged and its reservation is released, so the next message goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_hold_the_estimate_while_a_message_runs() {
    let fake = FakeChat::start(Switches {
        slow_first_byte: Some(Duration::from_secs(60)),
        ..Switches::default()
    })
    .await;
    // A longer first-byte timeout than the test runs, so only the client's leaving ends it.
    let relay = Relay::start(&chat_config(
        &fake.base,
        &fake.base,
        "first_byte_timeout_secs = 120",
    ))
    .await;
    // max_tokens 64 at 0.3 credits per output token: an estimate of about 21 credits.
    let (key_id, secret) = relay.new_key("chat", Some(30)).await;
    let body = json!({"model": "native-chat", "max_tokens": 64,
        "messages": [{"role": "user", "content": "anyone there"}]});
    let conn = crate::harness::message_held_open(&relay.base, &secret, &body).await;
    let fake_ref = &fake;
    poll_until(Duration::from_secs(10), || async move {
        (!fake_ref.received().is_empty()).then_some(())
    })
    .await
    .expect("the message reached the upstream");
    let second = relay
        .call_as(
            &secret,
            Method::POST,
            "/v1/messages",
            Body::Json(body.clone()),
            &[VERSION],
        )
        .await;
    assert_vendor(&second, 402, "billing_error", "this message may cost");

    drop(conn);
    fake.set(Switches::default());
    let relay_ref = &relay;
    let (secret_ref, body_ref) = (&secret, &body);
    poll_until(Duration::from_secs(10), || async move {
        let res = relay_ref
            .call_as(
                secret_ref,
                Method::POST,
                "/v1/messages",
                Body::Json(body_ref.clone()),
                &[VERSION],
            )
            .await;
        (res.status == 200).then_some(())
    })
    .await
    .expect("the reservation was released");
    let key_ref = &key_id;
    let entries = poll_until(Duration::from_secs(5), || async move {
        let res = relay_ref
            .admin(
                Method::GET,
                &format!("/admin/keys/{key_ref}/ledger"),
                Body::Empty,
            )
            .await;
        let e = res.json()["data"].as_array().cloned().unwrap_or_default();
        (!e.is_empty()).then_some(e)
    })
    .await
    .expect("the good message's charge");
    // Only the message that was answered is charged.
    assert_eq!(kinds(&entries).len(), 1, "{entries:?}");
    assert_eq!(entries[0]["kind"], "charge");
}

/// Charges are written in batches after their messages end, without a flush of their own; a
/// clean stop right after a run of answered messages still leaves every charge in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_message_is_charged_even_when_the_relay_stops_at_once() {
    let relay = Relay::start("").await;
    let key = relay.key.clone();
    // Streamed: the charge is queued by the relaying task after the last byte went out.
    let body = json!({"model": "sim-chat", "max_tokens": 16, "stream": true,
        "messages": [{"role": "user", "content": "count me"}]});
    for _ in 0..24 {
        let res = message(&relay, body.clone()).await;
        assert_eq!(res.status, 200, "{}", res.text());
    }
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), "").await;
    let k = kinds(&ledger(&relay).await);
    assert_eq!(k.len(), 24, "{k:?}");
    assert!(
        k.iter()
            .all(|(kind, amount)| kind == "charge" && *amount < 0),
        "{k:?}"
    );
}

/// An upstream that pauses between events longer than `server.stream_ping_ms`: the client gets
/// `ping` events in the gaps, each whole and between two events, and the stream is otherwise
/// the upstream's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_gets_pings_in_between_its_events() {
    let fake = FakeChat::start(Switches {
        event_pause: Duration::from_millis(150),
        ..Switches::default()
    })
    .await;
    let config = format!(
        "[server]\nstream_ping_ms = 50\n{}",
        chat_config(&fake.base, &fake.base, TIMEOUTS)
    );
    let relay = Relay::start(&config).await;
    let body = json!({"model": "native-chat", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "take your time"}]});
    let res = message(&relay, body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let evs = events(&res.body);
    let pings = evs.iter().filter(|(name, _)| name == "ping").count();
    assert!(pings >= 2, "no pings in the gaps: {}", res.text());
    for (name, data) in evs.iter().filter(|(name, _)| name == "ping") {
        assert_eq!(data, &json!({"type": "ping"}), "{name}");
    }
    assert_eq!(evs.first().unwrap().0, "message_start");
    assert_eq!(evs.last().unwrap().0, "message_stop");
    // Without the pings, the bytes are the upstream's.
    let direct = raw_stream(
        &format!("{}/v1/messages", fake.base),
        &json!({"model": "native-chat", "max_tokens": 64, "stream": true,
            "messages": [{"role": "user", "content": "take your time"}]}),
        &[VERSION],
    )
    .await;
    let ping = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    assert_eq!(
        res.text().replace(ping, ""),
        String::from_utf8_lossy(&direct.1)
    );
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
