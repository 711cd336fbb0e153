//! `openai-videos`: an upstream speaking OpenAI-style `/v1/videos` (PROTOCOLS.md §1), another
//! relay or reseller of this kind (the OpenAI Videos API itself shut down in 2026). Create is
//! multipart, as the official SDK sends it (the first frame as the `input_reference` file
//! part); the result is `GET /v1/videos/{id}/content`; the video's `seconds` and `size` are
//! what the upstream made. It has no built-in models: it makes what its upstream makes.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use store::BlobStore;

use crate::vendors::common::{Remote, RemoteSettings, path_part};
use crate::vendors::seam::{Registration, Vendor};
use crate::video::job::{
    ChannelCheck, PollOutcome, ResultFiles, ResultSource, StoredReference, SubmitOutcome,
    VendorUsage, VideoJob,
};

/// The `openai-videos` kind: its base URL must be configured.
pub const REGISTRATION: Registration = Registration {
    kind: "openai-videos",
    default_base_url: "",
    needs: &[],
    callbacks: false,
    models: Vec::new,
    build: |s, _| Ok(Box::new(OpenaiVideos::new(s.remote, s.blobs))),
};

pub struct OpenaiVideos {
    remote: Remote,
}

/// The Video object, as far as the relay reads it.
#[derive(Debug, Deserialize)]
struct Video {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    progress: Option<f64>,
    /// A string (`"8"`) in OpenAI's shape; relays of this kind may send a number.
    #[serde(default)]
    seconds: Option<serde_json::Value>,
    /// `1280x720`.
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// A poll's answer as the task's outcome; `base` is the video's URL on the upstream.
fn from_vendor(remote: &Remote, video: Video, base: &str) -> PollOutcome {
    let name = remote.name();
    let progress = video.progress.unwrap_or(0.0).clamp(0.0, 99.0) as u8;
    match video.status.as_deref().unwrap_or_default() {
        "queued" | "in_progress" | "processing" | "running" => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        "completed" | "succeeded" => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(format!("{base}/content")),
            thumbnail: Some(ResultSource::Url(format!(
                "{base}/content?variant=thumbnail"
            ))),
            last_frame: None,
            spritesheet: None,
            usage: usage(&video),
        }),
        status @ ("failed" | "cancelled" | "expired") => {
            let detail = video.error.map(|e| e.to_string()).unwrap_or_default();
            remote.upstream_failed(status, &detail)
        }
        other => PollOutcome::Unknown(format!("channel {name}: unknown status {other:?}")),
    }
}

/// The `seconds` and `size` a finished video reports.
fn usage(video: &Video) -> VendorUsage {
    let seconds = match &video.seconds {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Some(s),
            _ => return VendorUsage::Unreadable(format!("seconds {s:?}")),
        },
        Some(serde_json::Value::Number(n)) => match n.as_f64() {
            Some(s) if s >= 0.0 => Some(s),
            _ => return VendorUsage::Unreadable(format!("seconds {n}")),
        },
        Some(other) => return VendorUsage::Unreadable(format!("seconds {other}")),
    };
    let resolution = video.size.as_deref().and_then(|size| {
        let (w, h) = size.split_once('x')?;
        let short = w.trim().parse::<u32>().ok()?.min(h.trim().parse().ok()?);
        Some(format!("{short}p"))
    });
    if seconds.is_none() && resolution.is_none() {
        return VendorUsage::NotReported;
    }
    VendorUsage::Made {
        seconds,
        resolution,
    }
}

const BOUNDARY: &str = "video-relay-7f3a9c1e5b2d4a60";

impl OpenaiVideos {
    pub fn new(settings: RemoteSettings, blobs: Arc<dyn BlobStore>) -> OpenaiVideos {
        OpenaiVideos {
            remote: Remote::new(settings, blobs),
        }
    }

