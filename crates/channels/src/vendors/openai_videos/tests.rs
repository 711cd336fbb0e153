use super::*;
use serde_json::json;

const BASE: &str = "http://up/v1/videos/v1";

fn read_with(words: &[(&str, StatusMeaning)], answer: Value) -> (PollOutcome, Option<String>) {
    let words = words.iter().map(|(w, m)| ((*w).to_owned(), *m)).collect();
    from_vendor(
        &crate::vendors::common::test_remote("c"),
        &words,
        &answer,
        BASE,
    )
}

fn read(answer: Value) -> PollOutcome {
    read_with(&[], answer).0
}

fn running(progress: u8) -> PollOutcome {
    PollOutcome::Running {
        progress,
        next_poll: None,
    }
}

fn failed(code: &str, message: &str) -> PollOutcome {
    PollOutcome::Failed {
        code: code.into(),
        message: message.into(),
    }
}

/// The Video object of PROTOCOLS.md §1.
#[test]
fn a_video_object_reads_as_an_outcome() {
    assert_eq!(
        read(json!({"id":"v1","object":"video","status":"in_progress","progress":42})),
        running(42)
    );
    let PollOutcome::Succeeded(files) = read(
        json!({"id":"v1","object":"video","status":"completed","progress":100,"seconds":"8","size":"1280x720"}),
    ) else {
        panic!("not a success")
    };
    assert_eq!(
        files.video,
        ResultSource::Url("http://up/v1/videos/v1/content".into())
    );
    assert_eq!(
        files.usage,
        VendorUsage::Made {
            seconds: Some(8.0),
            resolution: Some("720p".into())
        }
    );
    let PollOutcome::Succeeded(files) = read(json!({"id":"v1","status":"completed"})) else {
        panic!("not a success")
    };
    assert_eq!(files.usage, VendorUsage::NotReported);
    let PollOutcome::Succeeded(files) =
        read(json!({"id":"v1","status":"completed","seconds":"eight"}))
    else {
        panic!("not a success")
    };
    assert!(matches!(files.usage, VendorUsage::Unreadable(_)));
    assert!(matches!(
        read(json!({"id":"v1","status":"mystery"})),
        PollOutcome::Unknown(_)
    ));
    assert!(matches!(read(json!({"id":"v1"})), PollOutcome::Unknown(_)));
    // An unknown word is logged redacted: the channel's key never goes along.
    let PollOutcome::Unknown(reason) = read(json!({"id":"v1","status":"echo test-key"})) else {
        panic!("not unknown")
    };
    assert!(!reason.contains("test-key"), "{reason}");
    assert!(matches!(
        read(json!({"id":"v1","status":7})),
        PollOutcome::Unknown(_)
    ));
}

/// Every word a relay behind may speak, in any case, and what it means.
#[test]
fn status_words_of_relays_behind_are_read_case_aside() {
    let check = |word: &str, expected: Option<StatusMeaning>| {
        assert_eq!(builtin_meaning(&status_word(word)), expected, "{word}");
    };
    for word in [
        "queued",
        "pending",
        "in_progress",
        "processing",
        "running",
        "NOT_START",
        "SUBMITTED",
        "QUEUED",
        "IN_PROGRESS",
        " Processing ",
    ] {
        check(word, Some(StatusMeaning::Running));
    }
    for word in ["completed", "succeeded", "success", "SUCCESS", "Completed"] {
        check(word, Some(StatusMeaning::Completed));
    }
    for word in ["failed", "failure", "FAILURE", "Failed"] {
        check(word, Some(StatusMeaning::Failed));
    }
    for word in ["cancelled", "canceled", "CANCELED"] {
        check(word, Some(StatusMeaning::Cancelled));
    }
    check("EXPIRED", Some(StatusMeaning::Expired));
    // new-api's UNKNOWN (and its video object's `unknown`) says the relay behind does not
    // know either: no reading, so the bounded unknown-status polls apply.
    for word in ["UNKNOWN", "unknown", "", "done", "in progress"] {
        check(word, None);
    }
    assert_eq!(read(json!({"status": "IN_PROGRESS"})), running(0));
    assert!(matches!(
        read(json!({"status": "SUCCESS"})),
        PollOutcome::Succeeded(_)
    ));
    assert_eq!(
        read(json!({"status": "Canceled"})),
        failed("upstream_error", "the upstream cancelled the task")
    );
    assert_eq!(
        read(json!({"status": "expired"})),
        failed(
            "upstream_error",
            "the upstream task expired before it finished"
        )
    );
}

/// The operator's words win over the built-in ones; unknown ones stay unknown.
#[test]
fn the_operators_status_words_are_read_first() {
    let words = [
        ("rendering", StatusMeaning::Running),
        ("done_ok", StatusMeaning::Completed),
        ("broken", StatusMeaning::Failed),
        ("completed", StatusMeaning::Running),
    ];
    let read = |status: &str| read_with(&words, json!({"status": status, "progress": 10})).0;
    assert_eq!(read("RENDERING"), running(10));
    assert!(matches!(read("DONE_OK"), PollOutcome::Succeeded(_)));
    assert_eq!(
        read("Broken"),
        failed("upstream_error", "the upstream failed the task")
    );
    assert_eq!(read("completed"), running(10));
    assert!(matches!(read("GLITTERING"), PollOutcome::Unknown(_)));
}

