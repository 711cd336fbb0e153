//! `POST /v1/videos` validation (`crates/videos-v1`), from a JSON body or from form fields
//! (the input as a JSON array of `[name, value]` pairs: a string is a text part, an object
//! `{"file": len, "filename": ..., "content_type": ...}` a file part). Never a panic; an error
//! names a field of the request; a valid request written back as a JSON body and as form fields
//! validates to the same request, and survives its own serde round trip; framing from it never
//! panics and gives an allowed size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use videos_v1::{
    FieldValue, FilePart, MAX_SIDE, MIN_SIDE, Media, RawCreate, ValidCreate, first_frame_param,
    resolve_framing, validate,
};

const FIELDS: [&str; 13] = [
    "model",
    "prompt",
    "size",
    "aspect_ratio",
    "duration",
    "seconds",
    "first_frame",
    "input_reference",
    "last_frame",
    "audio_url",
    "reference_video",
    "reference_video_audio",
    "callback_url",
];

/// Form fields from `[[name, value], ...]`; `None` when the JSON is not that shape.
fn form(value: &Value) -> Option<RawCreate> {
    let mut raw = RawCreate::default();
    for (index, pair) in value.as_array()?.iter().enumerate() {
        let [Value::String(name), value] = pair.as_array()?.as_slice() else {
            return None;
        };
        let field = match value {
            Value::String(text) => FieldValue::Text(text.clone()),
            Value::Object(file) => FieldValue::File(FilePart {
                index,
                filename: file
                    .get("filename")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                content_type: file
                    .get("content_type")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                len: file.get("file").and_then(Value::as_u64).unwrap_or(0),
            }),
            _ => return None,
        };
        raw.push(name.clone(), field);
    }
    Some(raw)
}

fn media_text(media: &Media) -> Option<&str> {
    match media {
        Media::Url(s) | Media::DataUri(s) => Some(s),
        Media::File(_) => None,
    }
}

/// The valid request as a JSON body, unless it has file parts.
fn as_json(valid: &ValidCreate) -> Option<RawCreate> {
    let mut body = Map::new();
    body.insert("model".into(), json!(valid.model));
    body.insert("prompt".into(), json!(valid.prompt));
    if let Some(size) = valid.size {
        body.insert("size".into(), json!(size.to_string()));
    }
    if let Some(ratio) = valid.aspect_ratio {
        body.insert("aspect_ratio".into(), json!(ratio.as_str()));
    }
    body.insert("duration".into(), json!(valid.duration));
    for (name, media) in [
        ("first_frame", &valid.first_frame),
        ("last_frame", &valid.last_frame),
        ("audio_url", &valid.audio),
        ("reference_video", &valid.reference_video),
    ] {
        if let Some(media) = media {
            body.insert(name.into(), json!(media_text(media)?));
        }
    }
    body.insert(
        "reference_video_audio".into(),
        json!(valid.reference_video_audio),
    );
    if let Some(url) = &valid.callback_url {
        body.insert("callback_url".into(), json!(url));
    }
    RawCreate::from_json(Value::Object(body)).ok()
}

/// The valid request as form fields: text parts, and file parts where it had them.
fn as_form(valid: &ValidCreate) -> RawCreate {
    let mut raw = RawCreate::default();
    raw.push("model", FieldValue::Text(valid.model.clone()));
    raw.push("prompt", FieldValue::Text(valid.prompt.clone()));
    if let Some(size) = valid.size {
        raw.push("size", FieldValue::Text(size.to_string()));
    }
    if let Some(ratio) = valid.aspect_ratio {
        raw.push("aspect_ratio", FieldValue::Text(ratio.as_str().into()));
    }
    raw.push("seconds", FieldValue::Text(valid.duration.to_string()));
    for (name, media) in [
        ("input_reference", &valid.first_frame),
        ("last_frame", &valid.last_frame),
        ("audio_url", &valid.audio),
        ("reference_video", &valid.reference_video),
    ] {
        let value = match media {
            None => continue,
            Some(Media::File(index)) => FieldValue::File(FilePart {
                index: *index,
                filename: Some("f".into()),
                content_type: None,
                len: 1,
            }),
            Some(media) => FieldValue::Text(media_text(media).unwrap_or_default().to_owned()),
        };
        raw.push(name, value);
    }
    let flag = if valid.reference_video_audio {
        "true"
    } else {
        "false"
    };
    raw.push("reference_video_audio", FieldValue::Text(flag.into()));
    if let Some(url) = &valid.callback_url {
        raw.push("callback_url", FieldValue::Text(url.clone()));
    }
    raw
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let raw = match form(&value) {
        Some(raw) => raw,
        None => match RawCreate::from_json(value) {
            Ok(raw) => raw,
            Err(e) => {
                assert!(e.param.is_none(), "{e:?}");
                return;
            }
        },
    };
    let valid = match validate(&raw) {
        Ok(valid) => valid,
        Err(e) => {
            let param = e.param.as_deref().unwrap_or_default();
            assert!(FIELDS.contains(&param), "{e:?}");
            return;
        }
    };
    let _ = first_frame_param(&raw);
    if let Some(json) = as_json(&valid) {
        assert_eq!(
            validate(&json).ok().as_ref(),
            Some(&valid),
            "as JSON: {json:?}"
        );
    }
    let form = as_form(&valid);
    assert_eq!(
        validate(&form).ok().as_ref(),
        Some(&valid),
        "as form: {form:?}"
    );
    let stored = serde_json::to_value(&valid).expect("a valid request serialises");
    let back: ValidCreate = serde_json::from_value(stored).expect("and reads back");
    assert_eq!(back, valid);

    let dims = (
        data.len() as u32 % 5000,
        data.first().map_or(0, |b| u32::from(*b) * 9),
    );
    let framing = resolve_framing(valid.size, valid.aspect_ratio, Some(dims));
    let sides = MIN_SIDE..=MAX_SIDE;
    assert!(
        sides.contains(&framing.width) && sides.contains(&framing.height),
        "{framing:?}"
    );
});
