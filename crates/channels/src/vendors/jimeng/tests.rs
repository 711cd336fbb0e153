use super::*;
use crate::video::job::ReferenceRole;
use serde_json::{Value, json};

/// Volcengine's documented signing example (docs 6369/67270): `GET /` of IAM's
/// `ListUsers`, an empty body, at 2020-12-30T08:18:05Z.
#[test]
fn the_documented_signing_example_signs_the_same() {
    let creds = Credentials {
        access_key: "AKLTMjI2ODVlYzI3ZGY1NGU4ZjhjYWRjMTlmNTM5OTZkYzE".into(),
        secret_key: "TnpCak5XWXpZV1U0WkRaaE5ERmxaR0ZpTmpjeVkyUXlZek0wTWpJMU1qWQ==".into(),
        region: "cn-north-1".into(),
        service: "iam".into(),
    };
    let query = [
        ("Version", "2018-01-01"),
        ("Offset", "0"),
        ("Action", "ListUsers"),
        ("Limit", "10"),
    ];
    let req = Unsigned {
        method: "GET",
        host: "iam.volcengineapi.com",
        path: "/",
        query: &query,
        content_type: "application/x-www-form-urlencoded; charset=utf-8",
        body: b"",
        x_date: &x_date(1_609_316_285),
    };
    assert_eq!(req.x_date, "20201230T081805Z");
    assert_eq!(
        canonical_query(&query),
        "Action=ListUsers&Limit=10&Offset=0&Version=2018-01-01"
    );
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert_eq!(
        canonical_request(&req, empty),
        format!(
            "GET\n/\nAction=ListUsers&Limit=10&Offset=0&Version=2018-01-01\n\
             content-type:application/x-www-form-urlencoded; charset=utf-8\n\
             host:iam.volcengineapi.com\nx-content-sha256:{empty}\n\
             x-date:20201230T081805Z\n\ncontent-type;host;x-content-sha256;x-date\n{empty}"
        )
    );
    let signed = sign(&creds, &req);
    assert_eq!(signed.x_content_sha256, empty);
    assert_eq!(
        signed.authorization,
        "HMAC-SHA256 Credential=AKLTMjI2ODVlYzI3ZGY1NGU4ZjhjYWRjMTlmNTM5OTZkYzE/20201230/cn-north-1/iam/request, \
         SignedHeaders=content-type;host;x-content-sha256;x-date, \
         Signature=28eeabbbd726b87002e0fe58ad8c1c768e619b06e2646f35b6ad7ed029a6d8a7"
    );
    // Another secret signs otherwise.
    let other = Credentials {
        secret_key: "another".into(),
        ..creds
    };
    assert_ne!(sign(&other, &req).authorization, signed.authorization);
}

#[test]
fn dates_hosts_and_queries_are_as_signed() {
    assert_eq!(x_date(0), "19700101T000000Z");
    assert_eq!(x_date(951_782_400), "20000229T000000Z");
    assert_eq!(x_date(1_798_761_599), "20261231T235959Z");
    assert_eq!(
        host_of("https://visual.volcengineapi.com/?Action=x").as_deref(),
        Some("visual.volcengineapi.com")
    );
    assert_eq!(
        host_of("https://visual.volcengineapi.com:443/").as_deref(),
        Some("visual.volcengineapi.com")
    );
    assert_eq!(
        host_of("http://127.0.0.1:8123/").as_deref(),
        Some("127.0.0.1:8123")
    );
    assert_eq!(canonical_query(&[("a b", "c/d")]), "a%20b=c%2Fd");
}

fn job(model: &str) -> VideoJob {
    VideoJob {
        duration_secs: 5,
        ..VideoJob::test(model, "千军万马")
    }
}

#[test]
fn bodies_are_the_documented_ones() {
    let sent = to_vendor(
        &job("jimeng_t2v_v30"),
        "jimeng_t2v_v30",
        Frames::default(),
        &[],
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&sent).unwrap(),
        json!({"req_key": "jimeng_t2v_v30", "prompt": "千军万马", "seed": -1,
               "frames": 121, "aspect_ratio": "16:9"})
    );
    let mut ten = job("jimeng_i2v_first_tail_v30");
    ten.duration_secs = 10;
    ten.seed = Some(7);
    let frames = Frames {
        first: Some(Frame::Inline("AAAA".into())),
        last: Some(Frame::Inline("BBBB".into())),
    };
    let sent = to_vendor(&ten, "jimeng_i2v_first_tail_v30", frames, &[]).unwrap();
    assert_eq!(
        serde_json::to_value(&sent).unwrap(),
        json!({"req_key": "jimeng_i2v_first_tail_v30", "prompt": "千军万马", "seed": 7,
               "frames": 241, "binary_data_base64": ["AAAA", "BBBB"]})
    );
    let url = Frames {
        first: Some(Frame::Url("https://x/a.png".into())),
        last: None,
    };
    let sent = to_vendor(&job("p"), "jimeng_ti2v_v30_pro", url, &[]).unwrap();
    assert_eq!(sent.image_urls, ["https://x/a.png"]);
    assert!(sent.aspect_ratio.is_none());
}

