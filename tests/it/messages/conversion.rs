//! Conversion to and from chat completions: each case of the matrix, whole and streamed.

use serde_json::{Value, json};

use super::{events, message, reassemble, setup};
use crate::fake_chat::{Switches, UPSTREAM_KEY};

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
