//! `ark`: Seedance-style content generation tasks (PROTOCOLS.md §4). Reference images go as
//! `data:` URIs (under the channel's inline cap); results are `content.video_url` and
//! `content.last_frame_url`, which expire, so the engine downloads them at once.

use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use store::BlobStore;

use crate::openai_videos::path_part;
use crate::remote::{
    Remote, RemoteSettings, poll_failure, snippet, submit_failure, upstream_failed,
};
use crate::upstream_http::{UpstreamError, UpstreamResponse};
use crate::video::{PollOutcome, ResultFiles, ResultSource, SubmitOutcome, VideoJob};

pub struct Ark {
    remote: Remote,
}

#[derive(Debug, Deserialize)]
struct Created {
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ArkTask {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    content: Option<ArkContent>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ArkContent {
    #[serde(default)]
    video_url: Option<String>,
    #[serde(default)]
    last_frame_url: Option<String>,
}

impl Ark {
    pub fn new(settings: RemoteSettings, blobs: Arc<dyn BlobStore>) -> Ark {
        Ark {
            remote: Remote::new(settings, blobs),
        }
    }

    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// A frame as a `data:` URI, or as the relay's signed URL when it is too large to inline
    /// and the relay has a public one.
    async fn image(&self, blob: &str, url: Option<&str>, role: &str) -> Result<Value, String> {
        let (bytes, mime) = match self.remote.read_blob(blob).await {
            Ok(read) => read,
            Err(e) => match url {
                Some(url) if e.contains("inline cap") => {
                    return Ok(json!({
                        "type": "image_url", "image_url": {"url": url}, "role": role,
                    }));
                }
                _ => return Err(e),
            },
        };
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        Ok(json!({
            "type": "image_url",
            "image_url": {"url": format!("data:{mime};base64,{data}")},
            "role": role,
        }))
    }

    async fn body(&self, job: &VideoJob) -> Result<Value, String> {
        let mut content = vec![json!({"type": "text", "text": job.prompt})];
        if let Some(blob) = &job.first_frame {
            content.push(
                self.image(blob, job.first_frame_url.as_deref(), "first_frame")
                    .await?,
            );
        }
        if let Some(blob) = &job.last_frame {
            content.push(
                self.image(blob, job.last_frame_url.as_deref(), "last_frame")
                    .await?,
            );
        }
        // Client-given reference URLs (already checked by the relay) go on as URLs.
        if let Some(url) = job.reference_video.as_deref().filter(|u| is_http(u)) {
            content.push(json!({
                "type": "video_url", "video_url": {"url": url}, "role": "reference_video",
            }));
        }
        if let Some(url) = job.audio_url.as_deref().filter(|u| is_http(u)) {
            content.push(json!({
                "type": "audio_url", "audio_url": {"url": url}, "role": "reference_audio",
            }));
        }
        let mut body = json!({
            "model": job.model,
            "content": content,
            "ratio": job.ratio,
            "duration": job.duration_secs,
            "return_last_frame": job.return_last_frame,
        });
        if let Some(resolution) = &job.resolution {
            body["resolution"] = json!(resolution);
        }
        if let Some(seed) = job.seed {
            body["seed"] = json!(seed);
        }
        Ok(body)
    }

    pub async fn submit(&self, job: &VideoJob) -> SubmitOutcome {
        let name = self.remote.name();
        let body = match self.body(job).await {
            Ok(body) => body,
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let req = self
            .remote
            .request(
                Method::POST,
                &self.remote.url("/contents/generations/tasks"),
                true,
            )
            .header("content-type", "application/json")
            .body(Bytes::from(body.to_string()));
        let result = self.remote.exchange(req).await;
        if let Some(failed) = submit_failure(name, &result) {
            return failed;
        }
        let Ok((_, _, body)) = result else {
            return SubmitOutcome::Retry(format!("channel {name}: no answer"));
        };
        match serde_json::from_slice::<Created>(&body) {
            Ok(Created { id: Some(id) }) if !id.is_empty() && id.len() <= 256 => {
                SubmitOutcome::Accepted { upstream_id: id }
            }
            _ => SubmitOutcome::Fatal(format!(
                "channel {name}: submission answer without an id: {}",
                snippet(&body)
            )),
        }
    }

    fn task_url(&self, upstream_id: &str) -> String {
        self.remote.url(&format!(
            "/contents/generations/tasks/{}",
            path_part(upstream_id)
        ))
    }

    pub async fn poll(&self, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let req = self
            .remote
            .request(Method::GET, &self.task_url(upstream_id), true)
            .body(Bytes::new());
        let result = self.remote.exchange(req).await;
        if let Some(outcome) = poll_failure(name, &result) {
            return outcome;
        }
        let Ok((_, _, body)) = result else {
            return PollOutcome::Transient(format!("channel {name}: no answer"));
        };
        let task: ArkTask = match serde_json::from_slice(&body) {
            Ok(t) => t,
            Err(_) => {
                return PollOutcome::Unknown(format!(
                    "channel {name}: unreadable poll answer: {}",
                    snippet(&body)
                ));
            }
        };
        match task.status.as_deref().unwrap_or_default() {
            "queued" => PollOutcome::Running {
                progress: 0,
                next_poll: None,
            },
            "running" => PollOutcome::Running {
                progress: 50,
                next_poll: None,
            },
            "succeeded" => {
                let content = task.content.unwrap_or(ArkContent {
                    video_url: None,
                    last_frame_url: None,
                });
                match content.video_url.filter(|u| is_http(u)) {
                    Some(video) => PollOutcome::Succeeded(ResultFiles {
                        video: ResultSource::Url(video),
                        thumbnail: None,
                        last_frame: content
                            .last_frame_url
                            .filter(|u| is_http(u))
                            .map(ResultSource::Url),
                    }),
                    None => upstream_failed(name, "succeeded", "succeeded without a video_url"),
                }
            }
            status @ ("failed" | "cancelled" | "expired") => {
                let detail = task.error.map(|e| e.to_string()).unwrap_or_default();
                upstream_failed(name, status, &detail)
            }
            other => PollOutcome::Unknown(format!("channel {name}: unknown status {other:?}")),
        }
    }

    pub async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        self.remote.download(url).await
    }

    pub async fn cancel(&self, upstream_id: &str) {
        self.remote.delete(&self.task_url(upstream_id)).await
    }
}

fn is_http(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream_http::UpstreamTimeouts;

    fn job(first: Option<&str>, last: Option<&str>) -> VideoJob {
        VideoJob {
            task_id: "gen_1".into(),
            model: "seedance-pro".into(),
            prompt: "a heron".into(),
            width: 1280,
            height: 720,
            ratio: "16:9".into(),
            resolution: Some("720p".into()),
            duration_secs: 5,
            first_frame: first.map(str::to_owned),
            last_frame: last.map(str::to_owned),
            first_frame_url: None,
            last_frame_url: None,
            audio_url: None,
            reference_video: None,
            reference_video_audio: false,
            return_last_frame: true,
            seed: Some(9),
            sim: Default::default(),
        }
    }

    #[tokio::test]
    async fn frames_go_inline_under_the_cap() {
        let dir = std::env::temp_dir().join(format!("channels-ark-{}", std::process::id()));
        let blobs: Arc<dyn BlobStore> = Arc::new(store::LocalBlobs::open(&dir).unwrap());
        blobs
            .put_bytes("a/first.png", b"\x89PNG\r\n\x1a\nsmall")
            .unwrap();
        blobs
            .put_bytes(
                "a/last.jpg",
                &[vec![0xFF, 0xD8, 0xFF], vec![0; 64]].concat(),
            )
            .unwrap();
        let ark = Ark::new(
            RemoteSettings {
                name: "ark".into(),
                models: vec!["gen2-pro".into()],
                base_url: "http://127.0.0.1:1/api/v3".into(),
                api_key: None,
                model_map: Default::default(),
                timeouts: UpstreamTimeouts::default(),
                min_poll_interval: std::time::Duration::from_secs(2),
                max_inline_bytes: 32,
            },
            blobs,
        );
        let body = ark.body(&job(Some("a/first.png"), None)).await.unwrap();
        assert_eq!(
            body["content"][0],
            json!({"type": "text", "text": "a heron"})
        );
        assert_eq!(body["content"][1]["role"], "first_frame");
        let url = body["content"][1]["image_url"]["url"].as_str().unwrap();
        assert!(url.starts_with("data:image/png;base64,"), "{url}");
        assert_eq!(body["resolution"], "720p");
        assert_eq!(body["seed"], 9);
        assert_eq!(body["return_last_frame"], true);
        let mut refs = job(None, None);
        refs.audio_url = Some("https://media.example/a.mp3".into());
        refs.reference_video = Some("https://media.example/v.mp4".into());
        let body = ark.body(&refs).await.unwrap();
        assert_eq!(body["content"][1]["role"], "reference_video");
        assert_eq!(
            body["content"][1]["video_url"]["url"],
            "https://media.example/v.mp4"
        );
        assert_eq!(body["content"][2]["role"], "reference_audio");
        // Over the inline cap: refused, naming the cap.
        let err = ark
            .body(&job(Some("a/first.png"), Some("a/last.jpg")))
            .await
            .unwrap_err();
        assert!(err.contains("inline cap"), "{err}");
        // ... unless the relay has a public URL for it.
        let mut with_url = job(Some("a/first.png"), Some("a/last.jpg"));
        with_url.last_frame_url = Some("https://relay.example/files/a/last.jpg?sig=1".into());
        let body = ark.body(&with_url).await.unwrap();
        assert_eq!(
            body["content"][2]["image_url"]["url"],
            "https://relay.example/files/a/last.jpg?sig=1"
        );
        assert_eq!(body["content"][2]["role"], "last_frame");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
