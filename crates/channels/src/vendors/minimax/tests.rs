use super::*;
use serde_json::{Value, json};

fn job() -> VideoJob {
    VideoJob {
        width: 1920,
        height: 1080,
        resolution: Some("1080p".into()),
        duration_secs: 6,
        ..VideoJob::test(
            "MiniMax-Hailuo-2.3",
            "A stylish woman walks down a Tokyo street",
        )
    }
}

fn body(request: &MinimaxRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

#[test]
fn text_to_video_is_the_documented_body() {
    let request = to_vendor(
        &job(),
        Images::default(),
        &[],
        Some("https://relay.example/callbacks/minimax/m?task=video_1&token=t".into()),
    )
    .unwrap();
    assert_eq!(
        body(&request),
        json!({"model": "MiniMax-Hailuo-2.3",
               "prompt": "A stylish woman walks down a Tokyo street",
               "duration": 6, "resolution": "1080P",
               "callback_url": "https://relay.example/callbacks/minimax/m?task=video_1&token=t"})
    );
}

#[test]
fn a_first_format_size_goes_as_the_smallest_tier_at_least_as_large() {
    let sized = |model: &str, w: u32, h: u32| VideoJob {
        model: model.into(),
        width: w,
        height: h,
        resolution: None,
        ..job()
    };
    let tier =
        |job: &VideoJob, images: Images| to_vendor(job, images, &[], None).map(|r| r.resolution);
    let text = Images::default;
    let first = || Images {
        first_frame: Some("https://example.com/a.jpg".into()),
        ..Images::default()
    };
    let both = || Images {
        last_frame: Some("https://example.com/b.jpg".into()),
        ..first()
    };
    let hailuo = "MiniMax-Hailuo-2.3";
    assert_eq!(
        tier(&sized(hailuo, 1366, 768), text()),
        Ok(Some("768P".into()))
    );
    assert_eq!(
        tier(&sized(hailuo, 1280, 720), text()),
        Ok(Some("768P".into()))
    );
    assert_eq!(
        tier(&sized(hailuo, 1080, 1920), text()),
        Ok(Some("1080P".into()))
    );
    let err = tier(&sized(hailuo, 2560, 1440), text()).unwrap_err();
    assert_eq!(
        err,
        "size 2560x1440: MiniMax-Hailuo-2.3 makes 1080p at most, no larger"
    );
    // 512P from a first frame only, and not with a last frame.
    let two = "MiniMax-Hailuo-02";
    assert_eq!(
        tier(&sized(two, 640, 360), first()),
        Ok(Some("512P".into()))
    );
    assert_eq!(tier(&sized(two, 640, 360), text()), Ok(Some("768P".into())));
    assert_eq!(tier(&sized(two, 640, 360), both()), Ok(Some("768P".into())));
    // The 01 series makes 720P only.
    assert_eq!(
        tier(&sized("T2V-01", 1280, 720), text()),
        Ok(Some("720P".into()))
    );
    assert!(tier(&sized("T2V-01", 1920, 1080), text()).is_err());
    // A model the catalog does not know: Hailuo's tiers.
    assert_eq!(
        tier(&sized("MiniMax-Hailuo-9", 1280, 720), text()),
        Ok(Some("768P".into()))
    );
    // The second format's tier goes as it is.
    let mut asked = sized(hailuo, 1366, 768);
    asked.resolution = Some("1080p".into());
    assert_eq!(tier(&asked, text()), Ok(Some("1080P".into())));
}

#[test]
fn frames_and_a_subject_go_as_data_uris_or_urls() {
    let images = Images {
        first_frame: Some(super::super::media::data_uri(
            b"\xFF\xD8\xFFjpeg",
            "image/jpeg",
        )),
        last_frame: Some("https://example.com/end.jpg".into()),
        references: vec![],
    };
    let mut two = job();
    two.model = "MiniMax-Hailuo-02".into();
    two.resolution = Some("768p".into());
    let sent = body(&to_vendor(&two, images, &[], None).unwrap());
    assert_eq!(
        sent["first_frame_image"],
        "data:image/jpeg;base64,/9j/anBlZw=="
    );
    assert_eq!(sent["last_frame_image"], "https://example.com/end.jpg");
    assert_eq!(sent["resolution"], "768P");
    assert_eq!(sent["duration"], 6);

    let subject = Images {
        references: vec!["https://cdn.example/face.jpg".into()],
        ..Images::default()
    };
    let mut s2v = job();
    s2v.model = "S2V-01".into();
    // A first-format size: S2V-01 makes 720P.
    s2v.resolution = None;
    (s2v.width, s2v.height) = (1280, 720);
    let sent = body(&to_vendor(&s2v, subject, &[], None).unwrap());
    assert_eq!(
        sent["subject_reference"],
        json!([{"type": "character", "image": ["https://cdn.example/face.jpg"]}])
    );
    assert_eq!(sent["resolution"], "720P");
    let two_refs = Images {
        references: vec!["a".into(), "b".into()],
        ..Images::default()
    };
    assert!(to_vendor(&s2v, two_refs, &[], None).is_err());
    let audio = StoredReference {
        role: ReferenceRole::Audio,
        blob: "b".into(),
        url: None,
    };
    let err = to_vendor(&s2v, Images::default(), &[audio], None).unwrap_err();
    assert!(err.contains("audio"), "{err}");
}

#[test]
fn submit_answers_classify_by_base_resp_even_in_a_200() {
    let ok =
        br#"{"task_id":"106916112212032","base_resp":{"status_code":0,"status_msg":"success"}}"#;
    assert_eq!(
        submit_outcome("m", StatusCode::OK, ok),
        SubmitOutcome::Accepted {
            upstream_id: "106916112212032".into()
        }
    );
    let err = |code: i64| {
        let body = json!({"task_id": "", "base_resp": {"status_code": code, "status_msg": "m"}});
        submit_outcome("m", StatusCode::OK, body.to_string().as_bytes())
    };
    for code in [1004, 2049, 1000, 1024] {
        assert!(matches!(err(code), SubmitOutcome::Retry(_)), "{code}");
    }
    for code in [1002, 1039, 2045] {
        assert!(
            matches!(
                err(code),
                SubmitOutcome::RateLimited {
                    retry_after: None,
                    ..
                }
            ),
            "{code}"
        );
    }
    assert!(matches!(
        err(1008),
        SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            ..
        }
    ));
    for code in [2013, 1026, 1027] {
        assert!(matches!(err(code), SubmitOutcome::Fatal(_)), "{code}");
    }
    assert!(submit_refused(
        br#"{"task_id":"","base_resp":{"status_code":1026,"status_msg":"input new_sensitive"}}"#
    ));
    // A success without a task id is no acceptance, and no refusal either: MiniMax may
    // have made a task the relay cannot follow.
    for answer in [
        &br#"{"task_id":"","base_resp":{"status_code":0}}"#[..],
        br#"{"base_resp":{"status_code":0,"status_msg":"success"}}"#,
        b"<html>ok</html>",
    ] {
        assert!(matches!(
            submit_outcome("m", StatusCode::OK, answer),
            SubmitOutcome::Ambiguous(_)
        ));
    }
    // HTTP statuses without a base_resp.
    assert!(matches!(
        submit_outcome("m", StatusCode::TOO_MANY_REQUESTS, b""),
        SubmitOutcome::RateLimited { .. }
    ));
    assert!(matches!(
        submit_outcome("m", StatusCode::UNAUTHORIZED, b""),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        submit_outcome("m", StatusCode::BAD_GATEWAY, b"<html>"),
        SubmitOutcome::Retry(_)
    ));
}

