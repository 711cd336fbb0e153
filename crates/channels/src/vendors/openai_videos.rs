//! `openai-videos`: an upstream speaking OpenAI-style `/v1/videos` (PROTOCOLS.md §1), another
//! relay of this kind included. Create is multipart, as the official SDK sends it (the first
//! frame as the `input_reference` file part); the result is `GET /v1/videos/{id}/content`.

use std::sync::Arc;

use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use store::BlobStore;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::vendors::common::{Remote, RemoteSettings, path_part};
use crate::video::job::{
    PollOutcome, ResultFiles, ResultSource, StoredReference, SubmitOutcome, VideoJob,
};

pub struct OpenaiVideos {
    remote: Remote,
}

#[derive(Debug, Deserialize)]
struct Video {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    progress: Option<f64>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

const BOUNDARY: &str = "video-relay-7f3a9c1e5b2d4a60";

impl OpenaiVideos {
    pub fn new(settings: RemoteSettings, blobs: Arc<dyn BlobStore>) -> OpenaiVideos {
        OpenaiVideos {
            remote: Remote::new(settings, blobs),
        }
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
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

    pub async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
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

    fn video_url(&self, upstream_id: &str) -> String {
        self.remote
            .url(&format!("/v1/videos/{}", path_part(upstream_id)))
    }

    pub async fn poll(&self, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let video: Video = match self.remote.poll_json(&self.video_url(upstream_id)).await {
            Ok(v) => v,
            Err(outcome) => return outcome,
        };
        let progress = video.progress.unwrap_or(0.0).clamp(0.0, 99.0) as u8;
        match video.status.as_deref().unwrap_or_default() {
            "queued" | "in_progress" | "processing" | "running" => PollOutcome::Running {
                progress,
                next_poll: None,
            },
            "completed" | "succeeded" => {
                let base = self.video_url(upstream_id);
                PollOutcome::Succeeded(ResultFiles {
                    video: ResultSource::Url(format!("{base}/content")),
                    thumbnail: Some(ResultSource::Url(format!(
                        "{base}/content?variant=thumbnail"
                    ))),
                    last_frame: None,
                    spritesheet: None,
                })
            }
            status @ ("failed" | "cancelled" | "expired") => {
                let detail = video.error.map(|e| e.to_string()).unwrap_or_default();
                self.remote.upstream_failed(status, &detail)
            }
            other => PollOutcome::Unknown(format!("channel {name}: unknown status {other:?}")),
        }
    }

    pub async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        self.remote.download(url).await
    }

    pub async fn cancel(&self, upstream_id: &str) {
        self.remote.delete(&self.video_url(upstream_id)).await
    }
}
