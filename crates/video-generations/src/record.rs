//! The second format's task record and list answer (CONTRACT §2.3).

use serde::{Deserialize, Serialize};

use crate::request::ValidGeneration;

/// `queued` -> `running` -> `succeeded` | `failed`; `queued` / `running` -> `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerationStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl GenerationStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            GenerationStatus::Queued => "queued",
            GenerationStatus::Running => "running",
            GenerationStatus::Succeeded => "succeeded",
            GenerationStatus::Failed => "failed",
            GenerationStatus::Cancelled => "cancelled",
        }
    }

    /// `succeeded`, `failed` and `cancelled` never change again.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            GenerationStatus::Succeeded | GenerationStatus::Failed | GenerationStatus::Cancelled
        )
    }
}

/// `{"code", "message"}` of a failed task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationError {
    pub code: String,
    pub message: String,
}

/// What a succeeded task is billed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub duration_seconds: u32,
}

/// The task record of `GET /v1/video/generations/{task_id}` (and of the create answer).
///
/// `video_url` is present only on `succeeded`; `last_frame_url` only then and only when the
/// request asked for it; both are left out of the JSON otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationObject {
    pub task_id: String,
    /// Always `video.generation`.
    pub object: String,
    pub model: String,
    pub status: GenerationStatus,
    /// 0..=100, never goes down.
    pub progress: u8,
    pub duration: u32,
    pub resolution: String,
    /// The ratio chosen (never `adaptive`).
    pub ratio: String,
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_frame_url: Option<String>,
    /// Set once the task succeeded.
    pub usage: Option<Usage>,
    /// Unix seconds.
    pub created_at: u64,
    pub updated_at: u64,
    pub error: Option<GenerationError>,
}

impl GenerationObject {
    /// The record of a task just accepted; `ratio` is the resolved one.
    pub fn queued(
        task_id: impl Into<String>,
        request: &ValidGeneration,
        ratio: impl Into<String>,
        seed: Option<u64>,
        created_at: u64,
    ) -> GenerationObject {
        GenerationObject {
            task_id: task_id.into(),
            object: "video.generation".to_owned(),
            model: request.model.clone(),
            status: GenerationStatus::Queued,
            progress: 0,
            duration: request.duration,
            resolution: request.resolution.clone(),
            ratio: ratio.into(),
            seed,
            video_url: None,
            last_frame_url: None,
            usage: None,
            created_at,
            updated_at: created_at,
            error: None,
        }
    }
}

/// `GET /v1/video/generations`: `{"object": "list", "data", "has_more", "first_id", "last_id"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationList {
    pub object: String,
    pub data: Vec<GenerationObject>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

impl GenerationList {
    pub fn new(data: Vec<GenerationObject>, has_more: bool) -> GenerationList {
        GenerationList {
            object: "list".to_owned(),
            first_id: data.first().map(|g| g.task_id.clone()),
            last_id: data.last().map(|g| g.task_id.clone()),
            data,
            has_more,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::AssetRef;

    fn request() -> ValidGeneration {
        ValidGeneration {
            model: "gen2-pro".into(),
            family: "gen2".into(),
            prompt: "a cat".into(),
            duration: 5,
            resolution: "720p".into(),
            ratio: "adaptive".into(),
            assets: Vec::<AssetRef>::new(),
            return_last_frame: true,
            seed: Some(42),
            callback_url: None,
        }
    }

    #[test]
    fn queued_record_shape() {
        let record = GenerationObject::queued("gen_1", &request(), "16:9", Some(42), 1_763_776_000);
        let v = serde_json::to_value(&record).unwrap();
        assert_eq!(
            v,
            json!({"task_id": "gen_1", "object": "video.generation", "model": "gen2-pro",
                   "status": "queued", "progress": 0, "duration": 5, "resolution": "720p",
                   "ratio": "16:9", "seed": 42, "usage": null, "created_at": 1_763_776_000u64,
                   "updated_at": 1_763_776_000u64, "error": null})
        );
    }

    #[test]
    fn succeeded_record_has_urls_and_usage() {
        let mut record = GenerationObject::queued("gen_1", &request(), "16:9", None, 10);
        record.status = GenerationStatus::Succeeded;
        record.progress = 100;
        record.video_url = Some("https://relay.example/files/a?sig=x".into());
        record.last_frame_url = Some("https://relay.example/files/b?sig=y".into());
        record.usage = Some(Usage {
            duration_seconds: 5,
        });
        let v = serde_json::to_value(&record).unwrap();
        assert_eq!(v["status"], "succeeded");
        assert_eq!(v["usage"]["duration_seconds"], 5);
        assert!(v["video_url"].is_string() && v["last_frame_url"].is_string());
        let back: GenerationObject = serde_json::from_value(v).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn statuses() {
        for (s, name, fin) in [
            (GenerationStatus::Queued, "queued", false),
            (GenerationStatus::Running, "running", false),
            (GenerationStatus::Succeeded, "succeeded", true),
            (GenerationStatus::Failed, "failed", true),
            (GenerationStatus::Cancelled, "cancelled", true),
        ] {
            assert_eq!(s.as_str(), name);
            assert_eq!(serde_json::to_value(s).unwrap(), name);
            assert_eq!(s.is_final(), fin);
        }
    }

    #[test]
    fn list_ids() {
        let a = GenerationObject::queued("gen_a", &request(), "16:9", None, 1);
        let b = GenerationObject::queued("gen_b", &request(), "16:9", None, 2);
        let list = GenerationList::new(vec![a, b], true);
        let v = serde_json::to_value(&list).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["first_id"], "gen_a");
        assert_eq!(v["last_id"], "gen_b");
        assert_eq!(v["has_more"], true);
        let empty = serde_json::to_value(GenerationList::new(Vec::new(), false)).unwrap();
        assert_eq!(empty["first_id"], serde_json::Value::Null);
    }
}
