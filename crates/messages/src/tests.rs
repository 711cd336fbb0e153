//! Data-driven tests: one `check` per area, tables of inputs and expectations.

use error_codes::ErrorCode;
use serde_json::{Value, json};

use crate::events::{Delta, StreamEvent};
use crate::openai::{ChatStream, ConvertError, from_chat_response, to_chat_request};
use crate::sse::SseDecoder;
use crate::types::{ContentBlock, KnownBlock, MessagesRequest, StopReason};
use crate::validate::{Endpoint, validate};
use crate::{events, sim};

fn base() -> Value {
    json!({"model": "sim-chat", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
}

/// `base()` with `patch` laid over it (a `null` in `patch` removes the key).
fn with(patch: Value) -> Value {
    let mut body = base();
    for (k, v) in patch.as_object().cloned().unwrap_or_default() {
        if v == json!("<remove>") {
            body.as_object_mut().unwrap().remove(&k);
        } else {
            body[k] = v;
        }
    }
    body
}

/// Refused with 400 and a message that starts with `prefix` (which names the field).
fn check_err(body: Value, prefix: &str) {
    let err = validate(&body, Endpoint::Messages).expect_err(&format!("should be refused: {body}"));
    assert_eq!(err.code, ErrorCode::InvalidRequest, "{body}");
    let vendor = err.vendor_body("req_x");
    let message = vendor["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(prefix),
        "{body}\n  message {message:?}\n  expected to start with {prefix:?}"
    );
    assert_eq!(vendor["error"]["type"], "invalid_request_error");
}

#[test]
fn every_rule_of_the_table_refuses_with_the_field_named() {
    let cases: Vec<(Value, &str)> = vec![
        (json!([1, 2]), "body: must be a JSON object"),
        (json!("x"), "body: must be a JSON object"),
        (with(json!({"model": "<remove>"})), "model: is required"),
        (with(json!({"model": 5})), "model: must be a string"),
        (with(json!({"model": ""})), "model: must not be empty"),
        (
            with(json!({"messages": "<remove>"})),
            "messages: is required",
        ),
        (with(json!({"messages": {}})), "messages: must be an array"),
        (
            with(json!({"messages": "hi"})),
            "messages: must be an array",
        ),
        (
            with(json!({"messages": []})),
            "messages: must contain at least one",
        ),
        (
            with(json!({"messages": [5]})),
            "messages.0: must be an object",
        ),
        (
            with(json!({"messages": [{"content": "x"}]})),
            "messages.0.role: is required",
        ),
        (
            with(json!({"messages": [{"role": "system", "content": "x"}]})),
            "messages.0.role: must be \"user\" or \"assistant\", got \"system\"",
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": "x"}, {"role": "bot", "content": "x"}]}),
            ),
            "messages.1.role: must be",
        ),
        (
            with(json!({"messages": [{"role": "user"}]})),
            "messages.0.content: is required",
        ),
        (
            with(json!({"messages": [{"role": "user", "content": 5}]})),
            "messages.0.content: must be a string or an array",
        ),
        (
            with(json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]})),
            "messages.0.content.0.type: is required",
        ),
        (
            with(json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]})),
            "messages.0.content.0.text: is required",
        ),
        (
            with(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})),
            "messages.0.content.0.text: must be a string",
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}]}]}),
            ),
            "messages.0.content.0.source.media_type: is required",
        ),
        (
            with(
                json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": "x"}]}]}),
            ),
            "messages.0.content.0.input: must be an object",
        ),
        (
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}),
            ),
            "messages.0.content.0.tool_use_id: is required",
        ),
        (
            with(
                json!({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}]}),
            ),
            "messages.0.content.0.signature: is required",
        ),
        (
            with(json!({"system": 5})),
            "system: must be a string or an array",
        ),
        (
            with(json!({"system": [{"type": "image", "source": {"type": "url", "url": "u"}}]})),
            "system.0.type: must be \"text\"",
        ),
        (
            with(json!({"max_tokens": "<remove>"})),
            "max_tokens: is required",
        ),
        (with(json!({"max_tokens": null})), "max_tokens: is required"),
        (
            with(json!({"max_tokens": 0})),
            "max_tokens: must be an integer >= 1, got 0",
        ),
        (
            with(json!({"max_tokens": -5})),
            "max_tokens: must be an integer >= 1",
        ),
        (
            with(json!({"max_tokens": 2.5})),
            "max_tokens: must be an integer >= 1",
        ),
        (
            with(json!({"max_tokens": "64"})),
            "max_tokens: must be an integer >= 1",
        ),
        (
            with(json!({"temperature": 1.5})),
            "temperature: must be a number from 0 to 1, got 1.5",
        ),
        (
            with(json!({"temperature": -0.1})),
            "temperature: must be a number from 0 to 1",
        ),
        (
            with(json!({"temperature": "hot"})),
            "temperature: must be a number from 0 to 1",
        ),
        (with(json!({"top_p": "x"})), "top_p: must be a number"),
        (
            with(json!({"top_k": -1})),
            "top_k: must be a non-negative integer",
        ),
        (
            with(json!({"top_k": 1.5})),
            "top_k: must be a non-negative integer",
        ),
        (with(json!({"stream": "yes"})), "stream: must be a boolean"),
        (
            with(json!({"stop_sequences": "x"})),
            "stop_sequences: must be an array of strings",
        ),
        (
            with(json!({"stop_sequences": [1]})),
            "stop_sequences.0: must be a string",
        ),
        (
            with(json!({"stop_sequences": ["ok", " "]})),
            "stop_sequences.1: must contain",
        ),
        (with(json!({"tools": {}})), "tools: must be an array"),
        (with(json!({"tools": [5]})), "tools.0: must be an object"),
        (
            with(json!({"tools": [{"input_schema": {}}]})),
            "tools.0.name: is required",
        ),
        (
            with(json!({"tools": [{"name": "f"}]})),
            "tools.0.input_schema: is required",
        ),
        (
            with(json!({"tools": [{"name": "f", "input_schema": "x"}]})),
            "tools.0.input_schema: must be a JSON schema object",
        ),
        (
            with(json!({"tools": [{"name": "f", "description": 1, "input_schema": {}}]})),
            "tools.0.description: must be a string",
        ),
        (
            with(json!({"tool_choice": "auto"})),
            "tool_choice: must be an object",
        ),
        (
            with(json!({"tool_choice": {}})),
            "tool_choice.type: is required",
        ),
        (
            with(json!({"tool_choice": {"type": "maybe"}})),
            "tool_choice.type: must be",
        ),
        (
            with(json!({"tool_choice": {"type": "tool"}})),
            "tool_choice.name: is required",
        ),
        (
            with(json!({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "no"}})),
            "tool_choice.disable_parallel_tool_use: must be a boolean",
        ),
        (
            with(json!({"thinking": true})),
            "thinking: must be an object",
        ),
        (with(json!({"thinking": {}})), "thinking.type: is required"),
        (
            with(json!({"thinking": {"type": "enabled"}})),
            "thinking.budget_tokens: is required",
        ),
        (
            with(json!({"thinking": {"type": "enabled", "budget_tokens": 0}})),
            "thinking.budget_tokens: must be an integer >= 1",
        ),
        (
            with(json!({"metadata": "x"})),
            "metadata: must be an object",
        ),
        (
            with(json!({"metadata": {"user_id": 5}})),
            "metadata.user_id: must be a string",
        ),
    ];
    for (body, prefix) in cases {
        check_err(body, prefix);
    }
}

