//! `POST /v1/videos`: the request as it arrived, its validation, and the valid request
//! (CONTRACT §1.1).
//!
//! Rules beyond the contract's table, decided here:
//! - A JSON `null` is the same as leaving the field out.
//! - A scalar field (`model`, `prompt`, `size`, `aspect_ratio`, `duration`, `seconds`,
//!   `reference_video_audio`) given more than once (repeated multipart parts) is a fault of that
//!   field, with that field's error.
//! - Every reference field (`first_frame`, `input_reference`, `last_frame`, `audio_url`,
//!   `reference_video`) may be a JSON array: its items count as references, so an array of one
//!   is fine and an empty array is the same as leaving the field out.
//! - `duration`: a JSON integer or a JSON number with a zero fraction (`8.0`); a JSON string is
//!   the wrong type (`invalid duration`, CONTRACT §0). `seconds` (the OpenAI SDK's name, which it
//!   sends as a string) also takes strings holding either (`"8"`, `"8.0"`). Multipart text parts
//!   are strings by nature, so both fields take them there.
//! - `reference_video_audio`: JSON `true`/`false`, or the strings `"true"`/`"false"`.
//! - A file part of zero bytes is not an image, audio or video.

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::ValidateUrl;

use crate::framing::{MAX_SIDE, MIN_SIDE, Ratio, Size};

/// The one model of the first format.
pub const MODEL: &str = "model_h3";

/// Longest prompt, in characters (Unicode scalar values).
pub const MAX_PROMPT_CHARS: usize = 10_000;
/// Shortest duration, seconds.
pub const MIN_DURATION: u32 = 5;
/// Longest duration, seconds.
pub const MAX_DURATION: u32 = 15;
/// Duration when neither `duration` nor `seconds` is given.
pub const DEFAULT_DURATION: u32 = 5;

/// The fields that take a reference (an http(s) URL, a `data:` URI or a file part).
pub const REFERENCE_FIELDS: [&str; 5] = [
    "first_frame",
    "input_reference",
    "last_frame",
    "audio_url",
    "reference_video",
];

/// One field of a create request as it arrived: a JSON value, a multipart text part, or a
/// multipart file part.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Json(Value),
    Text(String),
    File(FilePart),
}

/// A multipart file part; the server keeps the bytes, this crate only sees the handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    /// The server's handle to the bytes, echoed back as [`Media::File`].
    pub index: usize,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub len: u64,
}

/// The fields of a create request in arrival order. A name may repeat (multipart); unknown names
/// are ignored by [`validate`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawCreate {
    pub fields: Vec<(String, FieldValue)>,
}

impl RawCreate {
    /// From a parsed JSON body; anything but an object is `400 invalid request`.
    pub fn from_json(value: Value) -> Result<RawCreate, ApiError> {
        match value {
            Value::Object(map) => Ok(RawCreate {
                fields: map
                    .into_iter()
                    .map(|(name, value)| (name, FieldValue::Json(value)))
                    .collect(),
            }),
            other => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "the body must be a JSON object, got {}",
                    json_kind_article(&other)
                ),
            )),
        }
    }

    /// Appends a field (for building a request part by part from multipart).
    pub fn push(&mut self, name: impl Into<String>, value: FieldValue) {
        self.fields.push((name.into(), value));
    }

    /// The values given under `name`, JSON nulls left out.
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a FieldValue> + 'a {
        self.fields
            .iter()
            .filter(move |(n, v)| n == name && !matches!(v, FieldValue::Json(Value::Null)))
            .map(|(_, v)| v)
    }
}

/// Where a reference (image, audio, video) comes from. The server fetches or reads the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Media {
    /// An `http://` or `https://` URL, as given.
    Url(String),
    /// A `data:` URI, as given.
    DataUri(String),
    /// A multipart file part: its [`FilePart::index`].
    File(usize),
}

/// A create request that passed every check this crate can make without I/O.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidCreate {
    pub model: String,
    pub prompt: String,
    pub size: Option<Size>,
    /// `None` when adaptive or left out.
    pub aspect_ratio: Option<Ratio>,
    /// Seconds; from `duration` or `seconds`, [`DEFAULT_DURATION`] when neither is given.
    pub duration: u32,
    /// From `first_frame` or its alias `input_reference`.
    pub first_frame: Option<Media>,
    pub last_frame: Option<Media>,
    /// From `audio_url`.
    pub audio: Option<Media>,
    pub reference_video: Option<Media>,
    pub reference_video_audio: bool,
    /// Where the task's final status is announced (a signed webhook).
    #[serde(default)]
    pub callback_url: Option<String>,
}

