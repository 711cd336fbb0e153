//! The task record and the other answers of the first format (CONTRACT §1.2, §1.3).

use serde::{Deserialize, Serialize};

use crate::create::ValidCreate;
use crate::framing::{Framing, Ratio};

/// Wire status of a first-format task: `queued` -> `in_progress` -> `completed` | `failed`;
/// `queued` or `in_progress` -> `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoStatus {
    Queued,
    InProgress,
    Completed,
    Failed,
    Cancelled,
}

impl VideoStatus {
    /// The wire name, e.g. `"in_progress"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            VideoStatus::Queued => "queued",
            VideoStatus::InProgress => "in_progress",
            VideoStatus::Completed => "completed",
            VideoStatus::Failed => "failed",
            VideoStatus::Cancelled => "cancelled",
        }
    }

    /// `completed`, `failed` and `cancelled` never change again.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            VideoStatus::Completed | VideoStatus::Failed | VideoStatus::Cancelled
        )
    }
}

/// `error` of a failed task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoError {
    /// `upstream_error`, `timeout`, `moderation_blocked`, `cancelled`, ...
    pub code: String,
    pub message: String,
}

/// The task record (CONTRACT §1.2). Absent values serialise as `null`, never left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoObject {
    pub id: String,
    /// Same value as `id` (SPEC §4.1 names it `task_id`).
    pub task_id: String,
    /// Always `"video"`.
    pub object: String,
    pub model: String,
    pub status: VideoStatus,
    /// 0..=100, never goes down.
    pub progress: u8,
    pub prompt: String,
    /// The chosen framing, `"<width>x<height>"`.
    pub size: String,
    /// The chosen framing's ratio; never adaptive once created.
    pub aspect_ratio: Ratio,
    pub duration: u32,
    /// `duration` as a string (OpenAI's name and type).
    pub seconds: String,
    /// Unix seconds.
    pub created_at: u64,
    pub completed_at: Option<u64>,
    /// When the content stops being downloadable (Unix seconds).
    pub expires_at: Option<u64>,
    pub error: Option<VideoError>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The video this one remixes; `null` for a video that is not a remix.
    #[serde(default)]
    pub remixed_from_video_id: Option<String>,
    /// The video this one edits (`POST /v1/videos/edits`); `null` otherwise.
    #[serde(default)]
    pub edited_from_video_id: Option<String>,
    /// The video this one extends (`POST /v1/videos/extensions`); `null` otherwise. `seconds`
    /// of an extension is the stitched total.
    #[serde(default)]
    pub extended_from_video_id: Option<String>,
}

impl VideoObject {
    /// The record of a task just accepted: `queued`, progress 0.
    pub fn queued(
        id: impl Into<String>,
        request: &ValidCreate,
        framing: &Framing,
        created_at: u64,
        warnings: Vec<String>,
    ) -> VideoObject {
        let id = id.into();
        VideoObject {
            task_id: id.clone(),
            id,
            object: "video".to_owned(),
            model: request.model.clone(),
            status: VideoStatus::Queued,
            progress: 0,
            prompt: request.prompt.clone(),
            size: framing.size().to_string(),
            aspect_ratio: framing.ratio,
            duration: request.duration,
            seconds: request.duration.to_string(),
            created_at,
            completed_at: None,
            expires_at: None,
            error: None,
            warnings,
            remixed_from_video_id: None,
            edited_from_video_id: None,
            extended_from_video_id: None,
        }
    }
}

/// `GET /v1/videos`: `{"object":"list","data":[...],"has_more","first_id","last_id"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoList {
    /// Always `"list"`.
    pub object: String,
    pub data: Vec<VideoObject>,
    pub has_more: bool,
    /// Id of the first record of `data`; `null` when empty.
    pub first_id: Option<String>,
    /// Id of the last record of `data`; `null` when empty.
    pub last_id: Option<String>,
}

impl VideoList {
    pub fn new(data: Vec<VideoObject>, has_more: bool) -> VideoList {
        VideoList {
            object: "list".to_owned(),
            first_id: data.first().map(|v| v.id.clone()),
            last_id: data.last().map(|v| v.id.clone()),
            data,
            has_more,
        }
    }
}

