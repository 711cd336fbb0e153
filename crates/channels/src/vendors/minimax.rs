//! `minimax`: MiniMax Hailuo's video API (docs/channels.md: MiniMax). A task is
//! `POST /v1/video_generation`, polled at `GET /v1/query/video_generation?task_id=`; a finished
//! task names a `file_id`, resolved at `GET /v1/files/retrieve?file_id=` into a `download_url`
//! that lasts about an hour, so the engine fetches it at once. Every call carries
//! `Authorization: Bearer <key>`.
//!
//! Frames go as `first_frame_image` and `last_frame_image`, a reference image (S2V-01) as a
//! `subject_reference` of type `character`: a URL, or a `data:` URI when inline. Errors may come
//! as HTTP 200: `base_resp.status_code` decides (1002 rate limit, 1004 and 2049 key refused,
//! 1008 balance spent, 1026 and 1027 content refused, 2013 bad parameter). MiniMax reports no
//! usage: a task is billed on the duration it was asked for. A first-format size goes as the
//! model's smallest tier at least as large (`1366x768` is `768P`): the tier routing fitted, or
//! where a job comes without one, the tier this module picks the same way.

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::vendors::common::{PollError, Remote, path_part, retry_after, snippet, transport_check};
use crate::vendors::media;
use crate::vendors::seam::{CallbackSettings, Need, Registration, Vendor, VendorSettings};
use crate::video::caps::{self, Demand, ModelCaps};
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `minimax` kind: an API key; it takes a `callback_secret`.
pub const REGISTRATION: Registration = Registration {
    kind: "minimax",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::ApiKey],
    callbacks: true,
    status_words: false,
    models: catalog,
    build: |s, _| Ok(Box::new(Minimax::new(s))),
};

/// The Hailuo models of the v1 API and what each makes. Tiers are MiniMax's own (`512p`,
/// `720p`, `768p`, `1080p`); 10 s only below 1080p. Image-only models (2.3-Fast, the I2V-01
/// series) are listed with the rest: a text-only request to them is refused by MiniMax.
/// MiniMax-Hailuo-02 makes `512p` from a first frame only, and takes a last frame at `768p`
/// and `1080p` only.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let tiers = |t: &[&str]| t.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let model = |durations: Vec<u32>, resolutions: &[&str], by: &[(&str, Vec<u32>)]| ModelCaps {
        durations,
        resolutions: tiers(resolutions),
        // The video follows the tier's size (text) or the image.
        ratios: Vec::new(),
        durations_by_resolution: by
            .iter()
            .map(|(t, d)| ((*t).to_owned(), d.clone()))
            .collect::<BTreeMap<_, _>>(),
        first_frame: true,
        ..ModelCaps::default()
    };
    let hailuo = |tiers: &[&str]| model(vec![6, 10], tiers, &[("1080p", vec![6])]);
    let six = || model(vec![6], &["720p"], &[]);
    let two = ModelCaps {
        last_frame: true,
        last_frame_resolutions: tiers(&["768p", "1080p"]),
        image_only_resolutions: tiers(&["512p"]),
        ..hailuo(&["512p", "768p", "1080p"])
    };
    let mut subject = six();
    subject.first_frame = false;
    subject.reference_images = 1;
    let mut text = six();
    text.first_frame = false;
    vec![
        ("MiniMax-Hailuo-2.3", hailuo(&["768p", "1080p"])),
        ("MiniMax-Hailuo-2.3-Fast", hailuo(&["768p", "1080p"])),
        ("MiniMax-Hailuo-02", two),
        ("T2V-01-Director", text.clone()),
        ("T2V-01", text),
        ("I2V-01-Director", six()),
        ("I2V-01-live", six()),
        ("I2V-01", six()),
        ("S2V-01", subject),
    ]
}

/// MiniMax's international endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.minimax.io";

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// How long a channel whose balance is spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

/// A subject reference (S2V-01): one character, one image.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SubjectReference {
    #[serde(rename = "type")]
    pub kind: String,
    pub image: Vec<String>,
}

/// The body of `POST /v1/video_generation`, as MiniMax names its fields.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MinimaxRequest {
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Seconds, an integer: 6 or 10.
    pub duration: u32,
    /// Upper case: "512P", "720P", "768P", "1080P".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_frame_image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_frame_image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_reference: Option<Vec<SubjectReference>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

