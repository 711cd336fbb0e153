//! The bodies every area starts from: a small valid request, laid over with changes.

use serde_json::{Value, json};

use crate::types::MessagesRequest;
use crate::validate::{Endpoint, validate};

pub(super) fn base() -> Value {
    json!({"model": "sim-chat", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
}

/// `base()` with `patch` laid over it (a `null` in `patch` removes the key).
pub(super) fn with(patch: Value) -> Value {
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

pub(super) fn req(body: Value) -> MessagesRequest {
    validate(body, Endpoint::Messages).expect("valid")
}
