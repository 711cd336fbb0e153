//! `jimeng`: ByteDance's Jimeng video models on Volcengine's visual API (docs/channels.md:
//! Jimeng). Every call is a signed `POST /?Action=<action>&Version=2022-08-31` with a JSON body:
//! `CVSync2AsyncSubmitTask` submits `{req_key, prompt, seed, frames, aspect_ratio,
//! binary_data_base64 | image_urls}` and answers `{code, message, data: {task_id},
//! request_id}`, `code` 10000 for success; `CVSync2AsyncGetResult` with `{req_key, task_id}`
//! answers `data: {status, video_url}`, `status` `in_queue`, `generating`, `done`, `not_found`
//! or `expired`. The `req_key` names the model; the poll needs it again, so the upstream id the
//! relay keeps is `<req_key>/<task_id>`.
//!
//! Requests are signed with Volcengine's HMAC-SHA256 scheme ([`sign`]): an `X-Date`, the body's
//! SHA-256 as `X-Content-Sha256`, and `Authorization: HMAC-SHA256 Credential=<access
//! key>/<date>/<region>/<service>/request, SignedHeaders=content-type;host;x-content-sha256;
//! x-date, Signature=<hex>`, region `cn-north-1` and service `cv` unless the channel sets
//! others. The secret key never leaves the relay; the access key goes only in that header.
//!
//! Errors come two ways: the gateway's `{ResponseMetadata: {Error: {Code, CodeN, Message}}}`
//! (a bad signature, an unknown access key: HTTP 401 or 403, the channel's trouble), or the
//! service's `{code, message}` with a code other than 10000: 50411, 50412, 50413, 50511 and
//! 50512 are content refusals (input image, input text, text blocklist, output image, output
//! text), 50429 and 50430 the account's rate and concurrency limits, 50500 and above the
//! service's own trouble. A `done` task's `video_url` is temporary: the relay copies it at once.
//! Jimeng reports no length; a video is as long as the `frames` asked (121 = 5 s, 241 = 10 s at
//! 24 frames a second), and that is what the task settles on.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::vendors::common::{PollError, Remote, retry_after, snippet, transport_check};
use crate::vendors::media;
use crate::vendors::seam::{Need, Registration, Vendor, VendorSettings};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ResultFiles, ResultSource, StoredReference,
    SubmitOutcome, VendorUsage, VideoJob,
};

/// The `jimeng` kind: a Volcengine access key and secret key.
pub const REGISTRATION: Registration = Registration {
    kind: "jimeng",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::AccessKey, Need::SecretKey],
    callbacks: false,
    status_words: false,
    models: catalog,
    build: |s, _| Jimeng::new(s).map(|j| Box::new(j) as Box<dyn Vendor>),
};

/// Volcengine's visual API.
pub const DEFAULT_BASE_URL: &str = "https://visual.volcengineapi.com";

/// The region and service the visual API signs with.
pub const DEFAULT_REGION: &str = "cn-north-1";
pub const DEFAULT_SERVICE: &str = "cv";

/// The API version of both actions.
pub const VERSION: &str = "2022-08-31";
pub const SUBMIT_ACTION: &str = "CVSync2AsyncSubmitTask";
pub const RESULT_ACTION: &str = "CVSync2AsyncGetResult";

/// The code of a successful answer.
pub const SUCCESS: i64 = 10000;

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// The aspect ratios Jimeng makes from text (a first frame sets its own).
pub const ASPECT_RATIOS: [&str; 6] = ["16:9", "4:3", "1:1", "3:4", "9:16", "21:9"];

/// Frames per second of Jimeng's videos; `frames` is `24 * seconds + 1`.
pub const FPS: u32 = 24;

/// The content type every call carries (and signs).
const CONTENT_TYPE: &str = "application/json";

/// What a Jimeng `req_key` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inputs {
    /// Text only.
    Text,
    /// A first frame, required.
    FirstFrame,
    /// A first and a last frame, both required.
    FirstAndLast,
    /// Text, or text with a first frame.
    TextOrFirstFrame,
}