/// Validates a create request. Pure; returns the first failing check in CONTRACT §1.1's order:
/// model, prompt, size, aspect_ratio, duration (and seconds), reference counts, images, audio,
/// video, then reference_video_audio and callback_url.
pub fn validate(raw: &RawCreate) -> Result<ValidCreate, ApiError> {
    let model = check_model(raw)?;
    let prompt = check_prompt(raw)?;
    let size = check_size(raw)?;
    let aspect_ratio = check_aspect_ratio(raw)?;
    let duration = check_duration(raw)?;

    let first_frame = References::collect(raw, &["first_frame", "input_reference"]);
    let last_frame = References::collect(raw, &["last_frame"]);
    let audio = References::collect(raw, &["audio_url"]);
    let video = References::collect(raw, &["reference_video"]);
    first_frame.check_count("first-frame image (first_frame or input_reference)")?;
    last_frame.check_count("last_frame")?;
    audio.check_count("audio_url")?;
    video.check_count("reference_video")?;

    const IMAGE: &str = "an http(s) URL, a data: URI or a file part of a jpeg, png or webp image";
    let first_frame = first_frame.media(ErrorCode::InvalidImage, IMAGE)?;
    let last_frame = last_frame.media(ErrorCode::InvalidImage, IMAGE)?;
    let audio = audio.media(
        ErrorCode::InvalidAudio,
        "an http(s) URL, a data: URI or a file part of mp3, wav or m4a audio",
    )?;
    let reference_video = video.media(
        ErrorCode::InvalidVideo,
        "an http(s) URL, a data: URI or a file part of an mp4 or mov video",
    )?;
    let reference_video_audio = check_reference_video_audio(raw, reference_video.is_some())?;
    let callback_url = check_callback_url(raw)?;

    Ok(ValidCreate {
        model,
        prompt,
        size,
        aspect_ratio,
        duration,
        first_frame,
        last_frame,
        audio,
        reference_video,
        reference_video_audio,
        callback_url,
    })
}

/// Longest `callback_url`, in bytes.
pub const MAX_CALLBACK_URL: usize = 2048;

/// `callback_url`: an absolute http(s) URL with a host, no credentials, no whitespace.
fn check_callback_url(raw: &RawCreate) -> Result<Option<String>, ApiError> {
    let code = ErrorCode::InvalidRequest;
    let name = "callback_url";
    let Some(value) = single(raw, name, code)? else {
        return Ok(None);
    };
    let url = text(value).filter(|s| is_callback_url(s));
    match url {
        Some(url) => Ok(Some(url.to_owned())),
        None => Err(ApiError::field(
            code,
            name,
            format!(
                "callback_url must be an absolute http:// or https:// URL with a host, without \
                 credentials, of at most {MAX_CALLBACK_URL} bytes, got {}",
                describe(value.into())
            ),
        )),
    }
}

fn is_callback_url(s: &str) -> bool {
    let lower_prefix = |p: &str| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
    let rest = if lower_prefix("http://") {
        &s[7..]
    } else if lower_prefix("https://") {
        &s[8..]
    } else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    s.len() <= MAX_CALLBACK_URL
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && !authority.is_empty()
        && !authority.starts_with(':')
        && !authority.contains('@')
        && s.validate_url()
}

/// The field name the first frame came under (`input_reference` or `first_frame`), for the
/// `param` of errors the server finds later (fetching, sniffing). Call it after [`validate`]
/// succeeded, when at most one first-frame image was given.
pub fn first_frame_param(raw: &RawCreate) -> &'static str {
    if !References::collect(raw, &["input_reference"])
        .items
        .is_empty()
    {
        "input_reference"
    } else {
        "first_frame"
    }
}

fn check_model(raw: &RawCreate) -> Result<String, ApiError> {
    let code = ErrorCode::InvalidModel;
    let value = single(raw, "model", code)?.ok_or_else(|| {
        ApiError::field(
            code,
            "model",
            format!("model is required and must be {MODEL}"),
        )
    })?;
    match text(value) {
        Some(s) if s == MODEL => Ok(s.to_owned()),
        _ => Err(ApiError::field(
            code,
            "model",
            format!("model must be {MODEL}, got {}", describe(value.into())),
        )),
    }
}

fn check_prompt(raw: &RawCreate) -> Result<String, ApiError> {
    let code = ErrorCode::InvalidPrompt;
    let rule = format!("a non-empty string of at most {MAX_PROMPT_CHARS} characters");
    let value = single(raw, "prompt", code)?
        .ok_or_else(|| ApiError::field(code, "prompt", format!("prompt is required: {rule}")))?;
    let prompt = match text(value) {
        Some(s) if !s.trim().is_empty() => s,
        _ => {
            return Err(ApiError::field(
                code,
                "prompt",
                format!("prompt must be {rule}, got {}", describe(value.into())),
            ));
        }
    };
    let chars = prompt.chars().count();
    if chars > MAX_PROMPT_CHARS {
        return Err(ApiError::field(
            code,
            "prompt",
            format!("prompt must be at most {MAX_PROMPT_CHARS} characters, got {chars}"),
        ));
    }
    Ok(prompt.to_owned())
}

