use super::*;
use crate::video::job::ReferenceRole;
use serde_json::{Value, json};

fn job(model: &str) -> VideoJob {
    VideoJob {
        width: 832,
        height: 480,
        resolution: Some("480p".into()),
        duration_secs: 10,
        seed: Some(12345),
        ..VideoJob::test(model, "A kitten running in the moonlight")
    }
}

fn body(request: &WanRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

#[test]
fn text_to_video_takes_a_size_with_an_asterisk() {
    let mut j = job("wan2.5-t2v-preview");
    j.audio_url = Some("https://example.com/a.mp3".into());
    let (path, request) = to_vendor(&j, Inputs::default()).unwrap();
    assert_eq!(path, SYNTHESIS_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "wan2.5-t2v-preview",
               "input": {"prompt": "A kitten running in the moonlight",
                         "audio_url": "https://example.com/a.mp3"},
               "parameters": {"size": "832*480", "duration": 10, "seed": 12345}})
    );
    // A first-format size the table has, without a tier.
    let mut first = job("wan2.2-t2v-plus");
    first.resolution = None;
    first.width = 1920;
    first.height = 1080;
    first.duration_secs = 5;
    let (_, request) = to_vendor(&first, Inputs::default()).unwrap();
    assert_eq!(request.parameters.size.as_deref(), Some("1920*1080"));
    let mut odd = job("wan2.2-t2v-plus");
    odd.ratio = "21:9".into();
    assert!(to_vendor(&odd, Inputs::default()).is_err());
}

#[test]
fn a_first_frame_is_img_url_and_a_tier() {
    let media = Inputs {
        first_frame: Some(super::super::media::data_uri(b"\x89PNG cat", "image/png")),
        ..Inputs::default()
    };
    let mut j = job("wan2.5-i2v-preview");
    j.resolution = Some("720p".into());
    let (path, request) = to_vendor(&j, media).unwrap();
    assert_eq!(path, SYNTHESIS_PATH);
    let sent = body(&request);
    assert_eq!(
        sent["input"]["img_url"],
        "data:image/png;base64,iVBORyBjYXQ="
    );
    assert_eq!(sent["parameters"]["resolution"], "720P");
    assert!(sent["parameters"].get("size").is_none(), "{sent}");
}

#[test]
fn first_and_last_frames_go_to_kf2v_on_its_own_path() {
    let media = Inputs {
        first_frame: Some("https://example.com/first.png".into()),
        last_frame: Some("https://example.com/last.png".into()),
        references: vec![],
    };
    let mut j = job("wan2.2-kf2v-flash");
    j.resolution = Some("720p".into());
    j.duration_secs = 5;
    j.seed = None;
    let (path, request) = to_vendor(&j, media.clone()).unwrap();
    assert_eq!(path, KF2V_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "wan2.2-kf2v-flash",
               "input": {"prompt": "A kitten running in the moonlight",
                         "first_frame_url": "https://example.com/first.png",
                         "last_frame_url": "https://example.com/last.png"},
               "parameters": {"resolution": "720P", "duration": 5}})
    );
    // A last frame to a model that takes none: refused, not dropped.
    let err = to_vendor(&job("wan2.5-i2v-preview"), media).unwrap_err();
    assert!(err.contains("kf2v"), "{err}");
}

#[test]
fn wan_2_7_names_its_media() {
    assert!(is_media_model("wan2.7-i2v"));
    assert!(is_media_model("wan3.0-video"));
    assert!(!is_media_model("wan2.6-t2v"));
    assert!(!is_media_model("wanx2.1-t2v-turbo"));
    let media = Inputs {
        first_frame: Some("https://example.com/a.png".into()),
        last_frame: Some("https://example.com/b.png".into()),
        references: vec![(ReferenceRole::Audio, "https://example.com/a.mp3".into())],
    };
    let mut j = job("wan2.7-i2v");
    j.resolution = Some("720p".into());
    j.seed = None;
    let (path, request) = to_vendor(&j, media).unwrap();
    assert_eq!(path, SYNTHESIS_PATH);
    assert_eq!(
        body(&request),
        json!({"model": "wan2.7-i2v",
               "input": {"prompt": "A kitten running in the moonlight", "media": [
                   {"type": "first_frame", "url": "https://example.com/a.png"},
                   {"type": "last_frame", "url": "https://example.com/b.png"},
                   {"type": "driving_audio", "url": "https://example.com/a.mp3"}]},
               "parameters": {"resolution": "720P", "duration": 10}})
    );
    let (_, t2v) = to_vendor(&job("wan2.7-t2v"), Inputs::default()).unwrap();
    let sent = body(&t2v);
    assert_eq!(sent["parameters"]["ratio"], "16:9");
    assert_eq!(sent["parameters"]["resolution"], "480P");
    assert!(sent["input"].get("media").is_none(), "{sent}");
    // Reference images need the newer protocol.
    let refs = Inputs {
        references: vec![(ReferenceRole::Image, "https://example.com/r.png".into())],
        ..Inputs::default()
    };
    assert!(to_vendor(&job("wan2.6-t2v"), refs.clone()).is_err());
    let (_, r2v) = to_vendor(&job("wan2.7-r2v"), refs).unwrap();
    assert_eq!(
        body(&r2v)["input"]["media"],
        json!([{"type": "reference_image", "url": "https://example.com/r.png"}])
    );
}

