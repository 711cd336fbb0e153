//! Create-request validation: the fixture walk (`test_data/ok`, `test_data/err`) and the cases
//! JSON fixtures cannot express (multipart text and file parts, repeated names, long prompts).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use error_codes::{ApiError, ErrorCode};
use serde_json::{Value, json};

use crate::{
    FieldValue, FilePart, MODEL, Media, RawCreate, ValidCreate, first_frame_param, validate,
};

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(kind);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {}", dir.display());
    paths
}

fn read(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn validate_json(request: Value) -> Result<ValidCreate, ApiError> {
    validate(&RawCreate::from_json(request)?)
}

/// Every fixture, checked; failures are collected so one run reports them all.
#[test]
fn fixtures_ok_and_err() {
    let mut failures = Vec::new();
    for path in fixtures("ok") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture = read(&path);
        match validate_json(fixture["request"].clone()) {
            Err(e) => failures.push(format!("{name}: expected ok, got {e}")),
            Ok(valid) => {
                let got = serde_json::to_value(&valid).unwrap();
                let expect = fixture["expect"].as_object().cloned().unwrap_or_default();
                for (key, want) in expect {
                    if got.get(&key) != Some(&want) {
                        failures.push(format!("{name}: {key}: expected {want}, got {}", got[&key]));
                    }
                }
            }
        }
    }

    let mut codes_seen = BTreeSet::new();
    for path in fixtures("err") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture = read(&path);
        let (code, param) = (&fixture["code"], &fixture["param"]);
        match validate_json(fixture["request"].clone()) {
            Ok(valid) => failures.push(format!("{name}: expected {code}, got ok: {valid:?}")),
            Err(e) => {
                codes_seen.insert(e.code.code());
                if e.code.code() != code || e.param.as_deref() != param.as_str() {
                    failures.push(format!(
                        "{name}: expected {code} on {param}, got {} on {:?} ({})",
                        e.code.code(),
                        e.param,
                        e.detail
                    ));
                }
                if e.detail.is_empty() {
                    failures.push(format!("{name}: empty detail"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));

    // Every error the validator can give has at least one fixture.
    let codes = [
        ErrorCode::InvalidModel,
        ErrorCode::InvalidPrompt,
        ErrorCode::InvalidSize,
        ErrorCode::InvalidRatio,
        ErrorCode::InvalidDuration,
        ErrorCode::ReferenceLimitExceeded,
        ErrorCode::InvalidImage,
        ErrorCode::InvalidAudio,
        ErrorCode::InvalidVideo,
        ErrorCode::InvalidRequest,
    ];
    for code in codes {
        assert!(
            codes_seen.contains(code.code()),
            "no err fixture gives {code}"
        );
    }
}

fn text(s: &str) -> FieldValue {
    FieldValue::Text(s.to_owned())
}

fn file(index: usize, len: u64) -> FieldValue {
    FieldValue::File(FilePart {
        index,
        filename: Some(format!("frame{index}.png")),
        content_type: Some("image/png".to_owned()),
        len,
    })
}

/// A multipart request: `model` and `prompt` as text parts, then `parts`.
fn multipart(parts: Vec<(&str, FieldValue)>) -> RawCreate {
    let mut raw = RawCreate::default();
    raw.push("model", text(MODEL));
    raw.push("prompt", text("a cat on a skateboard"));
    for (name, value) in parts {
        raw.push(name, value);
    }
    raw
}

fn err(raw: &RawCreate) -> (ErrorCode, String) {
    let e = validate(raw).expect_err("expected an error");
    (e.code, e.param.unwrap_or_default())
}

#[test]
fn openai_sdk_multipart_works() {
    // What the official SDK sends: everything as parts, `seconds` as a string, the image as a
    // file part named `input_reference`.
    let raw = multipart(vec![
        ("seconds", text("8")),
        ("size", text("1280x720")),
        ("input_reference", file(3, 2048)),
    ]);
    let valid = validate(&raw).unwrap();
    assert_eq!(valid.duration, 8);
    assert_eq!(
        valid.size.map(|s| s.to_string()).as_deref(),
        Some("1280x720")
    );
    assert_eq!(valid.first_frame, Some(Media::File(3)));
    assert_eq!(valid.last_frame, None);
    assert_eq!(first_frame_param(&raw), "input_reference");
    let raw = multipart(vec![("first_frame", file(0, 1))]);
    assert_eq!(first_frame_param(&raw), "first_frame");
}

#[test]
fn multipart_text_parts() {
    let raw = multipart(vec![
        ("duration", text("12")),
        ("aspect_ratio", text("9:16")),
        ("first_frame", text("https://example.com/a.png")),
        ("last_frame", file(1, 10)),
        ("audio_url", file(2, 10)),
        ("reference_video", text("https://example.com/v.mp4")),
        ("reference_video_audio", text("true")),
        ("ignored", file(9, 1)),
    ]);
    let valid = validate(&raw).unwrap();
    assert_eq!(valid.duration, 12);
    assert_eq!(valid.aspect_ratio, Some(crate::Ratio::NineSixteen));
    assert_eq!(
        valid.first_frame,
        Some(Media::Url("https://example.com/a.png".into()))
    );
    assert_eq!(valid.last_frame, Some(Media::File(1)));
    assert_eq!(valid.audio, Some(Media::File(2)));
    assert!(valid.reference_video_audio);

    let raw = multipart(vec![("reference_video_audio", text("false"))]);
    assert!(!validate(&raw).unwrap().reference_video_audio);
}

#[test]
fn multipart_faults() {
    use ErrorCode::*;
    type Parts = Vec<(&'static str, FieldValue)>;
    let cases: Vec<(Parts, (ErrorCode, &str))> = vec![
        // Repeated reference parts exceed the limit.
        (
            vec![("first_frame", file(0, 9)), ("input_reference", file(1, 9))],
            (ReferenceLimitExceeded, "input_reference"),
        ),
        (
            vec![
                ("input_reference", file(0, 9)),
                ("input_reference", file(1, 9)),
            ],
            (ReferenceLimitExceeded, "input_reference"),
        ),
        (
            // Blame does not depend on arrival order.
            vec![("input_reference", file(0, 9)), ("first_frame", file(1, 9))],
            (ReferenceLimitExceeded, "input_reference"),
        ),
        (
            vec![
                ("last_frame", file(0, 9)),
                ("last_frame", text("https://e.com/a.png")),
            ],
            (ReferenceLimitExceeded, "last_frame"),
        ),
        (
            vec![
                ("audio_url", text("https://e.com/a.mp3")),
                ("audio_url", text("x")),
            ],
            (ReferenceLimitExceeded, "audio_url"),
        ),
        (
            vec![
                ("reference_video", file(0, 9)),
                ("reference_video", file(1, 9)),
            ],
            (ReferenceLimitExceeded, "reference_video"),
        ),
        // A repeated scalar is that field's fault.
        (vec![("model", text(MODEL))], (InvalidModel, "model")),
        (vec![("prompt", text("again"))], (InvalidPrompt, "prompt")),
        (
            vec![("size", text("1280x720")), ("size", text("1280x720"))],
            (InvalidSize, "size"),
        ),
        (
            vec![("seconds", text("8")), ("seconds", text("8"))],
            (InvalidDuration, "seconds"),
        ),
        (
            vec![
                ("reference_video", text("https://e.com/v.mp4")),
                ("reference_video_audio", text("true")),
                ("reference_video_audio", text("true")),
            ],
            (InvalidRequest, "reference_video_audio"),
        ),
        // A file part where text is expected.
        (
            vec![("duration", file(0, 9))],
            (InvalidDuration, "duration"),
        ),
        (vec![("size", file(0, 9))], (InvalidSize, "size")),
        (
            vec![("aspect_ratio", file(0, 9))],
            (InvalidRatio, "aspect_ratio"),
        ),
        // Text values with the wrong content.
        (vec![("seconds", text("4"))], (InvalidDuration, "seconds")),
        (vec![("duration", text(""))], (InvalidDuration, "duration")),
        (
            vec![("reference_video_audio", text("1"))],
            (InvalidRequest, "reference_video_audio"),
        ),
        (
            vec![("reference_video_audio", text("true"))],
            (InvalidRequest, "reference_video_audio"),
        ),
        // An empty file is no image, audio or video.
        (
            vec![("first_frame", file(0, 0))],
            (InvalidImage, "first_frame"),
        ),
        (vec![("audio_url", file(0, 0))], (InvalidAudio, "audio_url")),
        (
            vec![("reference_video", file(0, 0))],
            (InvalidVideo, "reference_video"),
        ),
    ];
    for (parts, (code, param)) in cases {
        let raw = multipart(parts.clone());
        assert_eq!(err(&raw), (code, param.to_owned()), "{parts:?}");
    }

    // A file part for model or prompt.
    let mut raw = RawCreate::default();
    raw.push("model", file(0, 9));
    assert_eq!(err(&raw), (InvalidModel, "model".to_owned()));
    let mut raw = RawCreate::default();
    raw.push("model", text(MODEL));
    raw.push("prompt", file(0, 9));
    assert_eq!(err(&raw), (InvalidPrompt, "prompt".to_owned()));
}

#[test]
fn prompt_length_counts_characters() {
    let prompt = |s: String| json!({"model": MODEL, "prompt": s});
    assert!(validate_json(prompt("a".repeat(10_000))).is_ok());
    // Multi-byte characters count once each.
    assert!(validate_json(prompt("猫".repeat(10_000))).is_ok());
    let e = validate_json(prompt("a".repeat(10_001))).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidPrompt);
    assert_eq!(e.param.as_deref(), Some("prompt"));
    assert!(e.detail.contains("10001"), "{}", e.detail);
}

#[test]
fn details_name_the_field_and_the_accepted_values() {
    let cases = [
        (
            json!({"model": "sora-2"}),
            r#"model must be model_h3, got "sora-2""#,
        ),
        (
            json!({"model": MODEL, "prompt": "p", "duration": "abc"}),
            r#"duration must be a JSON integer (not a string) from 5 to 15, got "abc""#,
        ),
        (
            json!({"model": MODEL, "prompt": "p", "seconds": 4}),
            "seconds must be an integer from 5 to 15, got 4",
        ),
        (
            json!({"model": MODEL, "prompt": "p", "aspect_ratio": "2:1"}),
            r#"aspect_ratio must be one of 16:9, 9:16, 1:1, 4:3, 3:4, 21:9 or adaptive, got "2:1""#,
        ),
        (
            json!({"model": MODEL, "prompt": "p", "size": [1, 2]}),
            r#"size must be "<width>x<height>" with both integers from 64 to 4096, e.g. "1280x720", got an array"#,
        ),
    ];
    for (request, detail) in cases {
        assert_eq!(validate_json(request).unwrap_err().detail, detail);
    }
    // Long values are cut short in details.
    let long = "x".repeat(500);
    let e = validate_json(json!({"model": long})).unwrap_err();
    assert!(e.detail.len() < 120, "{}", e.detail);
}

#[test]
fn from_json_refuses_non_objects() {
    for body in [json!([]), json!(1), json!("s"), json!(null), json!(true)] {
        let e = RawCreate::from_json(body).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.param, None);
    }
    let raw = RawCreate::from_json(json!({"model": MODEL, "n": 2})).unwrap();
    assert_eq!(raw.fields.len(), 2);
}
