use super::*;
use serde_json::{Value, json};

fn job() -> VideoJob {
    VideoJob {
        seed: Some(42),
        ..VideoJob::test(
            "veo-3.1-generate-preview",
            "A close up of two people staring at a cryptic drawing on a wall, torchlight flickering.",
        )
    }
}

fn image(data: &str, mime: &str) -> Image {
    Image {
        bytes_base64_encoded: data.into(),
        mime_type: mime.into(),
    }
}

fn wire(request: &PredictLongRunningRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

/// The documented text-to-video request, without its negative prompt (the relay has none),
/// and without the seed the Gemini API refuses.
#[test]
fn text_to_video_is_the_documented_body() {
    assert_eq!(
        wire(&to_vendor(&job(), Images::default())),
        json!({"instances":[{"prompt":"A close up of two people staring at a cryptic drawing on a wall, torchlight flickering."}],
               "parameters":{"aspectRatio":"16:9","durationSeconds":8}})
    );
    let mut tall = job();
    tall.ratio = "9:16".into();
    tall.resolution = Some("1080P".into());
    assert_eq!(
        wire(&to_vendor(&tall, Images::default()))["parameters"],
        json!({"aspectRatio":"9:16","durationSeconds":8,"resolution":"1080p"})
    );
}

/// First and last frame, and reference images, as the documented examples place them.
#[test]
fn frames_and_references_sit_in_the_instance() {
    let mut j = job();
    j.prompt = "The ghost fades out of the swing".into();
    let images = Images {
        first_frame: Some(image("iVBORw0KGgo...", "image/png")),
        last_frame: Some(image("iVBORw0KGgo...", "image/png")),
        references: Vec::new(),
    };
    assert_eq!(
        wire(&to_vendor(&j, images)),
        json!({"instances":[{"prompt":"The ghost fades out of the swing",
                "image":{"bytesBase64Encoded":"iVBORw0KGgo...","mimeType":"image/png"},
                "lastFrame":{"bytesBase64Encoded":"iVBORw0KGgo...","mimeType":"image/png"}}],
               "parameters":{"aspectRatio":"16:9","durationSeconds":8}})
    );
    j.prompt = "The woman in the dress walks on the beach".into();
    let images = Images {
        references: vec![
            image("/9j/4AAQ...", "image/jpeg"),
            image("/9j/4AAQ...", "image/jpeg"),
        ],
        ..Images::default()
    };
    assert_eq!(
        wire(&to_vendor(&j, images)),
        json!({"instances":[{"prompt":"The woman in the dress walks on the beach",
                "referenceImages":[
                  {"image":{"bytesBase64Encoded":"/9j/4AAQ...","mimeType":"image/jpeg"},"referenceType":"asset"},
                  {"image":{"bytesBase64Encoded":"/9j/4AAQ...","mimeType":"image/jpeg"},"referenceType":"asset"}]}],
               "parameters":{"durationSeconds":8,"aspectRatio":"16:9"}})
    );
}

fn read(json: &str) -> Result<PollOutcome, String> {
    from_vendor(serde_json::from_str(json).unwrap())
}

fn failure(outcome: Result<PollOutcome, String>) -> (String, String) {
    match outcome {
        Ok(PollOutcome::Failed { code, message }) => (code, message),
        other => panic!("not a failure: {other:?}"),
    }
}

/// The documented operations: running, done with a sample, RAI-filtered, failed.
#[test]
fn operations_read_as_outcomes() {
    assert_eq!(
        read(r#"{"name":"models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a"}"#),
        Ok(PollOutcome::Running {
            progress: 0,
            next_poll: None
        })
    );
    assert!(matches!(
        read(r#"{"name":"models/m/operations/x","done":false}"#),
        Ok(PollOutcome::Running { .. })
    ));
    let done = read(
        r#"{"name":"models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a","done":true,
         "response":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
          "generateVideoResponse":{"generatedSamples":[{"video":{"uri":"https://generativelanguage.googleapis.com/v1beta/files/6yh2fhz0xq3a:download?alt=media"}}]}}}"#,
    );
    let Ok(PollOutcome::Succeeded(files)) = done else {
        panic!("not a success: {done:?}")
    };
    assert_eq!(
        files.video,
        ResultSource::Url(
            "https://generativelanguage.googleapis.com/v1beta/files/6yh2fhz0xq3a:download?alt=media"
                .into()
        )
    );
    assert_eq!(files.usage, VendorUsage::NotReported);
    // Verbatim from a user's report: RAI-filtered, no samples.
    let (code, message) = failure(read(
        r#"{"name":"models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a","done":true,
         "response":{"@type":"type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
          "generateVideoResponse":{"raiMediaFilteredCount":1,
           "raiMediaFilteredReasons":["We encountered an issue with the audio for your prompt, which means we could not create your video. This can sometimes happen due to our safety filters or other processing issues. Please modify your request and try again. You have not been charged for this attempt."]}}}"#,
    ));
    assert_eq!(code, "moderation_blocked");
    assert!(
        message.contains("We encountered an issue with the audio"),
        "{message}"
    );
    let (code, message) = failure(read(
        r#"{"name":"models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a","done":true,
         "error":{"code":13,"message":"Internal error encountered."}}"#,
    ));
    assert_eq!(code, "upstream_error");
    assert!(!message.contains("Internal"), "{message}");
    let (code, _) = failure(read(
        r#"{"name":"x","done":true,"error":{"code":3,"message":"The prompt violates our usage policy. Support codes: 1234"}}"#,
    ));
    assert_eq!(code, "moderation_blocked");
    let (code, _) = failure(read(
        r#"{"name":"x","done":true,"response":{"generateVideoResponse":{"generatedSamples":[]}}}"#,
    ));
    assert_eq!(code, "upstream_error");
    assert_eq!(
        read(
            r#"{"name":"x","done":true,"response":{"generateVideoResponse":{"generatedSamples":[{"video":{"encodedVideo":"AAAA","encoding":"video/mp4"}}]}}}"#
        ),
        Err("AAAA".to_owned())
    );
}

