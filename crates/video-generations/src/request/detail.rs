//! How a value a client sent is written into an error detail: strings quoted and cut, other
//! values named by their kind.

use serde_json::Value;

pub(super) fn quote(s: &str) -> String {
    const MAX: usize = 60;
    let cut = if s.chars().count() > MAX {
        format!("{}...", s.chars().take(MAX).collect::<String>())
    } else {
        s.to_owned()
    };
    Value::String(cut).to_string()
}

/// A short description of a value for error details: strings quoted, long ones cut.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => kind_article(value).to_owned(),
        other => other.to_string(),
    }
}

pub(super) fn kind_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
