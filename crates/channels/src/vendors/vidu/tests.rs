use super::callback::url_path_and_query;
use super::*;
use serde_json::json;

fn job(model: &str) -> VideoJob {
    VideoJob {
        seed: Some(7),
        ..VideoJob::test(model, "A cat playing with a ball of yarn")
    }
}

fn sent(job: &VideoJob, inputs: Inputs) -> (Endpoint, Value) {
    let (e, body) = to_vendor(job, inputs, &[]).unwrap();
    (e, serde_json::to_value(body).unwrap())
}

#[test]
fn text_to_video_is_the_documented_body() {
    let (e, body) = sent(&job("viduq3-pro"), Inputs::default());
    assert_eq!(e.path(), "/ent/v2/text2video");
    assert_eq!(
        body,
        json!({"model": "viduq3-pro", "prompt": "A cat playing with a ball of yarn",
               "duration": 8, "seed": 7, "aspect_ratio": "16:9", "resolution": "720p"})
    );
}

#[test]
fn the_endpoint_follows_the_inputs() {
    let url = |s: &str| format!("https://example.com/{s}.png");
    let mut j = job("viduq1");
    j.duration_secs = 5;
    j.resolution = Some("1080p".into());
    let first = Inputs {
        first_frame: Some(url("a")),
        ..Inputs::default()
    };
    let (e, body) = sent(&j, first.clone());
    assert_eq!(e, Endpoint::Image);
    assert_eq!(body["images"], json!([url("a")]));
    assert!(body.get("aspect_ratio").is_none(), "{body}");
    let both = Inputs {
        last_frame: Some(url("b")),
        ..first
    };
    let (e, body) = sent(&j, both);
    assert_eq!(e.path(), "/ent/v2/start-end2video");
    assert_eq!(body["images"], json!([url("a"), url("b")]));
    let refs = Inputs {
        reference_images: vec![url("r1"), url("r2"), url("r3")],
        ..Inputs::default()
    };
    let (e, body) = sent(&j, refs);
    assert_eq!(e.path(), "/ent/v2/reference2video");
    assert_eq!(body["images"].as_array().unwrap().len(), 3);
    assert_eq!(body["aspect_ratio"], "16:9");
    // A last frame alone, or frames with references: refused.
    let last = Inputs {
        last_frame: Some(url("b")),
        ..Inputs::default()
    };
    assert!(to_vendor(&j, last, &[]).is_err());
    let mixed = Inputs {
        first_frame: Some(url("a")),
        reference_images: vec![url("r")],
        ..Inputs::default()
    };
    assert!(to_vendor(&j, mixed, &[]).is_err());
}

#[test]
fn each_model_is_held_to_its_documented_endpoints_durations_and_tiers() {
    let frame = Inputs {
        first_frame: Some("data:image/png;base64,iVBO".into()),
        ..Inputs::default()
    };
    // q3: 1 to 16 s.
    let mut q3 = job("viduq3-turbo");
    q3.duration_secs = 16;
    assert!(to_vendor(&q3, Inputs::default(), &[]).is_ok());
    q3.duration_secs = 17;
    assert!(to_vendor(&q3, Inputs::default(), &[]).is_err());
    // q2: up to 10 s, no first frame.
    let mut q2 = job("viduq2");
    q2.duration_secs = 10;
    assert!(to_vendor(&q2, Inputs::default(), &[]).is_ok());
    assert!(to_vendor(&q2, frame.clone(), &[]).is_err());
    q2.duration_secs = 11;
    assert!(to_vendor(&q2, Inputs::default(), &[]).is_err());
    // q1: 5 s at 1080p.
    let mut q1 = job("viduq1");
    q1.duration_secs = 5;
    assert!(to_vendor(&q1, Inputs::default(), &[]).is_err(), "720p");
    q1.resolution = Some("1080p".into());
    assert!(to_vendor(&q1, Inputs::default(), &[]).is_ok());
    // 2.0: images only; 4 or 8 s; 1080p at 4 s only.
    let mut v2 = job("vidu2.0");
    v2.duration_secs = 4;
    assert!(to_vendor(&v2, Inputs::default(), &[]).is_err());
    assert!(to_vendor(&v2, frame.clone(), &[]).is_ok());
    v2.duration_secs = 8;
    v2.resolution = Some("1080p".into());
    assert!(to_vendor(&v2, frame.clone(), &[]).is_err());
    assert!(to_vendor(&job("vidu3.0"), Inputs::default(), &[]).is_err());
    // 4:3 is q2 and q3 only.
    let mut r = job("viduq1");
    r.duration_secs = 5;
    r.resolution = Some("1080p".into());
    r.ratio = "4:3".into();
    assert!(to_vendor(&r, Inputs::default(), &[]).is_err());
    let mut audio = job("viduq3-pro");
    audio.audio_url = Some("https://example.com/a.mp3".into());
    assert!(to_vendor(&audio, Inputs::default(), &[]).is_err());
}