/// The images of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Images {
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub references: Vec<String>,
}

/// The tiers of a model the catalog does not know: Hailuo's, `512p` from a first frame only.
fn unknown_model() -> ModelCaps {
    let tiers = |t: &[&str]| t.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    ModelCaps {
        resolutions: tiers(&["512p", "768p", "1080p"]),
        last_frame: true,
        last_frame_resolutions: tiers(&["768p", "1080p"]),
        image_only_resolutions: tiers(&["512p"]),
        ..ModelCaps::default()
    }
}

/// MiniMax's `resolution` for `job`: its tier in MiniMax's upper case (`768p` is `768P`), or
/// for a first-format size the smallest tier the model makes that is at least the size's
/// short side and serves the request's frames (`512P` only from a first frame without a last
/// one); a size larger than every tier is refused. `None` for a job with neither.
fn resolution(
    job: &VideoJob,
    first_frame: bool,
    last_frame: bool,
) -> Result<Option<String>, String> {
    if let Some(tier) = &job.resolution {
        return Ok(Some(tier.to_ascii_uppercase()));
    }
    if job.width == 0 || job.height == 0 {
        return Ok(None);
    }
    let caps = catalog()
        .into_iter()
        .find(|(m, _)| *m == job.model)
        .map_or_else(unknown_model, |(_, caps)| caps);
    let demand = Demand {
        duration: job.duration_secs,
        size: Some((job.width, job.height)),
        first_frame,
        last_frame,
        ..Demand::default()
    };
    match caps::tier(&caps, &demand) {
        Some(Some(tier)) => Ok(Some(tier.to_ascii_uppercase())),
        _ => Err(format!(
            "size {}x{}: {} makes {} at most, no larger",
            job.width,
            job.height,
            job.model,
            caps.resolutions
                .iter()
                .max_by_key(|t| caps::tier_short_side(t))
                .map_or("nothing", String::as_str)
        )),
    }
}

/// The body for `job`, its images already encoded. Refuses what MiniMax has no field for
/// (video or audio references, more than one reference image) rather than dropping it.
pub fn to_vendor(
    job: &VideoJob,
    images: Images,
    references: &[StoredReference],
    callback_url: Option<String>,
) -> Result<MinimaxRequest, String> {
    if let Some(r) = references.iter().find(|r| r.role != ReferenceRole::Image) {
        return Err(format!(
            "minimax takes no {} references",
            r.role.as_str().trim_start_matches("reference_")
        ));
    }
    if job.reference_video.is_some() {
        return Err("minimax takes no reference video".into());
    }
    if job.audio_url.is_some() {
        return Err("minimax takes no reference audio".into());
    }
    if images.references.len() > 1 {
        return Err(format!(
            "minimax takes one reference image, not {}",
            images.references.len()
        ));
    }
    if images.last_frame.is_some() && images.first_frame.is_none() {
        return Err("minimax needs a first frame with a last frame".into());
    }
    let resolution = resolution(
        job,
        images.first_frame.is_some(),
        images.last_frame.is_some(),
    )?;
    let subject_reference = (!images.references.is_empty()).then(|| {
        vec![SubjectReference {
            kind: "character".into(),
            image: images.references,
        }]
    });
    Ok(MinimaxRequest {
        model: job.model.clone(),
        prompt: Some(job.prompt.clone()).filter(|p| !p.is_empty()),
        duration: job.duration_secs,
        resolution,
        first_frame_image: images.first_frame,
        last_frame_image: images.last_frame,
        subject_reference,
        callback_url,
    })
}

/// `base_resp`, in every answer.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BaseResp {
    #[serde(default)]
    pub status_code: i64,
    #[serde(default)]
    pub status_msg: String,
}

/// The answer to a submission.
#[derive(Debug, Clone, Deserialize)]
pub struct Submitted {
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub base_resp: Option<BaseResp>,
}

/// The answer to a query, and the body of a status callback.
#[derive(Debug, Clone, Deserialize)]
pub struct Queried {
    #[serde(default)]
    pub task_id: Option<String>,
    #[serde(default)]
    pub status: String,
    /// A string here (an integer in `files/retrieve`).
    #[serde(default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub video_width: Option<u32>,
    #[serde(default)]
    pub video_height: Option<u32>,
    #[serde(default)]
    pub base_resp: Option<BaseResp>,
}