#[test]
fn what_a_req_key_does_not_take_is_refused() {
    let first = || Some(Frame::Inline("AAAA".into()));
    let t2v = |frames| to_vendor(&job("m"), "jimeng_t2v_v30", frames, &[]);
    assert!(
        t2v(Frames {
            first: first(),
            last: None
        })
        .is_err()
    );
    let i2v = |frames| to_vendor(&job("m"), "jimeng_i2v_first_v30", frames, &[]);
    assert!(
        i2v(Frames::default())
            .unwrap_err()
            .contains("needs a first frame")
    );
    assert!(
        i2v(Frames {
            first: first(),
            last: first()
        })
        .is_err()
    );
    let tail = |frames| to_vendor(&job("m"), "jimeng_i2v_first_tail_v30", frames, &[]);
    assert!(
        tail(Frames {
            first: first(),
            last: None
        })
        .unwrap_err()
        .contains("last frame")
    );
    let mixed = Frames {
        first: first(),
        last: Some(Frame::Url("https://x/b.png".into())),
    };
    assert!(tail(mixed).is_err());
    assert!(to_vendor(&job("m"), "jimeng_x", Frames::default(), &[]).is_err());
    let mut eight = job("m");
    eight.duration_secs = 8;
    assert!(to_vendor(&eight, "jimeng_t2v_v30", Frames::default(), &[]).is_err());
    let mut odd = job("m");
    odd.ratio = "2:3".into();
    assert!(to_vendor(&odd, "jimeng_t2v_v30", Frames::default(), &[]).is_err());
    let image = StoredReference {
        role: ReferenceRole::Image,
        blob: "b".into(),
        url: None,
    };
    assert!(to_vendor(&job("m"), "jimeng_t2v_v30", Frames::default(), &[image]).is_err());
}

fn sub(status: u16, body: &str) -> SubmitOutcome {
    submit_outcome(
        "j",
        "jimeng_t2v_v30",
        StatusCode::from_u16(status).unwrap(),
        &http::HeaderMap::new(),
        body.as_bytes(),
    )
}

