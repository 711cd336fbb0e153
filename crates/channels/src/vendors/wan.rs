//! `wan`: Alibaba's Wan models on DashScope (Model Studio) asynchronous tasks (docs/channels.md:
//! Wan). Text and image to video are `POST /api/v1/services/aigc/video-generation/video-synthesis`,
//! first-and-last-frame models (`*-kf2v-*`) `POST /api/v1/services/aigc/image2video/video-synthesis`,
//! each with `Authorization: Bearer <key>` and `X-DashScope-Async: enable`; every task is polled
//! at `GET /api/v1/tasks/{task_id}` and cancelled (while pending) at `POST .../cancel`.
//!
//! Up to wan2.6 the body is `{model, input: {prompt, negative_prompt, img_url | first_frame_url,
//! last_frame_url, audio_url}, parameters: {size "1280*720" | resolution "720P", duration,
//! seed}}`; wan2.7 and later name their media in `input.media[]` and take `resolution` with
//! `ratio`. Images go as URLs or `data:` URIs. A finished task's `output.video_url` lasts a
//! day; its `usage` says the seconds billed (`duration`, `output_video_duration`, or
//! `video_duration` on wan2.1) and the tier (`SR`). Errors are `{code, message}` by name:
//! `Throttling*` rests the channel, `Arrearage` (a spent balance) too, `InvalidApiKey` and
//! `AccessDenied*` fail over, `DataInspectionFailed` is a content refusal, `InvalidParameter`
//! the request's own fault.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::Deserialize;

use crate::vendors::common::{PollError, Remote, path_part, retry_after, snippet};
use crate::vendors::media;
use crate::vendors::seam::{Need, Registration, Vendor, VendorSettings};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ResultFiles, ResultSource, StoredReference,
    SubmitOutcome, VendorUsage, VideoJob,
};

/// The `wan` kind: an API key of the endpoint's region.
pub const REGISTRATION: Registration = Registration {
    kind: "wan",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::ApiKey],
    callbacks: false,
    status_words: false,
    models: catalog,
    build: |s, _| Ok(Box::new(Wan::new(s))),
};

/// The Wan models DashScope documents (Singapore names; Beijing spells wan2.1 `wanx2.1`) and
/// what each makes. Image-only models are listed with the rest: a text-only request to them
/// is refused by DashScope.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let model = |durations: Vec<u32>, tiers: &[&str], ratios: &[&str]| ModelCaps {
        durations,
        resolutions: list(tiers),
        ratios: list(ratios),
        durations_by_resolution: BTreeMap::new(),
        ..ModelCaps::default()
    };
    let three = ["16:9", "9:16", "1:1"];
    let five = ["16:9", "9:16", "1:1", "4:3", "3:4"];
    let sound = |mut m: ModelCaps| {
        m.audio = true;
        m.reference_audios = 1;
        m
    };
    let text = |mut m: ModelCaps| {
        m.first_frame = false;
        m
    };
    let last = |mut m: ModelCaps| {
        m.last_frame = true;
        m
    };
    vec![
        (
            "wan2.7-t2v",
            sound(text(model((2..=15).collect(), &["720p", "1080p"], &five))),
        ),
        (
            "wan2.7-i2v",
            last(sound(model((2..=15).collect(), &["720p", "1080p"], &[]))),
        ),
        (
            // Up to five references together, 2-10 s with a reference video: taken narrowly,
            // four images and one video, 2-10 s. Its voices go with each reference
            // (`reference_voice`), which the relay does not send: no audio track.
            "wan2.7-r2v",
            ModelCaps {
                reference_images: 4,
                reference_videos: 1,
                audio: true,
                ..model((2..=10).collect(), &["720p", "1080p"], &five)
            },
        ),
        (
            "wan2.6-t2v",
            sound(text(model(vec![5, 10, 15], &["720p", "1080p"], &five))),
        ),
        (
            "wan2.6-i2v",
            sound(model(vec![5, 10, 15], &["720p", "1080p"], &[])),
        ),
        (
            "wan2.5-t2v-preview",
            sound(text(model(vec![5, 10], &["480p", "720p", "1080p"], &three))),
        ),
        (
            "wan2.5-i2v-preview",
            sound(model(vec![5, 10], &["480p", "720p", "1080p"], &[])),
        ),
        (
            "wan2.2-t2v-plus",
            text(model(vec![5], &["480p", "1080p"], &three)),
        ),
        ("wan2.2-i2v-plus", model(vec![5], &["480p", "1080p"], &[])),
        ("wan2.2-i2v-flash", model(vec![5], &["480p", "720p"], &[])),
        (
            "wan2.2-kf2v-flash",
            last(model(vec![5], &["480p", "720p", "1080p"], &[])),
        ),
        (
            "wan2.1-t2v-turbo",
            text(model(vec![5], &["480p", "720p"], &three)),
        ),
        ("wan2.1-t2v-plus", text(model(vec![5], &["720p"], &five))),
        ("wan2.1-i2v-turbo", model(vec![5], &["480p", "720p"], &[])),
        ("wan2.1-i2v-plus", model(vec![5], &["720p"], &[])),
        ("wan2.1-kf2v-plus", last(model(vec![5], &["720p"], &[]))),
    ]
}