/// The answer to `files/retrieve`.
#[derive(Debug, Clone, Deserialize)]
pub struct Retrieved {
    #[serde(default)]
    pub file: Option<FileObject>,
    #[serde(default)]
    pub base_resp: Option<BaseResp>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FileObject {
    #[serde(default)]
    pub download_url: Option<String>,
    #[serde(default)]
    pub bytes: Option<u64>,
}

/// What a `base_resp.status_code` means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The key was refused, or the plan does not cover this (1004, 2049, 2061): another
    /// channel may; this one needs its operator.
    Channel,
    /// The balance or the plan's quota is spent (1008, 1028, 1030, 2056): rest the channel.
    Balance,
    /// Too many requests or connections (1002, 1039, 1041, 2045): rest the channel briefly.
    RateLimit,
    /// The request itself is wrong (1042, 2013): no channel will take it.
    Request,
    /// Input or output refused as sensitive (1026, 1027).
    Refused,
    /// The vendor's own trouble (1000, 1001, 1024, 1033, or a code we do not know).
    Vendor,
}

/// The class of a non-zero `status_code`.
pub fn classify(code: i64) -> ErrorClass {
    match code {
        1004 | 2049 | 2061 => ErrorClass::Channel,
        1008 | 1028 | 1030 | 2056 => ErrorClass::Balance,
        1002 | 1039 | 1041 | 2045 => ErrorClass::RateLimit,
        1042 | 2013 => ErrorClass::Request,
        1026 | 1027 => ErrorClass::Refused,
        _ => ErrorClass::Vendor,
    }
}

/// The class of an HTTP status that is not a success and carries no `base_resp`.
fn classify_status(status: StatusCode) -> ErrorClass {
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ErrorClass::Channel,
        StatusCode::TOO_MANY_REQUESTS => ErrorClass::RateLimit,
        s if s.is_client_error() && s != StatusCode::REQUEST_TIMEOUT => ErrorClass::Request,
        _ => ErrorClass::Vendor,
    }
}

fn outcome_of(class: ErrorClass, detail: String) -> SubmitOutcome {
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

/// A submission's answer as the engine's outcome: a non-zero `base_resp` says the task was
/// not taken, whatever the HTTP status; without one, the HTTP status does. A success without a
/// task id may have made a task the relay cannot follow: `Ambiguous`, never sent again.
pub fn submit_outcome(name: &str, status: StatusCode, body: &[u8]) -> SubmitOutcome {
    match serde_json::from_slice::<Submitted>(body) {
        Ok(Submitted {
            base_resp: Some(base),
            ..
        }) if base.status_code != 0 => outcome_of(
            classify(base.status_code),
            format!(
                "channel {name}: minimax answered {status} status_code {}: {}",
                base.status_code, base.status_msg
            ),
        ),
        Ok(Submitted {
            task_id: Some(id), ..
        }) if status.is_success() && valid_id(&id) => SubmitOutcome::Accepted { upstream_id: id },
        _ if status.is_success() => SubmitOutcome::Ambiguous(format!(
            "channel {name}: minimax answered {status} without a task id: {}",
            snippet(body)
        )),
        _ => outcome_of(
            classify_status(status),
            format!(
                "channel {name}: minimax answered {status} without a task: {}",
                snippet(body)
            ),
        ),
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
    if submit_refused(body) {
        tracing::warn!(
            channel = name,
            answer = snippet(body),
            "minimax refused a submission's content"
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

/// Whether a submission was refused as sensitive content.
pub fn submit_refused(body: &[u8]) -> bool {
    serde_json::from_slice::<Submitted>(body).is_ok_and(|a| {
        a.base_resp
            .is_some_and(|b| classify(b.status_code) == ErrorClass::Refused)
    })
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 200
}

/// A task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    /// Done: its file is to be resolved into a download URL.
    Succeeded {
        file_id: String,
    },
    Failed {
        refused: bool,
        message: String,
    },
    Unknown(String),
}

/// A task's state from its `status` (`Preparing`, `Queueing`, `Processing`, `Success`,
/// `Fail`; callbacks write them in lower case, so case is not looked at).
pub fn from_vendor(task: &Queried) -> TaskState {
    let code = task.base_resp.as_ref().map_or(0, |b| b.status_code);
    match task.status.to_ascii_lowercase().as_str() {
        "preparing" | "queueing" => TaskState::Running { progress: 0 },
        "processing" => TaskState::Running { progress: 50 },
        "success" => match task.file_id.as_deref().filter(|f| !f.is_empty()) {
            Some(file_id) => TaskState::Succeeded {
                file_id: file_id.to_owned(),
            },
            None => TaskState::Failed {
                refused: false,
                message: "succeeded without a file".into(),
            },
        },
        "fail" | "failed" => TaskState::Failed {
            refused: classify(code) == ErrorClass::Refused,
            message: task
                .base_resp
                .as_ref()
                .map(|b| format!("{} {}", b.status_code, b.status_msg))
                .unwrap_or_default(),
        },
        other => TaskState::Unknown(other.to_owned()),
    }
}

/// A query's answer as the task's state. A non-zero `base_resp` on a task whose `status`
/// says it failed is the failure's reason; on an answer without a task status it is the
/// call's own failure (rate limit, key refused), and the next poll may do.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    let parsed = serde_json::from_slice::<Queried>(body);
    match parsed {
        Ok(task) if status.is_success() && !task.status.is_empty() => Ok(from_vendor(&task)),
        Ok(Queried {
            base_resp: Some(base),
            ..
        }) if base.status_code != 0 => Err(PollError::Transient(format!(
            "channel {name}: minimax query answered {status} status_code {}: {}",
            base.status_code, base.status_msg
        ))),
        _ if status == StatusCode::NOT_FOUND => Err(PollError::Gone),
        _ if !status.is_success() => Err(PollError::Transient(format!(
            "channel {name}: minimax query answered {status}: {}",
            snippet(body)
        ))),
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: unreadable minimax query answer: {}",
            snippet(body)
        ))),
    }
}

