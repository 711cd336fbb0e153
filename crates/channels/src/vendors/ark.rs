//! `ark`: Seedance-style content generation tasks (PROTOCOLS.md §4). Stored references (frames,
//! reference images, videos and audio) go as `data:` URIs under the channel's inline cap, else
//! as the relay's signed URLs; results are `content.video_url` and `content.last_frame_url`,
//! which expire, so the engine downloads them at once.
//!
//! With a callback secret, each submission carries a `callback_url` on the relay,
//! `<public base>/callbacks/ark/<channel>?task=<relay task id>&token=<token>`, the token an
//! HMAC of channel and task under the secret
//! ([`callback_token`](crate::vendors::seam::callback_token)): the upstream's callback then
//! names its task and proves it came through this submission. A finished task's
//! `duration` and `resolution` are what the upstream made.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use store::BlobStore;

use crate::vendors::common::{ReadBlobError, Remote, RemoteSettings, path_part};
use crate::vendors::seam::{CallbackSettings, Registration, Vendor};
use crate::video::job::{
    ChannelCheck, PollOutcome, ReferenceRole, ResultFiles, ResultSource, StoredReference,
    SubmitOutcome, VendorUsage, VideoJob,
};

/// The `ark` kind: its base URL (e.g. `https://host/api/v3`) must be configured; it takes a
/// `callback_secret`. Its models are named by each deployment, so it has no built-in ones.
pub const REGISTRATION: Registration = Registration {
    kind: "ark",
    default_base_url: "",
    needs: &[],
    callbacks: true,
    status_words: false,
    models: Vec::new,
    build: |s, _| Ok(Box::new(Ark::new(s.remote, s.blobs, s.callback))),
};

pub struct Ark {
    remote: Remote,
    callback: Option<ArkCallback>,
}

/// Where and how an `ark` channel asks its upstream to call back.
pub type ArkCallback = CallbackSettings;

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
    /// Seconds made.
    #[serde(default)]
    duration: Option<Value>,
    /// `720p`.
    #[serde(default)]
    resolution: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ArkContent {
    #[serde(default)]
    video_url: Option<String>,
    #[serde(default)]
    last_frame_url: Option<String>,
}

impl Ark {
    pub fn new(
        settings: RemoteSettings,
        blobs: Arc<dyn BlobStore>,
        callback: Option<ArkCallback>,
    ) -> Ark {
        Ark {
            remote: Remote::new(settings, blobs),
            callback,
        }
    }

    /// The `callback_url` of `task_id`, when the channel has a callback secret and the relay
    /// knows its public address.
    pub fn callback_url(&self, task_id: &str) -> Option<String> {
        let callback = self.callback.as_ref()?;
        callback.url("ark", self.remote.name(), task_id)
    }

    /// A stored reference as a content item of `kind` (`image_url`, `video_url`,
    /// `audio_url`): a `data:` URI when it is under the inline cap, else the relay's signed
    /// URL when it has a public one.
    async fn stored(
        &self,
        kind: &str,
        blob: &str,
        url: Option<&str>,
        role: &str,
    ) -> Result<Value, ReadBlobError> {
        let item = |url: String| {
            let mut item = json!({"type": kind, "role": role});
            item[kind] = json!({ "url": url });
            item
        };
        match (self.remote.read_blob(blob).await, url) {
            (Ok((bytes, mime)), _) => {
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                Ok(item(format!("data:{mime};base64,{data}")))
            }
            (Err(ReadBlobError::OverInlineCap { .. }), Some(url)) => Ok(item(url.to_owned())),
            (Err(e), _) => Err(e),
        }
    }

