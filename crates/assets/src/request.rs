//! Request bodies: library creation `{"name"}` and asset uploads (JSON `{"url", "type"}` or
//! multipart `file` + optional `type`).
//!
//! Rules decided here:
//! - Unknown fields are ignored; a JSON `null` is the same as leaving the field out.
//! - `name`: a string of 1 to 256 characters that is not only whitespace.
//! - `type` is optional in both upload forms: when it is left out, processing derives it from
//!   the bytes; when it is given, the bytes must be of that type or the asset fails.
//! - `url`: an `http://` or `https://` URL with a host and no whitespace or control
//!   characters, or a `data:` URI, at most 8,192 bytes for URLs (a `data:` URI is bounded by the
//!   body limit only). Whether it can be fetched is found out by processing (a `failed` asset),
//!   not by the request.
//! - Multipart: exactly one `file` part, which must be a file part (a part with a file name or
//!   a non-text content type); `type` at most once.
//! - Every fault is `400 invalid request` naming the field: none of these fields has an error of
//!   its own.

use error_codes::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::status::AssetType;

/// Longest library name, in characters.
pub const MAX_NAME_CHARS: usize = 256;
/// Longest `http(s)` URL, in bytes.
pub const MAX_URL_LEN: usize = 8192;

/// A valid library creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateLibrary {
    pub name: String,
}

/// Parses `{"name": "..."}`.
pub fn parse_create_library(body: &Value) -> Result<CreateLibrary, ApiError> {
    let fields = object(body, "{\"name\": \"...\"}")?;
    let rule = format!("a string of 1 to {MAX_NAME_CHARS} characters");
    let value = field(fields, "name").ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "name",
            format!("name is required: {rule}"),
        )
    })?;
    match value.as_str() {
        Some(name) if !name.trim().is_empty() && name.chars().count() <= MAX_NAME_CHARS => {
            Ok(CreateLibrary {
                name: name.to_owned(),
            })
        }
        _ => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "name",
            format!("name must be {rule}, got {}", describe(value)),
        )),
    }
}

/// Where an upload's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UploadSource {
    /// An `http(s)` URL or `data:` URI, fetched by processing.
    Url(String),
    /// A multipart file part: the server's handle and its length.
    File { index: usize, len: u64 },
}

/// A valid upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidUpload {
    pub source: UploadSource,
    /// The `type` the upload declared, if any.
    pub declared: Option<AssetType>,
}

/// Parses a JSON upload `{"url": "...", "type": "image" | "video" | "audio"}`.
pub fn parse_json_upload(body: &Value) -> Result<ValidUpload, ApiError> {
    let fields = object(
        body,
        "{\"url\": \"...\", \"type\": \"image\" | \"video\" | \"audio\"}",
    )?;
    let rule = "an http(s) URL or a data: URI of an image, video or audio file";
    let value = field(fields, "url").ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "url",
            format!("url is required: {rule} (or upload the file as multipart/form-data)"),
        )
    })?;
    let url = value.as_str().filter(|u| url_ok(u)).ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "url",
            format!("url must be {rule}, got {}", describe(value)),
        )
    })?;
    let declared = match field(fields, "type") {
        None => None,
        Some(v) => Some(asset_type(v.as_str(), || describe(v))?),
    };
    Ok(ValidUpload {
        source: UploadSource::Url(url.to_owned()),
        declared,
    })
}

/// One multipart part as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    /// A file part: the server keeps the bytes under `index`.
    File {
        index: usize,
        len: u64,
    },
}

/// Parses a multipart upload: `file` (a file part) and optional `type`, in arrival order.
pub fn parse_multipart_upload(parts: &[(String, Part)]) -> Result<ValidUpload, ApiError> {
    let named = |name: &'static str| -> Vec<&Part> {
        parts
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| p)
            .collect()
    };
    let files = named("file");
    let source = match files.as_slice() {
        [] => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "file",
                "file is required: a file part holding the image, video or audio \
                 (or send JSON {\"url\", \"type\"})",
            ));
        }
        [Part::File { index, len }] => UploadSource::File {
            index: *index,
            len: *len,
        },
        [Part::Text(_)] => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "file",
                "file must be a file part (with a filename), got a text part",
            ));
        }
        more => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "file",
                format!("file must be given once, got {} parts", more.len()),
            ));
        }
    };
    let types = named("type");
    let declared = match types.as_slice() {
        [] => None,
        [Part::Text(t)] => Some(asset_type(Some(t), || describe(&Value::String(t.clone())))?),
        [Part::File { .. }] => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "type",
                "type must be a text part: image, video or audio",
            ));
        }
        more => {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "type",
                format!("type must be given once, got {} parts", more.len()),
            ));
        }
    };
    Ok(ValidUpload { source, declared })
}

fn asset_type(value: Option<&str>, got: impl Fn() -> String) -> Result<AssetType, ApiError> {
    value.and_then(AssetType::from_wire).ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "type",
            format!("type must be one of image, video, audio, got {}", got()),
        )
    })
}

fn object<'a>(body: &'a Value, shape: &str) -> Result<&'a Map<String, Value>, ApiError> {
    match body {
        Value::Object(fields) => Ok(fields),
        other => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "the body must be a JSON object {shape}, got {}",
                kind_article(other)
            ),
        )),
    }
}

fn field<'a>(fields: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    fields.get(name).filter(|v| !v.is_null())
}

/// An `http(s)` URL with a host, or a `data:` URI with a payload; no whitespace or control
/// characters in either.
fn url_ok(s: &str) -> bool {
    let has_prefix = |p: &str| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    if has_prefix("data:") {
        return s
            .split_once(',')
            .is_some_and(|(_, payload)| !payload.is_empty());
    }
    let rest = if has_prefix("http://") {
        &s[7..]
    } else if has_prefix("https://") {
        &s[8..]
    } else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    s.len() <= MAX_URL_LEN && !host.is_empty() && !host.starts_with(':')
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => {
            const MAX: usize = 60;
            let cut = if s.chars().count() > MAX {
                format!("{}...", s.chars().take(MAX).collect::<String>())
            } else {
                s.clone()
            };
            Value::String(cut).to_string()
        }
        Value::Array(_) | Value::Object(_) => kind_article(value).to_owned(),
        other => other.to_string(),
    }
}

fn kind_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