/// The documented video `req_key`s: what each takes and its tier.
pub const REQ_KEYS: [(&str, Inputs, &str); 7] = [
    ("jimeng_t2v_v30", Inputs::Text, "720p"),
    ("jimeng_i2v_first_v30", Inputs::FirstFrame, "720p"),
    ("jimeng_i2v_first_tail_v30", Inputs::FirstAndLast, "720p"),
    ("jimeng_t2v_v30_1080p", Inputs::Text, "1080p"),
    ("jimeng_i2v_first_v30_1080", Inputs::FirstFrame, "1080p"),
    (
        "jimeng_i2v_first_tail_v30_1080",
        Inputs::FirstAndLast,
        "1080p",
    ),
    ("jimeng_ti2v_v30_pro", Inputs::TextOrFirstFrame, "1080p"),
];

/// What `req_key` takes, when it is one Jimeng documents.
pub fn inputs_of(req_key: &str) -> Option<(Inputs, &'static str)> {
    REQ_KEYS
        .iter()
        .find(|(k, _, _)| *k == req_key)
        .map(|(_, i, t)| (*i, *t))
}

/// The models Jimeng documents, by `req_key`: 5 or 10 s, at 720p or 1080p, in six ratios from
/// text; a first frame sets its own ratio. No sound.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    REQ_KEYS
        .iter()
        .map(|(key, inputs, tier)| {
            let first_frame = *inputs != Inputs::Text;
            (
                *key,
                ModelCaps {
                    durations: vec![5, 10],
                    resolutions: list(&[tier]),
                    ratios: list(&ASPECT_RATIOS),
                    first_frame,
                    last_frame: *inputs == Inputs::FirstAndLast,
                    ..ModelCaps::default()
                },
            )
        })
        .collect()
}

/// The `frames` of a duration Jimeng makes (5 s: 121, 10 s: 241).
pub fn frames_of(seconds: u32) -> Option<u32> {
    matches!(seconds, 5 | 10).then_some(FPS * seconds + 1)
}

/// The seconds `frames` make.
pub fn seconds_of(frames: u32) -> f64 {
    f64::from(frames.saturating_sub(1)) / f64::from(FPS)
}

/// A submission's body, as Jimeng names its fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SubmitRequest {
    pub req_key: String,
    pub prompt: String,
    /// `-1`: Jimeng picks one.
    pub seed: i64,
    /// 121 (5 s) or 241 (10 s).
    pub frames: u32,
    /// Text to video only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    /// The frames inline (raw base64), first then last ...
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub binary_data_base64: Vec<String>,
    /// ... or by URL, never both.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_urls: Vec<String>,
}

/// A frame as it goes to Jimeng.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Raw base64 of the image.
    Inline(String),
    Url(String),
}

/// The frames of a job, read from the blob store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frames {
    pub first: Option<Frame>,
    pub last: Option<Frame>,
}

/// The body for `job` on `req_key`. Refuses what the `req_key` does not take (a frame on a
/// text model, none on an image model, a last frame but on the first-and-last models),
/// reference images, videos and audio (Jimeng has no field for them), a duration other than 5
/// or 10 s, and a ratio Jimeng does not make from text.
pub fn to_vendor(
    job: &VideoJob,
    req_key: &str,
    frames: Frames,
    references: &[StoredReference],
) -> Result<SubmitRequest, String> {
    let Some((inputs, _)) = inputs_of(req_key) else {
        return Err(format!("jimeng has no video model {req_key:?}"));
    };
    if !references.is_empty() || job.reference_video.is_some() || job.audio_url.is_some() {
        return Err("jimeng takes no reference images, videos or audio".into());
    }
    let Some(frame_count) = frames_of(job.duration_secs) else {
        return Err(format!(
            "jimeng makes 5 or 10 s, not {} s",
            job.duration_secs
        ));
    };
    let (has_first, has_last) = (frames.first.is_some(), frames.last.is_some());
    match (inputs, has_first, has_last) {
        (Inputs::Text, false, false)
        | (Inputs::FirstFrame, true, false)
        | (Inputs::FirstAndLast, true, true)
        | (Inputs::TextOrFirstFrame, _, false) => {}
        (Inputs::Text, ..) => return Err(format!("{req_key} makes video from text alone")),
        (Inputs::FirstFrame, false, _) | (Inputs::FirstAndLast, false, _) => {
            return Err(format!("{req_key} needs a first frame"));
        }
        (Inputs::FirstAndLast, true, false) => {
            return Err(format!("{req_key} needs a last frame"));
        }
        (_, _, true) => return Err(format!("{req_key} takes no last frame")),
    }
    let aspect_ratio = if has_first {
        None
    } else {
        match job.ratio.as_str() {
            r if ASPECT_RATIOS.contains(&r) => Some(r.to_owned()),
            r => return Err(format!("jimeng has no aspect ratio {r}")),
        }
    };
    let mut binary_data_base64 = Vec::new();
    let mut image_urls = Vec::new();
    for frame in [frames.first, frames.last].into_iter().flatten() {
        match frame {
            Frame::Inline(data) => binary_data_base64.push(data),
            Frame::Url(url) => image_urls.push(url),
        }
    }
    if !binary_data_base64.is_empty() && !image_urls.is_empty() {
        return Err(
            "jimeng takes the frames all inline or all by URL; one is over the inline cap".into(),
        );
    }
    Ok(SubmitRequest {
        req_key: req_key.to_owned(),
        prompt: job.prompt.clone(),
        seed: job.seed.map_or(-1, i64::from),
        frames: frame_count,
        aspect_ratio,
        binary_data_base64,
        image_urls,
    })
}