    /// The task body: the prompt, the frames, the stored references in request order, then
    /// the client's reference URLs (PROTOCOLS.md §4).
    async fn body(&self, job: &VideoJob, references: &[StoredReference]) -> Result<Value, String> {
        let mut content = vec![json!({"type": "text", "text": job.prompt})];
        let frames = [
            (&job.first_frame, &job.first_frame_url, "first_frame"),
            (&job.last_frame, &job.last_frame_url, "last_frame"),
        ];
        for (blob, url, role) in frames {
            if let Some(blob) = blob {
                let item = self.stored("image_url", blob, url.as_deref(), role);
                content.push(item.await.map_err(|e| e.to_string())?);
            }
        }
        for r in references {
            let kind = match r.role {
                ReferenceRole::Image => "image_url",
                ReferenceRole::Video => "video_url",
                ReferenceRole::Audio => "audio_url",
            };
            let item = self.stored(kind, &r.blob, r.url.as_deref(), r.role.as_str());
            content.push(item.await.map_err(|e| e.to_string())?);
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
        if let Some(url) = self.callback_url(&job.task_id) {
            body["callback_url"] = json!(url);
        }
        Ok(body)
    }

    async fn submit_task(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        let body = match self.body(job, references).await {
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
            // The relay's task id. The relay never sends a submission twice (one whose
            // answer was lost fails instead); an upstream that honours the header is also
            // safe from anything between the two that would.
            .header("idempotency-key", &job.task_id)
            .body(Bytes::from(body.to_string()));
        let body = match self.remote.submit_exchange(req).await {
            Ok(body) => body,
            Err(outcome) => return outcome,
        };
        match serde_json::from_slice::<Created>(&body) {
            Ok(Created { id: Some(id) }) if !id.is_empty() && id.len() <= 256 => {
                SubmitOutcome::Accepted { upstream_id: id }
            }
            _ => self.remote.without_id(&body),
        }
    }

    fn task_url(&self, upstream_id: &str) -> String {
        self.remote.url(&format!(
            "/contents/generations/tasks/{}",
            path_part(upstream_id)
        ))
    }
}

#[async_trait]
impl Vendor for Ark {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        self.submit_task(job, references).await
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        match self.remote.poll_json(&self.task_url(upstream_id)).await {
            Ok(task) => from_vendor(&self.remote, task),
            Err(outcome) => outcome,
        }
    }

    async fn cancel(&self, upstream_id: &str) {
        self.remote.delete(&self.task_url(upstream_id)).await
    }

    /// A one-item page of the key's tasks: authenticated, generating nothing.
    async fn check(&self) -> ChannelCheck {
        let url = self
            .remote
            .url("/contents/generations/tasks?page_num=1&page_size=1");
        self.remote.check_get(&url, |_, _| None).await
    }
}

/// A task's answer as the task's outcome (PROTOCOLS.md §4); the upstream's words on a failure
/// go to `remote`'s log.
fn from_vendor(remote: &Remote, task: ArkTask) -> PollOutcome {
    let name = remote.name();
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
            let usage = usage(&task);
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
                    spritesheet: None,
                    usage,
                }),
                None => remote.upstream_failed("succeeded", "succeeded without a video_url"),
            }
        }
        status @ ("failed" | "cancelled" | "expired") => {
            let detail = task.error.map(|e| e.to_string()).unwrap_or_default();
            remote.upstream_failed(status, &detail)
        }
        other => PollOutcome::Unknown(format!("channel {name}: unknown status {other:?}")),
    }
}

/// The `duration` (an integer) and `resolution` a finished task reports.
fn usage(task: &ArkTask) -> VendorUsage {
    let seconds = match &task.duration {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|s| s >= 0.0) => n.as_f64(),
        Some(other) => return VendorUsage::Unreadable(format!("duration {other}")),
    };
    let resolution = match &task.resolution {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(other) => return VendorUsage::Unreadable(format!("resolution {other}")),
    };
    if seconds.is_none() && resolution.is_none() {
        return VendorUsage::NotReported;
    }
    VendorUsage::Made {
        seconds,
        resolution,
    }
}

