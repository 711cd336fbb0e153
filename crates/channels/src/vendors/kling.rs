//! `kling`: Kuaishou's Kling video API (docs.md: Kling). Three task kinds on their own paths,
//! `POST /v1/videos/{text2video,image2video,multi-image2video}`, each polled at
//! `GET /v1/videos/<kind>/<task_id>`: the upstream id the relay keeps is `<kind>/<task_id>`, so
//! a poll knows its path. Every call carries a fresh HS256 JWT made from the channel's access
//! key and secret key (`iss` = access key, `exp` = now + 1800 s, `nbf` = now - 5 s).
//!
//! Frames go as `image` and `image_tail` (the last frame), reference images as the
//! multi-image `image_list`; inline as raw base64 without a `data:` prefix (the vendor's own
//! rule), or as the relay's signed URL when over the inline cap. Answers are
//! `{code, message, request_id, data}`, `code` 0 for success; errors are read by `code`
//! (1000-1004 key refused, 1100-1102 account and balance, 1301 content refused, 1302-1303
//! rate limits, 5000-5002 the vendor's own trouble). The result is `task_result.videos[0]`,
//! its `url` (kept 30 days) and its `duration` (a string of seconds), the length billed.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::vendors::common::{PollError, Remote, path_part, retry_after, snippet, transport_check};
use crate::vendors::media;
use crate::vendors::seam::{CallbackSettings, Need, Registration, Vendor, VendorSettings};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `kling` kind: an access key and a secret key; it takes a `callback_secret`.
pub const REGISTRATION: Registration = Registration {
    kind: "kling",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::AccessKey, Need::SecretKey],
    callbacks: true,
    status_words: false,
    models: catalog,
    build: |s, _| Kling::new(s).map(|k| Box::new(k) as Box<dyn Vendor>),
};

/// The models Kling documents and what each makes (its capability map). `std` mode makes
/// 720p, `pro` 1080p (kling-v1 720p in both); image-to-video-only models (kling-v1-5,
/// kling-v2-1) are listed with the rest: a text-only request to them is refused by Kling. The
/// last frame is taken in `pro` mode only (1080p) on kling-v1-5, -v1-6, -v2-1, -v2-5-turbo
/// and -v2-6, and at 5 s only on kling-v1.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let tiers = |t: &[&str]| t.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let model = |durations: Vec<u32>, resolutions: &[&str], refs: u32| ModelCaps {
        durations,
        resolutions: tiers(resolutions),
        ratios: tiers(&["16:9", "9:16", "1:1"]),
        first_frame: true,
        reference_images: refs,
        ..ModelCaps::default()
    };
    let five_ten = || vec![5, 10];
    // A last frame at every tier and duration the model makes.
    let last = |mut m: ModelCaps| {
        m.last_frame = true;
        m
    };
    // A last frame in `pro` mode only.
    let last_in_pro = |m: ModelCaps| ModelCaps {
        last_frame_resolutions: tiers(&["1080p"]),
        ..last(m)
    };
    vec![
        (
            "kling-v1",
            ModelCaps {
                last_frame_durations: vec![5],
                ..last(model(five_ten(), &["720p"], 0))
            },
        ),
        (
            "kling-v1-5",
            last_in_pro(model(five_ten(), &["720p", "1080p"], 0)),
        ),
        (
            "kling-v1-6",
            last_in_pro(model(five_ten(), &["720p", "1080p"], 4)),
        ),
        ("kling-v2-master", model(five_ten(), &["720p"], 0)),
        (
            "kling-v2-1",
            last_in_pro(model(five_ten(), &["720p", "1080p"], 0)),
        ),
        ("kling-v2-1-master", model(five_ten(), &["1080p"], 0)),
        (
            "kling-v2-5-turbo",
            last_in_pro(model(five_ten(), &["720p", "1080p"], 0)),
        ),
        (
            "kling-v2-6",
            last_in_pro(model(five_ten(), &["720p", "1080p"], 0)),
        ),
        (
            "kling-v3",
            last(model((3..=15).collect(), &["720p", "1080p"], 0)),
        ),
    ]
}

/// Kling's public endpoint for servers outside China.
pub const DEFAULT_BASE_URL: &str = "https://api-singapore.klingai.com";