/// DashScope's international (Singapore) endpoint.
pub const DEFAULT_BASE_URL: &str = "https://dashscope-intl.aliyuncs.com";

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// How long a channel whose balance is spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

mod request;
pub use request::{
    Inputs, KF2V_PATH, Media, SYNTHESIS_PATH, WanInput, WanParameters, WanRequest, is_media_model,
    size_for, to_vendor,
};

/// An error answer: `{code, message, request_id}` (some gateways wrap it as `{error: {..}}`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WanError {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub error: Option<Box<WanError>>,
}

impl WanError {
    /// The code and message, from either shape.
    fn parts(&self) -> (String, String) {
        let inner = self.error.as_deref();
        let code = self
            .code
            .clone()
            .or_else(|| inner.and_then(|e| e.code.clone()))
            .unwrap_or_default();
        let message = self
            .message
            .clone()
            .or_else(|| inner.and_then(|e| e.message.clone()))
            .unwrap_or_default();
        (code, message)
    }
}

/// What a DashScope error code means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The key was refused, or the account cannot use this model (`InvalidApiKey`,
    /// `AccessDenied*`, `Model.AccessDenied`, `ModelNotFound`): another channel may.
    Channel,
    /// The balance or the quota is spent (`Arrearage`, `Throttling.AllocationQuota`,
    /// `AllocationQuota.*`): rest the channel.
    Balance,
    /// Too many requests (`Throttling`, `Throttling.RateQuota`): rest it briefly.
    RateLimit,
    /// The request itself is wrong (`InvalidParameter`, `BadRequest*`, `InvalidURL`).
    Request,
    /// Content refused (`DataInspectionFailed`, `IPInfringementSuspect`).
    Refused,
    /// The vendor's own trouble (`InternalError*`, or a code we do not know).
    Vendor,
}

/// The class of a code, by name; case and `_` are not looked at (`InvalidApiKey` is
/// `invalid_api_key`).
pub fn classify(code: &str, message: &str) -> ErrorClass {
    let norm: String = code
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    let message = message.to_ascii_lowercase();
    match norm.as_str() {
        "invalidapikey" | "modelnotfound" | "unsupportedmodel" => ErrorClass::Channel,
        n if n.starts_with("accessdenied") && n != "accessdenied" => {
            // `AccessDenied.Unpurchased`, `AllocationQuota.FreeTierOnly` and the like.
            ErrorClass::Channel
        }
        "accessdenied" | "model.accessdenied" => ErrorClass::Channel,
        "arrearage" | "insufficientquota" | "throttling.allocationquota" => ErrorClass::Balance,
        n if n.starts_with("allocationquota") => ErrorClass::Balance,
        n if n.starts_with("throttling") => ErrorClass::RateLimit,
        "datainspectionfailed" | "ipinfringementsuspect" => ErrorClass::Refused,
        // DashScope says an unknown model with this code: the channel's model map is wrong.
        "invalidparameter" if message.contains("model not exist") => ErrorClass::Channel,
        "invalidparameter" | "invalidurl" | "unsupportedoperation" => ErrorClass::Request,
        n if n.starts_with("badrequest") || n.starts_with("invalidparameter") => {
            ErrorClass::Request
        }
        _ => ErrorClass::Vendor,
    }
}