#[test]
fn documented_queries_map_to_states() {
    let poll = |json: &str| poll_answer("m", StatusCode::OK, json.as_bytes());
    for (status, progress) in [("Preparing", 0), ("Queueing", 0), ("Processing", 50)] {
        let body = format!(
            r#"{{"task_id":"106916112212032","status":"{status}","file_id":"","base_resp":{{"status_code":0,"status_msg":"success"}}}}"#
        );
        assert_eq!(poll(&body), Ok(TaskState::Running { progress }));
    }
    let success = r#"{"task_id":"176843862716480","status":"Success","file_id":"176844028768320",
        "video_width":1920,"video_height":1080,"base_resp":{"status_code":0,"status_msg":"success"}}"#;
    assert_eq!(
        poll(success),
        Ok(TaskState::Succeeded {
            file_id: "176844028768320".into()
        })
    );
    // A callback's lower case.
    let lower = success.replace("\"Success\"", "\"success\"");
    assert!(matches!(poll(&lower), Ok(TaskState::Succeeded { .. })));
    let refused = r#"{"task_id":"1","status":"Fail","file_id":"","base_resp":{"status_code":1027,"status_msg":"output new_sensitive"}}"#;
    assert!(matches!(
        poll(refused),
        Ok(TaskState::Failed { refused: true, .. })
    ));
    let failed = r#"{"task_id":"1","status":"Fail","file_id":"","base_resp":{"status_code":0,"status_msg":"success"}}"#;
    assert!(matches!(
        poll(failed),
        Ok(TaskState::Failed { refused: false, .. })
    ));
    let odd = success.replace("\"Success\"", "\"Paused\"");
    assert_eq!(poll(&odd), Ok(TaskState::Unknown("paused".into())));
    // A rate limit on the query itself, in a 200: the task is as it was.
    let limited = r#"{"base_resp":{"status_code":1002,"status_msg":"rate limit"}}"#;
    assert!(matches!(poll(limited), Err(PollError::Transient(_))));
    assert!(matches!(poll("[]"), Err(PollError::Unreadable(_))));
}