/// The longest life of a token, in seconds (the vendor's own sample uses 1800).
const TOKEN_LIFE_SECS: u64 = 1800;

/// How many reference images `multi-image2video` takes.
const MAX_IMAGE_LIST: usize = 4;

/// A Kling task kind: the path it is submitted to and polled at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Text2Video,
    Image2Video,
    MultiImage2Video,
}

impl Endpoint {
    pub const fn as_str(self) -> &'static str {
        match self {
            Endpoint::Text2Video => "text2video",
            Endpoint::Image2Video => "image2video",
            Endpoint::MultiImage2Video => "multi-image2video",
        }
    }

    pub fn parse(s: &str) -> Option<Endpoint> {
        [
            Endpoint::Text2Video,
            Endpoint::Image2Video,
            Endpoint::MultiImage2Video,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// The claims of a Kling token.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    pub iss: String,
    pub exp: u64,
    pub nbf: u64,
}

/// A token for `access_key` signed HS256 with `secret_key`, valid from 5 s before `now_secs`
/// for [`TOKEN_LIFE_SECS`].
pub fn token(access_key: &str, secret_key: &str, now_secs: u64) -> Result<String, String> {
    let claims = Claims {
        iss: access_key.to_owned(),
        exp: now_secs + TOKEN_LIFE_SECS,
        nbf: now_secs.saturating_sub(5),
    };
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    let key = jsonwebtoken::EncodingKey::from_secret(secret_key.as_bytes());
    jsonwebtoken::encode(&header, &claims, &key).map_err(|e| format!("signing a token: {e}"))
}

/// An image as Kling takes it: a URL, or raw base64 without a `data:` prefix.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ImageItem {
    pub image: String,
}

/// The body of a submission, as Kling names its fields. One struct for the three kinds: a
/// field a kind does not have stays `None` and is left out.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct KlingRequest {
    pub model_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative_prompt: Option<String>,
    /// Seconds, as a string: "5", "10".
    pub duration: String,
    /// `std` (720p) or `pro` (1080p on most models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `on` or `off`: audio made with the video (kling-v2-6 pro, kling-v3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sound: Option<String>,
    /// Text and multi-image kinds only; image to video follows its image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_tail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_list: Option<Vec<ImageItem>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// The relay's task id: unique per account, as Kling asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_task_id: Option<String>,
}

/// The images of a job, each already in the form Kling takes (see [`ImageItem`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Images {
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub references: Vec<String>,
}

/// The Kling kind and body for `job`, its images already encoded: frames (a first, a last, or
/// both: Kling takes either alone) go to image to video. Refuses what Kling has no field for
/// (video or audio references, reference images beside frames) rather than dropping it.
pub fn to_vendor(
    job: &VideoJob,
    images: Images,
    references: &[StoredReference],
    callback_url: Option<String>,
) -> Result<(Endpoint, KlingRequest), String> {
    if let Some(r) = references.iter().find(|r| r.role != ReferenceRole::Image) {
        return Err(format!(
            "kling takes no {} references",
            r.role.as_str().trim_start_matches("reference_")
        ));
    }
    if job.reference_video.is_some() {
        return Err("kling takes no reference video".into());
    }
    if job.audio_url.is_some() {
        return Err("kling takes no reference audio".into());
    }
    let endpoint = match (
        &images.first_frame,
        &images.last_frame,
        images.references.len(),
    ) {
        (None, None, 0) => Endpoint::Text2Video,
        (Some(_), _, 0) | (None, Some(_), 0) => Endpoint::Image2Video,
        (None, None, n) if n <= MAX_IMAGE_LIST => Endpoint::MultiImage2Video,
        (None, None, n) => {
            return Err(format!(
                "kling takes at most {MAX_IMAGE_LIST} reference images, not {n}"
            ));
        }
        (_, _, _) => return Err("kling takes reference images or frames, not both".into()),
    };
    // `std` makes 720p, `pro` 1080p; a first-format size is read by its short side.
    let mode = match job.resolution.as_deref() {
        Some("1080p") => Some("pro"),
        Some("720p") => Some("std"),
        Some(_) => None,
        None if job.width.min(job.height) > 720 => Some("pro"),
        None if job.width.min(job.height) > 0 => Some("std"),
        None => None,
    }
    .map(str::to_owned);
    let aspect_ratio = (endpoint != Endpoint::Image2Video
        && matches!(job.ratio.as_str(), "16:9" | "9:16" | "1:1"))
    .then(|| job.ratio.clone());
    let image_list = (endpoint == Endpoint::MultiImage2Video).then(|| {
        images
            .references
            .into_iter()
            .map(|image| ImageItem { image })
            .collect()
    });
    let request = KlingRequest {
        model_name: job.model.clone(),
        prompt: Some(job.prompt.clone()).filter(|p| !p.is_empty()),
        negative_prompt: None,
        duration: job.duration_secs.to_string(),
        mode,
        sound: None,
        aspect_ratio,
        image: images.first_frame,
        image_tail: images.last_frame,
        image_list,
        callback_url,
        external_task_id: Some(job.task_id.clone()),
    };
    Ok((endpoint, request))
}

