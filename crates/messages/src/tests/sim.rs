//! The `sim-chat` model: deterministic answers within the request's limits, and its stream
//! events written as SSE and read back.

use serde_json::{Value, json};

use super::support::{req, with};
use crate::events::{Delta, StreamEvent};
use crate::sse::SseDecoder;
use crate::types::{ContentBlock, KnownBlock, StopReason};
use crate::{events, sim};

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
