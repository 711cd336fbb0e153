//! SPEC §7's error cases of `/v1/videos`, in the contract's check order, and the body faults
//! (not JSON, wrong type, over the size limit).

use serde_json::{Value, json};

use super::video;
use crate::conformance::checks;
use crate::conformance::client::Req;
use crate::conformance::suite::Suite;

pub async fn first_format_errors(suite: &mut Suite) {
    let s = "SPEC§7";
    let key = suite.args.key.clone();
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "model other than model_h3",
            video(json!({"model": "sora-2"})),
            400,
            "invalid model",
        ),
        (
            "model missing",
            video(json!({"model": null})),
            400,
            "invalid model",
        ),
        (
            "prompt missing",
            video(json!({"prompt": null})),
            400,
            "invalid prompt",
        ),
        (
            "prompt wrong type",
            video(json!({"prompt": 5})),
            400,
            "invalid prompt",
        ),
        (
            "size malformed",
            video(json!({"size": "big"})),
            400,
            "invalid size",
        ),
        (
            "size out of range",
            video(json!({"size": "10x10"})),
            400,
            "invalid size",
        ),
        (
            "aspect_ratio unknown",
            video(json!({"size": null, "aspect_ratio": "5:5"})),
            400,
            "invalid ratio",
        ),
        (
            "duration 4",
            video(json!({"duration": 4})),
            400,
            "invalid duration",
        ),
        (
            "duration 16",
            video(json!({"duration": 16})),
            400,
            "invalid duration",
        ),
        (
            "duration wrong type",
            video(json!({"duration": "abc"})),
            400,
            "invalid duration",
        ),
        (
            "seconds and duration differ",
            video(json!({"duration": 5, "seconds": "6"})),
            400,
            "invalid duration",
        ),
        (
            "two audio references",
            video(json!({"audio_url": ["http://a.example/1.mp3", "http://a.example/2.mp3"]})),
            400,
            "reference limit exceeded",
        ),
        (
            "two video references",
            video(json!({"reference_video": ["http://a.example/1.mp4", "http://a.example/2.mp4"]})),
            400,
            "reference limit exceeded",
        ),
        (
            "two first frames",
            video(
                json!({"first_frame": "http://a.example/1.png", "input_reference": "http://a.example/2.png"}),
            ),
            400,
            "reference limit exceeded",
        ),
        (
            "image not a URL",
            video(json!({"first_frame": "not a url"})),
            400,
            "invalid image",
        ),
        (
            "image unreachable",
            video(json!({"first_frame": "http://127.0.0.1:9/x.png"})),
            400,
            "invalid image",
        ),
        (
            "image not an image",
            video(json!({"first_frame": "data:text/plain;base64,aGVsbG8="})),
            400,
            "invalid image",
        ),
        (
            "audio of the wrong form",
            video(json!({"audio_url": "ftp://a.example/x.mp3"})),
            400,
            "invalid audio",
        ),
        (
            "video of the wrong form",
            video(json!({"reference_video": "ftp://a.example/x.mp4"})),
            400,
            "invalid video",
        ),
        // The contract's check order: model, prompt, size, aspect_ratio, duration, references.
        (
            "order: model before size",
            video(json!({"model": "x", "size": "big"})),
            400,
            "invalid model",
        ),
        (
            "order: prompt before size",
            video(json!({"prompt": "", "size": "big"})),
            400,
            "invalid prompt",
        ),
        (
            "order: size before duration",
            video(json!({"size": "big", "duration": 99})),
            400,
            "invalid size",
        ),
        (
            "order: ratio before duration",
            video(json!({"size": null, "aspect_ratio": "5:5", "duration": 99})),
            400,
            "invalid ratio",
        ),
        (
            "order: duration before references",
            video(json!({"duration": 99, "audio_url": ["a", "b"]})),
            400,
            "invalid duration",
        ),
        (
            "order: counts before forms",
            video(json!({"audio_url": ["a", "b"], "first_frame": "not a url"})),
            400,
            "reference limit exceeded",
        ),
    ];
    for (name, body, status, message) in cases {
        let r = suite
            .send(Req::post("/v1/videos").bearer(&key).json(&body))
            .await;
        suite.check(
            s,
            &format!("POST /v1/videos {name}: {status} {message}"),
            checks::api_error(&r, status, message),
        );
    }
    let r = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .raw("application/json", "{not json"),
        )
        .await;
    suite.check(
        "CONTRACT§0.2",
        "POST /v1/videos body not JSON: 400 invalid request",
        checks::api_error(&r, 400, "invalid request"),
    );
    let r = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .raw("text/plain", "hello"),
        )
        .await;
    suite.check(
        "CONTRACT§0.2",
        "POST /v1/videos text/plain: 415",
        checks::api_error(&r, 415, "unsupported media type"),
    );
    // 413 comes before any field check on this path (CONTRACT §4.3).
    let pad = "x".repeat(suite.args.max_body_bytes + 1024);
    let big = video(json!({"model": "nope", "padding": pad}));
    let r = suite
        .send(Req::post("/v1/videos").bearer(&key).json(&big))
        .await;
    suite.check(
        "SPEC§7",
        "POST /v1/videos over max_body_bytes: 413 before fields",
        checks::api_error(&r, 413, "Payload Too Large"),
    );
}
