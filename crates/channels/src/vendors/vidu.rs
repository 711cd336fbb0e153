//! `vidu`: Shengshu's Vidu API (docs/channels.md: Vidu). Every call carries
//! `Authorization: Token <key>`. The endpoint follows the inputs: `POST /ent/v2/text2video`
//! (text alone), `/ent/v2/img2video` (one first frame), `/ent/v2/start-end2video` (a first and
//! a last frame) or `/ent/v2/reference2video` (reference images), body `{model, images,
//! prompt, duration, seed, resolution, aspect_ratio}` (`images` URLs or `data:` URIs;
//! `aspect_ratio` on text and reference only), answered `{task_id, state, ...}`.
//!
//! A task is read at `GET /ent/v2/tasks/{id}/creations`: `state` `created`, `queueing`,
//! `processing`, `success` or `failed` (with `err_code`), `credits` spent, and `creations[]`
//! with the video's `url`, valid for a limited time: the relay copies it at once. Errors are
//! `{code, reason, message, metadata}` with `reason` Vidu's error code: `401 Unauthorized`,
//! `403 Forbidden`, `400 CreditInsufficient`, `429 QuotaExceeded | TooManyRequests |
//! SystemThrottling`, content refusals `400 AuditSubmitIllegal | TaskPromptPolicyViolation`
//! (and a task failed with `CreationPolicyViolation`). `POST /ent/v2/tasks/{id}/cancel` stops a
//! task (`{}`); a cancelled task then reads `failed` (`UserCancelled`). The channel test reads
//! `GET /ent/v2/credits`, the account's remaining credits.
//!
//! With a `callback_secret`, a submission carries `callback_url` (the relay's
//! `/callbacks/vidu/<channel>?task=..&token=..`); Vidu posts the task there when its state
//! changes, signed under the API key ([`callback_signing_string`]), and
//! [`Vendor::verify_callback`] checks that signature beside the relay's own token.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::check;
use crate::vendors::common::{KeyHeader, PollError, Remote, path_part, retry_after, snippet};
use crate::vendors::media;
use crate::vendors::seam::{
    CallbackSettings, InboundCallback, Need, Registration, Vendor, VendorSettings,
};
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `vidu` kind: a Vidu API key; it takes a `callback_secret`.
pub const REGISTRATION: Registration = Registration {
    kind: "vidu",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::ApiKey],
    callbacks: true,
    status_words: false,
    models: catalog,
    build: |s, _| Ok(Box::new(Vidu::new(s))),
};

/// Vidu's public endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.vidu.com";

/// The account's credits: the channel test.
pub const CREDITS_PATH: &str = "/ent/v2/credits";

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// How long a channel whose credits are spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

/// Vidu's error codes for content that did not pass its review (input or output).
const REFUSAL_CODES: [&str; 3] = [
    "AuditSubmitIllegal",
    "TaskPromptPolicyViolation",
    "CreationPolicyViolation",
];

mod request;
pub use request::{
    Endpoint, Inputs, MAX_REFERENCE_IMAGES, MODELS, ModelRules, ViduRequest, catalog, endpoint_of,
    rules, to_vendor,
};

/// An error answer: `{code, reason, message, metadata}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ViduError {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

/// The reason (Vidu's error code) and message of an error body (empty when it is none).
pub fn error_parts(body: &[u8]) -> (String, String) {
    serde_json::from_slice::<ViduError>(body)
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .unwrap_or_default()
}

/// What a Vidu error means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The key was refused (`401`, `403`), or the model is unavailable to it: another channel
    /// may do.
    Channel,
    /// The account's credits are spent (`CreditInsufficient`): rest the channel.
    Balance,
    /// Too many requests or tasks at once (`429`): rest it briefly.
    RateLimit,
    /// The content did not pass Vidu's review.
    Refused,
    /// The request itself is wrong (another `400`).
    Request,
    /// Vidu's own trouble (`5xx`, `408`).
    Vendor,
}

/// The class of an error answer by its status and reason.
pub fn classify(status: StatusCode, reason: &str) -> ErrorClass {
    match reason {
        "CreditInsufficient" => return ErrorClass::Balance,
        "ModelUnavailable" => return ErrorClass::Channel,
        r if REFUSAL_CODES.contains(&r) => return ErrorClass::Refused,
        _ => {}
    }
    match status.as_u16() {
        401 | 403 => ErrorClass::Channel,
        429 => ErrorClass::RateLimit,
        408 | 500..=599 => ErrorClass::Vendor,
        _ => ErrorClass::Request,
    }
}