fn is_http(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use super::*;
    use crate::http::client::UpstreamTimeouts;
    use crate::vendors::seam::callback_token;

    fn job(first: Option<&str>, last: Option<&str>) -> VideoJob {
        VideoJob {
            task_id: "gen_1".into(),
            duration_secs: 5,
            first_frame: first.map(str::to_owned),
            last_frame: last.map(str::to_owned),
            return_last_frame: true,
            seed: Some(9),
            ..VideoJob::test("seedance-pro", "a heron")
        }
    }

    #[tokio::test]
    async fn frames_go_inline_under_the_cap() {
        let dir = std::env::temp_dir().join(format!("channels-ark-{}", std::process::id()));
        let blobs: Arc<dyn BlobStore> = Arc::new(store::LocalBlobs::open(&dir).unwrap());
        blobs
            .put_bytes("a/first.png", Bytes::from_static(b"\x89PNG\r\n\x1a\nsmall"))
            .await
            .unwrap();
        blobs
            .put_bytes(
                "a/last.jpg",
                [vec![0xFF, 0xD8, 0xFF], vec![0; 64]].concat().into(),
            )
            .await
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
                result_urls: Default::default(),
                network: Default::default(),
            },
            blobs,
            None,
        );
        let body = ark
            .body(&job(Some("a/first.png"), None), &[])
            .await
            .unwrap();
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
        let body = ark.body(&refs, &[]).await.unwrap();
        assert_eq!(body["content"][1]["role"], "reference_video");
        assert_eq!(
            body["content"][1]["video_url"]["url"],
            "https://media.example/v.mp4"
        );
        assert_eq!(body["content"][2]["role"], "reference_audio");
        // Over the inline cap: refused, naming the cap.
        let err = ark
            .body(&job(Some("a/first.png"), Some("a/last.jpg")), &[])
            .await
            .unwrap_err();
        assert!(err.contains("inline cap"), "{err}");
        // ... unless the relay has a public URL for it.
        let mut with_url = job(Some("a/first.png"), Some("a/last.jpg"));
        with_url.last_frame_url = Some("https://relay.example/files/a/last.jpg?sig=1".into());
        let body = ark.body(&with_url, &[]).await.unwrap();
        assert_eq!(
            body["content"][2]["image_url"]["url"],
            "https://relay.example/files/a/last.jpg?sig=1"
        );
        assert_eq!(body["content"][2]["role"], "last_frame");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An ark channel over a fresh blob directory holding `files`.
    async fn ark_with(dir: &str, files: &[(&str, &[u8])], max_inline_bytes: u64) -> (Ark, PathBuf) {
        let dir = std::env::temp_dir().join(format!("channels-{dir}-{}", std::process::id()));
        let blobs: Arc<dyn BlobStore> = Arc::new(store::LocalBlobs::open(&dir).unwrap());
        for (id, bytes) in files {
            blobs
                .put_bytes(id, Bytes::copy_from_slice(bytes))
                .await
                .unwrap();
        }
        let settings = RemoteSettings {
            name: "ark".into(),
            models: vec!["gen2-pro".into()],
            base_url: "http://127.0.0.1:1/api/v3".into(),
            api_key: None,
            model_map: Default::default(),
            timeouts: UpstreamTimeouts::default(),
            min_poll_interval: std::time::Duration::from_secs(2),
            max_inline_bytes,
            result_urls: Default::default(),
            network: Default::default(),
        };
        (Ark::new(settings, blobs, None), dir)
    }

    fn stored(role: ReferenceRole, blob: &str, url: Option<&str>) -> StoredReference {
        StoredReference {
            role,
            blob: blob.into(),
            url: url.map(str::to_owned),
        }
    }

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nsmall";
    const MP4: &[u8] = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isommp41\x00\x00\x00\x08free";
    const WAV: &[u8] = b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00";

    #[tokio::test]
    async fn every_stored_reference_goes_with_its_role_in_request_order() {
        let files: [(&str, &[u8]); 5] = [
            ("r/first.png", PNG),
            ("r/image-a.png", PNG),
            ("r/image-b.jpg", &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0]),
            ("r/clip.mp4", MP4),
            ("r/voice.wav", WAV),
        ];
        let (ark, dir) = ark_with("ark-refs", &files, 1024).await;
        let references = [
            stored(ReferenceRole::Image, "r/image-a.png", None),
            stored(ReferenceRole::Video, "r/clip.mp4", None),
            stored(ReferenceRole::Image, "r/image-b.jpg", None),
            stored(ReferenceRole::Audio, "r/voice.wav", None),
        ];
        let body = ark
            .body(&job(Some("r/first.png"), None), &references)
            .await
            .unwrap();
        let content = body["content"].as_array().unwrap();
        let seen: Vec<(&str, &str, &str)> = content[1..]
            .iter()
            .map(|item| {
                let kind = item["type"].as_str().unwrap();
                let url = item[kind]["url"].as_str().unwrap();
                let mime = url
                    .strip_prefix("data:")
                    .and_then(|u| u.split(';').next())
                    .unwrap_or(url);
                (kind, item["role"].as_str().unwrap(), mime)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("image_url", "first_frame", "image/png"),
                ("image_url", "reference_image", "image/png"),
                ("video_url", "reference_video", "video/mp4"),
                ("image_url", "reference_image", "image/jpeg"),
                ("audio_url", "reference_audio", "audio/wav"),
            ]
        );
        // The bytes themselves, base64 after the media type.
        let url = content[5]["audio_url"]["url"].as_str().unwrap();
        let data = url.strip_prefix("data:audio/wav;base64,").unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        assert_eq!(decoded, WAV);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn references_over_the_inline_cap_go_as_the_relays_urls_or_fail() {
        let files: [(&str, &[u8]); 3] = [
            ("r/clip.mp4", MP4),
            ("r/voice.wav", WAV),
            ("r/image.png", PNG),
        ];
        // MP4 and WAV are over 20 bytes; the PNG is not.
        let (ark, dir) = ark_with("ark-refs-cap", &files, 20).await;
        let references = [
            stored(
                ReferenceRole::Video,
                "r/clip.mp4",
                Some("https://relay.example/files/r/clip.mp4?sig=v"),
            ),
            stored(
                ReferenceRole::Audio,
                "r/voice.wav",
                Some("https://relay.example/files/r/voice.wav?sig=a"),
            ),
            stored(
                ReferenceRole::Image,
                "r/image.png",
                Some("https://relay.example/files/r/image.png?sig=i"),
            ),
        ];
        let body = ark.body(&job(None, None), &references).await.unwrap();
        assert_eq!(
            body["content"][1],
            json!({"type": "video_url", "role": "reference_video",
                   "video_url": {"url": "https://relay.example/files/r/clip.mp4?sig=v"}})
        );
        assert_eq!(
            body["content"][2],
            json!({"type": "audio_url", "role": "reference_audio",
                   "audio_url": {"url": "https://relay.example/files/r/voice.wav?sig=a"}})
        );
        // Under the cap: inline, even with a URL.
        let inline = body["content"][3]["image_url"]["url"].as_str().unwrap();
        assert!(inline.starts_with("data:image/png;base64,"), "{inline}");
        assert_eq!(body["content"][3]["role"], "reference_image");

        // Without a public URL, an oversized reference fails the submission, naming the cap.
        let err = ark
            .body(
                &job(None, None),
                &[stored(ReferenceRole::Video, "r/clip.mp4", None)],
            )
            .await
            .unwrap_err();
        assert!(
            err.contains("r/clip.mp4") && err.contains("inline cap"),
            "{err}"
        );
        // A reference whose bytes are gone fails it too.
        let err = ark
            .body(
                &job(None, None),
                &[stored(ReferenceRole::Image, "r/missing.png", None)],
            )
            .await
            .unwrap_err();
        assert!(err.contains("r/missing.png"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The task of PROTOCOLS.md §4 once it succeeded, and its other statuses.
    #[test]
    fn a_task_reads_as_an_outcome() {
        let remote = crate::vendors::common::test_remote("ark");
        let read = |json: &str| from_vendor(&remote, serde_json::from_str(json).unwrap());
        let PollOutcome::Succeeded(files) = read(
            r#"{"id":"cgt-1","model":"seedance","status":"succeeded","duration":5,"resolution":"720p",
                "ratio":"16:9","content":{"video_url":"https://cdn.example/v.mp4","last_frame_url":"https://cdn.example/l.png"}}"#,
        ) else {
            panic!("not a success")
        };
        assert_eq!(
            files.video,
            ResultSource::Url("https://cdn.example/v.mp4".into())
        );
        assert_eq!(
            files.last_frame,
            Some(ResultSource::Url("https://cdn.example/l.png".into()))
        );
        assert_eq!(
            files.usage,
            VendorUsage::Made {
                seconds: Some(5.0),
                resolution: Some("720p".into())
            }
        );
        let PollOutcome::Succeeded(files) = read(
            r#"{"status":"succeeded","duration":"five","content":{"video_url":"https://cdn.example/v.mp4"}}"#,
        ) else {
            panic!("not a success")
        };
        assert!(matches!(files.usage, VendorUsage::Unreadable(_)));
        assert!(matches!(
            read(r#"{"status":"succeeded","content":{}}"#),
            PollOutcome::Failed { .. }
        ));
        assert_eq!(
            read(r#"{"status":"queued"}"#),
            PollOutcome::Running {
                progress: 0,
                next_poll: None
            }
        );
        for status in ["failed", "cancelled", "expired"] {
            assert!(matches!(
                read(&format!(r#"{{"status":"{status}"}}"#)),
                PollOutcome::Failed { .. }
            ));
        }
        assert!(matches!(
            read(r#"{"status":"odd"}"#),
            PollOutcome::Unknown(_)
        ));
    }

    #[tokio::test]
    async fn a_callback_url_names_the_task_with_its_token() {
        let (mut ark, dir) = ark_with("callback", &[], 32).await;
        let public_base = Arc::new(OnceLock::new());
        ark.callback = Some(ArkCallback {
            secret: "s3cret".into(),
            public_base: public_base.clone(),
        });
        // Before the relay knows its address, no callback is asked for.
        let body = ark.body(&job(None, None), &[]).await.unwrap();
        assert!(body.get("callback_url").is_none(), "{body}");
        public_base
            .set("https://relay.example/".to_owned())
            .unwrap();
        let body = ark.body(&job(None, None), &[]).await.unwrap();
        let token = callback_token("s3cret", "ark", "gen_1");
        assert_eq!(
            body["callback_url"],
            format!("https://relay.example/callbacks/ark/ark?task=gen_1&token={token}")
        );
        // The token depends on secret, channel and task alike.
        assert_ne!(token, callback_token("other", "ark", "gen_1"));
        assert_ne!(token, callback_token("s3cret", "ark2", "gen_1"));
        assert_ne!(token, callback_token("s3cret", "ark", "gen_2"));
        assert_eq!(token.len(), 43);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