// ---- Signing: `sign.rs` ---------------------------------------------------------------

mod sign;
pub use sign::{
    Credentials, SIGNED_HEADERS, Signature, Unsigned, canonical_query, canonical_request, host_of,
    sign, x_date,
};

// ---- Answers -------------------------------------------------------------------------

/// The gateway's error (a bad signature, an unknown access key).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GatewayError {
    #[serde(rename = "Code", default)]
    pub code: String,
    #[serde(rename = "CodeN", default)]
    pub code_n: Option<i64>,
    #[serde(rename = "Message", default)]
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResponseMetadata {
    #[serde(rename = "Error", default)]
    pub error: Option<GatewayError>,
}

/// The data of a result.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskData {
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub video_url: Option<String>,
}

/// Any answer: the service's `{code, message, data}` or the gateway's `ResponseMetadata`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Answer {
    #[serde(default)]
    pub code: Option<i64>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub data: Option<TaskData>,
    #[serde(rename = "ResponseMetadata", default)]
    pub metadata: Option<ResponseMetadata>,
}

impl Answer {
    fn gateway_error(&self) -> Option<&GatewayError> {
        self.metadata.as_ref().and_then(|m| m.error.as_ref())
    }
}

/// What a Jimeng error means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The keys were refused or the account cannot serve (a gateway error, HTTP 401 or 403):
    /// another channel may do.
    Channel,
    /// The account's rate or concurrency limit (50429, 50430, HTTP 429): rest the channel.
    RateLimit,
    /// The content was refused (50411-50413, 50511, 50512).
    Refused,
    /// The request itself is wrong (another code, another 4xx).
    Request,
    /// The service's own trouble (50500 and above, HTTP 5xx).
    Vendor,
}

/// Whether `code` is a content refusal.
pub fn is_refusal(code: i64) -> bool {
    matches!(code, 50411..=50413 | 50511..=50520)
}

/// The class of an error answer by its code (when the service gave one) and HTTP status.
pub fn classify(status: StatusCode, answer: &Answer) -> ErrorClass {
    if answer.gateway_error().is_some() {
        return match status.as_u16() {
            429 => ErrorClass::RateLimit,
            500..=599 => ErrorClass::Vendor,
            _ => ErrorClass::Channel,
        };
    }
    match answer.code {
        Some(code) if is_refusal(code) => ErrorClass::Refused,
        Some(50429 | 50430) => ErrorClass::RateLimit,
        Some(50500..=50599) => ErrorClass::Vendor,
        _ => match status.as_u16() {
            401 | 403 => ErrorClass::Channel,
            429 => ErrorClass::RateLimit,
            408 | 500..=599 => ErrorClass::Vendor,
            _ => ErrorClass::Request,
        },
    }
}