#[test]
fn a_retrieved_file_gives_its_download_url() {
    let file = br#"{"file":{"file_id":176844028768320,"bytes":5896337,"created_at":1700469398,
        "filename":"output_aigc.mp4","purpose":"video_generation",
        "download_url":"https://video-product.cdn.minimax.io/inference_output/video/output.mp4"},
        "base_resp":{"status_code":0,"status_msg":"success"}}"#;
    assert_eq!(
        retrieve_answer("m", StatusCode::OK, file),
        Ok("https://video-product.cdn.minimax.io/inference_output/video/output.mp4".into())
    );
    let limited = br#"{"file":null,"base_resp":{"status_code":1002,"status_msg":"rate limit"}}"#;
    assert!(matches!(
        retrieve_answer("m", StatusCode::OK, limited),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(
        retrieve_answer("m", StatusCode::OK, br#"{"base_resp":{"status_code":0}}"#),
        Err(PollError::Unreadable(_))
    ));
}

#[test]
fn a_finished_task_is_its_download_url_settled_as_asked() {
    let done = outcome(
        "m",
        TaskState::Succeeded {
            file_id: "1".into(),
        },
        Some("https://cdn/v.mp4".into()),
    );
    assert_eq!(
        done,
        PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url("https://cdn/v.mp4".into()),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: VendorUsage::NotReported,
        })
    );
    let refused = outcome(
        "m",
        TaskState::Failed {
            refused: true,
            message: "1027".into(),
        },
        None,
    );
    assert!(matches!(refused, PollOutcome::Failed { code, .. } if code == REFUSED_CODE));
    let check = |body: &str| check_answer(StatusCode::OK, body.as_bytes()).verdict;
    assert_eq!(
        check(r#"{"files":[],"base_resp":{"status_code":0,"status_msg":"success"}}"#),
        CheckVerdict::Ok
    );
    assert_eq!(
        check(r#"{"base_resp":{"status_code":2049,"status_msg":"invalid api key"}}"#),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(r#"{"base_resp":{"status_code":1008,"status_msg":"insufficient balance"}}"#),
        CheckVerdict::Quota
    );
    assert_eq!(
        check(r#"{"base_resp":{"status_code":1002,"status_msg":"rate limit exceeded"}}"#),
        CheckVerdict::RateLimited
    );
    let names: std::collections::BTreeSet<&str> = catalog().iter().map(|(m, _)| *m).collect();
    assert_eq!(names.len(), 9);
    // 512P from a first frame only, and not with a last frame.
    let two = catalog()
        .into_iter()
        .find(|(m, _)| *m == "MiniMax-Hailuo-02")
        .unwrap()
        .1;
    assert_eq!(two.image_only_resolutions, ["512p"]);
    assert_eq!(two.last_frame_resolutions, ["768p", "1080p"]);
}