#[test]
fn submit_answers_classify_by_code_name() {
    let ok = br#"{"output":{"task_status":"PENDING","task_id":"0385dc79-5ff8-4d82-bcb6-xxxxxx"},"request_id":"4909100c"}"#;
    assert_eq!(
        submit_outcome("w", StatusCode::OK, ok),
        SubmitOutcome::Accepted {
            upstream_id: "0385dc79-5ff8-4d82-bcb6-xxxxxx".into()
        }
    );
    let err = |status: u16, code: &str, message: &str| {
        let body = json!({"code": code, "message": message, "request_id": "r"});
        submit_outcome(
            "w",
            StatusCode::from_u16(status).unwrap(),
            body.to_string().as_bytes(),
        )
    };
    assert!(matches!(
        err(401, "InvalidApiKey", "Invalid API-key provided."),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        err(400, "InvalidParameter", "Model not exist."),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        err(403, "AccessDenied.Unpurchased", "m"),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        err(429, "Throttling.RateQuota", "Requests rate limit exceeded"),
        SubmitOutcome::RateLimited {
            retry_after: None,
            ..
        }
    ));
    for (status, code) in [(400, "Arrearage"), (429, "Throttling.AllocationQuota")] {
        assert!(
            matches!(
                err(status, code, "m"),
                SubmitOutcome::RateLimited {
                    retry_after: Some(BALANCE_REST),
                    ..
                }
            ),
            "{code}"
        );
    }
    assert!(matches!(
        err(400, "InvalidParameter", "duration"),
        SubmitOutcome::Fatal(_)
    ));
    assert!(matches!(
        err(
            400,
            "DataInspectionFailed",
            "Input data may contain inappropriate content."
        ),
        SubmitOutcome::Fatal(_)
    ));
    assert!(submit_refused(
        br#"{"code":"DataInspectionFailed","message":"Input data may contain inappropriate content."}"#
    ));
    // The compatible-mode envelope, lower case.
    let wrapped = br#"{"error":{"code":"invalid_api_key","message":"Incorrect API key"}}"#;
    assert!(matches!(
        submit_outcome("w", StatusCode::UNAUTHORIZED, wrapped),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        submit_outcome("w", StatusCode::INTERNAL_SERVER_ERROR, b"oops"),
        SubmitOutcome::Retry(_)
    ));
    // A success without a task id: DashScope may have made a task the relay cannot
    // follow, so it is never sent again; an error code inside it is still a refusal.
    for answer in [
        &br#"{"output":{"task_status":"PENDING","task_id":""},"request_id":"r"}"#[..],
        br#"{"request_id":"r"}"#,
        b"",
    ] {
        assert!(matches!(
            submit_outcome("w", StatusCode::OK, answer),
            SubmitOutcome::Ambiguous(_)
        ));
    }
    assert!(matches!(
        submit_outcome(
            "w",
            StatusCode::OK,
            br#"{"code":"Throttling","message":"Requests throttling triggered"}"#
        ),
        SubmitOutcome::RateLimited { .. }
    ));
}

