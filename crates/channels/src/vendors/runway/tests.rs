use super::*;
use serde_json::{Value, json};

fn job(model: &str) -> VideoJob {
    VideoJob {
        resolution: None,
        duration_secs: 5,
        seed: Some(42),
        ..VideoJob::test(model, "A cute bunny hopping in a meadow")
    }
}

fn body(request: &RunwayBody) -> Value {
    serde_json::to_value(request).unwrap()
}

#[test]
fn text_to_video_names_its_ratio_in_pixels() {
    let (path, request) = to_vendor(&job("gen4.5"), Inputs::default()).unwrap();
    assert_eq!(path, TEXT_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "gen4.5", "promptText": "A cute bunny hopping in a meadow",
               "ratio": "1280:720", "duration": 5, "seed": 42})
    );
    // Veo on Runway takes no seed; 1080p in portrait.
    let mut veo = job("veo3.1");
    veo.resolution = Some("1080p".into());
    veo.ratio = "9:16".into();
    veo.duration_secs = 8;
    let (path, request) = to_vendor(&veo, Inputs::default()).unwrap();
    assert_eq!(path, TEXT_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "veo3.1", "promptText": "A cute bunny hopping in a meadow",
               "ratio": "1080:1920", "duration": 8})
    );
    // A ratio Runway has no size for at the tier fails before anything is sent.
    let mut odd = job("veo3.1");
    odd.resolution = Some("1080p".into());
    odd.ratio = "1:1".into();
    assert!(to_vendor(&odd, Inputs::default()).is_err());
    assert_eq!(pixels_for("720p", "21:9"), Some("1584:672"));
}

#[test]
fn frames_are_a_prompt_image_and_last_frames_go_only_where_taken() {
    let first = "data:image/png;base64,iVBORw0K".to_owned();
    let last = "https://example.com/last.png".to_owned();
    let (path, request) = to_vendor(
        &job("gen4_turbo"),
        Inputs {
            first: Some(first.clone()),
            ..Inputs::default()
        },
    )
    .unwrap();
    assert_eq!(path, IMAGE_PATH);
    assert_eq!(body(&request)["promptImage"], json!(first));
    let both = Inputs {
        first: Some(first.clone()),
        last: Some(last.clone()),
        ..Inputs::default()
    };
    let (path, request) = to_vendor(&job("veo3.1_fast"), both.clone()).unwrap();
    assert_eq!(path, IMAGE_PATH);
    assert_eq!(
        body(&request)["promptImage"],
        json!([{"uri": first, "position": "first"}, {"uri": last, "position": "last"}])
    );
    let err = to_vendor(&job("gen4_turbo"), both.clone()).unwrap_err();
    assert!(err.contains("no last frame"), "{err}");
    assert!(to_vendor(&job("gen4.5"), both).is_err());
    let err = to_vendor(&job("gen4_turbo"), Inputs::default()).unwrap_err();
    assert!(err.contains("image only"), "{err}");
    let lonely = Inputs {
        last: Some(last),
        ..Inputs::default()
    };
    assert!(to_vendor(&job("veo3.1"), lonely).is_err());
}

#[test]
fn gen4_aleph_edits_one_video_with_an_image_reference() {
    let inputs = Inputs {
        images: vec!["https://example.com/style.png".into()],
        videos: vec!["https://example.com/clip.mp4".into()],
        ..Inputs::default()
    };
    let (path, request) = to_vendor(&job("gen4_aleph"), inputs.clone()).unwrap();
    assert_eq!(path, VIDEO_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "gen4_aleph", "promptText": "A cute bunny hopping in a meadow",
               "videoUri": "https://example.com/clip.mp4",
               "references": [{"type": "image", "uri": "https://example.com/style.png"}],
               "seed": 42})
    );
    // No video, two videos, a frame: refused before anything is sent.
    assert!(to_vendor(&job("gen4_aleph"), Inputs::default()).is_err());
    let mut two = inputs.clone();
    two.videos.push("https://example.com/b.mp4".into());
    assert!(to_vendor(&job("gen4_aleph"), two).is_err());
    let mut framed = inputs.clone();
    framed.first = Some("https://example.com/f.png".into());
    assert!(to_vendor(&job("gen4_aleph"), framed).is_err());
    // References to a generating model, or audio anywhere: refused too.
    assert!(to_vendor(&job("gen4.5"), inputs).is_err());
    let audio = Inputs {
        audio: true,
        ..Inputs::default()
    };
    assert!(to_vendor(&job("veo3.1"), audio).is_err());
}