/// Every Kling answer: `code` 0 with `data`, or an error `code` and `message`.
#[derive(Debug, Clone, Deserialize)]
pub struct KlingAnswer<T> {
    pub code: i64,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default = "Option::default")]
    pub data: Option<T>,
}

/// A task as submission, query and callback give it.
#[derive(Debug, Clone, Deserialize)]
pub struct KlingTask {
    pub task_id: String,
    #[serde(default)]
    pub task_status: String,
    #[serde(default)]
    pub task_status_msg: Option<String>,
    #[serde(default)]
    pub task_result: Option<KlingTaskResult>,
    /// Units deducted from the resource pack (a string).
    #[serde(default)]
    pub final_unit_deduction: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct KlingTaskResult {
    #[serde(default)]
    pub videos: Vec<KlingVideo>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct KlingVideo {
    #[serde(default)]
    pub id: Option<String>,
    pub url: String,
    /// Seconds, as a string ("5", "5.1").
    #[serde(default)]
    pub duration: Option<String>,
}

/// What a Kling error code means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The channel's keys were refused, or its account cannot serve this (1000-1002, 1103,
    /// 1203, 1304): another channel may; this one needs its operator.
    Channel,
    /// The account's balance or resource pack is spent (1100-1102): rest the channel.
    Balance,
    /// Too many requests or tasks at once (1302, 1303): rest the channel briefly.
    RateLimit,
    /// The token was not yet or no longer valid (1003, 1004): a clock or a bug of ours; a
    /// new token on the next try may do.
    Token,
    /// The request itself is wrong (1200, 1201, 1202): no channel will take it.
    Request,
    /// The platform's policy refused the content (1300, 1301).
    Refused,
    /// The vendor's own trouble (5000-5002, or a code we do not know with a 5xx).
    Vendor,
}

/// The class of a Kling error `code` (HTTP `status` decides for a code we do not know).
pub fn classify(code: i64, status: StatusCode) -> ErrorClass {
    match code {
        1000..=1002 | 1103 | 1203 | 1304 => ErrorClass::Channel,
        1003 | 1004 => ErrorClass::Token,
        1100..=1102 => ErrorClass::Balance,
        1200..=1202 => ErrorClass::Request,
        1300 | 1301 => ErrorClass::Refused,
        1302 | 1303 => ErrorClass::RateLimit,
        5000..=5999 => ErrorClass::Vendor,
        _ if status == StatusCode::TOO_MANY_REQUESTS => ErrorClass::RateLimit,
        _ if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN => {
            ErrorClass::Channel
        }
        _ if status.is_client_error() => ErrorClass::Request,
        _ => ErrorClass::Vendor,
    }
}

/// How long a channel whose balance is spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

/// A submission's answer (`status`, `body`) as the engine's outcome; `Accepted` carries the
/// upstream id `<kind>/<task_id>`. An error `code` says the task was not taken, whatever the
/// HTTP status; a success without one and without a task id may have made a task the relay
/// cannot follow: `Ambiguous`, never sent again.
pub fn submit_outcome(
    name: &str,
    endpoint: Endpoint,
    status: StatusCode,
    body: &[u8],
) -> SubmitOutcome {
    let answer = serde_json::from_slice::<KlingAnswer<KlingTask>>(body);
    match answer {
        Ok(KlingAnswer {
            code: 0,
            data: Some(task),
            ..
        }) if status.is_success() && valid_id(&task.task_id) => SubmitOutcome::Accepted {
            upstream_id: format!("{}/{}", endpoint.as_str(), task.task_id),
        },
        Ok(answer) if answer.code != 0 => {
            let detail = format!(
                "channel {name}: kling answered {status} code {}: {}",
                answer.code, answer.message
            );
            match classify(answer.code, status) {
                ErrorClass::Channel | ErrorClass::Token | ErrorClass::Vendor => {
                    SubmitOutcome::Retry(detail)
                }
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
        _ if status.is_success() => SubmitOutcome::Ambiguous(format!(
            "channel {name}: kling answered {status} without a task id: {}",
            snippet(body)
        )),
        _ => {
            let detail = format!(
                "channel {name}: kling answered {status} without a task: {}",
                snippet(body)
            );
            if status == StatusCode::TOO_MANY_REQUESTS {
                SubmitOutcome::RateLimited {
                    retry_after: None,
                    reason: detail,
                }
            } else if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
                SubmitOutcome::Retry(detail)
            } else {
                SubmitOutcome::Fatal(detail)
            }
        }
    }
}

/// A submission's answer as the engine's outcome, as [`submit_outcome`] reads it, with a
/// content refusal told apart and a rate limit's `retry-after` read from `headers`.
pub fn read_submission(
    name: &str,
    endpoint: Endpoint,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    if submit_refused(body) {
        tracing::warn!(
            channel = name,
            answer = snippet(body),
            "kling refused a submission's content"
        );
        return SubmitOutcome::Refused {
            code: REFUSED_CODE.into(),
            message: "the upstream refused the content of the request".into(),
        };
    }
    match submit_outcome(name, endpoint, status, body) {
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

/// Whether the refusal of a submission was the platform's content policy (1300, 1301).
pub fn submit_refused(body: &[u8]) -> bool {
    serde_json::from_slice::<KlingAnswer<serde_json::Value>>(body)
        .is_ok_and(|a| classify(a.code, StatusCode::BAD_REQUEST) == ErrorClass::Refused)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 200 && !id.contains('/')
}

/// The kind and task id of an upstream id made by [`submit_outcome`].
pub fn split_upstream_id(upstream_id: &str) -> Option<(Endpoint, &str)> {
    let (kind, id) = upstream_id.split_once('/')?;
    let endpoint = Endpoint::parse(kind)?;
    valid_id(id).then_some((endpoint, id))
}

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// Whether a failed task's message is the platform's content risk control: Kling gives no
/// code for it, only its words ("triggering the content risk control of the platform").
pub fn is_refusal_message(msg: &str) -> bool {
    let msg = msg.to_ascii_lowercase();
    [
        "risk control",
        "risk-control",
        "content security",
        "security policy",
        "sensitive",
        "inappropriate",
        "moderation",
    ]
    .iter()
    .any(|w| msg.contains(w))
}

/// What a finished or running task means: the video URL and the reported length on success.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    Succeeded {
        url: String,
        duration_secs: Option<f64>,
    },
    Failed {
        refused: bool,
        message: String,
    },
    Unknown(String),
}

/// A task's state from its `task_status` (`submitted`, `processing`, `succeed`, `failed`).
pub fn from_vendor(task: &KlingTask) -> TaskState {
    match task.task_status.as_str() {
        "submitted" => TaskState::Running { progress: 0 },
        "processing" => TaskState::Running { progress: 50 },
        "succeed" => match task
            .task_result
            .as_ref()
            .and_then(|r| r.videos.first())
            .filter(|v| v.url.starts_with("https://") || v.url.starts_with("http://"))
        {
            Some(video) => TaskState::Succeeded {
                url: video.url.clone(),
                duration_secs: video
                    .duration
                    .as_deref()
                    .and_then(|d| d.trim().parse::<f64>().ok())
                    .filter(|d| d.is_finite() && *d > 0.0),
            },
            None => TaskState::Failed {
                refused: false,
                message: "succeeded without a video".into(),
            },
        },
        "failed" => {
            let message = task.task_status_msg.clone().unwrap_or_default();
            TaskState::Failed {
                refused: is_refusal_message(&message),
                message,
            }
        }
        other => TaskState::Unknown(other.to_owned()),
    }
}

/// A poll's answer (`status`, `body`) as the task's state, or why it says nothing of it.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    match serde_json::from_slice::<KlingAnswer<KlingTask>>(body) {
        Ok(KlingAnswer {
            code: 0,
            data: Some(task),
            ..
        }) if status.is_success() => Ok(from_vendor(&task)),
        Ok(answer) if answer.code != 0 => match classify(answer.code, status) {
            // The task (or the model) is unknown to the vendor: it is lost.
            _ if answer.code == 1203 || status == StatusCode::NOT_FOUND => Err(PollError::Gone),
            _ => Err(PollError::Transient(format!(
                "channel {name}: kling poll answered {status} code {}: {}",
                answer.code, answer.message
            ))),
        },
        _ if !status.is_success() => Err(PollError::Transient(format!(
            "channel {name}: kling poll answered {status}: {}",
            snippet(body)
        ))),
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: unreadable kling poll answer: {}",
            snippet(body)
        ))),
    }
}

