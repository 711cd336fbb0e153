//! `openai-videos`: an upstream speaking OpenAI-style `/v1/videos` (PROTOCOLS.md §1), another
//! relay or reseller of this kind (the OpenAI Videos API itself shut down in 2026). Create is
//! multipart, as the official SDK sends it (the first frame as the `input_reference` file
//! part); the video's `seconds` and `size` are what the upstream made. It has no built-in
//! models: it makes what its upstream makes.
//!
//! Relays behind the relay speak the shape loosely, and [`from_vendor`] reads them all: status
//! words of OpenAI, of the common Go relay (new-api's upper-case task statuses) and their
//! synonyms, case aside, and the operator's own (`status_words`); `progress` as a number
//! (percent, or a fraction strictly between 0 and 1) or a string (`"45%"`, `"45"`); errors as
//! an `error` object, a plain string, or new-api's `fail_reason`; the record alone or inside
//! new-api's `{"code", "data"}` envelope. The result is `GET /v1/videos/{id}/content` (bytes,
//! or a redirect followed); a URL the record names (`video_url`, `url`, `result_url`,
//! `metadata.url`) is fetched when that fails.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;
use serde::Deserialize;
use serde_json::Value;
use store::BlobStore;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::vendors::common::{Remote, RemoteSettings, path_part};
use crate::vendors::seam::{Registration, StatusMeaning, Vendor, status_word};
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
    status_words: true,
    models: Vec::new,
    build: |s, _| {
        Ok(Box::new(OpenaiVideos::new(
            s.remote,
            s.blobs,
            s.kind.status_words,
        )))
    },
};

pub struct OpenaiVideos {
    remote: Remote,
    /// The operator's status words (lower case), read before the built-in ones.
    words: BTreeMap<String, StatusMeaning>,
    /// A finished task's `/content` URL -> the URL its record named, fetched when `/content`
    /// does not serve the video; taken by the download.
    fallbacks: Mutex<HashMap<String, String>>,
}

/// The submission's answer, as far as the relay reads it: the video's id (new-api also
/// writes it as `task_id`).
#[derive(Debug, Deserialize)]
struct Created {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
}

/// The built-in reading of a status word (already trimmed and lower case): OpenAI's words,
/// their common synonyms, and new-api's task statuses (`NOT_START`, `SUBMITTED`, `QUEUED`,
/// `IN_PROGRESS`, `SUCCESS`, `FAILURE`; its `UNKNOWN` is no reading: the relay behind does not
/// know either).
pub fn builtin_meaning(word: &str) -> Option<StatusMeaning> {
    Some(match word {
        "queued" | "pending" | "in_progress" | "processing" | "running" | "not_start"
        | "submitted" => StatusMeaning::Running,
        "completed" | "succeeded" | "success" => StatusMeaning::Completed,
        "failed" | "failure" => StatusMeaning::Failed,
        "cancelled" | "canceled" => StatusMeaning::Cancelled,
        "expired" => StatusMeaning::Expired,
        _ => return None,
    })
}

/// A task's progress, 0 to 100, as a relay behind writes it: a number is percent, except one
/// strictly between 0 and 1, a fraction (`0.45` is 45 %); a string is the same number, or
/// percent whatever its size when it ends with `%` (`"45%"`, `"0.5%"`). Absent or unreadable
/// (another type, no number, negative): `None`, never a failure.
pub fn progress_of(value: Option<&Value>) -> Option<u8> {
    let fraction_or_percent = |x: f64| if x > 0.0 && x < 1.0 { x * 100.0 } else { x };
    let percent = match value? {
        Value::Number(n) => n.as_f64().map(fraction_or_percent),
        Value::String(s) => {
            let s = s.trim();
            match s.strip_suffix('%') {
                Some(p) => p.trim().parse::<f64>().ok(),
                None => s.parse::<f64>().ok().map(fraction_or_percent),
            }
        }
        _ => None,
    }?;
    (percent.is_finite() && percent >= 0.0).then(|| percent.min(100.0) as u8)
}