/// The documented error bodies: a wrong key and quota are the channel's trouble.
#[test]
fn submission_errors_are_classified() {
    let none = http::HeaderMap::new();
    let wrong_key = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",
        "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com",
          "metadata":{"service":"generativelanguage.googleapis.com"}}]}}"#;
    assert!(matches!(
        submit_error(StatusCode::BAD_REQUEST, &none, wrong_key),
        SubmitOutcome::Retry(_)
    ));
    let no_key = br#"{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.","status":"PERMISSION_DENIED"}}"#;
    assert!(matches!(
        submit_error(StatusCode::FORBIDDEN, &none, no_key),
        SubmitOutcome::Retry(_)
    ));
    let quota = br#"{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED",
        "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"m","quotaId":"q"}]},
          {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"30s"}]}}"#;
    assert_eq!(
        submit_error(StatusCode::TOO_MANY_REQUESTS, &none, quota),
        SubmitOutcome::RateLimited {
            retry_after: Some(Duration::from_secs(30)),
            reason: format!(
                "submission answered 429 Too Many Requests: {}",
                redact::for_log(quota, None)
            ),
        }
    );
    let precondition = br#"{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}"#;
    assert!(matches!(
        submit_error(StatusCode::BAD_REQUEST, &none, precondition),
        SubmitOutcome::Retry(_)
    ));
    let bad = br#"{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"seed\"","status":"INVALID_ARGUMENT"}}"#;
    assert!(matches!(
        submit_error(StatusCode::BAD_REQUEST, &none, bad),
        SubmitOutcome::Fatal(_)
    ));
    let unsafe_prompt = br#"{"error":{"code":400,"message":"The prompt could not be submitted: it violates the safety policy.","status":"INVALID_ARGUMENT"}}"#;
    assert!(matches!(
        submit_error(StatusCode::BAD_REQUEST, &none, unsafe_prompt),
        SubmitOutcome::Refused { ref code, .. } if code == "moderation_blocked"
    ));
    assert!(matches!(
        submit_error(StatusCode::SERVICE_UNAVAILABLE, &none, b"{}"),
        SubmitOutcome::Retry(_)
    ));
    assert_eq!(
        check_answer(StatusCode::BAD_REQUEST, wrong_key),
        Some(CheckVerdict::KeyRefused)
    );
    assert_eq!(
        check_answer(StatusCode::TOO_MANY_REQUESTS, quota),
        Some(CheckVerdict::Quota)
    );
    assert_eq!(
        check_answer(StatusCode::FORBIDDEN, no_key),
        Some(CheckVerdict::KeyRefused)
    );
}

#[test]
fn operation_names_become_paths_segment_by_segment() {
    assert_eq!(
        operation_path("models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a").as_deref(),
        Some("/models/veo-3.1-generate-preview/operations/6yh2fhz0xq3a")
    );
    assert_eq!(
        operation_path("models/m/operations/a b?c").as_deref(),
        Some("/models/m/operations/a%20b%3Fc")
    );
    for bad in ["", "models//x", "models/../x", "/models/x", "x/."] {
        assert_eq!(operation_path(bad), None, "{bad}");
    }
}

#[test]
fn the_built_in_catalog_has_the_documented_models() {
    let all = models();
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "veo-3.1-generate-preview",
            "veo-3.1-fast-generate-preview",
            "veo-3.1-lite-generate-preview",
            "veo-3.0-generate-001",
            "veo-3.0-fast-generate-001",
            "veo-2.0-generate-001"
        ]
    );
    let full = &all[0].1;
    assert_eq!(full.durations_by_resolution["4k"], [8]);
    assert_eq!(full.durations_by_resolution["1080p"], [8]);
    assert!(!full.durations_by_resolution.contains_key("720p"));
    assert_eq!(full.reference_images, 3);
    let veo2 = &all[5].1;
    assert_eq!(veo2.durations, [5, 6, 7, 8]);
    assert!(!veo2.audio && !veo2.last_frame);
}