/// `DELETE /v1/videos/{id}`: `{"id", "object": "video.deleted", "deleted": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedVideo {
    pub id: String,
    /// Always `"video.deleted"`.
    pub object: String,
    pub deleted: bool,
}

impl DeletedVideo {
    pub fn new(id: impl Into<String>) -> DeletedVideo {
        DeletedVideo {
            id: id.into(),
            object: "video.deleted".to_owned(),
            deleted: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::framing::resolve_framing;

    fn request() -> ValidCreate {
        ValidCreate {
            model: "model_h3".into(),
            prompt: "a cat".into(),
            size: None,
            aspect_ratio: None,
            duration: 8,
            first_frame: None,
            last_frame: None,
            audio: None,
            reference_video: None,
            reference_video_audio: false,
            callback_url: None,
        }
    }

    fn keys(value: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = value
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn record_has_exactly_the_contract_fields() {
        let framing = resolve_framing(None, None, None);
        let record = VideoObject::queued("video_1", &request(), &framing, 1763776000, vec![]);
        let json = serde_json::to_value(&record).unwrap();
        // CONTRACT §1.2's example, plus `remixed_from_video_id` (OpenAI's record has it) and
        // the sources of edits and extensions (OpenAI's record names none).
        let mut expected = json!({"id": "video_1", "task_id": "video_1", "object": "video",
            "model": "model_h3", "status": "queued", "progress": 0, "prompt": "a cat",
            "size": "1280x720", "aspect_ratio": "16:9", "duration": 8, "seconds": "8",
            "created_at": 1763776000, "completed_at": null, "expires_at": null,
            "error": null, "warnings": []});
        expected["remixed_from_video_id"] = Value::Null;
        expected["edited_from_video_id"] = Value::Null;
        expected["extended_from_video_id"] = Value::Null;
        assert_eq!(keys(&json), keys(&expected));
        assert_eq!(json, expected);
        let back: VideoObject = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn failed_record_and_statuses() {
        let framing = resolve_framing(None, Some(Ratio::NineSixteen), None);
        let mut record = VideoObject::queued("video_2", &request(), &framing, 1, vec![]);
        record.status = VideoStatus::Failed;
        record.error = Some(VideoError {
            code: "timeout".into(),
            message: "the task did not finish in time".into(),
        });
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["status"], "failed");
        assert_eq!(json["size"], "720x1280");
        assert_eq!(json["aspect_ratio"], "9:16");
        assert_eq!(keys(&json["error"]), ["code", "message"]);
        assert_eq!(json["error"]["code"], "timeout");

        let statuses = [
            (VideoStatus::Queued, false),
            (VideoStatus::InProgress, false),
            (VideoStatus::Completed, true),
            (VideoStatus::Failed, true),
            (VideoStatus::Cancelled, true),
        ];
        for (status, is_final) in statuses {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
            assert_eq!(status.is_final(), is_final);
        }
        assert_eq!(VideoStatus::InProgress.as_str(), "in_progress");
    }

    #[test]
    fn list_and_delete_shapes() {
        let framing = resolve_framing(None, None, None);
        let a = VideoObject::queued("video_a", &request(), &framing, 1, vec![]);
        let b = VideoObject::queued("video_b", &request(), &framing, 2, vec![]);
        let json = serde_json::to_value(VideoList::new(vec![a, b], true)).unwrap();
        assert_eq!(
            keys(&json),
            ["data", "first_id", "has_more", "last_id", "object"]
        );
        assert_eq!(json["object"], "list");
        assert_eq!(json["first_id"], "video_a");
        assert_eq!(json["last_id"], "video_b");
        assert_eq!(json["has_more"], true);
        let empty = serde_json::to_value(VideoList::new(vec![], false)).unwrap();
        assert_eq!(
            empty,
            json!({"object": "list", "data": [], "has_more": false,
                   "first_id": null, "last_id": null})
        );
        assert_eq!(
            serde_json::to_value(DeletedVideo::new("video_a")).unwrap(),
            json!({"id": "video_a", "object": "video.deleted", "deleted": true})
        );
    }
}
