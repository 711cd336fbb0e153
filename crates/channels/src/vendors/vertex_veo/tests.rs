use super::*;
use serde_json::json;

fn job() -> VideoJob {
    VideoJob::test("veo-3.0-generate-001", "a cat reading a book")
}

fn wire(request: &PredictLongRunningRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

fn image(data: &str, mime: &str) -> Image {
    Image {
        bytes_base64_encoded: data.into(),
        mime_type: mime.into(),
    }
}

/// The documented requests: text to video on Veo 3 (sound asked for, one sample), Veo 2
/// without `generateAudio`, a seed and a storage location, frames and references in the
/// instance.
#[test]
fn requests_are_the_documented_bodies() {
    let audio = Options {
        generate_audio: true,
        storage_uri: None,
    };
    assert_eq!(
        wire(&to_vendor(&job(), Images::default(), &audio)),
        json!({"instances": [{"prompt": "a cat reading a book"}],
               "parameters": {"aspectRatio": "16:9", "durationSeconds": 8, "sampleCount": 1,
                              "generateAudio": true}})
    );
    let mut veo2 = job();
    veo2.model = "veo-2.0-generate-001".into();
    veo2.duration_secs = 5;
    veo2.ratio = "9:16".into();
    veo2.seed = Some(4_294_967_295);
    let options = Options {
        generate_audio: false,
        storage_uri: Some("gs://video-bucket/output/".into()),
    };
    assert_eq!(
        wire(&to_vendor(&veo2, Images::default(), &options))["parameters"],
        json!({"aspectRatio": "9:16", "durationSeconds": 5, "sampleCount": 1,
               "seed": 4_294_967_295u32, "storageUri": "gs://video-bucket/output/"})
    );
    let mut hd = job();
    hd.resolution = Some("1080P".into());
    hd.seed = Some(-1);
    let images = Images {
        first_frame: Some(image("iVBORw0KGgo=", "image/png")),
        last_frame: Some(image("/9j/4AAQ", "image/jpeg")),
        references: vec![image("iVBORw0KGgo=", "image/png")],
    };
    let body = wire(&to_vendor(&hd, images, &audio));
    assert_eq!(
        body["instances"][0],
        json!({"prompt": "a cat reading a book",
               "image": {"bytesBase64Encoded": "iVBORw0KGgo=", "mimeType": "image/png"},
               "lastFrame": {"bytesBase64Encoded": "/9j/4AAQ", "mimeType": "image/jpeg"},
               "referenceImages": [{"image": {"bytesBase64Encoded": "iVBORw0KGgo=", "mimeType": "image/png"},
                                    "referenceType": "asset"}]})
    );
    assert_eq!(body["parameters"]["resolution"], "1080p");
    assert!(body["parameters"].get("seed").is_none(), "{body}");
}

fn read(text: &str) -> Reading {
    from_vendor(serde_json::from_str(text).unwrap())
}

fn failure(reading: Reading) -> (String, String) {
    match reading {
        Reading::Outcome(PollOutcome::Failed { code, message }) => (code, message),
        other => panic!("not a failure: {other:?}"),
    }
}

/// The documented operations: running, done with a `gcsUri` or inline bytes, filtered,
/// failed.
#[test]
fn operations_read_as_outcomes() {
    let name = "projects/PROJECT_ID/locations/us-central1/publishers/google/models/veo-3.0-generate-001/operations/a1b07c8e-7b5a-4aba-bb34-3e1ccb8afcc8";
    assert!(matches!(
        read(&json!({"name": name}).to_string()),
        Reading::Outcome(PollOutcome::Running { .. })
    ));
    assert!(matches!(
        read(&json!({"name": name, "done": false}).to_string()),
        Reading::Outcome(PollOutcome::Running { .. })
    ));
    let gcs = read(
        &json!({"name": name, "done": true, "response": {
            "@type": "type.googleapis.com/cloud.ai.large_models.vision.GenerateVideoResponse",
            "raiMediaFilteredCount": 0,
            "videos": [{"gcsUri": "gs://STORAGE_BUCKET/TIMESTAMPED_SUBDIRECTORY/sample_0.mp4", "mimeType": "video/mp4"}]}})
        .to_string(),
    );
    let Reading::Outcome(PollOutcome::Succeeded(files)) = gcs else {
        panic!("{gcs:?}")
    };
    assert_eq!(
        files.video,
        ResultSource::Url("gs://STORAGE_BUCKET/TIMESTAMPED_SUBDIRECTORY/sample_0.mp4".into())
    );
    assert_eq!(
        read(
            &json!({"name": name, "done": true, "response": {"raiMediaFilteredCount": 0,
                "videos": [{"bytesBase64Encoded": "", "mimeType": "video/mp4"}]}})
            .to_string()
        ),
        Reading::Inline
    );
    let (code, message) = failure(read(
        &json!({"name": name, "done": true, "response": {"raiMediaFilteredCount": 1,
            "raiMediaFilteredReasons": ["Unable to show generated videos. Some videos were filtered out. Support codes: 58061214"]}})
        .to_string(),
    ));
    assert_eq!(code, "moderation_blocked");
    assert!(message.contains("Support codes: 58061214"), "{message}");
    let (code, _) = failure(read(
        &json!({"name": name, "done": true, "response": {"raiMediaFilteredCount": "1"}})
            .to_string(),
    ));
    assert_eq!(code, "moderation_blocked");
    let (code, message) = failure(read(
        &json!({"name": name, "done": true,
                "error": {"code": 3, "message": "Generated video is large, an output storage uri is required."}})
        .to_string(),
    ));
    assert_eq!(code, "upstream_error");
    assert!(!message.contains("storage"), "{message}");
    let (code, _) = failure(read(
        &json!({"name": name, "done": true,
                "error": {"code": 3, "message": "The prompt could not be submitted. This prompt contains sensitive words that violate Google's Responsible AI practices. Try rephrasing the prompt. If you think this was an error, send feedback. Support codes: 17301594"}})
        .to_string(),
    ));
    assert_eq!(code, "moderation_blocked");
    let (code, _) = failure(read(
        &json!({"name": name, "done": true,
                "error": {"code": 3, "message": "The prompt violates the safety policy."}})
        .to_string(),
    ));
    assert_eq!(code, "moderation_blocked");
    let (code, _) = failure(read(
        &json!({"name": name, "done": true, "response": {"videos": []}}).to_string(),
    ));
    assert_eq!(code, "upstream_error");
    let (code, _) = failure(read(
        &json!({"name": name, "done": true, "response": {"videos": [{"gcsUri": "https://x/y.mp4"}]}}).to_string(),
    ));
    assert_eq!(code, "upstream_error");
}

#[test]
fn operation_names_become_the_model_path() {
    assert_eq!(
        operation_model_path(
            "projects/123456789/locations/us-central1/publishers/google/models/veo-3.0-generate-001/operations/a1b07c8e-7b5a"
        )
        .as_deref(),
        Some("/projects/123456789/locations/us-central1/publishers/google/models/veo-3.0-generate-001")
    );
    assert_eq!(
        operation_model_path("projects/p:q/locations/l/publishers/google/models/m n/operations/1")
            .as_deref(),
        Some("/projects/p%3Aq/locations/l/publishers/google/models/m%20n")
    );
    for bad in [
        "",
        "models/veo/operations/1",
        "projects/p/locations/l/publishers/google/models/m/operations/",
        "projects/../locations/l/publishers/google/models/m/operations/1",
        "projects/p/locations/l/publishers/google/models/m/operations/1/x",
        "projects/p/regions/l/publishers/google/models/m/operations/1",
    ] {
        assert_eq!(operation_model_path(bad), None, "{bad}");
    }
}

#[test]
fn endpoints_locations_and_storage_urls() {
    assert_eq!(
        endpoint(DEFAULT_BASE_URL, "us-central1"),
        "https://us-central1-aiplatform.googleapis.com"
    );
    assert_eq!(
        endpoint(DEFAULT_BASE_URL, "global"),
        "https://aiplatform.googleapis.com"
    );
    assert_eq!(
        endpoint("http://127.0.0.1:9/", "global"),
        "http://127.0.0.1:9"
    );
    for good in [
        "us-central1",
        "europe-west4",
        "global",
        "northamerica-northeast1",
    ] {
        check_location(good).unwrap();
    }
    for bad in ["", "US", "us-central1.evil.example/x", "a@b", "us-", "-us"] {
        assert!(check_location(bad).is_err(), "{bad}");
    }
    check_project("my-project").unwrap();
    check_project("example.com:my-project").unwrap();
    check_project("123456789").unwrap();
    assert!(check_project("my/project").is_err());
    assert!(check_project("").is_err());
    check_storage_uri("gs://video-bucket/output/").unwrap();
    check_storage_uri("gs://video-bucket").unwrap();
    assert!(check_storage_uri("s3://video-bucket/x").is_err());
    assert!(check_storage_uri("gs://A/x").is_err());
    assert_eq!(
        media_url(
            "https://storage.googleapis.com",
            "gs://bucket-1/out/1 2/sample_0.mp4"
        )
        .as_deref(),
        Some(
            "https://storage.googleapis.com/storage/v1/b/bucket-1/o/out%2F1%202%2Fsample_0.mp4?alt=media"
        )
    );
    assert_eq!(media_url("https://s", "gs://bucket-1/"), None);
    assert_eq!(media_url("https://s", "https://bucket-1/x"), None);
}

#[test]
fn the_built_in_catalog_has_the_documented_models() {
    let all = models();
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "veo-3.1-generate-001",
            "veo-3.1-fast-generate-001",
            "veo-3.1-generate-preview",
            "veo-3.1-fast-generate-preview",
            "veo-3.0-generate-001",
            "veo-3.0-fast-generate-001",
            "veo-2.0-generate-001"
        ]
    );
    let (_, full) = &all[2];
    assert_eq!(full.reference_images, 3);
    assert_eq!(full.reference_image_durations, [8]);
    assert!(full.audio && full.last_frame);
    let (_, veo2) = &all[6];
    assert_eq!(veo2.durations, [5, 6, 7, 8]);
    assert!(!veo2.audio && veo2.last_frame);
    assert_eq!(veo2.resolutions, ["720p"]);
}
