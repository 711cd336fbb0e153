//! The Message Batches API (`/v1/messages/batches`): its wire types and the pure validator of
//! a create body. Each request's `params` is checked as `/v1/messages` checks a body; an error
//! names the request (`requests[2].params.max_tokens`).

use std::collections::HashSet;

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::MessagesRequest;
use crate::validate::{Endpoint, validate};

/// The most requests one batch holds.
pub const MAX_REQUESTS: usize = 10_000;
/// The longest `custom_id`.
pub const MAX_CUSTOM_ID: usize = 64;

/// One request of a create body, checked.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    pub custom_id: String,
    /// The params as validated.
    pub request: MessagesRequest,
    /// The params as the client sent them.
    pub params: Value,
}

fn bad(path: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, path, format!("{path}: {what}"))
}

/// Checks a create body `{"requests": [{"custom_id", "params"}, ...]}`: 1 to
/// [`MAX_REQUESTS`] requests, each `custom_id` 1 to [`MAX_CUSTOM_ID`] characters of
/// `[a-zA-Z0-9_-]` and unique in the batch, each `params` a valid non-streaming
/// `/v1/messages` body. The first fault found, in request order, is the answer.
pub fn validate_batch(body: &Value) -> Result<Vec<BatchRequest>, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(bad("body", "must be a JSON object"));
    };
    let requests = match obj.get("requests") {
        None | Some(Value::Null) => return Err(bad("requests", "is required")),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("requests", "must be an array")),
    };
    if requests.is_empty() || requests.len() > MAX_REQUESTS {
        return Err(bad(
            "requests",
            format_args!(
                "must hold 1 to {MAX_REQUESTS} requests, got {}",
                requests.len()
            ),
        ));
    }
    let mut seen: HashSet<&str> = HashSet::with_capacity(requests.len());
    let mut out = Vec::with_capacity(requests.len());
    for (i, item) in requests.iter().enumerate() {
        let at = format!("requests[{i}]");
        let Some(item) = item.as_object() else {
            return Err(bad(&at, "must be an object with custom_id and params"));
        };
        let custom_id = match item.get("custom_id") {
            None | Some(Value::Null) => {
                return Err(bad(&format!("{at}.custom_id"), "is required"));
            }
            Some(Value::String(id)) => id,
            Some(_) => return Err(bad(&format!("{at}.custom_id"), "must be a string")),
        };
        if custom_id.is_empty()
            || custom_id.len() > MAX_CUSTOM_ID
            || !custom_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(bad(
                &format!("{at}.custom_id"),
                format_args!("must be 1 to {MAX_CUSTOM_ID} characters of a-z, A-Z, 0-9, _ and -"),
            ));
        }
        if !seen.insert(custom_id) {
            return Err(bad(
                &format!("{at}.custom_id"),
                format_args!("{custom_id:?} is used by an earlier request of the batch"),
            ));
        }
        let params = match item.get("params") {
            None | Some(Value::Null) => return Err(bad(&format!("{at}.params"), "is required")),
            Some(p) => p,
        };
        let request = validate(params.clone(), Endpoint::Messages).map_err(|e| within(&at, e))?;
        if request.is_stream() {
            return Err(bad(
                &format!("{at}.params.stream"),
                "must be false or absent: a batch's results are whole messages",
            ));
        }
        out.push(BatchRequest {
            custom_id: custom_id.clone(),
            request,
            params: params.clone(),
        });
    }
    Ok(out)
}

/// A params error as an error of request `at`: its field and detail prefixed.
fn within(at: &str, e: ApiError) -> ApiError {
    let prefix = format!("{at}.params");
    let detail = match &e.param {
        // The whole params: `body: ...` is `requests[i].params: ...`.
        Some(p) if p == "body" && e.detail.starts_with("body") => {
            format!("{prefix}{}", &e.detail["body".len()..])
        }
        Some(p) if e.detail.starts_with(p.as_str()) => format!("{prefix}.{}", e.detail),
        _ => format!("{prefix}: {}", e.detail),
    };
    let param = match &e.param {
        Some(p) if p != "body" => format!("{prefix}.{p}"),
        _ => prefix,
    };
    ApiError {
        code: e.code,
        param: Some(param),
        detail,
    }
}

/// `in_progress`, `canceling` or `ended`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessingStatus {
    InProgress,
    Canceling,
    Ended,
}

/// The requests of a batch by where they are; they add up to the batch's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestCounts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

/// A batch as the API shows it; times are RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageBatch {
    pub id: String,
    /// Always `message_batch`.
    #[serde(rename = "type")]
    pub kind: String,
    pub processing_status: ProcessingStatus,
    pub request_counts: RequestCounts,
    pub ended_at: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub archived_at: Option<String>,
    pub cancel_initiated_at: Option<String>,
    /// Where the results are, once the batch ended.
    pub results_url: Option<String>,
}

/// A page of batches, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchList {
    pub data: Vec<MessageBatch>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

/// The answer to a delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedBatch {
    pub id: String,
    /// Always `message_batch_deleted`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// How one request ended, as a line of the results file has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BatchResultBody {
    /// The message, as `/v1/messages` answers it.
    Succeeded {
        message: Value,
    },
    /// The error, in the shape `/v1/messages` answers it (`{"type": "error", "error": ...}`).
    Errored {
        error: Value,
    },
    Canceled,
    Expired,
}

/// One line of the results file: the result as recorded, written as it was.
#[derive(Debug, Clone, Serialize)]
pub struct BatchResultLine<'a> {
    pub custom_id: &'a str,
    pub result: &'a serde_json::value::RawValue,
}