#[test]
fn submit_answers_classify() {
    let h = http::HeaderMap::new();
    let sub = |status: u16, body: &str| {
        submit_outcome(
            "x",
            StatusCode::from_u16(status).unwrap(),
            &h,
            body.as_bytes(),
        )
    };
    let err = |code: u16, reason: &str, message: &str| {
        json!({"code": code, "reason": reason, "message": message,
               "metadata": {"trace_id": "04e5c2fe159ff7c574acd0424e78c35f"}})
        .to_string()
    };
    assert_eq!(
        sub(
            200,
            r#"{"task_id":"815519863127511040","state":"created","model":"viduq1"}"#
        ),
        SubmitOutcome::Accepted {
            upstream_id: "815519863127511040".into()
        }
    );
    assert!(matches!(
        sub(401, &err(401, "Unauthorized", "unauthorized")),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        sub(403, &err(403, "Forbidden", "forbidden")),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(
        sub(400, &err(400, "CreditInsufficient", "insufficient credits")),
        SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            ..
        }
    ));
    for reason in ["QuotaExceeded", "TooManyRequests", "SystemThrottling"] {
        assert!(matches!(
            sub(429, &err(429, reason, "too many requests")),
            SubmitOutcome::RateLimited {
                retry_after: None,
                ..
            }
        ));
    }
    for reason in ["AuditSubmitIllegal", "TaskPromptPolicyViolation"] {
        assert_eq!(
            sub(400, &err(400, reason, "submit is illegal")),
            SubmitOutcome::Refused {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into()
            }
        );
    }
    assert!(matches!(
        sub(400, &err(400, "FieldInvalid", "invalid field: duration")),
        SubmitOutcome::Fatal(_)
    ));
    assert!(matches!(sub(503, "oops"), SubmitOutcome::Retry(_)));
    for answer in [r#"{}"#, r#"{"task_id":""}"#, ""] {
        assert!(
            matches!(sub(200, answer), SubmitOutcome::Ambiguous(_)),
            "{answer}"
        );
    }
}