/// A `files/retrieve` answer as the file's download URL.
pub fn retrieve_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<String, PollError> {
    match serde_json::from_slice::<Retrieved>(body) {
        Ok(Retrieved {
            base_resp: Some(base),
            ..
        }) if base.status_code != 0 => Err(PollError::Transient(format!(
            "channel {name}: minimax files/retrieve answered status_code {}: {}",
            base.status_code, base.status_msg
        ))),
        Ok(Retrieved {
            file:
                Some(FileObject {
                    download_url: Some(url),
                    ..
                }),
            ..
        }) if status.is_success()
            && (url.starts_with("https://") || url.starts_with("http://")) =>
        {
            Ok(url)
        }
        _ if !status.is_success() => Err(PollError::Transient(format!(
            "channel {name}: minimax files/retrieve answered {status}: {}",
            snippet(body)
        ))),
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: minimax files/retrieve without a download_url: {}",
            snippet(body)
        ))),
    }
}

/// A `minimax` channel.
pub struct Minimax {
    remote: Remote,
    callback: Option<CallbackSettings>,
}

impl Minimax {
    pub fn new(settings: VendorSettings) -> Minimax {
        Minimax {
            remote: Remote::new(settings.remote, settings.blobs),
            callback: settings.callback,
        }
    }

    /// The `callback_url` of `task_id`: `<public base>/callbacks/minimax/<channel>?task=..&token=..`,
    /// when the channel has a callback secret and the relay knows its public address.
    pub fn callback_url(&self, task_id: &str) -> Option<String> {
        let callback = self.callback.as_ref()?;
        callback.url("minimax", self.remote.name(), task_id)
    }

    async fn images(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Images, String> {
        let mut out = Images::default();
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
        for r in references.iter().filter(|r| r.role == ReferenceRole::Image) {
            out.references.push(
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::data_uri).await?,
            );
        }
        Ok(out)
    }

    /// GETs `path` of MiniMax's API with the key.
    async fn get(&self, path: &str) -> Result<(StatusCode, Bytes), String> {
        let req = self
            .remote
            .request(Method::GET, &self.remote.url(path), true)
            .body(Bytes::new());
        let name = self.remote.name();
        self.remote
            .exchange(req)
            .await
            .map(|(status, _, body)| (status, body))
            .map_err(|e| format!("channel {name}: {e}"))
    }
}