#[test]
fn submission_answers_classify_by_status() {
    let read = |status: u16, body: &str| {
        read_submission(
            "r",
            StatusCode::from_u16(status).unwrap(),
            &http::HeaderMap::new(),
            body.as_bytes(),
        )
    };
    assert_eq!(
        read(200, r#"{"id":"17f20503-6c24-4c16-946b-35dbbce2af2f"}"#),
        SubmitOutcome::Accepted {
            upstream_id: "17f20503-6c24-4c16-946b-35dbbce2af2f".into()
        }
    );
    for blank in [r#"{"id":""}"#, "{}", ""] {
        assert!(
            matches!(read(200, blank), SubmitOutcome::Ambiguous(_)),
            "{blank}"
        );
    }
    assert!(matches!(
        read(400, r#"{"error":"Validation of body failed"}"#),
        SubmitOutcome::Fatal(_)
    ));
    assert!(matches!(
        read(
            400,
            r#"{"error":"You do not have enough credits to run this task."}"#
        ),
        SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            ..
        }
    ));
    assert!(matches!(
        read(402, r#"{"error":"Payment required"}"#),
        SubmitOutcome::RateLimited { .. }
    ));
    assert!(matches!(
        read(401, r#"{"error":"Invalid API key"}"#),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        read(429, r#"{"error":"Too many requests"}"#),
        SubmitOutcome::RateLimited {
            retry_after: None,
            ..
        }
    ));
    for s in [502, 503, 504] {
        assert!(matches!(read(s, ""), SubmitOutcome::Retry(_)), "{s}");
    }
}

#[test]
fn documented_tasks_map_to_states() {
    let state = |s: &str| from_vendor(&serde_json::from_str::<RunwayTask>(s).unwrap());
    for waiting in ["PENDING", "THROTTLED"] {
        let s =
            format!(r#"{{"id":"t","status":"{waiting}","createdAt":"2024-06-27T19:49:32.334Z"}}"#);
        assert_eq!(state(&s), TaskState::Running { progress: 0 });
    }
    assert_eq!(
        state(r#"{"id":"t","status":"RUNNING","progress":0.42}"#),
        TaskState::Running { progress: 42 }
    );
    assert_eq!(percent(Some(7.0)), 100);
    assert_eq!(percent(Some(-1.0)), 0);
    assert_eq!(percent(None), 0);
    assert_eq!(
        state(
            r#"{"id":"t","status":"SUCCEEDED","output":["https://dnznrvs05pmza.cloudfront.net/a.mp4?_jwt=x"]}"#
        ),
        TaskState::Succeeded {
            url: "https://dnznrvs05pmza.cloudfront.net/a.mp4?_jwt=x".into()
        }
    );
    assert!(matches!(
        state(r#"{"id":"t","status":"SUCCEEDED","output":[]}"#),
        TaskState::Failed { refused: false, .. }
    ));
    for (code, refused) in [
        ("SAFETY.INPUT.TEXT", true),
        ("SAFETY.OUTPUT.VIDEO", true),
        ("INTERNAL.BAD_OUTPUT.CODE01", false),
        ("ASSET.INVALID", false),
    ] {
        let s = format!(r#"{{"id":"t","status":"FAILED","failure":"f","failureCode":"{code}"}}"#);
        assert!(
            matches!(state(&s), TaskState::Failed { refused: r, status: "failed", .. } if r == refused),
            "{code}"
        );
    }
    assert!(matches!(
        state(r#"{"id":"t","status":"CANCELLED"}"#),
        TaskState::Failed {
            status: "cancelled",
            ..
        }
    ));
    assert_eq!(
        state(r#"{"id":"t","status":"ARCHIVED"}"#),
        TaskState::Unknown("ARCHIVED".into())
    );
    // As the engine gets them.
    let refused = poll_answer(
        "r",
        StatusCode::OK,
        br#"{"id":"t","status":"FAILED","failureCode":"SAFETY.INPUT.IMAGE"}"#,
    );
    assert!(matches!(refused, PollOutcome::Failed { ref code, .. } if code == REFUSED_CODE));
    let internal = poll_answer(
        "r",
        StatusCode::OK,
        br#"{"id":"t","status":"FAILED","failureCode":"INTERNAL.BAD_OUTPUT.CODE01"}"#,
    );
    assert!(matches!(internal, PollOutcome::Failed { ref code, .. } if code == "upstream_error"));
    let done = poll_answer(
        "r",
        StatusCode::OK,
        br#"{"id":"t","status":"SUCCEEDED","output":["https://x/v.mp4"]}"#,
    );
    assert!(matches!(
        done,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::NotReported,
            ..
        })
    ));
    assert!(matches!(
        poll_answer("r", StatusCode::NOT_FOUND, br#"{"error":"Task not found"}"#),
        PollOutcome::Failed { .. }
    ));
    assert!(matches!(
        poll_answer("r", StatusCode::TOO_MANY_REQUESTS, b"{}"),
        PollOutcome::Transient(_)
    ));
    assert!(matches!(
        poll_answer("r", StatusCode::OK, b"{}"),
        PollOutcome::Unknown(_)
    ));
}

#[test]
fn the_channel_test_reads_the_organization() {
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes()).verdict
    };
    let org = r#"{"creditBalance":1000,"tier":{"maxMonthlyCreditSpend":10000,"models":{}},"usage":{"models":{}}}"#;
    assert_eq!(check(200, org), CheckVerdict::Ok);
    assert_eq!(
        check(
            200,
            &org.replace("\"creditBalance\":1000", "\"creditBalance\":0")
        ),
        CheckVerdict::Quota
    );
    assert_eq!(
        check(401, r#"{"error":"Invalid API key"}"#),
        CheckVerdict::KeyRefused
    );
    assert_eq!(check(429, "{}"), CheckVerdict::RateLimited);
    assert_eq!(check(200, "{}"), CheckVerdict::Error);
}

#[test]
fn the_catalog_pairs_models_with_what_they_take() {
    let all = catalog();
    let caps = |name: &str| all.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    assert!(
        caps("gen4_turbo")
            .image_only_resolutions
            .contains(&"720p".to_owned())
    );
    assert!(!wire_of("gen4_turbo").text);
    assert!(caps("veo3.1").last_frame && wire_of("veo3.1").last_frame);
    assert!(!caps("gen4.5").last_frame && !wire_of("gen4.5").last_frame);
    // Every ratio the catalog names has a size at each of its tiers.
    for (name, c) in &all {
        for tier in &c.resolutions {
            for ratio in &c.ratios {
                assert!(pixels_for(tier, ratio).is_some(), "{name} {tier} {ratio}");
            }
        }
    }
}