fn check_size(raw: &RawCreate) -> Result<Option<Size>, ApiError> {
    let code = ErrorCode::InvalidSize;
    let Some(value) = single(raw, "size", code)? else {
        return Ok(None);
    };
    match text(value).and_then(Size::parse) {
        Some(size) => Ok(Some(size)),
        None => Err(ApiError::field(
            code,
            "size",
            format!(
                "size must be \"<width>x<height>\" with both integers from {MIN_SIDE} to \
                 {MAX_SIDE}, e.g. \"1280x720\", got {}",
                describe(value.into())
            ),
        )),
    }
}

fn check_aspect_ratio(raw: &RawCreate) -> Result<Option<Ratio>, ApiError> {
    let code = ErrorCode::InvalidRatio;
    let Some(value) = single(raw, "aspect_ratio", code)? else {
        return Ok(None);
    };
    match text(value) {
        Some("adaptive") => Ok(None),
        Some(s) if Ratio::from_wire(s).is_some() => Ok(Ratio::from_wire(s)),
        _ => {
            let names: Vec<&str> = Ratio::ALL.iter().map(|r| r.as_str()).collect();
            Err(ApiError::field(
                code,
                "aspect_ratio",
                format!(
                    "aspect_ratio must be one of {} or adaptive, got {}",
                    names.join(", "),
                    describe(value.into())
                ),
            ))
        }
    }
}

fn check_duration(raw: &RawCreate) -> Result<u32, ApiError> {
    let duration = seconds_field(raw, "duration", false)?;
    let seconds = seconds_field(raw, "seconds", true)?;
    match (duration, seconds) {
        (Some(d), Some(s)) if d != s => Err(ApiError::field(
            ErrorCode::InvalidDuration,
            "seconds",
            format!("seconds ({s}) and duration ({d}) differ; give one of them, or the same value"),
        )),
        (Some(d), _) => Ok(d),
        (None, s) => Ok(s.unwrap_or(DEFAULT_DURATION)),
    }
}

/// `duration` or `seconds`: a whole number of seconds from 5 to 15; a JSON string holding one
/// only where `json_strings` allows it.
fn seconds_field(raw: &RawCreate, name: &str, json_strings: bool) -> Result<Option<u32>, ApiError> {
    let code = ErrorCode::InvalidDuration;
    let Some(value) = single(raw, name, code)? else {
        return Ok(None);
    };
    let typed = json_strings || !matches!(value, FieldValue::Json(Value::String(_)));
    let in_range = Some(value)
        .filter(|_| typed)
        .and_then(whole_number)
        .filter(|n| (i64::from(MIN_DURATION)..=i64::from(MAX_DURATION)).contains(n))
        .and_then(|n| u32::try_from(n).ok());
    match in_range {
        Some(n) => Ok(Some(n)),
        None => Err(ApiError::field(
            code,
            name,
            format!(
                "{name} must be {} from {MIN_DURATION} to {MAX_DURATION}, got {}",
                if json_strings {
                    "an integer"
                } else {
                    "a JSON integer (not a string)"
                },
                describe(value.into())
            ),
        )),
    }
}

/// A whole number from a JSON number or a numeric string; out-of-range floats saturate.
fn whole_number(value: &FieldValue) -> Option<i64> {
    fn whole(f: f64) -> Option<i64> {
        // `as` saturates, which keeps huge values out of range.
        (f.is_finite() && f.fract() == 0.0).then_some(f as i64)
    }
    match value {
        FieldValue::Json(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|_| i64::MAX))
            .or_else(|| n.as_f64().and_then(whole)),
        FieldValue::Json(Value::String(s)) | FieldValue::Text(s) => s
            .parse::<i64>()
            .ok()
            .or_else(|| s.parse::<f64>().ok().and_then(whole)),
        _ => None,
    }
}

fn check_reference_video_audio(raw: &RawCreate, has_video: bool) -> Result<bool, ApiError> {
    let code = ErrorCode::InvalidRequest;
    let name = "reference_video_audio";
    let Some(value) = single(raw, name, code)? else {
        return Ok(false);
    };
    let flag = match value {
        FieldValue::Json(Value::Bool(b)) => Some(*b),
        _ => match text(value) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        },
    };
    match flag {
        Some(true) if !has_video => Err(ApiError::field(
            code,
            name,
            "reference_video_audio is true but no reference_video was given",
        )),
        Some(flag) => Ok(flag),
        None => Err(ApiError::field(
            code,
            name,
            format!(
                "{name} must be true or false, got {}",
                describe(value.into())
            ),
        )),
    }
}

