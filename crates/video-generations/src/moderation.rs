//! `POST /api/generation/video/moderation-result` (CONTRACT §2.4): body `{"task_id"}`, answer
//! `{"task_id", "status", "categories", "checked_at"}`.

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A moderation-result request: a task id of either format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModerationRequest {
    pub task_id: String,
}

/// Parses the body; anything but an object with a non-empty string `task_id` is
/// `400 invalid request` (param `task_id`, or none when the body is not an object). Unknown
/// fields are ignored.
pub fn parse_moderation_request(body: &Value) -> Result<ModerationRequest, ApiError> {
    let Value::Object(fields) = body else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "the body must be a JSON object {\"task_id\": \"...\"}",
        ));
    };
    match fields.get("task_id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(ModerationRequest {
            task_id: id.clone(),
        }),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "task_id",
            "task_id is required: the id of a task of either video format",
        )),
        Some(_) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "task_id",
            "task_id must be a string: the id of a task of either video format",
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModerationStatus {
    /// Not checked yet (the task has not produced a video).
    Pending,
    Passed,
    Rejected,
}

/// One moderation category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModerationCategory {
    pub name: String,
    pub flagged: bool,
    /// 0.0..=1.0.
    pub score: f64,
}

/// The moderation result of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModerationResult {
    pub task_id: String,
    pub status: ModerationStatus,
    pub categories: Vec<ModerationCategory>,
    /// Unix seconds; `None` while `pending`.
    pub checked_at: Option<u64>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests() {
        assert_eq!(
            parse_moderation_request(&json!({"task_id": "gen_1", "extra": 1})).unwrap(),
            ModerationRequest {
                task_id: "gen_1".into()
            }
        );
        for (body, param) in [
            (json!({}), Some("task_id")),
            (json!({"task_id": ""}), Some("task_id")),
            (json!({"task_id": null}), Some("task_id")),
            (json!({"task_id": 5}), Some("task_id")),
            (json!(["gen_1"]), None),
            (json!("gen_1"), None),
        ] {
            let err = parse_moderation_request(&body).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRequest, "{body}");
            assert_eq!(err.param.as_deref(), param, "{body}");
            assert!(!err.detail.is_empty());
        }
    }

    #[test]
    fn result_shape() {
        let result = ModerationResult {
            task_id: "gen_1".into(),
            status: ModerationStatus::Rejected,
            categories: vec![ModerationCategory {
                name: "violence".into(),
                flagged: true,
                score: 0.9,
            }],
            checked_at: Some(1_763_776_000),
        };
        let v = serde_json::to_value(&result).unwrap();
        assert_eq!(
            v,
            json!({"task_id": "gen_1", "status": "rejected",
                   "categories": [{"name": "violence", "flagged": true, "score": 0.9}],
                   "checked_at": 1_763_776_000u64})
        );
        let pending = ModerationResult {
            task_id: "gen_2".into(),
            status: ModerationStatus::Pending,
            categories: Vec::new(),
            checked_at: None,
        };
        let v = serde_json::to_value(&pending).unwrap();
        assert_eq!(v["status"], "pending");
        assert_eq!(v["checked_at"], Value::Null);
    }
}