#[test]
fn progress_is_read_as_a_number_a_fraction_or_a_string() {
    let check = |value: Value, expected: Option<u8>| {
        assert_eq!(progress_of(Some(&value)), expected, "{value}");
    };
    check(json!(45), Some(45));
    check(json!(45.7), Some(45));
    check(json!(0), Some(0));
    check(json!(1), Some(1));
    check(json!(100), Some(100));
    check(json!(250), Some(100));
    check(json!(0.45), Some(45));
    check(json!(0.999), Some(99));
    check(json!("45%"), Some(45));
    check(json!(" 45 % "), Some(45));
    check(json!("45"), Some(45));
    check(json!("0.45"), Some(45));
    check(json!("0.5%"), Some(0));
    check(json!("100%"), Some(100));
    for unreadable in [
        json!(-3),
        json!("-3%"),
        json!("almost"),
        json!(""),
        json!("%"),
        json!(null),
        json!(true),
        json!([45]),
        json!({"value": 45}),
        json!("NaN"),
        json!("inf"),
    ] {
        check(unreadable, None);
    }
    assert_eq!(progress_of(None), None);
    // Unreadable progress never fails a poll, and a running task never shows 100.
    assert_eq!(
        read(json!({"status": "running", "progress": "lots"})),
        running(0)
    );
    assert_eq!(
        read(json!({"status": "running", "progress": "100%"})),
        running(99)
    );
    assert_eq!(
        read(json!({"status": "QUEUED", "progress": "45%"})),
        running(45)
    );
}

/// Errors as an OpenAI error object, a plain string or new-api's `fail_reason`: the
/// client sees the relay's own code and words, never the upstream's.
#[test]
fn errors_in_every_shape_become_the_relays_own() {
    for answer in [
        json!({"status": "failed", "error": {"code": "internal", "message": "secret-host boom"}}),
        json!({"status": "failed", "error": "secret-host boom"}),
        json!({"status": "FAILURE", "fail_reason": "secret-host boom"}),
        json!({"status": "failed", "error": {"code": 500}}),
        json!({"status": "failed", "error": null}),
        json!({"status": "failed"}),
    ] {
        assert_eq!(
            read(answer.clone()),
            failed("upstream_error", "the upstream failed the task"),
            "{answer}"
        );
    }
    for answer in [
        json!({"status": "failed", "error": {"code": "moderation_blocked", "message": "secret x"}}),
        json!({"status": "failed", "error": {"code": "content_policy_violation", "message": "x"}}),
        json!({"status": "failed", "error": "Your request was rejected by the safety system"}),
        json!({"status": "FAILURE", "fail_reason": "prompt violates our content policy"}),
        json!({"status": "failed", "error": {"type": "moderation", "message": "x"}}),
    ] {
        assert_eq!(
            read(answer.clone()),
            failed("moderation_blocked", "the upstream refused the content"),
            "{answer}"
        );
    }
}

/// new-api's task record (its envelope, upper-case status, progress as a string,
/// `fail_reason`, `result_url`) and its video object (`metadata.url`).
#[test]
fn new_apis_shapes_are_read() {
    assert_eq!(
        read(json!({"code": "success", "message": "", "data": {
            "task_id": "task_1", "status": "IN_PROGRESS", "progress": "45%",
            "fail_reason": ""}})),
        running(45)
    );
    let (outcome, named) = read_with(
        &[],
        json!({"code": "success", "data": {"task_id": "task_1", "status": "SUCCESS",
            "progress": "100%", "result_url": "https://cdn.example/v.mp4?sig=1"}}),
    );
    assert!(matches!(outcome, PollOutcome::Succeeded(_)));
    assert_eq!(named.as_deref(), Some("https://cdn.example/v.mp4?sig=1"));
    assert_eq!(
        read(json!({"code": "success", "data": {"status": "FAILURE",
            "fail_reason": "upstream said no"}})),
        failed("upstream_error", "the upstream failed the task")
    );
    // An envelope without a status inside is no record.
    assert!(matches!(
        read(json!({"code": "success", "data": null})),
        PollOutcome::Unknown(_)
    ));
    let (_, named) = read_with(
        &[],
        json!({"id": "task_1", "object": "video", "status": "completed", "progress": 100,
            "metadata": {"url": "https://files.example/task_1.mp4"}}),
    );
    assert_eq!(named.as_deref(), Some("https://files.example/task_1.mp4"));
}

#[test]
fn the_records_result_url_is_read_from_its_fields() {
    let named = |answer: Value| read_with(&[], answer).1;
    let done = |key: &str, url: &str| {
        let mut v = json!({"status": "completed"});
        v[key] = json!(url);
        v
    };
    for key in ["video_url", "url", "result_url"] {
        assert_eq!(
            named(done(key, "https://cdn.example/a.mp4")).as_deref(),
            Some("https://cdn.example/a.mp4"),
            "{key}"
        );
    }
    // A path is on the channel's own origin.
    assert_eq!(
        named(done("video_url", "/files/a.mp4")).as_deref(),
        Some("http://127.0.0.1:9/files/a.mp4")
    );
    // No URL, a data: URI, a scheme-relative path, or the /content URL itself: nothing
    // else to try.
    for answer in [
        json!({"status": "completed"}),
        done("video_url", "data:video/mp4;base64,AAAA"),
        done("video_url", "//elsewhere.example/a.mp4"),
        done("video_url", "ftp://files.example/a.mp4"),
        done("video_url", "http://up/v1/videos/v1/content"),
        done("video_url", ""),
    ] {
        assert_eq!(named(answer.clone()), None, "{answer}");
    }
    // Only a success names one.
    assert_eq!(
        named(json!({"status": "running", "video_url": "https://x/a.mp4"})),
        None
    );
}