/// The one value of a scalar field; given more than once is that field's fault.
fn single<'a>(
    raw: &'a RawCreate,
    name: &'a str,
    code: ErrorCode,
) -> Result<Option<&'a FieldValue>, ApiError> {
    let mut values = raw.values(name);
    let first = values.next();
    let extra = values.count();
    if extra > 0 {
        return Err(ApiError::field(
            code,
            name,
            format!("{name} must be given once, got {} values", extra + 1),
        ));
    }
    Ok(first)
}

/// The text of a JSON string or a multipart text part.
fn text(value: &FieldValue) -> Option<&str> {
    match value {
        FieldValue::Json(Value::String(s)) | FieldValue::Text(s) => Some(s),
        _ => None,
    }
}

/// One reference as given, with arrays flattened.
#[derive(Clone, Copy)]
enum Item<'a> {
    Json(&'a Value),
    Text(&'a str),
    File(&'a FilePart),
}

impl<'a> Item<'a> {
    fn text(self) -> Option<&'a str> {
        match self {
            Item::Json(Value::String(s)) => Some(s),
            Item::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl<'a> From<&'a FieldValue> for Item<'a> {
    fn from(value: &'a FieldValue) -> Self {
        match value {
            FieldValue::Json(v) => Item::Json(v),
            FieldValue::Text(s) => Item::Text(s),
            FieldValue::File(f) => Item::File(f),
        }
    }
}

/// Every reference of one kind, each with the name of the field it came under, in the order of
/// the given field names (so the field blamed does not depend on arrival order).
struct References<'a> {
    items: Vec<(&'a str, Item<'a>)>,
}

impl<'a> References<'a> {
    fn collect(raw: &'a RawCreate, names: &[&'a str]) -> Self {
        let mut items = Vec::new();
        for &name in names {
            for value in raw.values(name) {
                match value {
                    FieldValue::Json(Value::Array(array)) => {
                        items.extend(array.iter().map(|v| (name, Item::Json(v))));
                    }
                    other => items.push((name, other.into())),
                }
            }
        }
        References { items }
    }

    /// At most one reference of a kind (SPEC §4.1 rule 4).
    fn check_count(&self, what: &str) -> Result<(), ApiError> {
        match self.items.get(1) {
            None => Ok(()),
            Some((name, _)) => Err(ApiError::field(
                ErrorCode::ReferenceLimitExceeded,
                *name,
                format!("at most 1 {what} is allowed, got {}", self.items.len()),
            )),
        }
    }

    /// The reference, if any, as [`Media`]; `accepted` says what the field takes.
    fn media(&self, code: ErrorCode, accepted: &str) -> Result<Option<Media>, ApiError> {
        let Some(&(name, item)) = self.items.first() else {
            return Ok(None);
        };
        let media = match item {
            Item::File(file) if file.len > 0 => Some(Media::File(file.index)),
            _ => item.text().and_then(media_from_str),
        };
        media.map(Some).ok_or_else(|| {
            ApiError::field(
                code,
                name,
                format!("{name} must be {accepted}, got {}", describe(item)),
            )
        })
    }
}

/// An http(s) URL (syntax checked; no whitespace or control characters, so it can be fetched as
/// given) or a `data:` URI with a payload.
fn media_from_str(s: &str) -> Option<Media> {
    let lower_prefix = |p: &str| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
    if lower_prefix("data:") {
        let (_, payload) = s.split_once(',')?;
        return (!payload.is_empty()).then(|| Media::DataUri(s.to_owned()));
    }
    let clean = !s.chars().any(|c| c.is_whitespace() || c.is_control());
    let web = lower_prefix("http://") || lower_prefix("https://");
    (web && clean && s.validate_url()).then(|| Media::Url(s.to_owned()))
}

/// A short description of a value for error details: strings quoted, long ones cut.
fn describe(item: Item<'_>) -> String {
    const MAX: usize = 60;
    let quote = |s: &str| -> String {
        let cut = if s.chars().count() > MAX {
            format!("{}...", s.chars().take(MAX).collect::<String>())
        } else {
            s.to_owned()
        };
        Value::String(cut).to_string()
    };
    match item {
        Item::Json(Value::String(s)) => quote(s),
        Item::Text(s) => quote(s),
        Item::Json(v @ (Value::Array(_) | Value::Object(_))) => json_kind_article(v).to_owned(),
        Item::Json(v) => v.to_string(),
        Item::File(f) if f.len == 0 => "an empty file part".to_owned(),
        Item::File(_) => "a file part".to_owned(),
    }
}

fn json_kind_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