/// An error answer in words for a log: the code and message, never the body whole.
fn described(status: StatusCode, answer: &Answer, body: &[u8]) -> String {
    match (answer.gateway_error(), answer.code) {
        (Some(e), _) => format!(
            "jimeng answered {status} {} ({}): {}",
            e.code,
            e.code_n.unwrap_or_default(),
            snippet(e.message.as_bytes())
        ),
        (None, Some(code)) => format!(
            "jimeng answered {status} code {code}: {}",
            snippet(answer.message.as_deref().unwrap_or_default().as_bytes())
        ),
        (None, None) => format!("jimeng answered {status}: {}", snippet(body)),
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 200 && !id.contains('/')
}

/// A submission's answer as the engine's outcome; `Accepted` carries `<req_key>/<task_id>`.
/// Any code but 10000 says Jimeng took nothing; a success without a task id may have made a
/// task the relay cannot follow (`Ambiguous`, never sent again).
pub fn submit_outcome(
    name: &str,
    req_key: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    let answer = serde_json::from_slice::<Answer>(body).unwrap_or_default();
    if status.is_success() && answer.code == Some(SUCCESS) {
        let id = answer.data.as_ref().and_then(|d| d.task_id.clone());
        return match id {
            Some(id) if valid_id(&id) => SubmitOutcome::Accepted {
                upstream_id: format!("{req_key}/{id}"),
            },
            _ => SubmitOutcome::Ambiguous(format!(
                "channel {name}: jimeng answered {status} without a task id: {}",
                snippet(body)
            )),
        };
    }
    if status.is_success() && answer.code.is_none() && answer.gateway_error().is_none() {
        return SubmitOutcome::Ambiguous(format!(
            "channel {name}: jimeng answered {status} without a code: {}",
            snippet(body)
        ));
    }
    let detail = format!("channel {name}: {}", described(status, &answer, body));
    match classify(status, &answer) {
        ErrorClass::Channel | ErrorClass::Vendor => SubmitOutcome::Retry(detail),
        ErrorClass::RateLimit => SubmitOutcome::RateLimited {
            retry_after: retry_after(headers),
            reason: detail,
        },
        ErrorClass::Refused => {
            tracing::warn!(
                channel = name,
                detail,
                "jimeng refused a submission's content"
            );
            SubmitOutcome::Refused {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the request".into(),
            }
        }
        ErrorClass::Request => SubmitOutcome::Fatal(detail),
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
    },
    /// Refused for its content (a refusal code in the result).
    Refused(String),
    /// Ended without a video: `not_found`, `expired`, a failure code, or `done` without a URL.
    Failed {
        status: String,
        message: String,
    },
    Unknown(String),
}

/// A result's answer as the task's state. A code other than 10000 is the task's end (a
/// refusal, a failure) unless it is a rate limit, a gateway error or the service's own
/// trouble answered with a 5xx, which are polled again.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    let Ok(answer) = serde_json::from_slice::<Answer>(body) else {
        return Err(if status.is_success() {
            PollError::Unreadable(format!(
                "channel {name}: unreadable jimeng result: {}",
                snippet(body)
            ))
        } else {
            PollError::Transient(format!(
                "channel {name}: jimeng result answered {status}: {}",
                snippet(body)
            ))
        });
    };
    let transient = || {
        PollError::Transient(format!(
            "channel {name}: {}",
            described(status, &answer, body)
        ))
    };
    if answer.gateway_error().is_some() {
        return Err(transient());
    }
    match answer.code {
        Some(SUCCESS) => {}
        Some(code) if is_refusal(code) => {
            return Ok(TaskState::Refused(described(status, &answer, body)));
        }
        Some(50429 | 50430) => return Err(transient()),
        Some(code) if status.is_server_error() && !(50000..50500).contains(&code) => {
            return Err(transient());
        }
        Some(code) => {
            return Ok(TaskState::Failed {
                status: "failed".into(),
                message: format!(
                    "code {code}: {}",
                    answer.message.as_deref().unwrap_or_default()
                ),
            });
        }
        None if !status.is_success() => return Err(transient()),
        None => {
            return Err(PollError::Unreadable(format!(
                "channel {name}: jimeng result without a code: {}",
                snippet(body)
            )));
        }
    }
    let data = answer.data.unwrap_or_default();
    Ok(match data.status.as_deref() {
        Some("in_queue") => TaskState::Running { progress: 0 },
        Some("generating") => TaskState::Running { progress: 50 },
        Some("done") => match data
            .video_url
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
        {
            Some(url) => TaskState::Succeeded { url },
            None => TaskState::Failed {
                status: "done".into(),
                message: "done without a video_url".into(),
            },
        },
        Some(s @ ("not_found" | "expired")) => TaskState::Failed {
            status: s.to_owned(),
            message: format!("the task is {s}"),
        },
        Some(other) => TaskState::Unknown(other.to_owned()),
        None => TaskState::Unknown(String::new()),
    })
}