    /// The multipart body: the text fields, then the first frame when there is one.
    async fn body(&self, job: &VideoJob) -> Result<Bytes, String> {
        let mut out = Vec::new();
        let mut field = |name: &str, value: &str| {
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        };
        field("model", &job.model);
        field("prompt", &job.prompt);
        field("seconds", &job.duration_secs.to_string());
        field("size", &format!("{}x{}", job.width, job.height));
        if let Some(blob) = &job.first_frame {
            let (bytes, mime) = self
                .remote
                .read_blob(blob)
                .await
                .map_err(|e| e.to_string())?;
            let ext = mime.rsplit('/').next().unwrap_or("bin");
            out.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"input_reference\"; filename=\"reference.{ext}\"\r\nContent-Type: {mime}\r\n\r\n"
                )
                .as_bytes(),
            );
            out.extend_from_slice(&bytes);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        Ok(Bytes::from(out))
    }

    fn video_url(&self, upstream_id: &str) -> String {
        self.remote
            .url(&format!("/v1/videos/{}", path_part(upstream_id)))
    }
}

#[async_trait]
impl Vendor for OpenaiVideos {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        if job.audio_url.is_some()
            || job.reference_video.is_some()
            || job.last_frame.is_some()
            || !references.is_empty()
        {
            tracing::warn!(
                channel = name,
                task = job.task_id,
                "the upstream's /v1/videos has no field for a last frame, reference images, \
                 audio or a reference video; they are left out"
            );
        }
        let body = match self.body(job).await {
            Ok(body) => body,
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let req = self
            .remote
            .request(Method::POST, &self.remote.url("/v1/videos"), true)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            // The relay's task id. The relay never sends a submission twice (one whose
            // answer was lost fails instead); an upstream that honours the header is also
            // safe from anything between the two that would.
            .header("idempotency-key", &job.task_id)
            .body(body);
        let body = match self.remote.submit_exchange(req).await {
            Ok(body) => body,
            Err(outcome) => return outcome,
        };
        match serde_json::from_slice::<Video>(&body) {
            Ok(Video { id: Some(id), .. }) if !id.is_empty() && id.len() <= 256 => {
                SubmitOutcome::Accepted { upstream_id: id }
            }
            _ => self.remote.without_id(&body),
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let base = self.video_url(upstream_id);
        match self.remote.poll_json::<Video>(&base).await {
            Ok(video) => from_vendor(&self.remote, video, &base),
            Err(outcome) => outcome,
        }
    }

    async fn cancel(&self, upstream_id: &str) {
        self.remote.delete(&self.video_url(upstream_id)).await
    }

    /// A one-item list of the key's videos: authenticated, generating nothing.
    async fn check(&self) -> ChannelCheck {
        let url = self.remote.url("/v1/videos?limit=1");
        self.remote.check_get(&url, |_, _| None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> PollOutcome {
        let video: Video = serde_json::from_str(json).unwrap();
        from_vendor(
            &crate::vendors::common::test_remote("c"),
            video,
            "http://up/v1/videos/v1",
        )
    }

    /// The Video object of PROTOCOLS.md §1.
    #[test]
    fn a_video_object_reads_as_an_outcome() {
        assert_eq!(
            read(r#"{"id":"v1","object":"video","status":"in_progress","progress":42}"#),
            PollOutcome::Running {
                progress: 42,
                next_poll: None
            }
        );
        let PollOutcome::Succeeded(files) = read(
            r#"{"id":"v1","object":"video","status":"completed","progress":100,"seconds":"8","size":"1280x720"}"#,
        ) else {
            panic!("not a success")
        };
        assert_eq!(
            files.video,
            ResultSource::Url("http://up/v1/videos/v1/content".into())
        );
        assert_eq!(
            files.usage,
            VendorUsage::Made {
                seconds: Some(8.0),
                resolution: Some("720p".into())
            }
        );
        let PollOutcome::Succeeded(files) = read(r#"{"id":"v1","status":"completed"}"#) else {
            panic!("not a success")
        };
        assert_eq!(files.usage, VendorUsage::NotReported);
        let PollOutcome::Succeeded(files) =
            read(r#"{"id":"v1","status":"completed","seconds":"eight"}"#)
        else {
            panic!("not a success")
        };
        assert!(matches!(files.usage, VendorUsage::Unreadable(_)));
        assert!(matches!(
            read(r#"{"id":"v1","status":"failed","error":{"code":"x","message":"y"}}"#),
            PollOutcome::Failed { .. }
        ));
        assert!(matches!(
            read(r#"{"id":"v1","status":"mystery"}"#),
            PollOutcome::Unknown(_)
        ));
    }
}