/// A submission's answer as the engine's outcome. A success carries the `task_id`; one
/// without it may have made a task the relay cannot follow (`Ambiguous`, never sent again).
/// An error status says Vidu took nothing.
pub fn submit_outcome(
    name: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    if status.is_success() {
        #[derive(Deserialize)]
        struct Started {
            #[serde(default)]
            task_id: Option<Value>,
        }
        let id = serde_json::from_slice::<Started>(body)
            .ok()
            .and_then(|s| s.task_id)
            .and_then(|id| match id {
                Value::String(s) => Some(s),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|id| !id.is_empty() && id.len() <= 200);
        return match id {
            Some(upstream_id) => SubmitOutcome::Accepted { upstream_id },
            None => SubmitOutcome::Ambiguous(format!(
                "channel {name}: vidu answered {status} without a task_id: {}",
                snippet(body)
            )),
        };
    }
    let (reason, message) = error_parts(body);
    let detail = format!(
        "channel {name}: vidu answered {status} {reason}: {}",
        snippet(body)
    );
    match classify(status, &reason) {
        ErrorClass::Channel | ErrorClass::Vendor => SubmitOutcome::Retry(detail),
        ErrorClass::Balance => SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            reason: detail,
        },
        ErrorClass::RateLimit => SubmitOutcome::RateLimited {
            retry_after: retry_after(headers),
            reason: detail,
        },
        ErrorClass::Refused => {
            tracing::warn!(channel = name, %reason, "vidu refused the content of a task");
            SubmitOutcome::Refused {
                code: REFUSED_CODE.into(),
                message: refusal_message(&reason, &message),
            }
        }
        ErrorClass::Request => SubmitOutcome::Fatal(detail),
    }
}

/// What a client is told of a refusal: Vidu's code and documented words, never its body.
fn refusal_message(reason: &str, _message: &str) -> String {
    match reason {
        "CreationPolicyViolation" => "the upstream refused the generated content".into(),
        _ => "the upstream refused the content of the task".into(),
    }
}

/// One result of a task.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ViduCreation {
    #[serde(default)]
    pub url: Option<String>,
}

/// A poll's answer (and a callback's body).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ViduTask {
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub err_code: Option<String>,
    #[serde(default)]
    pub credits: Option<Value>,
    #[serde(default)]
    pub creations: Vec<ViduCreation>,
}

/// A task's state.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    Succeeded {
        url: String,
        credits: Option<f64>,
    },
    /// Failed on content Vidu's review refused.
    Refused(String),
    /// Cancelled (`UserCancelled`).
    Cancelled,
    Failed(String),
    Unknown(String),
}

/// A task's state from its `state`.
pub fn from_vendor(task: &ViduTask) -> TaskState {
    let http_url = |u: &Option<String>| {
        u.clone()
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
    };
    let err = task.err_code.clone().unwrap_or_default();
    match task.state.as_deref().unwrap_or_default() {
        "created" => TaskState::Running { progress: 0 },
        "queueing" => TaskState::Running { progress: 5 },
        "processing" => TaskState::Running { progress: 50 },
        "success" => match task.creations.first().and_then(|c| http_url(&c.url)) {
            Some(url) => TaskState::Succeeded {
                url,
                credits: task
                    .credits
                    .as_ref()
                    .and_then(Value::as_f64)
                    .filter(|c| c.is_finite()),
            },
            None => TaskState::Failed("success without a creation url".into()),
        },
        "failed" if REFUSAL_CODES.contains(&err.as_str()) => TaskState::Refused(err),
        "failed" if err == "UserCancelled" => TaskState::Cancelled,
        "failed" => TaskState::Failed(err),
        other => TaskState::Unknown(other.to_owned()),
    }
}

/// A poll's answer as the task's state: `200` with the task; `404` gone; any other status
/// polled again.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    if status == StatusCode::NOT_FOUND {
        return Err(PollError::Gone);
    }
    if !status.is_success() {
        return Err(PollError::Transient(format!(
            "channel {name}: vidu poll answered {status}: {}",
            snippet(body)
        )));
    }
    match serde_json::from_slice::<ViduTask>(body) {
        Ok(task) if task.state.is_some() => Ok(from_vendor(&task)),
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: unreadable vidu poll answer: {}",
            snippet(body)
        ))),
    }
}

/// A task's state as the engine's poll outcome. Vidu reports the credits a task spent, not
/// the length it made: the task is settled as asked (the credits go to the log).
pub fn outcome(name: &str, state: TaskState) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { url, credits } => {
            tracing::info!(channel = name, credits, "vidu finished a task");
            PollOutcome::Succeeded(ResultFiles {
                video: ResultSource::Url(url),
                thumbnail: None,
                last_frame: None,
                spritesheet: None,
                usage: VendorUsage::NotReported,
            })
        }
        TaskState::Refused(reason) => {
            tracing::warn!(channel = name, %reason, "vidu refused the content of a task");
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: refusal_message(&reason, ""),
            }
        }
        TaskState::Cancelled => super::common::upstream_failed(name, "cancelled", "UserCancelled"),
        TaskState::Failed(reason) => super::common::upstream_failed(name, "failed", &reason),
        TaskState::Unknown(state) => {
            PollOutcome::Unknown(format!("channel {name}: unknown vidu state {state:?}"))
        }
    }
}