/// A task's state as the engine's poll outcome; a video is billed at the `frames` asked.
pub fn outcome(name: &str, state: TaskState, frames: Option<u32>) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { url } => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(url),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: match frames {
                Some(frames) => VendorUsage::Made {
                    seconds: Some(seconds_of(frames)),
                    resolution: None,
                },
                None => {
                    VendorUsage::Unreadable("jimeng task of a duration it does not make".into())
                }
            },
        }),
        TaskState::Refused(detail) => {
            tracing::warn!(channel = name, detail, "jimeng refused a task's content");
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into(),
            }
        }
        TaskState::Failed { status, message } => {
            super::common::upstream_failed(name, &status, &message)
        }
        TaskState::Unknown(status) => {
            PollOutcome::Unknown(format!("channel {name}: unknown jimeng status {status:?}"))
        }
    }
}

/// A channel test's answer (a result of a task that does not exist): the service's own answer
/// (code 10000 with `not_found`, or any code of its own but a rate limit) says the signature
/// was accepted; a gateway error or 401/403 that the keys were refused.
pub fn check_answer(status: StatusCode, body: &[u8]) -> ChannelCheck {
    let answer = serde_json::from_slice::<Answer>(body);
    let (verdict, detail) = match answer {
        Ok(a) if a.code.is_some() || a.gateway_error().is_some() => {
            let verdict = if a.code == Some(SUCCESS) && status.is_success() {
                CheckVerdict::Ok
            } else {
                match classify(status, &a) {
                    ErrorClass::Channel => CheckVerdict::KeyRefused,
                    ErrorClass::RateLimit => CheckVerdict::RateLimited,
                    ErrorClass::Vendor => CheckVerdict::Error,
                    // The service read the request: the signature was good.
                    ErrorClass::Request | ErrorClass::Refused => CheckVerdict::Ok,
                }
            };
            let detail = match verdict {
                CheckVerdict::Ok => CheckVerdict::Ok.words().to_owned(),
                _ => described(status, &a, body),
            };
            (verdict, detail)
        }
        // An answer that is no Jimeng answer is never a good key.
        _ => (
            match crate::check::verdict_of(status) {
                CheckVerdict::Ok => CheckVerdict::Error,
                other => other,
            },
            format!("unexpected answer: {status}: {}", snippet(body)),
        ),
    };
    ChannelCheck { verdict, detail }
}

// ---- The channel ---------------------------------------------------------------------

