//! Conversion to and from chat completions: requests, whole answers, and streams with their
//! block indexes and failures.

use serde_json::{Value, json};

use super::support::{req, with};
use crate::events::StreamEvent;
use crate::openai::{ChatStream, ConvertError, from_chat_response, to_chat_request};
use crate::types::StopReason;

#[test]
fn requests_convert_to_chat_completions() {
    let r = req(json!({
    "model": "m", "max_tokens": 100, "system": "be brief", "temperature": 0.5, "top_k": 3,
    "stop_sequences": ["END"], "stream": true, "metadata": {"user_id": "u1"},
    "tools": [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
              {"type": "web_search_20250305", "name": "web_search"}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}, {"type": "text", "text": "thanks"}]},
        {"role": "assistant", "content": "you are welcome"},
        {"role": "user", "content": "bye"}
    ]}));
    let chat = to_chat_request(&r, "upstream-m");
    let expected = json!({
    "model": "upstream-m", "max_tokens": 100, "temperature": 0.5, "stop": ["END"],
    "stream": true, "stream_options": {"include_usage": true}, "user": "u1",
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": "required", "parallel_tool_calls": false,
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "checking", "tool_calls": [{"id": "toolu_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "you are welcome"},
        {"role": "user", "content": "bye"}
    ]});
    assert_eq!(chat, expected);
    let forced = req(with(
        json!({"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "f"}}),
    ));
    assert_eq!(
        to_chat_request(&forced, "x")["tool_choice"],
        json!({"type": "function", "function": {"name": "f"}})
    );
}

#[test]
fn whole_answers_convert_back() {
    let r = req(with(json!({"stop_sequences": ["STOP"]})));
    let cases: Vec<(Value, Value)> = vec![
        (
            json!({"choices": [{"message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 12, "completion_tokens": 3}}),
            json!({"content": [{"type": "text", "text": "Hi!"}], "stop_reason": "end_turn", "stop_sequence": null,
                   "usage": {"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
        ),
        (
            json!({"choices": [{"message": {"content": "cut"}, "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 10}}}),
            json!({"content": [{"type": "text", "text": "cut"}], "stop_reason": "max_tokens", "stop_sequence": null,
                   "usage": {"input_tokens": 2, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 10}}),
        ),
        (
            json!({"choices": [{"message": {"content": "a"}, "finish_reason": "stop", "stop_reason": "STOP"}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
            json!({"content": [{"type": "text", "text": "a"}], "stop_reason": "stop_sequence", "stop_sequence": "STOP",
                   "usage": {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
        ),
        (
            json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}],
                   "stop_reason": "tool_use", "stop_sequence": null,
                   "usage": {"input_tokens": 7, "output_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
        ),
    ];
    for (answer, expected) in cases {
        let message = from_chat_response(&answer, "msg_9", "conv", &r, 7).unwrap();
        let v = serde_json::to_value(&message).unwrap();
        assert_eq!(v["id"], "msg_9");
        assert_eq!(v["type"], "message");
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["model"], "conv");
        for key in ["content", "stop_reason", "stop_sequence", "usage"] {
            assert_eq!(v[key], expected[key], "{key} of {answer}");
        }
    }
    let bad = json!({"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}}]});
    assert!(matches!(
        from_chat_response(&bad, "m", "m", &r, 0),
        Err(ConvertError::BadArguments { .. })
    ));
    assert_eq!(
        from_chat_response(&json!({"choices": []}), "m", "m", &r, 0),
        Err(ConvertError::NoChoices)
    );
}

/// Runs chunks through the state machine and returns the events as `(name, index)` pairs.
fn run_stream(chunks: &[Value]) -> (Vec<StreamEvent>, Vec<(String, Option<usize>)>) {
    let r = req(with(json!({"stream": true, "stop_sequences": ["STOP"]})));
    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    let mut events = s.start();
    for chunk in chunks {
        events.extend(s.data(&chunk.to_string()).unwrap());
    }
    events.extend(s.data("[DONE]").unwrap());
    events.extend(s.finish().unwrap());
    let shape = events
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap();
            (
                e.name().to_owned(),
                v.get("index").and_then(Value::as_u64).map(|i| i as usize),
            )
        })
        .collect();
    (events, shape)
}

fn shape(pairs: &[(&str, Option<usize>)]) -> Vec<(String, Option<usize>)> {
    pairs.iter().map(|(n, i)| (n.to_string(), *i)).collect()
}

#[test]
fn streams_convert_with_correct_block_indexes() {
    let chunk = |delta: Value, finish: Value| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let (events, got) = run_stream(&[
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Let me "}), Value::Null),
        chunk(json!({"content": "check."}), Value::Null),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": \"Pa"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "ris\"}"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "get_time", "arguments": "{}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9}}),
    ]);
    assert_eq!(
        got,
        shape(&[
            ("message_start", None),
            ("ping", None),
            ("content_block_start", Some(0)),
            ("content_block_delta", Some(0)),
            ("content_block_delta", Some(0)),
            ("content_block_stop", Some(0)),
            ("content_block_start", Some(1)),
            ("content_block_delta", Some(1)),
            ("content_block_delta", Some(1)),
            ("content_block_stop", Some(1)),
            ("content_block_start", Some(2)),
            ("content_block_delta", Some(2)),
            ("content_block_stop", Some(2)),
            ("message_delta", None),
            ("message_stop", None),
        ])
    );
    match &events[events.len() - 2] {
        StreamEvent::MessageDelta { delta, usage } => {
            assert_eq!(delta.stop_reason, Some(StopReason::ToolUse));
            assert_eq!(usage.output_tokens, 9);
            assert_eq!(usage.input_tokens, Some(20));
        }
        other => panic!("{other:?}"),
    }
    // A stop string named by the upstream.
    let (events, _) = run_stream(&[
        chunk(json!({"content": "a b"}), Value::Null),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "STOP"}]}),
    ]);
    match &events[events.len() - 2] {
        StreamEvent::MessageDelta { delta, usage } => {
            assert_eq!(delta.stop_reason, Some(StopReason::StopSequence));
            assert_eq!(delta.stop_sequence.as_deref(), Some("STOP"));
            // No usage from the upstream: the relay's own count.
            assert_eq!(usage.output_tokens, 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cut_or_failing_stream_is_an_error() {
    let r = req(with(json!({"stream": true})));
    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    s.data(&json!({"choices": [{"delta": {"content": "par"}}]}).to_string())
        .unwrap();
    assert_eq!(s.finish(), Err(ConvertError::Truncated));
    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    assert!(matches!(
        s.data(&json!({"error": {"message": "boom"}}).to_string()),
        Err(ConvertError::Upstream(m)) if m == "boom"
    ));
}

/// Nothing after `[DONE]` counts: a consumer that stops reading at `[DONE]` and one that gets
/// more events in the same chunk see the same stream.
#[test]
fn nothing_after_done_counts() {
    let r = req(with(json!({"stream": true})));
    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    s.data(&json!({"choices": [{"delta": {"content": "hi"}}]}).to_string())
        .unwrap();
    assert_eq!(s.data("[DONE]"), Ok(Vec::new()));
    assert_eq!(
        s.data(&json!({"error": {"message": "boom"}}).to_string()),
        Ok(Vec::new())
    );
    assert_eq!(
        s.data(&json!({"choices": [{"delta": {"content": "more"}}]}).to_string()),
        Ok(Vec::new())
    );
    assert_eq!(s.data("not json"), Ok(Vec::new()));
    assert_eq!(s.usage().output_tokens, crate::tokens::count_text("hi"));
}

/// A tool call whose arguments go on after another block began (text, or another call) fails
/// the stream: a delta of a closed block is not a valid event sequence. Calls one after
/// another convert as before.
#[test]
fn a_tool_call_resumed_after_another_block_is_an_error() {
    let r = req(with(json!({"stream": true})));
    let call = |index: u64, name: Option<&str>, arguments: &str| {
        let mut function = json!({"arguments": arguments});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        json!({"choices": [{"delta": {"tool_calls": [{"index": index, "function": function}]}}]})
            .to_string()
    };
    let text = json!({"choices": [{"delta": {"content": "Let me check."}}]}).to_string();

    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    s.data(&call(0, Some("get_weather"), "")).unwrap();
    s.data(&text).unwrap();
    assert!(matches!(
        s.data(&call(0, None, "{\"city\": \"Paris\"}")),
        Err(ConvertError::Invalid(_))
    ));

    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    s.data(&call(0, Some("a"), "")).unwrap();
    s.data(&call(1, Some("b"), "{}")).unwrap();
    assert!(matches!(
        s.data(&call(0, None, "{}")),
        Err(ConvertError::Invalid(_))
    ));

    let mut s = ChatStream::new("msg_1", "conv", &r, 5);
    let mut events = Vec::new();
    for piece in [
        call(0, Some("a"), "{\"x\":"),
        call(0, None, "1}"),
        call(1, Some("b"), "{}"),
    ] {
        events.extend(s.data(&piece).unwrap());
    }
    events.extend(s.data(&call(1, None, "")).unwrap());
    let indexes: Vec<(&str, usize)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ContentBlockStart { index, .. } => Some(("start", *index)),
            StreamEvent::ContentBlockDelta { index, .. } => Some(("delta", *index)),
            StreamEvent::ContentBlockStop { index } => Some(("stop", *index)),
            _ => None,
        })
        .collect();
    assert_eq!(
        indexes,
        [
            ("start", 0),
            ("delta", 0),
            ("delta", 0),
            ("stop", 0),
            ("start", 1),
            ("delta", 1)
        ]
    );
}
