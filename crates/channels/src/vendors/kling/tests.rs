use super::*;
use serde_json::{Value, json};

fn job() -> VideoJob {
    VideoJob {
        ratio: "1:1".into(),
        resolution: Some("1080p".into()),
        duration_secs: 5,
        ..VideoJob::test("kling-v2-6", "A cute little rabbit wearing glasses")
    }
}

fn body(request: &KlingRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

#[test]
fn text_to_video_is_the_documented_body() {
    let (endpoint, request) = to_vendor(&job(), Images::default(), &[], None).unwrap();
    assert_eq!(endpoint, Endpoint::Text2Video);
    assert_eq!(
        body(&request),
        json!({"model_name": "kling-v2-6", "prompt": "A cute little rabbit wearing glasses",
               "duration": "5", "mode": "pro", "aspect_ratio": "1:1",
               "external_task_id": "video_1"})
    );
    // The duration is a string, whatever the length.
    let mut ten = job();
    ten.duration_secs = 10;
    ten.resolution = Some("720p".into());
    ten.ratio = "adaptive".into();
    let (_, request) =
        to_vendor(&ten, Images::default(), &[], Some("https://r/cb".into())).unwrap();
    let sent = body(&request);
    assert_eq!(sent["duration"], "10");
    assert_eq!(sent["mode"], "std");
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
    assert_eq!(sent["callback_url"], "https://r/cb");
}

#[test]
fn frames_go_to_image_to_video_without_a_ratio() {
    let images = Images {
        first_frame: Some(super::super::media::raw_base64(
            b"\x89PNG first",
            "image/png",
        )),
        last_frame: Some("https://relay.example/files/last.png?sig=1".into()),
        references: vec![],
    };
    let (endpoint, request) = to_vendor(&job(), images, &[], None).unwrap();
    assert_eq!(endpoint, Endpoint::Image2Video);
    let sent = body(&request);
    // Raw base64, never a data: URI.
    assert_eq!(sent["image"], "iVBORyBmaXJzdA==");
    assert_eq!(
        sent["image_tail"],
        "https://relay.example/files/last.png?sig=1"
    );
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
    // A last frame alone is enough for Kling ("image or image_tail").
    let only_last = Images {
        last_frame: Some("https://relay.example/files/last.png?sig=1".into()),
        ..Images::default()
    };
    let (endpoint, request) = to_vendor(&job(), only_last, &[], None).unwrap();
    assert_eq!(endpoint, Endpoint::Image2Video);
    let sent = body(&request);
    assert!(sent.get("image").is_none(), "{sent}");
    assert_eq!(
        sent["image_tail"],
        "https://relay.example/files/last.png?sig=1"
    );
    // Frames and reference images do not mix.
    let mixed = Images {
        last_frame: Some("x".into()),
        references: vec!["y".into()],
        ..Images::default()
    };
    assert!(to_vendor(&job(), mixed, &[], None).is_err());
}

#[test]
fn reference_images_go_as_an_image_list() {
    let images = Images {
        references: vec!["aGVsbG8=".into(), "https://relay.example/b.png".into()],
        ..Images::default()
    };
    let mut multi = job();
    multi.model = "kling-v1-6".into();
    multi.ratio = "16:9".into();
    let (endpoint, request) = to_vendor(&multi, images, &[], None).unwrap();
    assert_eq!(endpoint, Endpoint::MultiImage2Video);
    let sent = body(&request);
    assert_eq!(
        sent["image_list"],
        json!([{"image": "aGVsbG8="}, {"image": "https://relay.example/b.png"}])
    );
    assert_eq!(sent["aspect_ratio"], "16:9");
    let five = Images {
        references: vec!["a".into(); 5],
        ..Images::default()
    };
    let err = to_vendor(&multi, five, &[], None).unwrap_err();
    assert!(err.contains("at most 4"), "{err}");
    // Video and audio references have no field at Kling: refused, not dropped.
    let video = StoredReference {
        role: ReferenceRole::Video,
        blob: "b".into(),
        url: None,
    };
    let err = to_vendor(&multi, Images::default(), &[video], None).unwrap_err();
    assert!(err.contains("video"), "{err}");
}

#[test]
fn the_token_carries_the_documented_claims_and_verifies() {
    let t = token("ak-1", "sk-1", 1_700_000_000).unwrap();
    let header = jsonwebtoken::decode_header(&t).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::HS256);
    assert_eq!(header.typ.as_deref(), Some("JWT"));
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    validation.validate_exp = false;
    validation.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Claims>(
        &t,
        &jsonwebtoken::DecodingKey::from_secret(b"sk-1"),
        &validation,
    )
    .unwrap()
    .claims;
    assert_eq!(
        claims,
        Claims {
            iss: "ak-1".into(),
            exp: 1_700_001_800,
            nbf: 1_699_999_995
        }
    );
    // Another secret does not verify it.
    assert!(
        jsonwebtoken::decode::<Claims>(
            &t,
            &jsonwebtoken::DecodingKey::from_secret(b"sk-2"),
            &validation
        )
        .is_err()
    );
}