/// A `kling` channel.
pub struct Kling {
    remote: Remote,
    access_key: String,
    secret_key: String,
    callback: Option<CallbackSettings>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Kling {
    pub fn new(settings: VendorSettings) -> Result<Kling, String> {
        let access_key = settings
            .kind
            .access_key
            .clone()
            .ok_or("kling needs an access key")?;
        let secret_key = settings
            .kind
            .secret_key
            .clone()
            .ok_or("kling needs a secret key")?;
        Ok(Kling {
            remote: Remote::new(settings.remote, settings.blobs),
            access_key,
            secret_key,
            callback: settings.callback,
        })
    }

    /// A request to Kling's API with a fresh token (made per call: signing is a few
    /// microseconds, and a token never outlives its use).
    fn request(&self, method: Method, path: &str) -> Result<http::request::Builder, String> {
        let token = token(&self.access_key, &self.secret_key, now_secs())?;
        Ok(self
            .remote
            .request(method, &self.remote.url(path), false)
            .header("authorization", format!("Bearer {token}")))
    }

    /// The `callback_url` of `task_id`, when the channel has a callback secret and the relay
    /// knows its public address: `<public base>/callbacks/kling/<channel>?task=..&token=..`.
    pub fn callback_url(&self, task_id: &str) -> Option<String> {
        let callback = self.callback.as_ref()?;
        callback.url("kling", self.remote.name(), task_id)
    }

    async fn images(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Images, String> {
        let one = |blob: &Option<String>, url: &Option<String>| {
            let (blob, url) = (blob.clone(), url.clone());
            async move {
                match blob {
                    Some(blob) => {
                        media::reference(&self.remote, &blob, url.as_deref(), media::raw_base64)
                            .await
                            .map(Some)
                    }
                    None => Ok(None),
                }
            }
        };
        let first_frame = one(&job.first_frame, &job.first_frame_url).await?;
        let last_frame = one(&job.last_frame, &job.last_frame_url).await?;
        let mut images = Vec::new();
        for r in references.iter().filter(|r| r.role == ReferenceRole::Image) {
            images.push(
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::raw_base64)
                    .await?,
            );
        }
        Ok(Images {
            first_frame,
            last_frame,
            references: images,
        })
    }
}

/// What a finished task reports of its length: the vendor's `duration`, else unreadable
/// (settled at the pre-deduction, never at zero).
fn usage(duration_secs: Option<f64>) -> VendorUsage {
    match duration_secs {
        Some(seconds) => VendorUsage::Made {
            seconds: Some(seconds),
            resolution: None,
        },
        None => VendorUsage::Unreadable("kling reported no readable videos[0].duration".into()),
    }
}

/// A task's state as the engine's poll outcome.
pub fn outcome(name: &str, state: TaskState) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { url, duration_secs } => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(url),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: usage(duration_secs),
        }),
        TaskState::Failed {
            refused: true,
            message,
        } => {
            tracing::warn!(channel = name, message, "kling refused a task's content");
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into(),
            }
        }
        TaskState::Failed {
            refused: false,
            message,
        } => super::common::upstream_failed(name, "failed", &message),
        TaskState::Unknown(status) => {
            PollOutcome::Unknown(format!("channel {name}: unknown kling status {status:?}"))
        }
    }
}

