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
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check;
use crate::vendors::ark::callback_token;
use crate::vendors::common::{KeyHeader, Remote, path_part, retry_after, snippet};
use crate::vendors::media;
use crate::vendors::seam::{
    CallbackSettings, InboundCallback, Need, Registration, Vendor, VendorSettings,
};
use crate::video::caps::ModelCaps;
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

/// The most reference images reference-to-video takes.
pub const MAX_REFERENCE_IMAGES: usize = 7;

/// Which endpoint a task goes to, by its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Text,
    Image,
    StartEnd,
    Reference,
}

impl Endpoint {
    pub const fn path(self) -> &'static str {
        match self {
            Endpoint::Text => "/ent/v2/text2video",
            Endpoint::Image => "/ent/v2/img2video",
            Endpoint::StartEnd => "/ent/v2/start-end2video",
            Endpoint::Reference => "/ent/v2/reference2video",
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Endpoint::Text => "text to video",
            Endpoint::Image => "image to video",
            Endpoint::StartEnd => "start-end to video",
            Endpoint::Reference => "reference to video",
        }
    }
}

/// What one Vidu model takes, as Vidu documents it.
#[derive(Debug, Clone, Copy)]
pub struct ModelRules {
    pub name: &'static str,
    pub endpoints: &'static [Endpoint],
    pub durations: &'static [u32],
    pub tiers: &'static [&'static str],
    /// Tiers made at fewer durations (`vidu2.0`'s 360p and 1080p at 4 s only).
    pub short_only_tiers: &'static [&'static str],
    /// Aspect ratios of text and reference tasks.
    pub ratios: &'static [&'static str],
    /// Whether its videos have sound (the q3 models' audio, on by default).
    pub audio: bool,
}

const RATIOS_FIVE: &[&str] = &["16:9", "9:16", "1:1", "3:4", "4:3"];
const RATIOS_THREE: &[&str] = &["16:9", "9:16", "1:1"];
const ALL: &[Endpoint] = &[
    Endpoint::Text,
    Endpoint::Image,
    Endpoint::StartEnd,
    Endpoint::Reference,
];
const IMAGES_ONLY: &[Endpoint] = &[Endpoint::Image, Endpoint::StartEnd, Endpoint::Reference];

/// The models Vidu documents, and what each takes.
pub const MODELS: &[ModelRules] = &[
    ModelRules {
        name: "viduq3-pro",
        endpoints: &[Endpoint::Text, Endpoint::Image, Endpoint::StartEnd],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: true,
    },
    ModelRules {
        name: "viduq3-turbo",
        endpoints: &[Endpoint::Text, Endpoint::Image, Endpoint::StartEnd],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: true,
    },
    ModelRules {
        name: "viduq2",
        endpoints: &[Endpoint::Text, Endpoint::Reference],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: false,
    },
    ModelRules {
        name: "viduq1",
        endpoints: ALL,
        durations: &[5],
        tiers: &["1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_THREE,
        audio: false,
    },
    ModelRules {
        name: "vidu2.0",
        endpoints: IMAGES_ONLY,
        durations: &[4, 8],
        tiers: &["360p", "720p", "1080p"],
        short_only_tiers: &["360p", "1080p"],
        ratios: RATIOS_THREE,
        audio: false,
    },
    ModelRules {
        name: "vidu1.5",
        endpoints: IMAGES_ONLY,
        durations: &[4, 8],
        tiers: &["360p", "720p", "1080p"],
        short_only_tiers: &["360p", "1080p"],
        ratios: RATIOS_THREE,
        audio: false,
    },
];

/// The rules of `model`, when Vidu documents it.
pub fn rules(model: &str) -> Option<&'static ModelRules> {
    MODELS.iter().find(|m| m.name == model)
}

/// The built-in catalog: each documented model's capabilities.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    MODELS
        .iter()
        .map(|m| {
            let text = m.endpoints.contains(&Endpoint::Text);
            let caps = ModelCaps {
                durations: m.durations.to_vec(),
                resolutions: list(m.tiers),
                ratios: list(m.ratios),
                durations_by_resolution: m
                    .short_only_tiers
                    .iter()
                    .map(|t| ((*t).to_owned(), vec![m.durations[0]]))
                    .collect(),
                first_frame: m.endpoints.contains(&Endpoint::Image),
                last_frame: m.endpoints.contains(&Endpoint::StartEnd),
                image_only_resolutions: if text { Vec::new() } else { list(m.tiers) },
                reference_images: if m.endpoints.contains(&Endpoint::Reference) {
                    MAX_REFERENCE_IMAGES as u32
                } else {
                    0
                },
                audio: m.audio,
                ..ModelCaps::default()
            };
            (m.name, caps)
        })
        .collect()
}