/// A submission's answer as the engine's outcome. An error `code` says the task was not
/// taken; a success without one and without a task id may have made a task the relay cannot
/// follow: `Ambiguous`, never sent again.
pub fn submit_outcome(name: &str, status: StatusCode, body: &[u8]) -> SubmitOutcome {
    if status.is_success()
        && let Ok(task) = serde_json::from_slice::<WanTask>(body)
        && let Some(output) = task.output
        && !output.task_id.is_empty()
        && output.task_id.len() <= 200
    {
        return SubmitOutcome::Accepted {
            upstream_id: output.task_id,
        };
    }
    let (code, message) = serde_json::from_slice::<WanError>(body)
        .map(|e| e.parts())
        .unwrap_or_default();
    let detail = format!(
        "channel {name}: dashscope answered {status} {code}: {message} {}",
        if code.is_empty() {
            snippet(body)
        } else {
            String::new()
        }
    );
    let class = if code.is_empty() {
        match status {
            s if s.is_success() => {
                return SubmitOutcome::Ambiguous(format!(
                    "channel {name}: dashscope answered {status} without a task id: {}",
                    snippet(body)
                ));
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ErrorClass::Channel,
            StatusCode::TOO_MANY_REQUESTS => ErrorClass::RateLimit,
            s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT => ErrorClass::Vendor,
            _ => ErrorClass::Request,
        }
    } else {
        classify(&code, &message)
    };
    match class {
        ErrorClass::Channel | ErrorClass::Vendor => SubmitOutcome::Retry(detail),
        ErrorClass::Balance => SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            reason: detail,
        },
        ErrorClass::RateLimit => SubmitOutcome::RateLimited {
            retry_after: None,
            reason: detail,
        },
        ErrorClass::Request | ErrorClass::Refused => SubmitOutcome::Fatal(detail),
    }
}

/// A submission's answer as the engine's outcome, as [`submit_outcome`] reads it, with a
/// content refusal told apart and a rate limit's `retry-after` read from `headers`.
pub fn read_submission(
    name: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    if !status.is_success() && submit_refused(body) {
        tracing::warn!(
            channel = name,
            answer = snippet(body),
            "dashscope refused a submission's content"
        );
        return SubmitOutcome::Refused {
            code: REFUSED_CODE.into(),
            message: "the upstream refused the content of the request".into(),
        };
    }
    match submit_outcome(name, status, body) {
        SubmitOutcome::RateLimited {
            retry_after: None,
            reason,
        } => SubmitOutcome::RateLimited {
            retry_after: retry_after(headers),
            reason,
        },
        other => other,
    }
}

/// Whether a submission was refused for its content.
pub fn submit_refused(body: &[u8]) -> bool {
    serde_json::from_slice::<WanError>(body).is_ok_and(|e| {
        let (code, message) = e.parts();
        classify(&code, &message) == ErrorClass::Refused
    })
}

/// A task as submission and query give it.
#[derive(Debug, Clone, Deserialize)]
pub struct WanTask {
    #[serde(default)]
    pub output: Option<WanOutput>,
    #[serde(default)]
    pub usage: Option<WanUsage>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct WanOutput {
    #[serde(default)]
    pub task_id: String,
    #[serde(default)]
    pub task_status: String,
    #[serde(default)]
    pub video_url: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// `usage` of a finished task; names differ by model generation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WanUsage {
    /// Seconds billed (wan2.2 and later).
    #[serde(default)]
    pub duration: Option<f64>,
    #[serde(default)]
    pub output_video_duration: Option<f64>,
    /// Seconds (wanx2.1).
    #[serde(default)]
    pub video_duration: Option<f64>,
    /// The tier's short side: 480, 720, 1080.
    #[serde(default, rename = "SR")]
    pub sr: Option<u32>,
}

impl WanUsage {
    /// The seconds made, from whichever name the model's generation uses.
    pub fn seconds(&self) -> Option<f64> {
        self.duration
            .or(self.output_video_duration)
            .or(self.video_duration)
            .filter(|d| d.is_finite() && *d > 0.0)
    }