#[async_trait]
impl Vendor for Kling {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        let fatal = |e: String| SubmitOutcome::Fatal(format!("channel {name}: {e}"));
        let images = match self.images(job, references).await {
            Ok(images) => images,
            Err(e) => return fatal(e),
        };
        let callback = self.callback_url(&job.task_id);
        let (endpoint, body) = match to_vendor(job, images, references, callback) {
            Ok(v) => v,
            Err(e) => return fatal(e),
        };
        let body = match serde_json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => return fatal(e.to_string()),
        };
        let req = match self.request(Method::POST, &format!("/v1/videos/{}", endpoint.as_str())) {
            Ok(req) => req
                .header("content-type", "application/json")
                .body(Bytes::from(body)),
            Err(e) => return fatal(e),
        };
        // Sent again (here or elsewhere) only when nothing of it left, or Kling's answer says
        // it took nothing: a request that may have reached Kling unanswered is ambiguous.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                read_submission(name, endpoint, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => read_submission(name, endpoint, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let Some((endpoint, id)) = split_upstream_id(upstream_id) else {
            return PollOutcome::Failed {
                code: "upstream_error".into(),
                message: "the upstream task id is not one this channel made".into(),
            };
        };
        let path = format!("/v1/videos/{}/{}", endpoint.as_str(), path_part(id));
        let req = match self.request(Method::GET, &path) {
            Ok(req) => req.body(Bytes::new()),
            Err(e) => return PollOutcome::Transient(format!("channel {name}: {e}")),
        };
        match self.remote.exchange(req).await {
            Err(e) => PollOutcome::Transient(format!("channel {name}: {e}")),
            Ok((status, _, body)) => match poll_answer(name, status, &body) {
                Ok(state) => outcome(name, state),
                Err(e) => e.outcome(),
            },
        }
    }

    /// `GET /account/costs` over the last day: free, generates nothing, needs a good token.
    async fn check(&self) -> ChannelCheck {
        let end = now_secs() * 1000;
        let path = format!(
            "/account/costs?start_time={}&end_time={end}",
            end.saturating_sub(86_400_000)
        );
        let req = match self.request(Method::GET, &path) {
            Ok(req) => req.body(Bytes::new()),
            Err(e) => {
                return ChannelCheck {
                    verdict: CheckVerdict::KeyRefused,
                    detail: e,
                };
            }
        };
        match self.remote.exchange(req).await {
            Err(e) => transport_check(&e),
            Ok((status, _, body)) => check_answer(status, &body),
        }
    }
}

/// A channel test's answer: code 0 is a good key; 1000-1004 a refused one; 1100-1102 an
/// account out of funds; the rate limits (1302-1304) a rate limit.
pub fn check_answer(status: StatusCode, body: &[u8]) -> ChannelCheck {
    let answer = serde_json::from_slice::<KlingAnswer<serde_json::Value>>(body);
    let (verdict, detail) = match answer {
        Ok(a) if a.code == 0 && status.is_success() => {
            (CheckVerdict::Ok, "reachable, key accepted".to_owned())
        }
        Ok(a) => {
            let verdict = match classify(a.code, status) {
                ErrorClass::Channel | ErrorClass::Token => CheckVerdict::KeyRefused,
                ErrorClass::Balance => CheckVerdict::Quota,
                ErrorClass::RateLimit => CheckVerdict::RateLimited,
                _ => CheckVerdict::Error,
            };
            (
                verdict,
                format!("kling answered {status} code {}: {}", a.code, a.message),
            )
        }
        Err(_) => (
            CheckVerdict::Error,
            format!("unexpected answer: {status}: {}", snippet(body)),
        ),
    };
    ChannelCheck { verdict, detail }
}

#[cfg(test)]
mod tests;
