use super::*;
use serde_json::json;

fn job(model: &str) -> VideoJob {
    VideoJob {
        seed: Some(7),
        ..VideoJob::test(model, "A cat playing with a ball of yarn")
    }
}

fn body(request: &XaiRequest) -> Value {
    serde_json::to_value(request).unwrap()
}

#[test]
fn text_to_video_is_the_documented_body() {
    let request = to_vendor(&job("grok-imagine-video"), Inputs::default(), &[]).unwrap();
    assert_eq!(
        body(&request),
        json!({"model": "grok-imagine-video", "prompt": "A cat playing with a ball of yarn",
               "duration": 8, "aspect_ratio": "16:9", "resolution": "720p"})
    );
    // A first-format size without a fitted tier: its short side.
    let mut j = job("grok-imagine-video");
    j.resolution = None;
    j.width = 848;
    j.height = 480;
    assert_eq!(
        to_vendor(&j, Inputs::default(), &[])
            .unwrap()
            .resolution
            .as_deref(),
        Some("480p")
    );
}

#[test]
fn a_first_frame_is_image_url_and_an_adaptive_ratio_is_left_out() {
    let mut j = job("grok-imagine-video");
    j.first_frame = Some("blob".into());
    j.ratio = "adaptive".into();
    let inputs = Inputs {
        first_frame: Some(media::data_uri(b"\x89PNG cat", "image/png")),
        ..Inputs::default()
    };
    let sent = body(&to_vendor(&j, inputs, &[]).unwrap());
    assert_eq!(
        sent["image"],
        json!({"url": "data:image/png;base64,iVBORyBjYXQ="})
    );
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
    assert!(sent.get("reference_images").is_none(), "{sent}");
    // Text alone needs a ratio xAI makes.
    let mut odd = job("grok-imagine-video");
    odd.ratio = "21:9".into();
    assert!(to_vendor(&odd, Inputs::default(), &[]).is_err());
}