#[test]
fn the_param_is_the_top_level_field() {
    let err = validate(
        &with(json!({"messages": [{"role": "system", "content": "x"}]})),
        Endpoint::Messages,
    )
    .unwrap_err();
    assert_eq!(err.param.as_deref(), Some("messages"));
}

#[test]
fn good_bodies_pass_and_keep_unknown_fields() {
    let cases = vec![
        base(),
        with(json!({"temperature": 0, "top_p": 0.9, "top_k": 5, "stream": true})),
        with(json!({"temperature": 1, "system": "be brief", "stop_sequences": []})),
        with(
            json!({"system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]}),
        ),
        with(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "d"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "ok"}], "is_error": false}]}
        ]})),
        with(
            json!({"tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}},
                               {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
                    "tool_choice": {"type": "tool", "name": "f"}}),
        ),
        with(
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u"}}),
        ),
        with(
            json!({"temperature": null, "tools": null, "service_tier": "auto", "container": {"x": 1}}),
        ),
    ];
    for body in cases {
        let req = validate(&body, Endpoint::Messages)
            .unwrap_or_else(|e| panic!("{body}\nrefused: {}", e.detail));
        // Unknown fields survive, at every level.
        let back = serde_json::to_value(&req).unwrap();
        for key in ["service_tier", "container"] {
            assert_eq!(back.get(key), body.get(key), "{key} of {body}");
        }
    }
    let body = with(
        json!({"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "text"}}, {"type": "text", "text": "t", "citations": []}]}]}),
    );
    let back = serde_json::to_value(validate(&body, Endpoint::Messages).unwrap()).unwrap();
    assert_eq!(back["system"], body["system"]);
    assert_eq!(back["messages"], body["messages"]);
}

#[test]
fn count_tokens_needs_no_max_tokens() {
    let body = with(json!({"max_tokens": "<remove>"}));
    assert!(validate(&body, Endpoint::CountTokens).is_ok());
    assert!(validate(&body, Endpoint::Messages).is_err());
}

fn req(body: Value) -> MessagesRequest {
    validate(&body, Endpoint::Messages).expect("valid")
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ContentBlockDelta {
                delta: Delta::TextDelta { text },
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_simulator_is_deterministic_and_honours_the_limits() {
    struct Case {
        body: Value,
        text: &'static str,
        stop: StopReason,
        sequence: Option<&'static str>,
    }
    let cases = [
        Case {
            body: with(json!({"messages": [{"role": "user", "content": "Hello there, relay!"}]})),
            text: "You said Hello there relay",
            stop: StopReason::EndTurn,
            sequence: None,
        },
        Case {
            body: with(
                json!({"max_tokens": 3, "messages": [{"role": "user", "content": "one two three four"}]}),
            ),
            text: "You said one",
            stop: StopReason::MaxTokens,
            sequence: None,
        },
        Case {
            body: with(
                json!({"stop_sequences": ["zzz", "three"], "messages": [{"role": "user", "content": "one two three four"}]}),
            ),
            text: "You said one two ",
            stop: StopReason::StopSequence,
            sequence: Some("three"),
        },
        Case {
            // The stop string lies beyond max_tokens: max_tokens wins.
            body: with(
                json!({"max_tokens": 3, "stop_sequences": ["four"], "messages": [{"role": "user", "content": "one two three four"}]}),
            ),
            text: "You said one",
            stop: StopReason::MaxTokens,
            sequence: None,
        },
        Case {
            body: with(json!({"messages": [
                {"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "18 degrees"}]}]})),
            text: "Tool result received 18 degrees",
            stop: StopReason::EndTurn,
            sequence: None,
        },
    ];
    for case in cases {
        let r = req(case.body.clone());
        let message = sim::response(&r, "msg_1");
        let text = message
            .content
            .first()
            .and_then(ContentBlock::as_text)
            .unwrap_or("");
        assert_eq!(text, case.text, "{}", case.body);
        assert_eq!(message.stop_reason, Some(case.stop), "{}", case.body);
        assert_eq!(message.stop_sequence.as_deref(), case.sequence);
        assert_eq!(message.usage.output_tokens, crate::tokens::count_text(text));
        assert_eq!(message.usage.input_tokens, crate::tokens::count_request(&r));
        assert!(message.usage.output_tokens <= r.max_tokens.unwrap());
        // The stream says the same, word by word.
        let events = sim::stream(&r, "msg_1");
        assert_eq!(text_of(&events), case.text);
        let deltas = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::ContentBlockDelta { .. }))
            .count();
        assert_eq!(deltas, case.text.split_inclusive(' ').count());
        match events.iter().rev().nth(1) {
            Some(StreamEvent::MessageDelta { delta, usage }) => {
                assert_eq!(delta.stop_reason, Some(case.stop));
                assert_eq!(usage.output_tokens, message.usage.output_tokens);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_forced_tool_choice_gives_a_tool_use_block() {
    let r = req(with(json!({
        "messages": [{"role": "user", "content": "weather in Paris"}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}}}}],
        "tool_choice": {"type": "tool", "name": "get_weather"}})));
    let message = sim::response(&r, "msg_1");
    assert_eq!(message.stop_reason, Some(StopReason::ToolUse));
    match message.content.as_slice() {
        [
            ContentBlock::Known(KnownBlock::ToolUse {
                name, input, id, ..
            }),
        ] => {
            assert_eq!(name, "get_weather");
            assert_eq!(
                input,
                &json!({"city": "weather in Paris", "unit": "c", "days": 1})
            );
            assert!(id.starts_with("toolu_"));
        }
        other => panic!("{other:?}"),
    }
    // Streamed: the pieces of input_json_delta join to the same input.
    let events = sim::stream(&r, "msg_1");
    let json_text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ContentBlockDelta {
                delta: Delta::InputJsonDelta { partial_json },
                ..
            } => Some(partial_json.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json_text).unwrap(),
        json!({"city": "weather in Paris", "unit": "c", "days": 1})
    );
}

#[test]
fn every_event_has_its_name_line_and_decodes_back() {
    let r = req(with(json!({"stream": true})));
    let events = sim::stream(&r, "msg_1");
    let text = events::encode_all(&events);
    let decoded = SseDecoder::new().feed(text.as_bytes());
    assert_eq!(decoded.len(), events.len());
    for (event, sse) in events.iter().zip(&decoded) {
        assert_eq!(sse.event.as_deref(), Some(event.name()));
        let back: StreamEvent = serde_json::from_str(&sse.data).unwrap();
        assert_eq!(&back, event);
    }
}

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
