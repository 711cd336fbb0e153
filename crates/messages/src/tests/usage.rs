//! Reading an answer's usage: from its JSON text without building the answer, agreeing with
//! the reading from a parsed value.

use serde_json::Value;

use crate::types::{Usage, usage_in, usage_of};

#[test]
fn usage_is_read_from_the_text_as_from_the_value() {
    let cases: [(&str, Option<Usage>); 6] = [
        (
            r#"{"id":"msg_1","content":[{"type":"text","text":"hi \"usage\""}],
                "usage":{"input_tokens":12,"output_tokens":7,"cache_read_input_tokens":3},
                "stop_reason":"end_turn"}"#,
            Some(Usage {
                input_tokens: 12,
                output_tokens: 7,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 3,
            }),
        ),
        (r#"{"id":"msg_1"}"#, None),
        (r#"{"usage":null}"#, None),
        (r#"{"usage":{"input_tokens":1}}"#, None),
        (r#"{"usage":{"input_tokens":-1,"output_tokens":2}}"#, None),
        ("not json", None),
    ];
    for (body, want) in cases {
        assert_eq!(usage_in(body.as_bytes()), want, "{body}");
        if let Ok(value) = serde_json::from_str::<Value>(body) {
            assert_eq!(usage_of(&value), want, "{body}");
        }
    }
}