    /// The tier made (`720p`), from `SR`.
    pub fn tier(&self) -> Option<String> {
        self.sr.map(|sr| format!("{sr}p"))
    }
}

/// A task's state.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    Succeeded {
        url: String,
        seconds: Option<f64>,
        tier: Option<String>,
        /// Whether a `usage` came at all (none is logged, and settled as asked).
        usage_read: bool,
    },
    Failed {
        refused: bool,
        status: &'static str,
        message: String,
    },
    Unknown(String),
}

/// A task's state from `output.task_status` (`PENDING`, `RUNNING`, `SUCCEEDED`, `FAILED`,
/// `CANCELED`, `UNKNOWN`: the id is older than a day or of another region).
pub fn from_vendor(task: &WanTask) -> TaskState {
    let Some(output) = &task.output else {
        return TaskState::Unknown("no output".into());
    };
    match output.task_status.as_str() {
        "PENDING" => TaskState::Running { progress: 0 },
        "RUNNING" => TaskState::Running { progress: 50 },
        "SUCCEEDED" => match output
            .video_url
            .as_deref()
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
        {
            Some(url) => {
                let usage = task.usage.clone().unwrap_or_default();
                TaskState::Succeeded {
                    url: url.to_owned(),
                    seconds: usage.seconds(),
                    tier: usage.tier(),
                    usage_read: task.usage.is_some() && usage.seconds().is_some(),
                }
            }
            None => TaskState::Failed {
                refused: false,
                status: "failed",
                message: "succeeded without a video_url".into(),
            },
        },
        "FAILED" => {
            let code = output.code.clone().unwrap_or_default();
            let message = output.message.clone().unwrap_or_default();
            TaskState::Failed {
                refused: classify(&code, &message) == ErrorClass::Refused,
                status: "failed",
                message: format!("{code}: {message}"),
            }
        }
        "CANCELED" => TaskState::Failed {
            refused: false,
            status: "cancelled",
            message: "cancelled".into(),
        },
        "UNKNOWN" => TaskState::Failed {
            refused: false,
            status: "expired",
            message: "the task is unknown (older than a day, or of another region)".into(),
        },
        other => TaskState::Unknown(other.to_owned()),
    }
}

/// A query's answer as the task's state.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    if !status.is_success() {
        return Err(PollError::Transient(format!(
            "channel {name}: dashscope query answered {status}: {}",
            snippet(body)
        )));
    }
    match serde_json::from_slice::<WanTask>(body) {
        Ok(task) if task.output.is_some() => Ok(from_vendor(&task)),
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: unreadable dashscope query answer: {}",
            snippet(body)
        ))),
    }
}

/// A `wan` channel.
pub struct Wan {
    remote: Remote,
}

impl Wan {
    pub fn new(settings: VendorSettings) -> Wan {
        Wan {
            remote: Remote::new(settings.remote, settings.blobs),
        }
    }

    async fn inputs(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Inputs, String> {
        let mut out = Inputs::default();
        for (blob, url, slot) in [
            (&job.first_frame, &job.first_frame_url, &mut out.first_frame),
            (&job.last_frame, &job.last_frame_url, &mut out.last_frame),
        ] {
            if let Some(blob) = blob {
                *slot = Some(
                    media::reference(&self.remote, blob, url.as_deref(), media::data_uri).await?,
                );
            }
        }
        for r in references {
            let sent =
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::data_uri).await?;
            out.references.push((r.role, sent));
        }
        Ok(out)
    }
}