/// The record a poll answered: the video object itself, or new-api's task envelope
/// (`{"code": "success", "data": {...}}`) around it.
fn record(answer: &Value) -> &Value {
    match answer.get("data") {
        Some(data) if answer.get("status").is_none() && data.get("status").is_some() => data,
        _ => answer,
    }
}

/// A member that is a non-empty string.
fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// What the record says went wrong, in the upstream's words (for the log only): `error` as an
/// object (`message`, `code`, `type`) or a plain string, and new-api's `fail_reason`.
fn error_words(video: &Value) -> Vec<String> {
    let mut words = Vec::new();
    match video.get("error") {
        Some(Value::String(s)) if !s.trim().is_empty() => words.push(s.trim().to_owned()),
        Some(error @ Value::Object(_)) => {
            for key in ["code", "type", "message"] {
                match error.get(key) {
                    Some(Value::String(s)) if !s.trim().is_empty() => {
                        words.push(s.trim().to_owned())
                    }
                    Some(Value::Number(n)) => words.push(n.to_string()),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    if let Some(reason) = text(video, "fail_reason") {
        words.push(reason.to_owned());
    }
    words
}

/// Whether the upstream's words say its content rules refused the task.
fn says_moderation(words: &[String]) -> bool {
    words.iter().any(|w| {
        let w = w.to_ascii_lowercase().replace(['_', '-'], " ");
        [
            "moderation",
            "content policy",
            "policy violation",
            "safety",
            "sensitive",
            "prohibited",
            "nsfw",
            "inappropriate",
        ]
        .iter()
        .any(|needle| w.contains(needle))
    })
}

/// The URL of the result the record names, if any: `video_url`, `url`, `result_url` (new-api's
/// task record) or `metadata.url` (new-api's video object); a path is taken on the channel's
/// own origin. Anything that is no http(s) URL (a `data:` URI) is left alone.
fn record_url(video: &Value, base_url: &str) -> Option<String> {
    let named = ["video_url", "url", "result_url"]
        .iter()
        .find_map(|key| text(video, key))
        .or_else(|| video.get("metadata").and_then(|m| text(m, "url")))?;
    if named.starts_with("http://") || named.starts_with("https://") {
        return Some(named.to_owned());
    }
    if named.starts_with('/') && !named.starts_with("//") {
        let uri = base_url.parse::<http::Uri>().ok()?;
        return Some(format!(
            "{}://{}{named}",
            uri.scheme_str()?,
            uri.authority()?
        ));
    }
    None
}

/// A poll's answer as the task's outcome (`words`: the operator's, read first), and for a
/// success the URL its record names when it is not `/content` itself; `base` is the video's
/// URL on the upstream.
fn from_vendor(
    remote: &Remote,
    words: &BTreeMap<String, StatusMeaning>,
    answer: &Value,
    base: &str,
) -> (PollOutcome, Option<String>) {
    let name = remote.name();
    let video = record(answer);
    let Some(status) = video.get("status").and_then(Value::as_str) else {
        return (
            PollOutcome::Unknown(format!("channel {name}: a poll answer without a status")),
            None,
        );
    };
    let word = status_word(status);
    let meaning = words.get(&word).copied().or_else(|| builtin_meaning(&word));
    let outcome = match meaning {
        Some(StatusMeaning::Running) => PollOutcome::Running {
            progress: progress_of(video.get("progress")).unwrap_or(0).min(99),
            next_poll: None,
        },
        Some(StatusMeaning::Completed) => {
            let files = ResultFiles {
                video: ResultSource::Url(format!("{base}/content")),
                thumbnail: Some(ResultSource::Url(format!(
                    "{base}/content?variant=thumbnail"
                ))),
                last_frame: None,
                spritesheet: None,
                usage: usage(video),
            };
            let named = record_url(video, &remote.settings.base_url)
                .filter(|url| *url != format!("{base}/content"));
            return (PollOutcome::Succeeded(files), named);
        }
        Some(
            ended @ (StatusMeaning::Failed | StatusMeaning::Cancelled | StatusMeaning::Expired),
        ) => {
            let said = error_words(video);
            let detail = said.join(": ");
            if says_moderation(&said) {
                tracing::warn!(
                    channel = name,
                    detail = remote.log_text(detail.as_bytes()),
                    "the upstream refused a task's content"
                );
                PollOutcome::Failed {
                    code: "moderation_blocked".into(),
                    message: "the upstream refused the content".into(),
                }
            } else {
                let status = match ended {
                    StatusMeaning::Cancelled => "cancelled",
                    StatusMeaning::Expired => "expired",
                    _ => "failed",
                };
                remote.upstream_failed(status, &detail)
            }
        }
        None => {
            let shown: String = status.chars().take(64).collect();
            PollOutcome::Unknown(format!(
                "channel {name}: unknown status {}",
                remote.log_text(format!("{shown:?}").as_bytes())
            ))
        }
    };
    (outcome, None)
}

/// The `seconds` and `size` a finished video reports.
fn usage(video: &Value) -> VendorUsage {
    let seconds = match video.get("seconds") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => match s.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Some(s),
            _ => return VendorUsage::Unreadable(format!("seconds {s:?}")),
        },
        Some(Value::Number(n)) => match n.as_f64() {
            Some(s) if s >= 0.0 => Some(s),
            _ => return VendorUsage::Unreadable(format!("seconds {n}")),
        },
        Some(other) => return VendorUsage::Unreadable(format!("seconds {other}")),
    };
    let resolution = text(video, "size").and_then(|size| {
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

/// Whether a result download's answer is no video: not a success, or JSON (a relay behind
/// that answers `/content` with an error inside a `200`).
fn serves_no_video(res: &UpstreamResponse) -> bool {
    let json = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("json"));
    !res.status.is_success() || json
}

/// Finished tasks whose record's URL is kept for their download at most.
const MAX_FALLBACKS: usize = 4096;

const BOUNDARY: &str = "video-relay-7f3a9c1e5b2d4a60";

impl OpenaiVideos {
    pub fn new(
        settings: RemoteSettings,
        blobs: Arc<dyn BlobStore>,
        words: BTreeMap<String, StatusMeaning>,
    ) -> OpenaiVideos {
        OpenaiVideos {
            remote: Remote::new(settings, blobs),
            words,
            fallbacks: Mutex::default(),
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
        let created = serde_json::from_slice::<Created>(&body)
            .ok()
            .and_then(|c| c.id.filter(|id| !id.is_empty()).or(c.task_id));
        match created {
            Some(id) if !id.is_empty() && id.len() <= 256 => {
                SubmitOutcome::Accepted { upstream_id: id }
            }
            _ => self.remote.without_id(&body),
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let base = self.video_url(upstream_id);
        let answer = match self.remote.poll_json::<Value>(&base).await {
            Ok(answer) => answer,
            Err(outcome) => return outcome,
        };
        let (outcome, named) = from_vendor(&self.remote, &self.words, &answer, &base);
        if let Some(named) = named
            && let Ok(mut fallbacks) = self.fallbacks.lock()
        {
            // Entries whose download never came (a relay stopped between the two) are
            // forgotten in bulk rather than kept without bound; the next poll names them again.
            if fallbacks.len() >= MAX_FALLBACKS {
                fallbacks.clear();
            }
            fallbacks.insert(format!("{base}/content"), named);
        }
        outcome
    }

    /// `/content` first (the key goes along; a redirect is followed without it); when it
    /// serves no video and the record named a URL, that URL, through the address guard unless
    /// it is on the channel's own origin or a trusted host. When both fail, `/content`'s answer
    /// stands (the other's failure is logged).
    async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        let named = self
            .fallbacks
            .lock()
            .ok()
            .and_then(|mut fallbacks| fallbacks.remove(url));
        let first = self.remote.download(url).await;
        let Some(named) = named else {
            return first;
        };
        if first.as_ref().is_ok_and(|res| !serves_no_video(res)) {
            return first;
        }
        match self.remote.download(&named).await {
            Ok(res) if !serves_no_video(&res) => Ok(res),
            other => {
                let why = match other {
                    Ok(res) => format!("answered {}", res.status),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(
                    channel = self.remote.name(),
                    error = self.remote.log_text(why.as_bytes()),
                    "the result URL the upstream's record named served no video either"
                );
                first
            }
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
mod tests;
