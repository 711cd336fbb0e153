//! `/v1/messages`, `count_tokens` and `/v1/models`: answers, faults in the vendor's shape,
//! streams and their events, and billing of messages.

use serde_json::{Value, json};

use crate::conformance::checks;
use crate::conformance::client::Req;
use crate::conformance::suite::Suite;

fn chat(extra: Value) -> Value {
    let mut b = json!({"model": "sim-chat", "max_tokens": 20, "messages": [{"role": "user", "content": "Hello there relay"}]});
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v.is_null() {
                o.remove(k);
            } else {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    b
}

pub async fn messages(suite: &mut Suite) {
    let s = "SPEC§4.5";
    let key = suite.args.key.clone();
    let msg = |body: &Value| {
        Req::post("/v1/messages")
            .bearer(&key)
            .header("vendor-version", "2023-06-01")
            .json(body)
    };
    let r = suite
        .send(
            Req::post("/v1/messages")
                .bearer(&key)
                .json(&chat(json!({}))),
        )
        .await;
    suite.check(
        "SPEC§9",
        "messages without vendor-version: 400",
        checks::vendor_error(
            &r,
            400,
            "invalid_request_error",
            |m| m == "vendor-version: header is required",
            "\"vendor-version: header is required\"",
        ),
    );
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "max_tokens 0",
            chat(json!({"max_tokens": 0})),
            "max_tokens:",
        ),
        (
            "max_tokens missing",
            chat(json!({"max_tokens": null})),
            "max_tokens:",
        ),
        (
            "temperature 1.5",
            chat(json!({"temperature": 1.5})),
            "temperature:",
        ),
        (
            "temperature -0.1",
            chat(json!({"temperature": -0.1})),
            "temperature:",
        ),
        (
            "messages missing",
            chat(json!({"messages": null})),
            "messages",
        ),
        ("model missing", chat(json!({"model": null})), "model"),
        (
            "stop_sequences a string",
            chat(json!({"stop_sequences": "x"})),
            "stop_sequences:",
        ),
    ];
    for (name, body, prefix) in cases {
        let r = suite.send(msg(&body)).await;
        suite.check(
            s,
            &format!("messages {name}: 400 naming the field"),
            checks::vendor_error(
                &r,
                400,
                "invalid_request_error",
                |m| m.starts_with(prefix),
                &format!("\"{prefix}...\""),
            ),
        );
    }
    let r = suite
        .send(msg(&chat(json!({"model": "no-such-model"}))))
        .await;
    suite.check(
        "CONTRACT§3",
        "messages unknown model: 400 invalid model",
        checks::vendor_error(
            &r,
            400,
            "invalid_request_error",
            |m| m == "invalid model",
            "\"invalid model\"",
        ),
    );

    let r = suite.send(msg(&chat(json!({"temperature": 1})))).await;
    let b = r.json();
    let usage_ok = [
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .all(|f| b["usage"][f].is_u64());
    let v = checks::status(&r, 200).and_then(|()| {
        if b["type"] == "message" && b["role"] == "assistant" && b["id"].is_string() && b["content"][0]["type"] == "text" && b["content"][0]["text"].is_string() && b["stop_reason"] == "end_turn" && usage_ok {
            Ok(())
        } else {
            Err(format!("expected a message (type, role, content text, stop_reason end_turn, four usage integers), got {}", r.describe()))
        }
    });
    suite.check(s, "messages answer shape (Bearer)", v);
    let r = suite
        .send(
            Req::post("/v1/messages")
                .header("x-api-key", &key)
                .header("anthropic-version", "2023-06-01")
                .json(&chat(json!({}))),
        )
        .await;
    suite.check(
        "SPEC§5",
        "messages with x-api-key and anthropic-version",
        checks::status(&r, 200),
    );
    let r = suite.send(msg(&chat(json!({"stream": true})))).await;
    let v = checks::status(&r, 200)
        .and_then(|()| match r.header("content-type") {
            Some(t) if t.starts_with("text/event-stream") => Ok(()),
            other => Err(format!("expected text/event-stream, got {other:?}")),
        })
        .and_then(|()| checks::sse_grammar(&String::from_utf8_lossy(&r.body)).map(|_| ()));
    suite.check("CONTRACT§3", "stream event grammar", v);
    let r = suite
        .send(msg(&chat(json!({}))).header("x-relay-sim", "error=500"))
        .await;
    suite.check(
        "CONTRACT§0.1",
        "upstream failure: 500 api_error upstream error",
        checks::vendor_error(
            &r,
            500,
            "api_error",
            |m| m == "upstream error",
            "\"upstream error\"",
        ),
    );
    let v = match (
        r.header("x-should-retry"),
        r.header("retry-after").and_then(|v| v.parse::<u64>().ok()),
        r.header("retry-after-ms")
            .and_then(|v| v.parse::<u64>().ok()),
    ) {
        (Some("true"), Some(secs), Some(_)) if secs < 120 => Ok(()),
        (Some("false"), None, None) => Ok(()),
        other => Err(format!(
            "expected x-should-retry true with retry-after (< 120 s) and retry-after-ms, or false with neither, got {other:?}"
        )),
    };
    suite.check("CONTRACT§0.1a", "a 500 says whether to retry", v);
    let pad = "x".repeat(suite.args.max_body_bytes + 1024);
    let r = suite.send(msg(&chat(json!({"padding": pad})))).await;
    suite.check(
        "CONTRACT§0.2",
        "messages over max_body_bytes: 413 request_too_large",
        checks::vendor_error(
            &r,
            413,
            "request_too_large",
            |m| m == "Payload Too Large",
            "\"Payload Too Large\"",
        ),
    );
    let r = suite
        .send(
            Req::post("/v1/messages/count_tokens")
                .bearer(&key)
                .header("vendor-version", "2023-06-01")
                .json(&chat(json!({"max_tokens": null}))),
        )
        .await;
    suite.check(
        "CONTRACT§3",
        "count_tokens answers input_tokens",
        if r.json()["input_tokens"].is_u64() {
            Ok(())
        } else {
            Err(format!("expected input_tokens, got {}", r.describe()))
        },
    );
    let r = suite.send(Req::get("/v1/models").bearer(&key)).await;
    let listed = r.json()["data"]
        .as_array()
        .is_some_and(|d| d.iter().any(|m| m["id"] == "sim-chat"));
    suite.check(
        "CONTRACT§3",
        "models lists sim-chat",
        if listed {
            Ok(())
        } else {
            Err(format!("expected sim-chat, got {}", r.describe()))
        },
    );
    let r = suite.send(msg(&chat(json!({"max_tokens": 1})))).await;
    suite.check(
        "CONTRACT§3",
        "max_tokens cuts the answer: stop_reason max_tokens",
        checks::field(&r, "/stop_reason", &json!("max_tokens")),
    );
    let r = suite
        .send(msg(&chat(json!({"stream": true}))).header("x-relay-sim", "fail"))
        .await;
    let text = String::from_utf8_lossy(&r.body);
    let v = checks::status(&r, 200).and_then(|()| {
        if text.contains("event: error\n") && !text.contains("event: message_stop") {
            Ok(())
        } else {
            Err(format!(
                "expected a stream ending in an error event without message_stop, got {}",
                r.describe()
            ))
        }
    });
    suite.check(
        "CONTRACT§3",
        "a stream failing after it began ends with an error event",
        v,
    );
}
