//! Requests that make a new video from a completed one: edits (`POST /v1/videos/edits`) and
//! extensions (`POST /v1/videos/extensions`). Their body is a create request's (JSON or
//! multipart) plus `video`, the source: `{"id": "<video id>"}` in JSON, the form field
//! `video[id]` in multipart (as the OpenAI SDK encodes the object). The server reads the
//! source, then builds the create request from it and checks it with [`crate::validate`].

use error_codes::{ApiError, ErrorCode};
use serde_json::Value;

use crate::create::{FieldValue, RawCreate};

/// The longest stitched total of an extension, in seconds (extensions of extensions add up;
/// each is paid for its new segment only, while it renders the whole).
pub const MAX_EXTENDED_DURATION: u32 = 60;

/// An extension of `more` seconds of a source of `base` seconds: `400 invalid duration`
/// naming `seconds` when the total would pass [`MAX_EXTENDED_DURATION`].
pub fn check_extended(base: u32, more: u32) -> Result<(), ApiError> {
    let max = MAX_EXTENDED_DURATION;
    if base.saturating_add(more) > max {
        return Err(ApiError::field(
            ErrorCode::InvalidDuration,
            "seconds",
            format!(
                "the source is {base} seconds; with {more} more it would pass the {max} seconds an extended video may last"
            ),
        ));
    }
    Ok(())
}

/// The field naming the source video.
pub const SOURCE_FIELD: &str = "video";
/// The multipart form of `{"video": {"id": ...}}`.
const SOURCE_ID_FORM_FIELD: &str = "video[id]";

fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, SOURCE_FIELD, detail)
}

/// The id of the source video an edit or extension names, checked before anything else of
/// the request: missing, given twice, not a non-empty string, or an uploaded file (the relay
/// edits and extends only videos it made) is `400 invalid request` naming `video`.
pub fn source_id(raw: &RawCreate) -> Result<&str, ApiError> {
    let mut found = None;
    for (name, value) in &raw.fields {
        let id = match (name.as_str(), value) {
            (_, FieldValue::Json(Value::Null)) => continue,
            (SOURCE_FIELD, FieldValue::File(_)) => {
                return Err(invalid(
                    "video is an uploaded file; only a video made here can be the source: give {\"id\": \"<id of a completed video>\"} (multipart: video[id])",
                ));
            }
            (SOURCE_FIELD, FieldValue::Json(Value::Object(object))) => match object.get("id") {
                Some(Value::String(id)) => id.as_str(),
                _ => return Err(invalid("video.id must be the id of a completed video")),
            },
            (SOURCE_FIELD, _) => {
                return Err(invalid(
                    "video must be an object {\"id\": \"<id of a completed video>\"}",
                ));
            }
            (SOURCE_ID_FORM_FIELD, FieldValue::Text(id)) => id.as_str(),
            (SOURCE_ID_FORM_FIELD, FieldValue::Json(Value::String(id))) => id.as_str(),
            (SOURCE_ID_FORM_FIELD, _) => {
                return Err(invalid("video[id] must be the id of a completed video"));
            }
            _ => continue,
        };
        if found.is_some() {
            return Err(invalid("video is given more than once"));
        }
        if id.is_empty() {
            return Err(invalid("video.id must not be empty"));
        }
        found = Some(id);
    }
    found.ok_or_else(|| {
        invalid("video is required: {\"id\": \"<id of a completed video>\"} (multipart: video[id])")
    })
}

/// Whether the request gives a length (`seconds` or `duration`): an extension must say how
/// long its new segment is.
pub fn has_duration(raw: &RawCreate) -> bool {
    raw.fields.iter().any(|(name, value)| {
        matches!(name.as_str(), "seconds" | "duration")
            && !matches!(value, FieldValue::Json(Value::Null))
    })
}

/// Removes every field named `name`.
pub fn remove(raw: &mut RawCreate, name: &str) {
    raw.fields.retain(|(n, _)| n != name);
}

/// Removes the source fields, so that the rest is a create request.
pub fn remove_source(raw: &mut RawCreate) {
    remove(raw, SOURCE_FIELD);
    remove(raw, SOURCE_ID_FORM_FIELD);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::create::FilePart;

    fn check(raw: RawCreate, expected: Result<&str, &str>) {
        match (source_id(&raw), expected) {
            (Ok(id), Ok(want)) => assert_eq!(id, want),
            (Err(e), Err(want)) => {
                assert_eq!(e.code, ErrorCode::InvalidRequest);
                assert_eq!(e.param.as_deref(), Some("video"));
                assert!(e.detail.contains(want), "{} lacks {want}", e.detail);
            }
            (got, want) => panic!("{raw:?}: got {got:?}, expected {want:?}"),
        }
    }

    fn text(fields: &[(&str, &str)]) -> RawCreate {
        RawCreate {
            fields: fields
                .iter()
                .map(|(n, v)| ((*n).to_owned(), FieldValue::Text((*v).to_owned())))
                .collect(),
        }
    }

    fn json_body(value: Value) -> RawCreate {
        RawCreate::from_json(value).unwrap()
    }

    #[test]
    fn the_source_as_json_or_form_field() {
        check(
            json_body(json!({"prompt": "p", "video": {"id": "video_1"}})),
            Ok("video_1"),
        );
        check(
            text(&[("prompt", "p"), ("video[id]", "video_2")]),
            Ok("video_2"),
        );
        check(json_body(json!({"video[id]": "video_3"})), Ok("video_3"));
    }

    #[test]
    fn a_missing_or_malformed_source_names_video() {
        check(json_body(json!({"prompt": "p"})), Err("video is required"));
        check(json_body(json!({"video": null})), Err("video is required"));
        check(
            json_body(json!({"video": "video_1"})),
            Err("must be an object"),
        );
        check(
            json_body(json!({"video": {"id": 7}})),
            Err("video.id must be"),
        );
        check(json_body(json!({"video": {}})), Err("video.id must be"));
        check(
            json_body(json!({"video": {"id": ""}})),
            Err("must not be empty"),
        );
        check(
            text(&[("video[id]", "a"), ("video[id]", "b")]),
            Err("more than once"),
        );
        let upload = RawCreate {
            fields: vec![(
                "video".into(),
                FieldValue::File(FilePart {
                    index: 0,
                    filename: Some("a.mp4".into()),
                    content_type: Some("video/mp4".into()),
                    len: 3,
                }),
            )],
        };
        check(upload, Err("uploaded file"));
    }

    #[test]
    fn extensions_stop_at_sixty_seconds() {
        assert!(check_extended(6, 5).is_ok());
        assert!(check_extended(46, 14).is_ok());
        let refused = check_extended(46, 15).unwrap_err();
        assert_eq!(refused.code, ErrorCode::InvalidDuration);
        assert_eq!(refused.param.as_deref(), Some("seconds"));
        assert!(refused.detail.contains("46 seconds"), "{}", refused.detail);
        assert!(refused.detail.contains("60 seconds"), "{}", refused.detail);
        assert!(check_extended(u32::MAX, 1).is_err());
    }

    #[test]
    fn lengths_and_removal() {
        let mut raw = text(&[("prompt", "p"), ("video[id]", "v"), ("seconds", "8")]);
        assert!(has_duration(&raw));
        remove(&mut raw, "seconds");
        assert!(!has_duration(&raw));
        remove_source(&mut raw);
        assert_eq!(raw, text(&[("prompt", "p")]));
        assert!(!has_duration(&json_body(json!({"duration": null}))));
    }
}
