//! Reading an answer's usage: from its JSON text without building the answer, agreeing with
//! the reading from a parsed value.

use serde_json::Value;

use crate::types::{Usage, usage_in, usage_of};

/// Each body's usage, from its text and (where it is JSON) from its parsed value, is `want`.
fn agree(cases: &[(&str, Option<Usage>)]) {
    for (body, want) in cases {
        assert_eq!(usage_in(body.as_bytes()), *want, "{body}");
        if let Ok(value) = serde_json::from_str::<Value>(body) {
            assert_eq!(usage_of(&value), *want, "{body}");
        }
    }
}

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
    agree(&cases);
}

/// The scan finds the top-level member only: not one nested in the content or named inside a
/// string, whatever the escapes, spaces and order; and it agrees with the whole parse.
#[test]
fn the_scan_finds_only_the_top_level_usage() {
    let usage = |i: u64, o: u64| Usage {
        input_tokens: i,
        output_tokens: o,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
    };
    let cases: [(&str, Option<Usage>); 9] = [
        (
            r#"{"content":[{"type":"tool_use","input":{"usage":{"input_tokens":0,"output_tokens":0}}}],"usage":{"input_tokens":5,"output_tokens":6}}"#,
            Some(usage(5, 6)),
        ),
        (
            r#"{"usage":{"input_tokens":5,"output_tokens":6},"content":[{"type":"tool_use","input":{"usage":{"input_tokens":0,"output_tokens":0}}}]}"#,
            Some(usage(5, 6)),
        ),
        (
            r#"{"text":"\\\"usage\":{\"input_tokens\":0}","usage":{"input_tokens":1,"output_tokens":2}}"#,
            Some(usage(1, 2)),
        ),
        (
            " {\n \"a\" : [1, {\"b\": \"]}\"}] ,\t\"usage\" : { \"input_tokens\" : 3 , \"output_tokens\" : 4 , \"server_tool_use\": {\"web_search_requests\": 1} } } ",
            Some(usage(3, 4)),
        ),
        (
            r#"{"a":1.5e3,"b":true,"c":null,"usage":{"input_tokens":7,"output_tokens":8}}"#,
            Some(usage(7, 8)),
        ),
        (
            r#"{"content":[{"usage":{"input_tokens":1,"output_tokens":1}}]}"#,
            None,
        ),
        (
            r#"{"us\u0061ge":{"input_tokens":9,"output_tokens":9}}"#,
            Some(usage(9, 9)),
        ),
        (r#"[{"input_tokens":1,"output_tokens":2}]"#, None),
        (r#"{"usage":{"input_tokens":1,"output_tokens":2}"#, None),
    ];
    agree(&cases);
}

/// A count the decoder refuses (past `u64`, a fraction, an exponent, a string, a leading
/// zero, `null`, a required one missing) gives no usage, from the text as from the value;
/// `whole_number` (how a stream's counts are read) takes digits as JSON writes them that fit
/// a `u64`, and nothing else.
#[test]
fn counts_in_every_form_are_read_as_the_decoder_reads_them() {
    let with = |i: u64, o: u64, creation: u64, read: u64| Usage {
        input_tokens: i,
        output_tokens: o,
        cache_creation_input_tokens: creation,
        cache_read_input_tokens: read,
    };
    let cases: [(&str, Option<Usage>); 11] = [
        (
            r#"{"usage":{"output_tokens":0,"input_tokens":18446744073709551615}}"#,
            Some(with(u64::MAX, 0, 0, 0)),
        ),
        (
            r#"{"usage":{"input_tokens":1,"output_tokens":2,"cache_creation_input_tokens":30,"cache_read_input_tokens":4}}"#,
            Some(with(1, 2, 30, 4)),
        ),
        (
            r#"{"usage":{"input_tokens":18446744073709551616,"output_tokens":2}}"#,
            None,
        ),
        (r#"{"usage":{"input_tokens":1.5,"output_tokens":2}}"#, None),
        (r#"{"usage":{"input_tokens":1e2,"output_tokens":2}}"#, None),
        (r#"{"usage":{"input_tokens":"1","output_tokens":2}}"#, None),
        (r#"{"usage":{"input_tokens":01,"output_tokens":2}}"#, None),
        (
            r#"{"usage":{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":null}}"#,
            None,
        ),
        (r#"{"usage":{"input_tokens":1,"output_tokens":-0}}"#, None),
        (r#"{"usage":{"output_tokens":2}}"#, None),
        (
            r#"{"usage":{"input_tokens":1,"output_tokens":2,"other":{"input_tokens":9}}}"#,
            Some(with(1, 2, 0, 0)),
        ),
    ];
    agree(&cases);
    for (text, want) in [
        ("0", Some(0)),
        ("907", Some(907)),
        ("", None),
        ("00", None),
        ("1a", None),
    ] {
        assert_eq!(crate::scan::whole_number(text.as_bytes()), want, "{text}");
    }
}

/// Every value is skipped whole: the member after it is found.
#[test]
fn the_scan_skips_every_kind_of_value() {
    let values = [
        r#""""#,
        r#""a\"b\\""#,
        r#""\u00e9\n""#,
        "0",
        "-1.25e-3",
        "true",
        "false",
        "null",
        "[]",
        "{}",
        r#"[[], {}, "]", "}", {"x": ["{"]}]"#,
    ];
    for value in values {
        let body =
            format!(r#"{{"v": {value}, "usage": {{"input_tokens": 1, "output_tokens": 2}}}}"#);
        assert_eq!(
            crate::scan::member(body.as_bytes(), "v")
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            Some(value.to_owned()),
            "{body}"
        );
        assert!(usage_in(body.as_bytes()).is_some(), "{body}");
    }
}

/// `members` finds several keys in one pass, as `member` finds each; a string long enough
/// for the scan's second way of reading it ends where it should.
#[test]
fn members_reads_as_member_does() {
    let long = "x\\\"".repeat(20);
    let bodies = [
        format!(
            r#"{{"type": "message_start", "s": "{long}", "message": {{"usage": {{}}}}, "type": 2}}"#
        ),
        r#"{"usage": null}"#.to_owned(),
        r#"{"a": 1,}"#.to_owned(),
        "[1]".to_owned(),
        "{}".to_owned(),
    ];
    let keys = ["type", "message", "usage", "s"];
    for body in &bodies {
        let text = body.as_bytes();
        let one_by_one = keys.map(|k| crate::scan::member(text, k));
        match crate::scan::members(text, keys) {
            Some(found) => assert_eq!(found, one_by_one, "{body}"),
            None => assert_eq!(one_by_one, [None; 4], "{body}"),
        }
    }
    // The value of `usage` in `message` read in the same pass, as `member` reads it there.
    let nested = [
        r#"{"type":"message_start","message":{"id":"m","content":[{"usage":1}],"usage":{"input_tokens":3}}}"#,
        r#"{"message":{"usage":{"a":1},"usage":{"b":2}},"message":{"usage":7}}"#,
        r#"{"message":{},"usage":1}"#,
        r#"{"message":{"usage" 1},"usage":1}"#,
        r#"{"message":[{"usage":1}]}"#,
        r#"{"message":{"x":{"usage":5}}}"#,
        r#"{"message":{"usage":2}} x"#,
    ];
    for body in nested {
        let text = body.as_bytes();
        let keys = ["type", "message", "usage"];
        let within = crate::scan::members_within(text, keys, Some((1, "usage")));
        let apart = crate::scan::members(text, keys).map(|found| {
            (
                found,
                found[1].and_then(|m| crate::scan::member(m, "usage")),
            )
        });
        assert_eq!(within, apart, "{body}");
    }
    let [kind, _, _, s] = crate::scan::members(bodies[0].as_bytes(), keys).unwrap();
    assert_eq!(kind.and_then(crate::scan::plain_str), Some("message_start"));
    assert_eq!(s.map(<[u8]>::len), Some(long.len() + 2));
    assert_eq!(
        crate::scan::plain_str(br#""a\u0062""#),
        None,
        "an escape is for a parser"
    );
}
