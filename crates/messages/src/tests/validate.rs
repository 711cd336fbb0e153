//! The validator: every rule of SPEC §4.5's table refuses with the field named first, and good
//! bodies pass with their unknown fields kept.

use error_codes::ErrorCode;
use serde_json::{Value, json};

use super::support::{base, with};
use crate::validate::{Endpoint, validate};

/// Refused with 400 and a message that starts with `prefix` (which names the field).
fn check_err(body: Value, prefix: &str) {
    let err = validate(body.clone(), Endpoint::Messages)
        .expect_err(&format!("should be refused: {body}"));
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
        with(json!({"messages": [{"role": "system", "content": "x"}]})),
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
        let req = validate(body.clone(), Endpoint::Messages)
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
    let back = serde_json::to_value(validate(body.clone(), Endpoint::Messages).unwrap()).unwrap();
    assert_eq!(back["system"], body["system"]);
    assert_eq!(back["messages"], body["messages"]);
}

#[test]
fn count_tokens_needs_no_max_tokens() {
    let body = with(json!({"max_tokens": "<remove>"}));
    assert!(validate(body.clone(), Endpoint::CountTokens).is_ok());
    assert!(validate(body.clone(), Endpoint::Messages).is_err());
}
