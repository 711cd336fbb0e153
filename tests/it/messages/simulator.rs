//! The built-in `sim-chat` model: whole and streamed answers, stop rules and tools, simulated
//! failures, and the charge of every answered message, also across a stop.

use std::time::Duration;

use serde_json::json;

use super::{VERSION, assert_vendor, events, kinds, ledger, message, post, reassemble};
use crate::harness::{Relay, poll_until};

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