/// A task's state as the engine's poll outcome; a finished task's `download_url` is given.
pub fn outcome(name: &str, state: TaskState, download_url: Option<String>) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { .. } => match download_url {
            Some(url) => PollOutcome::Succeeded(ResultFiles {
                video: ResultSource::Url(url),
                thumbnail: None,
                last_frame: None,
                spritesheet: None,
                // The v1 API reports no length: settled on what was asked.
                usage: VendorUsage::NotReported,
            }),
            None => PollOutcome::Transient(format!("channel {name}: no download URL yet")),
        },
        TaskState::Failed {
            refused: true,
            message,
        } => {
            tracing::warn!(channel = name, message, "minimax refused a task's content");
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
            PollOutcome::Unknown(format!("channel {name}: unknown minimax status {status:?}"))
        }
    }
}

#[async_trait]
impl Vendor for Minimax {
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
        let body = match to_vendor(job, images, references, callback)
            .and_then(|b| serde_json::to_vec(&b).map_err(|e| e.to_string()))
        {
            Ok(b) => b,
            Err(e) => return fatal(e),
        };
        let req = self
            .remote
            .request(Method::POST, &self.remote.url("/v1/video_generation"), true)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        // Sent again (here or elsewhere) only when nothing of it left, or MiniMax's answer
        // says it took nothing: a request that may have reached MiniMax unanswered is
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

    /// Queries the task; once it succeeded, resolves its file into the download URL (valid
    /// for about an hour: the engine fetches it at once).
    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let query = format!(
            "/v1/query/video_generation?task_id={}",
            path_part(upstream_id)
        );
        let state = match self.get(&query).await {
            Err(e) => return PollOutcome::Transient(e),
            Ok((status, body)) => match poll_answer(name, status, &body) {
                Ok(state) => state,
                Err(e) => return e.outcome(),
            },
        };
        let TaskState::Succeeded { file_id } = &state else {
            return outcome(name, state, None);
        };
        let retrieve = format!("/v1/files/retrieve?file_id={}", path_part(file_id));
        match self.get(&retrieve).await {
            Err(e) => PollOutcome::Transient(e),
            Ok((status, body)) => match retrieve_answer(name, status, &body) {
                Ok(url) => outcome(name, state, Some(url)),
                Err(e) => e.outcome(),
            },
        }
    }

    /// `GET /v1/files/list` of one purpose: authenticated, generates nothing.
    async fn check(&self) -> ChannelCheck {
        let req = self
            .remote
            .request(Method::GET, &self.remote.url(CHECK_PATH), true)
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Err(e) => transport_check(&e),
            Ok((status, _, body)) => check_answer(status, &body),
        }
    }
}

/// The channel test's call. `purpose` is required, and MiniMax documents `voice_clone`,
/// `prompt_audio` and `t2a_async_input` as its values (not `video_generation`, though a
/// video's file carries that purpose): the documented example is asked for.
pub const CHECK_PATH: &str = "/v1/files/list?purpose=t2a_async_input";

/// A channel test's answer: `base_resp` 0 is a good key; 1004 or 2049 a refused one; a
/// balance or rate code an account out of funds or rate.
pub fn check_answer(status: StatusCode, body: &[u8]) -> ChannelCheck {
    let base = serde_json::from_slice::<Submitted>(body)
        .ok()
        .and_then(|a| a.base_resp);
    let (verdict, detail) = match base {
        Some(b) if b.status_code == 0 && status.is_success() => {
            (CheckVerdict::Ok, "reachable, key accepted".to_owned())
        }
        Some(b) => {
            let verdict = match classify(b.status_code) {
                ErrorClass::Channel => CheckVerdict::KeyRefused,
                ErrorClass::Balance => CheckVerdict::Quota,
                ErrorClass::RateLimit => CheckVerdict::RateLimited,
                _ => CheckVerdict::Error,
            };
            (
                verdict,
                format!(
                    "minimax answered status_code {}: {}",
                    b.status_code, b.status_msg
                ),
            )
        }
        None => {
            let verdict = match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => CheckVerdict::KeyRefused,
                StatusCode::TOO_MANY_REQUESTS => CheckVerdict::RateLimited,
                _ => CheckVerdict::Error,
            };
            (
                verdict,
                format!("unexpected answer: {status}: {}", snippet(body)),
            )
        }
    };
    ChannelCheck { verdict, detail }
}

#[cfg(test)]
mod tests;
