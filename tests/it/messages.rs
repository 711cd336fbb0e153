//! The native messages endpoints: validation, auth and errors in the vendor's shape, the
//! simulator, pass-through to a native upstream (byte for byte), conversion to and from chat
//! completions, upstream failures, cancellation and billing. The tests are in the modules
//! below, by area; here is what they share.

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
    relay.ledger(&id).await
}

/// The fake, answering every request with `status`.
fn failing(status: u16) -> Switches {
    Switches {
        fail_status: Some(status),
        ..Switches::default()
    }
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

mod bounds;
mod contract;
mod conversion;
mod simulator;
mod upstreams;