#[test]
fn submit_answers_classify() {
    assert_eq!(
        sub(
            200,
            r#"{"code":10000,"data":{"task_id":"7602141718759103050"},"message":"Success","request_id":"2026","status":10000,"time_elapsed":"34.9ms"}"#
        ),
        SubmitOutcome::Accepted {
            upstream_id: "jimeng_t2v_v30/7602141718759103050".into()
        }
    );
    for answer in [
        r#"{"code":10000,"data":{}}"#,
        r#"{"code":10000,"data":null}"#,
        "{}",
        "",
    ] {
        assert!(
            matches!(sub(200, answer), SubmitOutcome::Ambiguous(_)),
            "{answer}"
        );
    }
    for code in [50411, 50412, 50413, 50511, 50512] {
        let body = format!(r#"{{"code":{code},"data":null,"message":"Text Risk Not Pass"}}"#);
        assert!(
            matches!(sub(400, &body), SubmitOutcome::Refused { ref code, .. } if code == REFUSED_CODE),
            "{code}"
        );
    }
    for code in [50429, 50430] {
        let body = format!(r#"{{"code":{code},"message":"Request Has Reached API Limit"}}"#);
        assert!(
            matches!(sub(429, &body), SubmitOutcome::RateLimited { .. }),
            "{code}"
        );
        assert!(
            matches!(sub(200, &body), SubmitOutcome::RateLimited { .. }),
            "{code}"
        );
    }
    let signature = r#"{"ResponseMetadata":{"RequestId":"r","Action":"CVSync2AsyncSubmitTask","Version":"2022-08-31","Service":"cv","Region":"cn-north-1","Error":{"CodeN":100010,"Code":"SignatureDoesNotMatch","Message":"The request signature we calculated does not match the signature you provided."}}}"#;
    assert!(matches!(sub(401, signature), SubmitOutcome::Retry(_)));
    assert!(matches!(sub(403, "{}"), SubmitOutcome::Retry(_)));
    assert!(matches!(
        sub(500, r#"{"code":50500,"message":"Internal Error"}"#),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        sub(400, r#"{"code":50400,"message":"Invalid Parameter"}"#),
        SubmitOutcome::Fatal(_)
    ));
}

fn poll(status: u16, body: &str) -> Result<TaskState, PollError> {
    poll_answer("j", StatusCode::from_u16(status).unwrap(), body.as_bytes())
}

#[test]
fn results_map_to_states() {
    let data = |d: Value| json!({"code": 10000, "data": d, "message": "Success"}).to_string();
    assert_eq!(
        poll(200, &data(json!({"status": "in_queue"}))),
        Ok(TaskState::Running { progress: 0 })
    );
    assert_eq!(
        poll(200, &data(json!({"status": "generating"}))),
        Ok(TaskState::Running { progress: 50 })
    );
    assert_eq!(
        poll(
            200,
            &data(json!({"status": "done", "video_url": "https://v.example/a.mp4"}))
        ),
        Ok(TaskState::Succeeded {
            url: "https://v.example/a.mp4".into()
        })
    );
    for s in ["not_found", "expired"] {
        assert!(matches!(
            poll(200, &data(json!({"status": s}))),
            Ok(TaskState::Failed { status, .. }) if status == s
        ));
    }
    assert!(matches!(
        poll(200, &data(json!({"status": "done", "video_url": ""}))),
        Ok(TaskState::Failed { .. })
    ));
    assert!(matches!(
        poll(
            400,
            r#"{"code":50511,"data":null,"message":"Post Img Risk Not Pass"}"#
        ),
        Ok(TaskState::Refused(_))
    ));
    assert!(matches!(
        poll(429, r#"{"code":50429,"message":"limit"}"#),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(
        poll(
            401,
            r#"{"ResponseMetadata":{"Error":{"Code":"SignatureDoesNotMatch","CodeN":100010}}}"#
        ),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(poll(502, "<html>"), Err(PollError::Transient(_))));
    assert!(matches!(poll(200, "[]"), Err(PollError::Unreadable(_))));
    assert_eq!(
        poll(200, &data(json!({"status": "paused"}))),
        Ok(TaskState::Unknown("paused".into()))
    );
}

#[test]
fn outcomes_bill_the_frames_asked_and_refund_the_rest() {
    let done = outcome(
        "j",
        TaskState::Succeeded {
            url: "https://v/a.mp4".into(),
        },
        frames_of(10),
    );
    assert!(matches!(
        done,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Made { seconds: Some(s), .. },
            ..
        }) if s == 10.0
    ));
    assert_eq!(seconds_of(121), 5.0);
    assert!(matches!(
        outcome("j", TaskState::Refused("x".into()), None),
        PollOutcome::Failed { code, .. } if code == REFUSED_CODE
    ));
    assert!(matches!(
        outcome("j", TaskState::Failed { status: "expired".into(), message: String::new() }, None),
        PollOutcome::Failed { code, .. } if code == "upstream_error"
    ));
}

#[test]
fn a_channel_test_tells_a_refused_key_from_a_good_one() {
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes()).verdict
    };
    assert_eq!(
        check(
            200,
            r#"{"code":10000,"data":{"status":"not_found"},"message":"Success"}"#
        ),
        CheckVerdict::Ok
    );
    assert_eq!(
        check(
            401,
            r#"{"ResponseMetadata":{"Error":{"Code":"SignatureDoesNotMatch","CodeN":100010,"Message":"m"}}}"#
        ),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(
            401,
            r#"{"ResponseMetadata":{"Error":{"Code":"InvalidAccessKey","CodeN":100009}}}"#
        ),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(429, r#"{"code":50430,"message":"c"}"#),
        CheckVerdict::RateLimited
    );
    assert_eq!(check(200, "<html>"), CheckVerdict::Error);
    assert_eq!(check(502, "<html>"), CheckVerdict::Error);
}

#[test]
fn the_catalog_names_each_documented_req_key_once() {
    let models = catalog();
    assert_eq!(models.len(), REQ_KEYS.len());
    for (name, caps) in &models {
        assert_eq!(caps.durations, [5, 10], "{name}");
        assert!(!caps.audio, "{name}");
    }
    let caps = |n: &str| models.iter().find(|(m, _)| *m == n).unwrap().1.clone();
    assert!(!caps("jimeng_t2v_v30").first_frame);
    assert!(caps("jimeng_i2v_first_tail_v30_1080").last_frame);
    assert_eq!(caps("jimeng_ti2v_v30_pro").resolutions, ["1080p"]);
    assert!(check_scope_part("region", "cn-north-1").is_ok());
    assert!(check_scope_part("region", "cn/north").is_err());
    assert!(check_scope_part("service", "").is_err());
}