#[test]
fn documented_queries_map_to_states() {
    let poll = |s: &str| poll_answer("w", StatusCode::OK, s.as_bytes());
    let running = r#"{"request_id":"e5d7","output":{"task_id":"86ec","task_status":"RUNNING",
        "submit_time":"2025-09-29 14:18:52.331","scheduled_time":"2025-09-29 14:18:59.290"}}"#;
    assert_eq!(poll(running), Ok(TaskState::Running { progress: 50 }));
    let new_usage = r#"{"request_id":"caa6","output":{"task_id":"eff1","task_status":"SUCCEEDED",
        "video_url":"https://dashscope-result-sh.oss-accelerate.aliyuncs.com/xxx.mp4?Expires=1"},
        "usage":{"duration":10,"output_video_duration":10,"video_count":1,"ratio":"16:9","SR":720}}"#;
    assert_eq!(
        poll(new_usage),
        Ok(TaskState::Succeeded {
            url: "https://dashscope-result-sh.oss-accelerate.aliyuncs.com/xxx.mp4?Expires=1".into(),
            seconds: Some(10.0),
            tier: Some("720p".into()),
            usage_read: true,
        })
    );
    let legacy = r#"{"request_id":"4c87","output":{"task_id":"4363","task_status":"SUCCEEDED",
        "video_url":"https://dashscope-result-wlcb.oss-cn-wulanchabu.aliyuncs.com/1d/xxx.mp4?Expires=2"},
        "usage":{"video_duration":5,"video_count":1,"SR":1080}}"#;
    assert!(matches!(
        poll(legacy),
        Ok(TaskState::Succeeded { seconds: Some(s), tier: Some(t), .. }) if s == 5.0 && t == "1080p"
    ));
    let no_usage =
        r#"{"output":{"task_id":"1","task_status":"SUCCEEDED","video_url":"https://x/v.mp4"}}"#;
    assert!(matches!(
        poll(no_usage),
        Ok(TaskState::Succeeded {
            usage_read: false,
            ..
        })
    ));
    let refused = r#"{"output":{"task_id":"1","task_status":"FAILED","code":"DataInspectionFailed",
        "message":"Output data may contain inappropriate content."}}"#;
    assert!(matches!(
        poll(refused),
        Ok(TaskState::Failed { refused: true, .. })
    ));
    let late = r#"{"output":{"task_id":"1","task_status":"FAILED","code":"InvalidParameter",
        "message":"duration customization is not supported"}}"#;
    assert!(matches!(
        poll(late),
        Ok(TaskState::Failed {
            refused: false,
            status: "failed",
            ..
        })
    ));
    for (status, word) in [("CANCELED", "cancelled"), ("UNKNOWN", "expired")] {
        let body = format!(r#"{{"output":{{"task_id":"1","task_status":"{status}"}}}}"#);
        assert!(
            matches!(poll(&body), Ok(TaskState::Failed { status: s, .. }) if s == word),
            "{status}"
        );
    }
    let odd = running.replace("RUNNING", "SUSPENDED");
    assert_eq!(poll(&odd), Ok(TaskState::Unknown("SUSPENDED".into())));
    assert!(matches!(
        poll_answer("w", StatusCode::TOO_MANY_REQUESTS, b"{}"),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(poll("{}"), Err(PollError::Unreadable(_))));
}

#[test]
fn usage_is_billed_and_the_channel_test_reads_the_key() {
    let done = outcome(
        "w",
        TaskState::Succeeded {
            url: "https://x/v.mp4".into(),
            seconds: Some(5.0),
            tier: Some("720p".into()),
            usage_read: true,
        },
    );
    assert!(matches!(
        done,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Made { seconds: Some(s), resolution: Some(ref r) },
            ..
        }) if s == 5.0 && r == "720p"
    ));
    let unread = outcome(
        "w",
        TaskState::Succeeded {
            url: "https://x/v.mp4".into(),
            seconds: None,
            tier: None,
            usage_read: false,
        },
    );
    assert!(matches!(
        unread,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Unreadable(_),
            ..
        })
    ));
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes()).verdict
    };
    assert_eq!(
        check(
            200,
            r#"{"request_id":"r","output":{"task_id":"00000000-0000-0000-0000-000000000000","task_status":"UNKNOWN"}}"#
        ),
        CheckVerdict::Ok
    );
    assert_eq!(
        check(
            401,
            r#"{"code":"InvalidApiKey","message":"Invalid API-key provided."}"#
        ),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(400, r#"{"code":"Arrearage","message":"Access denied"}"#),
        CheckVerdict::Quota
    );
    assert_eq!(
        check(
            429,
            r#"{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded"}"#
        ),
        CheckVerdict::RateLimited
    );
}