/// The body of a submission, as Vidu names its fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ViduRequest {
    pub model: String,
    /// First frame, first and last frame, or reference images: URLs or `data:` URIs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    pub duration: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    pub resolution: String,
    /// Where Vidu posts the task when its state changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

/// The images of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub reference_images: Vec<String>,
}

/// The tier of a job: the one it was fitted to, else the one its size's short side names.
pub fn tier_of(job: &VideoJob) -> String {
    if let Some(tier) = &job.resolution {
        return tier.to_ascii_lowercase();
    }
    match job.width.min(job.height) {
        0..=400 => "360p",
        401..=600 => "540p",
        601..=900 => "720p",
        _ => "1080p",
    }
    .to_owned()
}

/// The endpoint of `inputs`: reference images, first and last frame, first frame, or text.
pub fn endpoint_of(inputs: &Inputs) -> Result<Endpoint, String> {
    match (
        &inputs.first_frame,
        &inputs.last_frame,
        inputs.reference_images.is_empty(),
    ) {
        (None, None, true) => Ok(Endpoint::Text),
        (Some(_), None, true) => Ok(Endpoint::Image),
        (Some(_), Some(_), true) => Ok(Endpoint::StartEnd),
        (None, None, false) => Ok(Endpoint::Reference),
        (None, Some(_), _) => Err("vidu takes a last frame only after a first frame".into()),
        _ => Err("vidu takes frames or reference images, not both".into()),
    }
}

/// The endpoint and body for `job`, its images already encoded. Refuses what Vidu has no
/// field for (audio, reference videos) rather than dropping it, and a model, endpoint,
/// duration, tier or ratio Vidu does not document together.
pub fn to_vendor(
    job: &VideoJob,
    inputs: Inputs,
    references: &[StoredReference],
) -> Result<(Endpoint, ViduRequest), String> {
    if job.audio_url.is_some() || references.iter().any(|r| r.role == ReferenceRole::Audio) {
        return Err("vidu takes no audio track".into());
    }
    if job.reference_video.is_some() || references.iter().any(|r| r.role == ReferenceRole::Video) {
        return Err("vidu takes no reference video".into());
    }
    if inputs.reference_images.len() > MAX_REFERENCE_IMAGES {
        return Err(format!(
            "vidu takes at most {MAX_REFERENCE_IMAGES} reference images, not {}",
            inputs.reference_images.len()
        ));
    }
    let endpoint = endpoint_of(&inputs)?;
    let model = job.model.as_str();
    let Some(rules) = rules(model) else {
        return Err(format!("vidu documents no model {model:?}"));
    };
    if !rules.endpoints.contains(&endpoint) {
        return Err(format!("vidu's {model} makes no {}", endpoint.name()));
    }
    if !rules.durations.contains(&job.duration_secs) {
        return Err(format!(
            "vidu's {model} makes {:?} s, not {} s",
            rules.durations, job.duration_secs
        ));
    }
    let tier = tier_of(job);
    if !rules.tiers.contains(&tier.as_str()) {
        return Err(format!(
            "vidu's {model} makes {}, not {tier}",
            rules.tiers.join(", ")
        ));
    }
    if rules.short_only_tiers.contains(&tier.as_str()) && job.duration_secs != rules.durations[0] {
        return Err(format!(
            "vidu's {model} makes {tier} at {} s only",
            rules.durations[0]
        ));
    }
    // Text and reference tasks name a ratio; frames set the picture.
    let aspect_ratio = match endpoint {
        Endpoint::Text | Endpoint::Reference => match job.ratio.as_str() {
            r if rules.ratios.contains(&r) => Some(r.to_owned()),
            "adaptive" if endpoint == Endpoint::Reference => None,
            r => return Err(format!("vidu's {model} has no aspect ratio {r}")),
        },
        Endpoint::Image | Endpoint::StartEnd => None,
    };
    if endpoint == Endpoint::Text && job.prompt.trim().is_empty() {
        return Err("vidu needs a prompt for text to video".into());
    }
    let images = match endpoint {
        Endpoint::Text => Vec::new(),
        Endpoint::Image | Endpoint::StartEnd => inputs
            .first_frame
            .into_iter()
            .chain(inputs.last_frame)
            .collect(),
        Endpoint::Reference => inputs.reference_images,
    };
    Ok((
        endpoint,
        ViduRequest {
            model: model.to_owned(),
            images,
            prompt: job.prompt.clone(),
            duration: job.duration_secs,
            seed: job.seed.filter(|s| *s >= 0),
            aspect_ratio,
            resolution: tier,
            callback_url: None,
        },
    ))
}

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