/// The documented submit answer.
const SUBMITTED: &str = r#"{"code":0,"message":"SUCCEED","request_id":"9984d27b-a408-4073-ae28-17ca6a13622d",
    "data":{"task_id":"786329374510137429","task_info":{"external_task_id":""},
    "task_status":"submitted","created_at":1722769557708,"updated_at":1722769557708}}"#;

#[test]
fn submit_answers_classify_by_code() {
    let ok = submit_outcome(
        "k",
        Endpoint::Image2Video,
        StatusCode::OK,
        SUBMITTED.as_bytes(),
    );
    assert_eq!(
        ok,
        SubmitOutcome::Accepted {
            upstream_id: "image2video/786329374510137429".into()
        }
    );
    assert_eq!(
        split_upstream_id("image2video/786329374510137429"),
        Some((Endpoint::Image2Video, "786329374510137429"))
    );
    assert_eq!(split_upstream_id("video/1"), None);
    assert_eq!(split_upstream_id("text2video/"), None);
    let err = |status: u16, code: i64| {
        let body = json!({"code": code, "message": "m", "request_id": "r"}).to_string();
        submit_outcome(
            "k",
            Endpoint::Text2Video,
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
        )
    };
    // Keys refused, IP not allowed, model not open to the account: another channel may.
    for (status, code) in [
        (401, 1000),
        (401, 1002),
        (403, 1103),
        (429, 1304),
        (500, 5000),
    ] {
        assert!(
            matches!(err(status, code), SubmitOutcome::Retry(_)),
            "{code}"
        );
    }
    // Rate and concurrency limits rest the channel; a spent balance rests it longer.
    for code in [1302, 1303] {
        assert!(matches!(
            err(429, code),
            SubmitOutcome::RateLimited {
                retry_after: None,
                ..
            }
        ));
    }
    assert!(matches!(
        err(429, 1102),
        SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            ..
        }
    ));
    // The request itself, or its content: no channel would take it.
    for code in [1201, 1301] {
        assert!(matches!(err(400, code), SubmitOutcome::Fatal(_)), "{code}");
    }
    let refused = json!({"code": 1301, "message": "Trigger the content security policy of the platform", "request_id": "r"});
    assert!(submit_refused(refused.to_string().as_bytes()));
    assert!(!submit_refused(br#"{"code":1201,"message":"m"}"#));
    // No JSON at all: by HTTP status.
    let plain = |status: StatusCode| submit_outcome("k", Endpoint::Text2Video, status, b"<html>");
    assert!(matches!(
        plain(StatusCode::BAD_GATEWAY),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        plain(StatusCode::REQUEST_TIMEOUT),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        plain(StatusCode::TOO_MANY_REQUESTS),
        SubmitOutcome::RateLimited { .. }
    ));
    assert!(matches!(
        plain(StatusCode::BAD_REQUEST),
        SubmitOutcome::Fatal(_)
    ));
    // A success without a task id: Kling may have made a task the relay cannot follow,
    // so it is never sent again.
    for answer in [
        &br#"{"code":0,"message":"SUCCEED","request_id":"r"}"#[..],
        br#"{"code":0,"data":{"task_id":""}}"#,
        b"<html>ok</html>",
    ] {
        assert!(matches!(
            submit_outcome("k", Endpoint::Text2Video, StatusCode::OK, answer),
            SubmitOutcome::Ambiguous(_)
        ));
    }
}

#[test]
fn documented_poll_answers_map_to_states() {
    let poll = |json: &str| poll_answer("k", StatusCode::OK, json.as_bytes());
    let processing = r#"{"code":0,"message":"SUCCEED","request_id":"x","data":{"task_id":"786329374510137429",
        "task_status":"processing","task_status_msg":"","task_info":{"external_task_id":""},
        "created_at":1722769557708,"updated_at":1722769560123}}"#;
    assert_eq!(poll(processing), Ok(TaskState::Running { progress: 50 }));
    let submitted = processing.replace("\"processing\"", "\"submitted\"");
    assert_eq!(poll(&submitted), Ok(TaskState::Running { progress: 0 }));
    let succeed = r#"{"code":0,"message":"SUCCEED","request_id":"x","data":{"task_id":"786329374510137429",
        "task_status":"succeed","task_status_msg":"","task_info":{"external_task_id":""},
        "task_result":{"videos":[{"id":"b6c8","url":"https://v1-kling.klingai.com/kcdn/video.mp4",
        "watermark_url":"","duration":"5.1"}]},"watermark_info":{"enabled":false},
        "final_unit_deduction":"1","created_at":1722769557708,"updated_at":1722769642311}}"#;
    assert_eq!(
        poll(succeed),
        Ok(TaskState::Succeeded {
            url: "https://v1-kling.klingai.com/kcdn/video.mp4".into(),
            duration_secs: Some(5.1)
        })
    );
    let failed = r#"{"code":0,"message":"SUCCEED","request_id":"x","data":{"task_id":"786329374510137429",
        "task_status":"failed","task_status_msg":"Failure to pass the risk control system",
        "task_info":{"external_task_id":""},"created_at":1,"updated_at":2}}"#;
    assert!(matches!(
        poll(failed),
        Ok(TaskState::Failed { refused: true, .. })
    ));
    let plain = failed.replace("Failure to pass the risk control system", "internal error");
    assert!(matches!(
        poll(&plain),
        Ok(TaskState::Failed { refused: false, .. })
    ));
    let odd = processing.replace("\"processing\"", "\"paused\"");
    assert_eq!(poll(&odd), Ok(TaskState::Unknown("paused".into())));
    // An unreadable duration is no duration, never zero.
    let no_len = succeed.replace("\"5.1\"", "\"soon\"");
    assert!(matches!(
        poll(&no_len),
        Ok(TaskState::Succeeded {
            duration_secs: None,
            ..
        })
    ));
    // Errors: a lost task fails, anything else is tried again.
    let lost =
        br#"{"code":1203,"message":"The requested resource does not exist","request_id":"r"}"#;
    assert!(matches!(
        poll_answer("k", StatusCode::NOT_FOUND, lost),
        Err(PollError::Gone)
    ));
    let busy = br#"{"code":5001,"message":"maintenance","request_id":"r"}"#;
    assert!(matches!(
        poll_answer("k", StatusCode::SERVICE_UNAVAILABLE, busy),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(
        poll_answer("k", StatusCode::OK, b"{}"),
        Err(PollError::Unreadable(_))
    ));
}