/// A channel test's answer: the account's credits read is a good key; errors are read as
/// submissions read them.
pub fn check_answer(
    status: StatusCode,
    body: &[u8],
    log: impl Fn(&[u8]) -> String,
) -> ChannelCheck {
    if status.is_success() {
        let read = serde_json::from_slice::<Value>(body)
            .ok()
            .is_some_and(|v| v.get("remains").is_some_and(Value::is_array));
        return if read {
            ChannelCheck {
                verdict: CheckVerdict::Ok,
                detail: CheckVerdict::Ok.words().into(),
            }
        } else {
            check::answered(CheckVerdict::Error, status, &log(body))
        };
    }
    let (reason, _) = error_parts(body);
    let verdict = match classify(status, &reason) {
        ErrorClass::Channel if status.as_u16() == 401 || status.as_u16() == 403 => {
            CheckVerdict::KeyRefused
        }
        ErrorClass::Balance => CheckVerdict::Quota,
        ErrorClass::RateLimit => CheckVerdict::RateLimited,
        _ => check::verdict_of(status),
    };
    check::answered(verdict, status, &log(body))
}

mod callback;
pub use callback::{
    CALLBACK_ACCESS_KEY, CALLBACK_ALGORITHM, CALLBACK_DATE_SKEW, callback_signing_string,
    verify_callback_signature,
};

/// A `vidu` channel.
pub struct Vidu {
    remote: Remote,
    callback: Option<CallbackSettings>,
}

impl Vidu {
    pub fn new(settings: VendorSettings) -> Vidu {
        Vidu {
            remote: Remote::new(settings.remote, settings.blobs).with_key_header(KeyHeader::Token),
            callback: settings.callback,
        }
    }

    /// The `callback_url` of `task_id`, when the channel has a callback secret and the relay
    /// knows its public address: `<public base>/callbacks/vidu/<channel>?task=..&token=..`.
    pub fn callback_url(&self, task_id: &str) -> Option<String> {
        let callback = self.callback.as_ref()?;
        callback.url("vidu", self.remote.name(), task_id)
    }

    async fn inputs(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Inputs, String> {
        let mut out = Inputs::default();
        if let Some(blob) = &job.first_frame {
            out.first_frame = Some(
                media::reference(
                    &self.remote,
                    blob,
                    job.first_frame_url.as_deref(),
                    media::data_uri,
                )
                .await?,
            );
        }
        if let Some(blob) = &job.last_frame {
            out.last_frame = Some(
                media::reference(
                    &self.remote,
                    blob,
                    job.last_frame_url.as_deref(),
                    media::data_uri,
                )
                .await?,
            );
        }
        for r in references.iter().filter(|r| r.role == ReferenceRole::Image) {
            out.reference_images.push(
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::data_uri).await?,
            );
        }
        Ok(out)
    }
}

#[async_trait]
impl Vendor for Vidu {
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
        let callback_url = self.callback_url(&job.task_id);
        let (endpoint, body) = match to_vendor(job, inputs, references).and_then(|(e, body)| {
            let body = ViduRequest {
                callback_url,
                ..body
            };
            serde_json::to_vec(&body)
                .map(|b| (e, b))
                .map_err(|e| e.to_string())
        }) {
            Ok(sent) => sent,
            Err(e) => return fatal(e),
        };
        let req = self
            .remote
            .request(Method::POST, &self.remote.url(endpoint.path()), true)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        // Sent again (here or elsewhere) only when nothing of it left, or Vidu's answer says
        // it took nothing: a request that may have reached Vidu unanswered is ambiguous.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                submit_outcome(name, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => submit_outcome(name, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let url = self.remote.url(&format!(
            "/ent/v2/tasks/{}/creations",
            path_part(upstream_id)
        ));
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

    /// `POST /ent/v2/tasks/{id}/cancel`, best effort.
    async fn cancel(&self, upstream_id: &str) {
        let url = self
            .remote
            .url(&format!("/ent/v2/tasks/{}/cancel", path_part(upstream_id)));
        let body = serde_json::json!({ "id": upstream_id }).to_string();
        let req = self
            .remote
            .request(Method::POST, &url, true)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        match self.remote.exchange(req).await {
            Ok((status, _, _)) if status.is_success() => {}
            Ok((status, _, body)) => tracing::info!(
                channel = self.remote.name(),
                %status,
                answer = self.remote.log_text(&body),
                "vidu did not cancel the task"
            ),
            Err(e) => tracing::warn!(channel = self.remote.name(), error = %e, "cancel failed"),
        }
    }

    /// `GET /ent/v2/credits`: the account's remaining credits, free, generating nothing.
    async fn check(&self) -> ChannelCheck {
        self.remote
            .check_get_with(CREDITS_PATH, |status, body| {
                check_answer(status, body, |b| self.remote.log_text(b))
            })
            .await
    }

    /// Vidu signs each callback under the API key, over the callback URL the relay handed it
    /// for this task ([`verify_callback_signature`]).
    fn verify_callback(&self, callback: &InboundCallback<'_>) -> Result<(), String> {
        let url = self
            .callback_url(callback.task_id)
            .ok_or("the channel hands Vidu no callback URL")?;
        let key = self
            .remote
            .settings
            .api_key
            .as_deref()
            .ok_or("the channel has no API key")?;
        verify_callback_signature(
            &url,
            callback.method,
            callback.headers,
            key,
            std::time::SystemTime::now(),
        )
    }
}

#[cfg(test)]
mod tests;