#[test]
fn documented_polls_map_to_states() {
    let poll = |s: &str| poll_answer("x", StatusCode::OK, s.as_bytes());
    for state in ["created", "queueing", "processing"] {
        assert!(matches!(
            poll(&json!({"state": state}).to_string()),
            Ok(TaskState::Running { .. })
        ));
    }
    let done = r#"{"state":"success","err_code":"","credits":4,"payload":"","creations":[{"id":"c1","url":"https://cdn.vidu.com/v.mp4","cover_url":"https://cdn.vidu.com/c.jpeg"}]}"#;
    assert_eq!(
        poll(done),
        Ok(TaskState::Succeeded {
            url: "https://cdn.vidu.com/v.mp4".into(),
            credits: Some(4.0),
        })
    );
    assert!(matches!(
        poll(r#"{"state":"success","creations":[]}"#),
        Ok(TaskState::Failed(_))
    ));
    assert_eq!(
        poll(r#"{"state":"failed","err_code":"CreationPolicyViolation"}"#),
        Ok(TaskState::Refused("CreationPolicyViolation".into()))
    );
    assert_eq!(
        poll(r#"{"state":"failed","err_code":"UserCancelled"}"#),
        Ok(TaskState::Cancelled)
    );
    assert_eq!(
        poll(r#"{"state":"paused"}"#),
        Ok(TaskState::Unknown("paused".into()))
    );
    assert_eq!(
        poll_answer("x", StatusCode::NOT_FOUND, b"{}"),
        Err(PollError::Gone)
    );
    assert!(matches!(
        poll_answer("x", StatusCode::TOO_MANY_REQUESTS, b"{}"),
        Err(PollError::Transient(_))
    ));
    assert!(matches!(poll("[]"), Err(PollError::Unreadable(_))));
    assert_eq!(
        outcome("x", TaskState::Refused("AuditSubmitIllegal".into())),
        PollOutcome::Failed {
            code: REFUSED_CODE.into(),
            message: "the upstream refused the content of the task".into()
        }
    );
}

#[test]
fn a_channel_test_reads_the_credits() {
    let log = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes(), log).verdict
    };
    assert_eq!(
        check(
            200,
            r#"{"remains":[{"type":"metered","credit_remain":100,"concurrency_limit":5,"current_concurrency":0,"queue_count":0}]}"#
        ),
        CheckVerdict::Ok
    );
    assert_eq!(
        check(401, r#"{"code":401,"reason":"Unauthorized"}"#),
        CheckVerdict::KeyRefused
    );
    assert_eq!(
        check(429, r#"{"code":429,"reason":"TooManyRequests"}"#),
        CheckVerdict::RateLimited
    );
    assert_eq!(check(200, "<html>"), CheckVerdict::Error);
    assert_eq!(check(502, "<html>"), CheckVerdict::Error);
}

#[test]
fn the_catalog_names_each_documented_model_once() {
    let models = catalog();
    let names: std::collections::BTreeSet<&str> = models.iter().map(|(m, _)| *m).collect();
    assert_eq!(names.len(), models.len());
    let caps = |name: &str| models.iter().find(|(m, _)| *m == name).unwrap().1.clone();
    assert_eq!(caps("viduq3-pro").durations, (1..=16).collect::<Vec<u32>>());
    assert!(caps("viduq3-pro").audio && caps("viduq3-pro").last_frame);
    assert_eq!(caps("viduq2").durations, (1..=10).collect::<Vec<u32>>());
    assert!(!caps("viduq2").first_frame);
    assert_eq!(caps("viduq2").reference_images, 7);
    assert_eq!(caps("viduq1").durations, [5]);
    assert_eq!(caps("viduq1").resolutions, ["1080p"]);
    let v2 = caps("vidu2.0");
    assert_eq!(v2.durations, [4, 8]);
    assert_eq!(v2.image_only_resolutions, v2.resolutions);
    assert_eq!(v2.durations_by_resolution["1080p"], [4]);
}

/// Vidu's own example: `POST` to `http://127.0.0.1:8080/vidu/callback?name=james&age=36`
/// on Tue, 06 May 2025 12:09:42 GMT with the nonce `123e4567-...`, signed headers
/// `Date;x-request-nonce`; the string ends with a newline.
#[test]
fn the_callback_signing_string_is_vidus_documented_example() {
    let date = "Tue, 06 May 2025 12:09:42 GMT";
    let (path, query) = url_path_and_query("http://127.0.0.1:8080/vidu/callback?name=james&age=36");
    let text = callback_signing_string(
        "POST",
        path,
        query,
        date,
        &[
            ("Date", date),
            ("x-request-nonce", "123e4567-e89b-12d3-a456-426614174000"),
        ],
    );
    assert_eq!(
        text,
        "POST\n/vidu/callback\nname=james&age=36\nvidu\nTue, 06 May 2025 12:09:42 GMT\n\
         Date:Tue, 06 May 2025 12:09:42 GMT\n\
         x-request-nonce:123e4567-e89b-12d3-a456-426614174000\n"
    );
    assert_eq!(url_path_and_query("https://relay.example"), ("/", ""));
    assert_eq!(url_path_and_query("https://r.example/a/b#x"), ("/a/b", ""));
}

/// Headers as Vidu sends them for `url`, signed under `key` at `date`.
fn signed(url: &str, key: &str, date: &str) -> http::HeaderMap {
    use base64::Engine as _;
    use hmac::Mac as _;
    let nonce = "5f0c1d2e-0000-4000-8000-000000000001";
    let (path, query) = url_path_and_query(url);
    let text = callback_signing_string(
        "POST",
        path,
        query,
        date,
        &[("Date", date), ("x-request-nonce", nonce)],
    );
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(text.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let mut headers = http::HeaderMap::new();
    for (name, value) in [
        ("date", date),
        ("x-request-nonce", nonce),
        ("x-hmac-signed-headers", "Date;x-request-nonce"),
        ("x-hmac-signature", signature.as_str()),
        ("x-hmac-algorithm", "hmac-sha256"),
        ("x-hmac-access-key", "vidu"),
    ] {
        headers.insert(name, value.parse().unwrap());
    }
    headers
}

#[test]
fn a_callback_is_let_in_only_when_signed_under_the_key_over_its_url_and_fresh() {
    let url = "https://relay.example/base/callbacks/vidu/v?task=video_1&token=ab12";
    let date = "Tue, 06 May 2025 12:09:42 GMT";
    let at = httpdate::parse_http_date(date).unwrap();
    let post = http::Method::POST;
    let check = |headers: &http::HeaderMap, url: &str, now| {
        verify_callback_signature(url, &post, headers, "vda_key", now)
    };
    let good = signed(url, "vda_key", date);
    assert_eq!(check(&good, url, at), Ok(()));
    // Within the skew either way; not beyond it.
    let skew = CALLBACK_DATE_SKEW;
    assert_eq!(check(&good, url, at + skew), Ok(()));
    assert_eq!(check(&good, url, at - skew), Ok(()));
    let late = check(&good, url, at + skew + std::time::Duration::from_secs(1));
    assert!(late.unwrap_err().contains("15 minutes"));
    // Another key, another task's URL, another method: refused.
    let other_key = signed(url, "another_key", date);
    assert!(check(&other_key, url, at).is_err());
    let other_task = url.replace("video_1", "video_2");
    assert!(check(&good, &other_task, at).is_err());
    assert!(verify_callback_signature(url, &http::Method::PUT, &good, "vda_key", at).is_err());
    // A signed header changed after signing, or left out.
    let mut nonce = good.clone();
    nonce.insert("x-request-nonce", "another".parse().unwrap());
    assert!(check(&nonce, url, at).is_err());
    for name in [
        "x-hmac-signature",
        "x-hmac-algorithm",
        "x-hmac-access-key",
        "date",
    ] {
        let mut without = good.clone();
        without.remove(name);
        let e = check(&without, url, at).unwrap_err();
        assert!(e.contains(name), "{name}: {e}");
    }
    let mut md5 = good.clone();
    md5.insert("x-hmac-algorithm", "hmac-md5".parse().unwrap());
    assert!(check(&md5, url, at).is_err());
}