#[test]
fn outcomes_refund_refusals_and_bill_the_reported_length() {
    let done = outcome(
        "k",
        TaskState::Succeeded {
            url: "https://cdn/v.mp4".into(),
            duration_secs: Some(5.1),
        },
    );
    let PollOutcome::Succeeded(files) = done else {
        panic!("{done:?}")
    };
    assert_eq!(files.video, ResultSource::Url("https://cdn/v.mp4".into()));
    assert_eq!(
        files.usage,
        VendorUsage::Made {
            seconds: Some(5.1),
            resolution: None
        }
    );
    let unread = outcome(
        "k",
        TaskState::Succeeded {
            url: "https://cdn/v.mp4".into(),
            duration_secs: None,
        },
    );
    assert!(matches!(
        unread,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Unreadable(_),
            ..
        })
    ));
    let refused = outcome(
        "k",
        TaskState::Failed {
            refused: true,
            message: "risk control".into(),
        },
    );
    assert!(matches!(refused, PollOutcome::Failed { code, .. } if code == REFUSED_CODE));
    let failed = outcome(
        "k",
        TaskState::Failed {
            refused: false,
            message: "x".into(),
        },
    );
    assert!(matches!(failed, PollOutcome::Failed { code, .. } if code == "upstream_error"));
}

#[test]
fn a_channel_test_reads_the_accounts_answer() {
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes()).verdict
    };
    assert_eq!(
        check(
            200,
            r#"{"code":0,"message":"string","request_id":"string","data":{"code":0,"msg":"string","resource_pack_subscribe_infos":[]}}"#
        ),
        CheckVerdict::Ok
    );
    assert_eq!(
        check(401, r#"{"code":1002,"message":"Authorization is invalid"}"#),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(429, r#"{"code":1102,"message":"Resource pack depleted"}"#),
        CheckVerdict::Quota
    );
    assert_eq!(
        check(429, r#"{"code":1302,"message":"Too many requests"}"#),
        CheckVerdict::RateLimited
    );
    assert_eq!(check(502, "<html>"), CheckVerdict::Error);
}

#[test]
fn the_catalog_names_each_documented_model_once() {
    let models = catalog();
    let names: std::collections::BTreeSet<&str> = models.iter().map(|(m, _)| *m).collect();
    assert_eq!(names.len(), models.len());
    let v3 = &models.iter().find(|(m, _)| *m == "kling-v3").unwrap().1;
    assert_eq!(v3.durations, (3..=15).collect::<Vec<u32>>());
    let multi = &models.iter().find(|(m, _)| *m == "kling-v1-6").unwrap().1;
    assert_eq!(multi.reference_images, 4);
    // The capability map: a last frame in pro mode (1080p) only, on kling-v1 at 5 s only.
    let caps = |name: &str| models.iter().find(|(m, _)| *m == name).unwrap().1.clone();
    for name in [
        "kling-v1-5",
        "kling-v1-6",
        "kling-v2-1",
        "kling-v2-5-turbo",
        "kling-v2-6",
    ] {
        let c = caps(name);
        assert!(c.last_frame, "{name}");
        assert_eq!(c.last_frame_resolutions, ["1080p"], "{name}");
    }
    assert_eq!(caps("kling-v1").last_frame_durations, [5]);
    assert!(caps("kling-v3").last_frame_resolutions.is_empty());
    assert!(!caps("kling-v2-master").last_frame);
}