/// Why a poll's answer says nothing of its task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollError {
    /// The task is gone (`404 TaskNotFound`).
    Gone,
    Transient(String),
    Unreadable(String),
}

impl PollError {
    pub fn outcome(self) -> PollOutcome {
        match self {
            PollError::Gone => PollOutcome::Failed {
                code: "upstream_error".into(),
                message: "the upstream no longer knows the task".into(),
            },
            PollError::Transient(reason) => PollOutcome::Transient(reason),
            PollError::Unreadable(reason) => PollOutcome::Unknown(reason),
        }
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

/// The access key Vidu signs its callbacks as: always `vidu`.
pub const CALLBACK_ACCESS_KEY: &str = "vidu";

/// The algorithm Vidu names in `X-HMAC-ALGORITHM`.
pub const CALLBACK_ALGORITHM: &str = "hmac-sha256";

/// How far a signed callback's `Date` may be from the relay's clock.
pub const CALLBACK_DATE_SKEW: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The string Vidu signs for a callback: the method, the callback URL's path and query, the
/// access key `vidu`, the `Date` header, then each signed header as `Name:value` and a newline,
/// in the order `X-HMAC-SIGNED-HEADERS` gives them.
pub fn callback_signing_string(
    method: &str,
    path: &str,
    query: &str,
    date: &str,
    signed_headers: &[(&str, &str)],
) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let mut out = format!("{method}\n{path}\n{query}\n{CALLBACK_ACCESS_KEY}\n{date}\n");
    for (name, value) in signed_headers {
        out.push_str(name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    out
}

/// Checks a callback's `X-HMAC-*` headers against the callback URL the relay handed Vidu
/// (`callback_url`) and the channel's API key, `now` being the relay's clock.
pub fn verify_callback_signature(
    callback_url: &str,
    method: &http::Method,
    headers: &http::HeaderMap,
    key: &str,
    now: std::time::SystemTime,
) -> Result<(), String> {
    use base64::Engine as _;
    use hmac::Mac as _;
    let header = |name: &str| -> Result<&str, String> {
        headers
            .get(name)
            .ok_or_else(|| format!("no {name} header"))?
            .to_str()
            .map_err(|_| format!("the {name} header is not text"))
    };
    let algorithm = header("x-hmac-algorithm")?;
    if !algorithm.eq_ignore_ascii_case(CALLBACK_ALGORITHM) {
        return Err(format!(
            "X-HMAC-ALGORITHM is {algorithm:?}, not {CALLBACK_ALGORITHM}"
        ));
    }
    let access_key = header("x-hmac-access-key")?;
    if access_key != CALLBACK_ACCESS_KEY {
        return Err(format!(
            "X-HMAC-ACCESS-KEY is {access_key:?}, not {CALLBACK_ACCESS_KEY}"
        ));
    }
    let date = header("date")?;
    let sent =
        httpdate::parse_http_date(date).map_err(|_| format!("Date {date:?} is not a date"))?;
    let skew = now.duration_since(sent).unwrap_or_else(|e| e.duration());
    if skew > CALLBACK_DATE_SKEW {
        return Err(format!(
            "Date {date:?} is more than 15 minutes from the relay's clock"
        ));
    }
    let names = header("x-hmac-signed-headers")?;
    let mut signed = Vec::new();
    for name in names.split(';').map(str::trim).filter(|n| !n.is_empty()) {
        signed.push((name, header(name)?));
    }
    let signature = base64::engine::general_purpose::STANDARD
        .decode(header("x-hmac-signature")?.trim())
        .map_err(|_| "X-HMAC-SIGNATURE is not base64".to_owned())?;
    let (path, query) = url_path_and_query(callback_url);
    let text = callback_signing_string(method.as_str(), path, query, date, &signed);
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).map_err(|e| e.to_string())?;
    mac.update(text.as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| "the signature does not match".to_owned())
}

/// The path (`/` when empty) and query (empty when none) of an absolute URL.
fn url_path_and_query(url: &str) -> (&str, &str) {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = after_scheme
        .find(['/', '?'])
        .map_or("", |at| &after_scheme[at..]);
    let rest = rest.split('#').next().unwrap_or_default();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    (if path.is_empty() { "/" } else { path }, query)
}

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
        let base = callback.public_base.get()?.trim_end_matches('/');
        let name = self.remote.name();
        let token = callback_token(&callback.secret, name, task_id);
        Some(format!(
            "{base}/callbacks/vidu/{}?task={}&token={token}",
            path_part(name),
            path_part(task_id)
        ))
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
mod tests {
    use super::*;
    use serde_json::json;

    fn job(model: &str) -> VideoJob {
        VideoJob {
            task_id: "video_1".into(),
            model: model.into(),
            prompt: "A cat playing with a ball of yarn".into(),
            width: 1280,
            height: 720,
            ratio: "16:9".into(),
            resolution: Some("720p".into()),
            duration_secs: 8,
            first_frame: None,
            last_frame: None,
            first_frame_url: None,
            last_frame_url: None,
            audio_url: None,
            reference_video: None,
            reference_video_audio: false,
            return_last_frame: false,
            seed: Some(7),
            sim: Default::default(),
        }
    }

    fn sent(job: &VideoJob, inputs: Inputs) -> (Endpoint, Value) {
        let (e, body) = to_vendor(job, inputs, &[]).unwrap();
        (e, serde_json::to_value(body).unwrap())
    }

    #[test]
    fn text_to_video_is_the_documented_body() {
        let (e, body) = sent(&job("viduq3-pro"), Inputs::default());
        assert_eq!(e.path(), "/ent/v2/text2video");
        assert_eq!(
            body,
            json!({"model": "viduq3-pro", "prompt": "A cat playing with a ball of yarn",
                   "duration": 8, "seed": 7, "aspect_ratio": "16:9", "resolution": "720p"})
        );
    }

    #[test]
    fn the_endpoint_follows_the_inputs() {
        let url = |s: &str| format!("https://example.com/{s}.png");
        let mut j = job("viduq1");
        j.duration_secs = 5;
        j.resolution = Some("1080p".into());
        let first = Inputs {
            first_frame: Some(url("a")),
            ..Inputs::default()
        };
        let (e, body) = sent(&j, first.clone());
        assert_eq!(e, Endpoint::Image);
        assert_eq!(body["images"], json!([url("a")]));
        assert!(body.get("aspect_ratio").is_none(), "{body}");
        let both = Inputs {
            last_frame: Some(url("b")),
            ..first
        };
        let (e, body) = sent(&j, both);
        assert_eq!(e.path(), "/ent/v2/start-end2video");
        assert_eq!(body["images"], json!([url("a"), url("b")]));
        let refs = Inputs {
            reference_images: vec![url("r1"), url("r2"), url("r3")],
            ..Inputs::default()
        };
        let (e, body) = sent(&j, refs);
        assert_eq!(e.path(), "/ent/v2/reference2video");
        assert_eq!(body["images"].as_array().unwrap().len(), 3);
        assert_eq!(body["aspect_ratio"], "16:9");
        // A last frame alone, or frames with references: refused.
        let last = Inputs {
            last_frame: Some(url("b")),
            ..Inputs::default()
        };
        assert!(to_vendor(&j, last, &[]).is_err());
        let mixed = Inputs {
            first_frame: Some(url("a")),
            reference_images: vec![url("r")],
            ..Inputs::default()
        };
        assert!(to_vendor(&j, mixed, &[]).is_err());
    }

    #[test]
    fn each_model_is_held_to_its_documented_endpoints_durations_and_tiers() {
        let frame = Inputs {
            first_frame: Some("data:image/png;base64,iVBO".into()),
            ..Inputs::default()
        };
        // q3: 1 to 16 s.
        let mut q3 = job("viduq3-turbo");
        q3.duration_secs = 16;
        assert!(to_vendor(&q3, Inputs::default(), &[]).is_ok());
        q3.duration_secs = 17;
        assert!(to_vendor(&q3, Inputs::default(), &[]).is_err());
        // q2: up to 10 s, no first frame.
        let mut q2 = job("viduq2");
        q2.duration_secs = 10;
        assert!(to_vendor(&q2, Inputs::default(), &[]).is_ok());
        assert!(to_vendor(&q2, frame.clone(), &[]).is_err());
        q2.duration_secs = 11;
        assert!(to_vendor(&q2, Inputs::default(), &[]).is_err());
        // q1: 5 s at 1080p.
        let mut q1 = job("viduq1");
        q1.duration_secs = 5;
        assert!(to_vendor(&q1, Inputs::default(), &[]).is_err(), "720p");
        q1.resolution = Some("1080p".into());
        assert!(to_vendor(&q1, Inputs::default(), &[]).is_ok());
        // 2.0: images only; 4 or 8 s; 1080p at 4 s only.
        let mut v2 = job("vidu2.0");
        v2.duration_secs = 4;
        assert!(to_vendor(&v2, Inputs::default(), &[]).is_err());
        assert!(to_vendor(&v2, frame.clone(), &[]).is_ok());
        v2.duration_secs = 8;
        v2.resolution = Some("1080p".into());
        assert!(to_vendor(&v2, frame.clone(), &[]).is_err());
        assert!(to_vendor(&job("vidu3.0"), Inputs::default(), &[]).is_err());
        // 4:3 is q2 and q3 only.
        let mut r = job("viduq1");
        r.duration_secs = 5;
        r.resolution = Some("1080p".into());
        r.ratio = "4:3".into();
        assert!(to_vendor(&r, Inputs::default(), &[]).is_err());
        let mut audio = job("viduq3-pro");
        audio.audio_url = Some("https://example.com/a.mp3".into());
        assert!(to_vendor(&audio, Inputs::default(), &[]).is_err());
    }

    #[test]
    fn submit_answers_classify() {
        let h = http::HeaderMap::new();
        let sub = |status: u16, body: &str| {
            submit_outcome(
                "x",
                StatusCode::from_u16(status).unwrap(),
                &h,
                body.as_bytes(),
            )
        };
        let err = |code: u16, reason: &str, message: &str| {
            json!({"code": code, "reason": reason, "message": message,
                   "metadata": {"trace_id": "04e5c2fe159ff7c574acd0424e78c35f"}})
            .to_string()
        };
        assert_eq!(
            sub(
                200,
                r#"{"task_id":"815519863127511040","state":"created","model":"viduq1"}"#
            ),
            SubmitOutcome::Accepted {
                upstream_id: "815519863127511040".into()
            }
        );
        assert!(matches!(
            sub(401, &err(401, "Unauthorized", "unauthorized")),
            SubmitOutcome::Retry(_)
        ));
        assert!(matches!(
            sub(403, &err(403, "Forbidden", "forbidden")),
            SubmitOutcome::Retry(_)
        ));
        assert!(matches!(
            sub(400, &err(400, "CreditInsufficient", "insufficient credits")),
            SubmitOutcome::RateLimited {
                retry_after: Some(BALANCE_REST),
                ..
            }
        ));
        for reason in ["QuotaExceeded", "TooManyRequests", "SystemThrottling"] {
            assert!(matches!(
                sub(429, &err(429, reason, "too many requests")),
                SubmitOutcome::RateLimited {
                    retry_after: None,
                    ..
                }
            ));
        }
        for reason in ["AuditSubmitIllegal", "TaskPromptPolicyViolation"] {
            assert_eq!(
                sub(400, &err(400, reason, "submit is illegal")),
                SubmitOutcome::Refused {
                    code: REFUSED_CODE.into(),
                    message: "the upstream refused the content of the task".into()
                }
            );
        }
        assert!(matches!(
            sub(400, &err(400, "FieldInvalid", "invalid field: duration")),
            SubmitOutcome::Fatal(_)
        ));
        assert!(matches!(sub(503, "oops"), SubmitOutcome::Retry(_)));
        for answer in [r#"{}"#, r#"{"task_id":""}"#, ""] {
            assert!(
                matches!(sub(200, answer), SubmitOutcome::Ambiguous(_)),
                "{answer}"
            );
        }
    }

    #[test]
    fn documented_polls_map_to_states() {
        let poll = |s: &str| poll_answer("x", StatusCode::OK, s.as_bytes());
        for state in ["created", "queueing", "processing"] {
            assert!(matches!(
                poll(&json!({"state": state}).to_string()),
                Ok(TaskState::Running { .. })
            ));
        }
        let done = r#"{"state":"success","err_code":"","credits":4,"payload":"","creations":[{"id":"c1","url":"https://cdn.vidu.com/v.mp4","cover_url":"https://cdn.vidu.com/c.jpeg"}]}"#;
        assert_eq!(
            poll(done),
            Ok(TaskState::Succeeded {
                url: "https://cdn.vidu.com/v.mp4".into(),
                credits: Some(4.0),
            })
        );
        assert!(matches!(
            poll(r#"{"state":"success","creations":[]}"#),
            Ok(TaskState::Failed(_))
        ));
        assert_eq!(
            poll(r#"{"state":"failed","err_code":"CreationPolicyViolation"}"#),
            Ok(TaskState::Refused("CreationPolicyViolation".into()))
        );
        assert_eq!(
            poll(r#"{"state":"failed","err_code":"UserCancelled"}"#),
            Ok(TaskState::Cancelled)
        );
        assert_eq!(
            poll(r#"{"state":"paused"}"#),
            Ok(TaskState::Unknown("paused".into()))
        );
        assert_eq!(
            poll_answer("x", StatusCode::NOT_FOUND, b"{}"),
            Err(PollError::Gone)
        );
        assert!(matches!(
            poll_answer("x", StatusCode::TOO_MANY_REQUESTS, b"{}"),
            Err(PollError::Transient(_))
        ));
        assert!(matches!(poll("[]"), Err(PollError::Unreadable(_))));
        assert_eq!(
            outcome("x", TaskState::Refused("AuditSubmitIllegal".into())),
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into()
            }
        );
    }

    #[test]
    fn a_channel_test_reads_the_credits() {
        let log = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let check = |status: u16, body: &str| {
            check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes(), log).verdict
        };
        assert_eq!(
            check(
                200,
                r#"{"remains":[{"type":"metered","credit_remain":100,"concurrency_limit":5,"current_concurrency":0,"queue_count":0}]}"#
            ),
            CheckVerdict::Ok
        );
        assert_eq!(
            check(401, r#"{"code":401,"reason":"Unauthorized"}"#),
            CheckVerdict::KeyRefused
        );
        assert_eq!(
            check(429, r#"{"code":429,"reason":"TooManyRequests"}"#),
            CheckVerdict::RateLimited
        );
        assert_eq!(check(200, "<html>"), CheckVerdict::Error);
        assert_eq!(check(502, "<html>"), CheckVerdict::Error);
    }

    #[test]
    fn the_catalog_names_each_documented_model_once() {
        let models = catalog();
        let names: std::collections::BTreeSet<&str> = models.iter().map(|(m, _)| *m).collect();
        assert_eq!(names.len(), models.len());
        let caps = |name: &str| models.iter().find(|(m, _)| *m == name).unwrap().1.clone();
        assert_eq!(caps("viduq3-pro").durations, (1..=16).collect::<Vec<u32>>());
        assert!(caps("viduq3-pro").audio && caps("viduq3-pro").last_frame);
        assert_eq!(caps("viduq2").durations, (1..=10).collect::<Vec<u32>>());
        assert!(!caps("viduq2").first_frame);
        assert_eq!(caps("viduq2").reference_images, 7);
        assert_eq!(caps("viduq1").durations, [5]);
        assert_eq!(caps("viduq1").resolutions, ["1080p"]);
        let v2 = caps("vidu2.0");
        assert_eq!(v2.durations, [4, 8]);
        assert_eq!(v2.image_only_resolutions, v2.resolutions);
        assert_eq!(v2.durations_by_resolution["1080p"], [4]);
    }

    /// Vidu's own example: `POST` to `http://127.0.0.1:8080/vidu/callback?name=james&age=36`
    /// on Tue, 06 May 2025 12:09:42 GMT with the nonce `123e4567-...`, signed headers
    /// `Date;x-request-nonce`; the string ends with a newline.
    #[test]
    fn the_callback_signing_string_is_vidus_documented_example() {
        let date = "Tue, 06 May 2025 12:09:42 GMT";
        let (path, query) =
            url_path_and_query("http://127.0.0.1:8080/vidu/callback?name=james&age=36");
        let text = callback_signing_string(
            "POST",
            path,
            query,
            date,
            &[
                ("Date", date),
                ("x-request-nonce", "123e4567-e89b-12d3-a456-426614174000"),
            ],
        );
        assert_eq!(
            text,
            "POST\n/vidu/callback\nname=james&age=36\nvidu\nTue, 06 May 2025 12:09:42 GMT\n\
             Date:Tue, 06 May 2025 12:09:42 GMT\n\
             x-request-nonce:123e4567-e89b-12d3-a456-426614174000\n"
        );
        assert_eq!(url_path_and_query("https://relay.example"), ("/", ""));
        assert_eq!(url_path_and_query("https://r.example/a/b#x"), ("/a/b", ""));
    }

    /// Headers as Vidu sends them for `url`, signed under `key` at `date`.
    fn signed(url: &str, key: &str, date: &str) -> http::HeaderMap {
        use base64::Engine as _;
        use hmac::Mac as _;
        let nonce = "5f0c1d2e-0000-4000-8000-000000000001";
        let (path, query) = url_path_and_query(url);
        let text = callback_signing_string(
            "POST",
            path,
            query,
            date,
            &[("Date", date), ("x-request-nonce", nonce)],
        );
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
        mac.update(text.as_bytes());
        let signature =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        let mut headers = http::HeaderMap::new();
        for (name, value) in [
            ("date", date),
            ("x-request-nonce", nonce),
            ("x-hmac-signed-headers", "Date;x-request-nonce"),
            ("x-hmac-signature", signature.as_str()),
            ("x-hmac-algorithm", "hmac-sha256"),
            ("x-hmac-access-key", "vidu"),
        ] {
            headers.insert(name, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn a_callback_is_let_in_only_when_signed_under_the_key_over_its_url_and_fresh() {
        let url = "https://relay.example/base/callbacks/vidu/v?task=video_1&token=ab12";
        let date = "Tue, 06 May 2025 12:09:42 GMT";
        let at = httpdate::parse_http_date(date).unwrap();
        let post = http::Method::POST;
        let check = |headers: &http::HeaderMap, url: &str, now| {
            verify_callback_signature(url, &post, headers, "vda_key", now)
        };
        let good = signed(url, "vda_key", date);
        assert_eq!(check(&good, url, at), Ok(()));
        // Within the skew either way; not beyond it.
        let skew = CALLBACK_DATE_SKEW;
        assert_eq!(check(&good, url, at + skew), Ok(()));
        assert_eq!(check(&good, url, at - skew), Ok(()));
        let late = check(&good, url, at + skew + std::time::Duration::from_secs(1));
        assert!(late.unwrap_err().contains("15 minutes"));
        // Another key, another task's URL, another method: refused.
        let other_key = signed(url, "another_key", date);
        assert!(check(&other_key, url, at).is_err());
        let other_task = url.replace("video_1", "video_2");
        assert!(check(&good, &other_task, at).is_err());
        assert!(verify_callback_signature(url, &http::Method::PUT, &good, "vda_key", at).is_err());
        // A signed header changed after signing, or left out.
        let mut nonce = good.clone();
        nonce.insert("x-request-nonce", "another".parse().unwrap());
        assert!(check(&nonce, url, at).is_err());
        for name in [
            "x-hmac-signature",
            "x-hmac-algorithm",
            "x-hmac-access-key",
            "date",
        ] {
            let mut without = good.clone();
            without.remove(name);
            let e = check(&without, url, at).unwrap_err();
            assert!(e.contains(name), "{name}: {e}");
        }
        let mut md5 = good.clone();
        md5.insert("x-hmac-algorithm", "hmac-md5".parse().unwrap());
        assert!(check(&md5, url, at).is_err());
    }
}