/// A `jimeng` channel.
pub struct Jimeng {
    remote: Remote,
    creds: Credentials,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `s` is fit for a credential scope's region or service.
pub fn check_scope_part(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty()
        || s.len() > 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "{what} {s:?} must be 1 to 64 letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

impl Jimeng {
    pub fn new(settings: VendorSettings) -> Result<Jimeng, String> {
        let access_key = settings
            .kind
            .access_key
            .clone()
            .ok_or("jimeng needs an access key")?;
        let secret_key = settings
            .kind
            .secret_key
            .clone()
            .ok_or("jimeng needs a secret key")?;
        let region = settings
            .kind
            .region
            .clone()
            .unwrap_or_else(|| DEFAULT_REGION.to_owned());
        let service = settings
            .kind
            .service
            .clone()
            .unwrap_or_else(|| DEFAULT_SERVICE.to_owned());
        check_scope_part("region", &region)?;
        check_scope_part("service", &service)?;
        Ok(Jimeng {
            remote: Remote::new(settings.remote, settings.blobs),
            creds: Credentials {
                access_key,
                secret_key,
                region,
                service,
            },
        })
    }

    /// A signed `POST /?Action=<action>&Version=2022-08-31` with `body`.
    fn request(
        &self,
        action: &str,
        body: Vec<u8>,
    ) -> Result<Result<http::Request<Bytes>, http::Error>, String> {
        let query = [("Action", action), ("Version", VERSION)];
        let url = self.remote.url(&format!("/?{}", canonical_query(&query)));
        let host = host_of(&url).ok_or_else(|| format!("base_url gives no host: {url}"))?;
        let date = x_date(now_secs());
        let signed = sign(
            &self.creds,
            &Unsigned {
                method: "POST",
                host: &host,
                path: "/",
                query: &query,
                content_type: CONTENT_TYPE,
                body: &body,
                x_date: &date,
            },
        );
        Ok(self
            .remote
            .request(Method::POST, &url, false)
            .header("content-type", CONTENT_TYPE)
            .header("x-date", signed.x_date)
            .header("x-content-sha256", signed.x_content_sha256)
            .header("authorization", signed.authorization)
            .body(Bytes::from(body)))
    }

    async fn frames(&self, job: &VideoJob) -> Result<Frames, String> {
        let one = |blob: Option<String>, url: Option<String>| async move {
            let Some(blob) = blob else {
                return Ok(None);
            };
            let sent =
                media::reference(&self.remote, &blob, url.as_deref(), media::raw_base64).await?;
            Ok::<_, String>(Some(if url.as_deref() == Some(sent.as_str()) {
                Frame::Url(sent)
            } else {
                Frame::Inline(sent)
            }))
        };
        Ok(Frames {
            first: one(job.first_frame.clone(), job.first_frame_url.clone()).await?,
            last: one(job.last_frame.clone(), job.last_frame_url.clone()).await?,
        })
    }
}

/// The `req_key` and task id of an upstream id made by [`submit_outcome`].
pub fn split_upstream_id(upstream_id: &str) -> Option<(&str, &str)> {
    let (key, id) = upstream_id.split_once('/')?;
    (!key.is_empty() && valid_id(id)).then_some((key, id))
}

#[async_trait]
impl Vendor for Jimeng {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        let fatal = |e: String| SubmitOutcome::Fatal(format!("channel {name}: {e}"));
        let req_key = job.model.as_str();
        let frames = match self.frames(job).await {
            Ok(frames) => frames,
            Err(e) => return fatal(e),
        };
        let body = match to_vendor(job, req_key, frames, references)
            .and_then(|b| serde_json::to_vec(&b).map_err(|e| e.to_string()))
        {
            Ok(body) => body,
            Err(e) => return fatal(e),
        };
        let req = match self.request(SUBMIT_ACTION, body) {
            Ok(req) => req,
            Err(e) => return fatal(e),
        };
        // Sent again (here or elsewhere) only when nothing of it left, or Jimeng's answer says
        // it took nothing: a request that may have reached Jimeng unanswered is ambiguous.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                submit_outcome(name, req_key, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => submit_outcome(name, req_key, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let Some((req_key, task_id)) = split_upstream_id(upstream_id) else {
            return PollOutcome::Failed {
                code: "upstream_error".into(),
                message: "the upstream task id is not one this channel made".into(),
            };
        };
        let body = serde_json::json!({"req_key": req_key, "task_id": task_id}).to_string();
        let req = match self.request(RESULT_ACTION, body.into_bytes()) {
            Ok(req) => req,
            Err(e) => return PollOutcome::Transient(format!("channel {name}: {e}")),
        };
        match self.remote.exchange(req).await {
            Err(e) => PollOutcome::Transient(format!("channel {name}: {e}")),
            Ok((status, _, body)) => match poll_answer(name, status, &body) {
                Ok(state) => outcome(name, state, frames_of(job.duration_secs)),
                Err(e) => e.outcome(),
            },
        }
    }

    /// `CVSync2AsyncGetResult` of a task that does not exist: signed like every call, generating
    /// nothing.
    async fn check(&self) -> ChannelCheck {
        let body = serde_json::json!({"req_key": REQ_KEYS[0].0, "task_id": "0"}).to_string();
        let req = match self.request(RESULT_ACTION, body.into_bytes()) {
            Ok(req) => req,
            Err(e) => {
                return ChannelCheck {
                    verdict: CheckVerdict::Error,
                    detail: e,
                };
            }
        };
        let mut check = match self.remote.exchange(req).await {
            Err(e) => transport_check(&e),
            Ok((status, _, body)) => check_answer(status, &body),
        };
        // Should the gateway ever echo the access key, an operator still never sees it.
        if !self.creds.access_key.is_empty() {
            check.detail = check.detail.replace(self.creds.access_key.as_str(), "***");
        }
        check
    }
}

#[cfg(test)]
mod tests;