#[test]
fn what_xai_has_no_field_for_is_refused_not_dropped() {
    let mut last = job("grok-imagine-video");
    last.first_frame = Some("a".into());
    last.last_frame = Some("b".into());
    assert!(
        to_vendor(&last, Inputs::default(), &[])
            .unwrap_err()
            .contains("last frame")
    );
    let mut audio = job("grok-imagine-video");
    audio.audio_url = Some("https://example.com/a.mp3".into());
    assert!(to_vendor(&audio, Inputs::default(), &[]).is_err());
    let video = StoredReference {
        role: ReferenceRole::Video,
        blob: "v".into(),
        url: None,
    };
    assert!(to_vendor(&job("grok-imagine-video"), Inputs::default(), &[video]).is_err());
    let both = Inputs {
        first_frame: Some("https://example.com/a.png".into()),
        reference_images: vec!["https://example.com/b.png".into()],
    };
    assert!(to_vendor(&job("grok-imagine-video"), both, &[]).is_err());
    for seconds in [0, 16] {
        let mut j = job("grok-imagine-video");
        j.duration_secs = seconds;
        assert!(to_vendor(&j, Inputs::default(), &[]).is_err(), "{seconds}");
    }
    let mut tier = job("grok-imagine-video");
    tier.resolution = Some("4k".into());
    assert!(to_vendor(&tier, Inputs::default(), &[]).is_err());
    // Reference images alone: reference to video.
    let refs = Inputs {
        reference_images: vec!["https://example.com/r.png".into()],
        ..Inputs::default()
    };
    let sent = body(&to_vendor(&job("grok-imagine-video"), refs, &[]).unwrap());
    assert_eq!(
        sent["reference_images"],
        json!([{"url": "https://example.com/r.png"}])
    );
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
    assert_eq!(
        sub(
            200,
            r#"{"request_id":"d97415a1-5796-b7ec-379f-4e6819e08fdf"}"#
        ),
        SubmitOutcome::Accepted {
            upstream_id: "d97415a1-5796-b7ec-379f-4e6819e08fdf".into()
        }
    );
    // The wrong key is a 400 saying so: the channel's trouble, not the request's.
    let wrong = r#"{"code":"Client specified an invalid argument","error":"Incorrect API key provided: xa***zz. You can obtain an API key from https://console.x.ai."}"#;
    assert!(matches!(sub(400, wrong), SubmitOutcome::Retry(_)));
    assert!(matches!(
        sub(401, r#"{"code":"Unauthenticated","error":"no key"}"#),
        SubmitOutcome::Retry(_)
    ));
    assert!(matches!(sub(403, "{}"), SubmitOutcome::Retry(_)));
    assert!(matches!(sub(404, "{}"), SubmitOutcome::Retry(_)));
    assert!(matches!(sub(503, "oops"), SubmitOutcome::Retry(_)));
    let credits = r#"{"code":"Some resource has been exhausted","error":"Your team 16f2 has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit."}"#;
    assert!(matches!(
        sub(429, credits),
        SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            ..
        }
    ));
    assert!(matches!(
        sub(
            429,
            r#"{"error":{"message":"Too many requests","code":"rate_limit"}}"#
        ),
        SubmitOutcome::RateLimited {
            retry_after: None,
            ..
        }
    ));
    let mut with_retry = http::HeaderMap::new();
    with_retry.insert("retry-after", "3".parse().unwrap());
    assert!(matches!(
        submit_outcome("x", StatusCode::TOO_MANY_REQUESTS, &with_retry, b"{}"),
        SubmitOutcome::RateLimited { retry_after: Some(d), .. } if d.as_secs() == 3
    ));
    assert!(matches!(
        sub(
            400,
            r#"{"code":"Client specified an invalid argument","error":"duration must be between 1 and 15"}"#
        ),
        SubmitOutcome::Fatal(_)
    ));
    assert!(matches!(sub(422, "{}"), SubmitOutcome::Fatal(_)));
    // A success without a request_id may have made a job: never sent again.
    for answer in [r#"{}"#, r#"{"request_id":""}"#, ""] {
        assert!(
            matches!(sub(200, answer), SubmitOutcome::Ambiguous(_)),
            "{answer}"
        );
    }
    assert!(matches!(
        sub(200, r#"{"code":"x","error":"bad"}"#),
        SubmitOutcome::Fatal(_)
    ));
}

#[test]
fn documented_polls_map_to_states() {
    let poll = |s: &str| poll_answer("x", StatusCode::OK, s.as_bytes());
    assert_eq!(
        poll(r#"{"request_id":"d974"}"#),
        Ok(TaskState::Running { progress: 0 })
    );
    assert_eq!(
        poll(r#"{"status":"pending","progress":42}"#),
        Ok(TaskState::Running { progress: 42 })
    );
    let done = r#"{"status":"done","video":{"url":"https://vidgen.x.ai/xai-vidgen-bucket/xai-video-f532.mp4","duration":6,"respect_moderation":true},"model":"grok-imagine-video"}"#;
    assert_eq!(
        poll(done),
        Ok(TaskState::Succeeded {
            url: "https://vidgen.x.ai/xai-vidgen-bucket/xai-video-f532.mp4".into(),
            seconds: Some(6.0),
        })
    );
    // Done without a URL, or not respecting moderation: withheld.
    assert_eq!(
        poll(r#"{"status":"done","video":{"url":"","duration":6,"respect_moderation":false}}"#),
        Ok(TaskState::Withheld)
    );
    assert_eq!(poll(r#"{"status":"done"}"#), Ok(TaskState::Withheld));
    assert_eq!(
        poll(r#"{"status":"done","video":{"url":"https://x/v.mp4","respect_moderation":false}}"#),
        Ok(TaskState::Withheld)
    );
    // Failed and expired jobs answer 200 with their error.
    assert!(matches!(
        poll(r#"{"status":"failed","error":{"code":"internal_error","message":"generation failed"}}"#),
        Ok(TaskState::Failed { status: "failed", message }) if message.contains("generation failed")
    ));
    assert!(matches!(
        poll(r#"{"status":"expired","error":{"code":"expired","message":"request expired"}}"#),
        Ok(TaskState::Failed {
            status: "expired",
            ..
        })
    ));
    assert_eq!(
        poll(r#"{"status":"paused"}"#),
        Ok(TaskState::Unknown("paused".into()))
    );
    assert_eq!(
        poll_answer("x", StatusCode::ACCEPTED, br#"{"request_id":"a"}"#),
        Ok(TaskState::Running { progress: 0 })
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
}

#[test]
fn outcomes_refund_what_was_withheld_and_bill_the_reported_length() {
    let done = outcome(
        "x",
        TaskState::Succeeded {
            url: "https://x/v.mp4".into(),
            seconds: Some(6.0),
        },
    );
    assert!(matches!(
        done,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Made { seconds: Some(s), resolution: None },
            ..
        }) if s == 6.0
    ));
    let unread = outcome(
        "x",
        TaskState::Succeeded {
            url: "https://x/v.mp4".into(),
            seconds: None,
        },
    );
    assert!(matches!(
        unread,
        PollOutcome::Succeeded(ResultFiles {
            usage: VendorUsage::Unreadable(_),
            ..
        })
    ));
    assert_eq!(
        outcome("x", TaskState::Withheld),
        PollOutcome::Failed {
            code: REFUSED_CODE.into(),
            message: "the upstream refused the content of the task".into()
        }
    );
    assert!(matches!(
        outcome("x", TaskState::Failed { status: "expired", message: String::new() }),
        PollOutcome::Failed { code, message } if code == "upstream_error" && message.contains("expired")
    ));
}

#[test]
fn a_channel_test_reads_the_keys_record() {
    let log = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let check = |status: u16, body: &str| {
        check_answer(StatusCode::from_u16(status).unwrap(), body.as_bytes(), log).verdict
    };
    let info = |blocked: bool| {
        json!({"redacted_api_key": "xai-...b14o", "user_id": "u", "name": "My API Key",
               "create_time": "2024-01-01T12:55:18.139305Z", "modify_time": "2024-08-28T17:20:12.343321Z",
               "modified_by": "m", "team_id": "t", "acls": ["api-key:model:*", "api-key:endpoint:*"],
               "api_key_id": "ae1e1841-4326-a8a9-8a91-9a5f3b2f3f5d", "team_blocked": false,
               "api_key_blocked": blocked, "api_key_disabled": false})
        .to_string()
    };
    assert_eq!(check(200, &info(false)), CheckVerdict::Ok);
    assert_eq!(check(200, &info(true)), CheckVerdict::KeyRefused);
    assert_eq!(
        check(
            400,
            r#"{"code":"Client specified an invalid argument","error":"Incorrect API key provided: xa***zz."}"#
        ),
        CheckVerdict::KeyRefused
    );
    assert_eq!(check(401, "{}"), CheckVerdict::KeyRefused);
    assert_eq!(
        check(
            429,
            r#"{"error":"Your team t has either used all available credits or reached its monthly spending limit."}"#
        ),
        CheckVerdict::Quota
    );
    assert_eq!(check(429, "{}"), CheckVerdict::RateLimited);
    assert_eq!(check(200, "<html>"), CheckVerdict::Error);
    assert_eq!(check(502, "<html>"), CheckVerdict::Error);
}

#[test]
fn the_catalog_names_each_documented_model_once() {
    let models = catalog();
    let names: std::collections::BTreeSet<&str> = models.iter().map(|(m, _)| *m).collect();
    assert_eq!(names.len(), models.len());
    for (name, caps) in &models {
        assert_eq!(caps.durations, (1..=15).collect::<Vec<u32>>(), "{name}");
        assert_eq!(caps.ratios.len(), 7, "{name}");
        assert!(caps.first_frame && !caps.last_frame && caps.audio, "{name}");
        assert_eq!(caps.reference_images, 0, "{name}");
    }
    let tiers = |name: &str| {
        models
            .iter()
            .find(|(m, _)| *m == name)
            .unwrap()
            .1
            .resolutions
            .clone()
    };
    assert_eq!(tiers("grok-imagine-video"), ["480p", "720p"]);
    assert_eq!(tiers("grok-imagine-video-1.5"), ["480p", "720p", "1080p"]);
}
