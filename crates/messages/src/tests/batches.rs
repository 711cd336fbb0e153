//! The create body of a batch: every fault is refused naming the request and its field.

use error_codes::ErrorCode;
use serde_json::{Value, json};

use super::support::{base, with};
use crate::batches::{MAX_REQUESTS, validate_batch};

fn one(custom_id: Value, params: Value) -> Value {
    json!({"requests": [{"custom_id": custom_id, "params": params}]})
}

/// Refused with 400 naming `param`, the detail starting with `prefix`.
fn check_err(body: Value, param: &str, prefix: &str) {
    let err = validate_batch(&body).expect_err("should be refused");
    assert_eq!(err.code, ErrorCode::InvalidRequest, "{prefix}");
    assert_eq!(err.param.as_deref(), Some(param), "{}", err.detail);
    assert!(
        err.detail.starts_with(prefix),
        "{:?} vs {prefix:?}",
        err.detail
    );
}

#[test]
fn faults_name_the_request_and_field() {
    let too_many: Vec<Value> = (0..=MAX_REQUESTS)
        .map(|i| json!({"custom_id": format!("r{i}"), "params": base()}))
        .collect();
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!([]), "body", "body: must be a JSON object"),
        (json!({}), "requests", "requests: is required"),
        (
            json!({"requests": {}}),
            "requests",
            "requests: must be an array",
        ),
        (
            json!({"requests": []}),
            "requests",
            "requests: must hold 1 to 10000",
        ),
        (
            json!({"requests": too_many}),
            "requests",
            "requests: must hold 1 to 10000",
        ),
        (
            json!({"requests": [5]}),
            "requests[0]",
            "requests[0]: must be an object",
        ),
        (
            json!({"requests": [{"params": base()}]}),
            "requests[0].custom_id",
            "requests[0].custom_id: is required",
        ),
        (
            one(json!(7), base()),
            "requests[0].custom_id",
            "requests[0].custom_id: must be a string",
        ),
        (
            one(json!(""), base()),
            "requests[0].custom_id",
            "requests[0].custom_id: must be 1 to 64",
        ),
        (
            one(json!("a b"), base()),
            "requests[0].custom_id",
            "requests[0].custom_id: must be 1 to 64",
        ),
        (
            one(json!("x".repeat(65)), base()),
            "requests[0].custom_id",
            "requests[0].custom_id: must be 1 to 64",
        ),
        (
            json!({"requests": [
                {"custom_id": "a", "params": base()},
                {"custom_id": "a", "params": base()},
            ]}),
            "requests[1].custom_id",
            "requests[1].custom_id: \"a\" is used by an earlier request",
        ),
        (
            json!({"requests": [{"custom_id": "a"}]}),
            "requests[0].params",
            "requests[0].params: is required",
        ),
        (
            one(json!("a"), json!("x")),
            "requests[0].params",
            "requests[0].params: must be a JSON object",
        ),
        (
            json!({"requests": [
                {"custom_id": "a", "params": base()},
                {"custom_id": "b", "params": with(json!({"max_tokens": 0}))},
            ]}),
            "requests[1].params.max_tokens",
            "requests[1].params.max_tokens: ",
        ),
        (
            one(json!("a"), with(json!({"model": "<remove>"}))),
            "requests[0].params.model",
            "requests[0].params.model: is required",
        ),
        (
            one(json!("a"), with(json!({"stream": true}))),
            "requests[0].params.stream",
            "requests[0].params.stream: must be false or absent",
        ),
    ];
    for (body, param, prefix) in cases {
        check_err(body, param, prefix);
    }
}

#[test]
fn good_requests_pass_in_order() {
    let body = json!({"requests": [
        {"custom_id": "first-1", "params": base()},
        {"custom_id": "Second_2", "params": with(json!({"stream": false}))},
    ]});
    let ok = validate_batch(&body).expect("valid");
    let ids: Vec<&str> = ok.iter().map(|r| r.custom_id.as_str()).collect();
    assert_eq!(ids, ["first-1", "Second_2"]);
    assert_eq!(ok[0].request.model, "sim-chat");
    assert_eq!(ok[0].params, base());
}
