//! `summarize` against the validator: the same verdict where it decides, and the same summary.

use super::*;

/// `summarize` on `body`, checked against the validator: the same verdict where it
/// decides, and the same summary.
fn agree(body: &str, endpoint: Endpoint) -> Option<Summary> {
    let quick = summarize(body.as_bytes(), endpoint);
    let slow = serde_json::from_str(body)
        .ok()
        .and_then(|v| validate(v, endpoint).ok());
    if let Some(summary) = &quick {
        let request = slow.unwrap_or_else(|| panic!("summarized, yet invalid: {body}"));
        assert_eq!(*summary, Summary::of(&request), "{body}");
    }
    quick
}

#[test]
fn the_requests_sdks_send_are_read_without_the_validator() {
    let bodies = [
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}"#,
        r#"{"model":"m","max_tokens":1,"stream":true,"system":"Be brief, please.",
            "messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},
            {"role":"user","content":[{"type":"text","text":"caf\u00e9 42x","cache_control":{"type":"ephemeral"}}]}]}"#,
        r#"{"model":"m","max_tokens":9,"system":[{"type":"text","text":"one two"}],
            "temperature":0.5,"top_p":1,"top_k":5,"stop_sequences":["END"],
            "metadata":{"user_id":"u-1"},"thinking":{"type":"enabled","budget_tokens":1024},
            "tool_choice":{"type":"tool","name":"get_weather"},
            "tools":[{"name":"get_weather","description":"Weather of a city",
                      "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
                     {"type":"web_search_20250305","name":"web_search","max_uses":3}],
            "messages":[{"role":"user","content":[
                {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},
                {"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},
                {"type":"text","text":"What is this?"}]},
              {"role":"assistant","content":[
                {"type":"thinking","thinking":"Let me see.","signature":"sig"},
                {"type":"tool_use","id":"tu_1","name":"get_weather","input":{"city":"Paris"}}]},
              {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"Sunny"}],"is_error":false},
                {"type":"tool_result","tool_use_id":"tu_2","content":"Rain"}]}]}"#,
        r#"{"model":"m","max_tokens":8,"temperature":null,"system":null,"unknown":[1,{"a":2}],
            "messages":[{"role":"user","content":"x","name":"extra"}]}"#,
    ];
    for body in bodies {
        let summary = agree(body, Endpoint::Messages);
        assert!(summary.is_some(), "not read: {body}");
    }
    let counted = r#"{"model":"m","messages":[{"role":"user","content":"a b"}]}"#;
    let summary = agree(counted, Endpoint::CountTokens).expect("read");
    assert_eq!((summary.max_tokens, summary.input_tokens), (None, 5));
    assert_eq!(summarize(counted.as_bytes(), Endpoint::Messages), None);
}

#[test]
fn anything_not_plainly_valid_is_left_to_the_validator() {
    let bodies = [
        "",
        "[]",
        "{}",
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"x"}]} x"#,
        r#"{"model":" ","max_tokens":64,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":6.0,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":-0,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user"}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":null}]}"#,
        r#"{"model":"m","model":"n","max_tokens":64,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"top_k":-1,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"stream":"yes","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"stop_sequences":[" "],"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"system":[{"type":"image","source":{"type":"url","url":"u"}}],"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"tools":[{"name":"t"}],"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"tools":[{"name":"","input_schema":{}}],"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"metadata":{"user_id":5},"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"x"}}]}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"tool_use","id":"i","name":"n","input":[]}]}]}"#,
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"t"}]}]}"#,
        // Valid, but of a block type this does not read: the validator counts it.
        r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"d"}}]}]}"#,
    ];
    for body in bodies {
        assert_eq!(agree(body, Endpoint::Messages), None, "read: {body}");
    }
}

#[test]
fn checked_bodies_give_their_typed_request_either_way() {
    let body = br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let checked = Checked::new(body, Endpoint::Messages).expect("valid");
    let typed = checked.typed(body).expect("typed");
    assert_eq!(typed.model, "m");
    assert_eq!(checked.summary, Summary::of(&typed));
    let odd = br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","x":1}]}]}"#;
    let checked = Checked::new(odd, Endpoint::Messages).expect("valid");
    assert!(matches!(checked.typed(odd), Ok(Cow::Borrowed(_))));
    let err = Checked::new(b"{", Endpoint::Messages).expect_err("not JSON");
    assert_eq!(err.param.as_deref(), Some("body"));
    assert!(err.detail.starts_with("body: not valid JSON"), "{err:?}");
    let err = Checked::new(br#"{"model":"m","messages":[]}"#, Endpoint::Messages)
        .expect_err("no messages");
    assert_eq!(err.param.as_deref(), Some("messages"));
}