/// A task's state as the engine's poll outcome.
pub fn outcome(name: &str, state: TaskState) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded {
            url,
            seconds,
            tier,
            usage_read,
        } => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(url),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: if usage_read {
                VendorUsage::Made {
                    seconds,
                    resolution: tier,
                }
            } else {
                VendorUsage::Unreadable("dashscope reported no readable usage".into())
            },
        }),
        TaskState::Failed {
            refused: true,
            message,
            ..
        } => {
            tracing::warn!(
                channel = name,
                message,
                "dashscope refused a task's content"
            );
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into(),
            }
        }
        TaskState::Failed {
            refused: false,
            status,
            message,
        } => super::common::upstream_failed(name, status, &message),
        TaskState::Unknown(status) => PollOutcome::Unknown(format!(
            "channel {name}: unknown dashscope status {status:?}"
        )),
    }
}

#[async_trait]
impl Vendor for Wan {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        let fatal = |e: String| SubmitOutcome::Fatal(format!("channel {name}: {e}"));
        let inputs = match self.inputs(job, references).await {
            Ok(inputs) => inputs,
            Err(e) => return fatal(e),
        };
        let (path, body) = match to_vendor(job, inputs).and_then(|(path, body)| {
            serde_json::to_vec(&body)
                .map(|b| (path, b))
                .map_err(|e| e.to_string())
        }) {
            Ok(v) => v,
            Err(e) => return fatal(e),
        };
        let req = self
            .remote
            .request(Method::POST, &self.remote.url(path), true)
            .header("content-type", "application/json")
            .header("x-dashscope-async", "enable")
            .body(Bytes::from(body));
        // Sent again (here or elsewhere) only when nothing of it left, or DashScope's answer
        // says it took nothing: a request that may have reached DashScope unanswered is
        // ambiguous.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                read_submission(name, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => read_submission(name, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let url = self
            .remote
            .url(&format!("/api/v1/tasks/{}", path_part(upstream_id)));
        let req = self
            .remote
            .request(Method::GET, &url, true)
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Err(e) => PollOutcome::Transient(format!("channel {name}: {e}")),
            Ok((status, _, body)) => match poll_answer(name, status, &body) {
                Ok(state) => outcome(name, state),
                Err(e) => e.outcome(),
            },
        }
    }

    /// `POST /api/v1/tasks/{id}/cancel`: DashScope cancels a task still pending (a running
    /// one answers `UnsupportedOperation`, logged).
    async fn cancel(&self, upstream_id: &str) {
        let url = self
            .remote
            .url(&format!("/api/v1/tasks/{}/cancel", path_part(upstream_id)));
        let req = self
            .remote
            .request(Method::POST, &url, true)
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Ok((status, _, _)) if status.is_success() => {}
            Ok((status, _, body)) => tracing::info!(
                channel = self.remote.name(),
                %status,
                answer = snippet(&body),
                "dashscope did not cancel the task"
            ),
            Err(e) => tracing::warn!(channel = self.remote.name(), error = %e, "cancel failed"),
        }
    }

    /// A query of a task id that never existed: `200 UNKNOWN` with a good key, `401
    /// InvalidApiKey` with a bad one (or one of another region).
    async fn check(&self) -> ChannelCheck {
        self.remote
            .check_get_with(
                "/api/v1/tasks/00000000-0000-0000-0000-000000000000",
                check_answer,
            )
            .await
    }
}

/// A channel test's answer.
pub fn check_answer(status: StatusCode, body: &[u8]) -> ChannelCheck {
    if status.is_success()
        && serde_json::from_slice::<WanTask>(body).is_ok_and(|t| t.output.is_some())
    {
        return ChannelCheck {
            verdict: CheckVerdict::Ok,
            detail: "reachable, key accepted".into(),
        };
    }
    let (code, message) = serde_json::from_slice::<WanError>(body)
        .map(|e| e.parts())
        .unwrap_or_default();
    let verdict = match (classify(&code, &message), status) {
        (_, StatusCode::UNAUTHORIZED) | (ErrorClass::Channel, _) => CheckVerdict::KeyRefused,
        (ErrorClass::Balance, _) => CheckVerdict::Quota,
        (ErrorClass::RateLimit, _) | (_, StatusCode::TOO_MANY_REQUESTS) => {
            CheckVerdict::RateLimited
        }
        _ => CheckVerdict::Error,
    };
    ChannelCheck {
        verdict,
        detail: format!("dashscope answered {status} {code}: {message}"),
    }
}

#[cfg(test)]
mod tests;
