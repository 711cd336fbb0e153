//! The first format's flows: create (JSON and multipart), statuses, content with ranges and
//! the thumbnail, cancel, failure, moderation, timeout, framing, list paging, delete.

use serde_json::{Value, json};

use super::{PNG_1X1, base64, id_of, video, wait_final};
use crate::conformance::checks;
use crate::conformance::client::{Req, multipart};
use crate::conformance::suite::Suite;

pub async fn first_format_flows(suite: &mut Suite) {
    let s = "SPEC§4.1";
    let key = suite.args.key.clone();
    let create = |sim: &str, body: Value| {
        Req::post("/v1/videos")
            .bearer(&key)
            .header("x-relay-sim", sim)
            .json(&body)
    };

    // Submit everything first so the tasks run side by side.
    let main = suite.send(create("delay_ms=1500", video(json!({})))).await;
    let v = checks::status(&main, 200).and_then(|()| {
        let b = main.json();
        if b["task_id"].is_string() && b["task_id"] == b["id"] && b["object"] == "video" {
            Ok(())
        } else {
            Err(format!(
                "expected a task record with task_id = id and object video, got {}",
                main.describe()
            ))
        }
    });
    suite.check(s, "create answers the record with task_id", v);
    let main_id = main.json()["task_id"]
        .as_str()
        .unwrap_or("missing")
        .to_owned();
    suite.check(
        "CONTRACT§1.2",
        "record shows the framing and default duration",
        {
            checks::field(&main, "/size", &json!("64x64"))
                .and_then(|()| checks::field(&main, "/duration", &json!(5)))
        },
    );
    let failing = suite
        .send(create("fail; delay_ms=200", video(json!({}))))
        .await;
    let rejected = suite
        .send(create("reject; delay_ms=200", video(json!({}))))
        .await;
    let (ctype, body) = multipart(&[
        ("model", None, "", b"model_h3"),
        ("prompt", None, "", b"a multipart conformance test"),
        ("seconds", None, "", b"5"),
        ("size", None, "", b"64x64"),
        ("input_reference", Some("first.png"), "image/png", PNG_1X1),
    ]);
    let multi = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .header("x-relay-sim", "delay_ms=60000")
                .raw(&ctype, body),
        )
        .await;
    suite.check(
        s,
        "multipart create with an image file part",
        checks::status(&multi, 200),
    );
    let stuck_timeout = suite.args.task_timeout_secs.filter(|t| *t <= 20);
    let stuck = match stuck_timeout {
        Some(_) => Some(suite.send(create("stuck", video(json!({})))).await),
        None => None,
    };

    let path = format!("/v1/videos/{main_id}");
    let r = suite.send(Req::get(&path).bearer(&key)).await;
    let unfinished = matches!(r.json()["status"].as_str(), Some("queued" | "in_progress"));
    if unfinished {
        suite.check(
            "CONTRACT§0.1a",
            "unfinished task carries openai-poll-after-ms",
            checks::header(&r, "openai-poll-after-ms", "5000"),
        );
        let r = suite
            .send(Req::get(format!("{path}/content")).bearer(&key))
            .await;
        suite.check(
            "SPEC§3",
            "content before completed: 409 task not completed",
            checks::api_error(&r, 409, "task not completed"),
        );
    } else {
        suite.skip(
            "SPEC§3",
            "content before completed",
            "the task finished before the check",
        );
    }
    if let Some(other) = suite.args.key_group2.clone() {
        let r = suite.send(Req::get(&path).bearer(&other)).await;
        suite.check(
            "CONTRACT§0",
            "another key's task is 404",
            checks::api_error(&r, 404, "not found"),
        );
    }
    let statuses = ["queued", "in_progress", "completed"];
    let (done, v) = wait_final(
        suite,
        &path,
        &["completed", "failed", "cancelled"],
        &statuses,
    )
    .await;
    suite.check(
        "CONTRACT§1.2",
        "statuses queued -> in_progress -> completed, progress rising",
        v,
    );
    suite.check(
        "SPEC§4.2",
        "task reaches completed",
        checks::field(&done, "/status", &json!("completed")),
    );

    // Content, ranges, thumbnail.
    let r = suite
        .send(Req::get(format!("{path}/content")).bearer(&key))
        .await;
    let whole = r.body.clone();
    let v = checks::status(&r, 200)
        .and_then(|()| checks::header(&r, "content-type", "video/mp4"))
        .and_then(|()| checks::header(&r, "accept-ranges", "bytes"))
        .and_then(|()| checks::header(&r, "content-length", &whole.len().to_string()));
    suite.check("SPEC§4.3", "content is video/mp4 with length and ranges", v);
    suite.check(
        "SPEC§4.3",
        "content is an MP4 of the task's size",
        checks::mp4(&whole, Some(64), Some(64)),
    );
    if whole.len() > 200 {
        let len = whole.len();
        let r = suite
            .send(
                Req::get(format!("{path}/content"))
                    .bearer(&key)
                    .header("range", "bytes=0-99"),
            )
            .await;
        suite.check(
            "CONTRACT§1.3",
            "Range bytes=0-99 is 206",
            checks::range(&r, &whole, 0, 99),
        );
        let r = suite
            .send(
                Req::get(format!("{path}/content"))
                    .bearer(&key)
                    .header("range", "bytes=100-"),
            )
            .await;
        suite.check(
            "CONTRACT§1.3",
            "Range bytes=100- is 206",
            checks::range(&r, &whole, 100, len - 1),
        );
        let r = suite
            .send(
                Req::get(format!("{path}/content"))
                    .bearer(&key)
                    .header("range", "bytes=-50"),
            )
            .await;
        suite.check(
            "CONTRACT§1.3",
            "Range bytes=-50 is 206",
            checks::range(&r, &whole, len - 50, len - 1),
        );
        let r = suite
            .send(
                Req::get(format!("{path}/content"))
                    .bearer(&key)
                    .header("range", &format!("bytes={len}-")),
            )
            .await;
        let v = checks::status(&r, 416)
            .and_then(|()| checks::header(&r, "content-range", &format!("bytes */{len}")));
        suite.check("CONTRACT§1.3", "Range past the end is 416", v);
    }
    let r = suite
        .send(Req::get(format!("{path}/content?variant=thumbnail")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        "thumbnail is a PNG",
        checks::status(&r, 200).and_then(|()| checks::png(&r.body)),
    );
    let r = suite
        .send(Req::post(format!("{path}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        "cancel of a completed task: 409 task not cancellable",
        checks::api_error(&r, 409, "task not cancellable"),
    );
    let r = suite
        .send(
            Req::post("/api/generation/video/moderation-result")
                .bearer(&key)
                .json(&json!({"task_id": main_id})),
        )
        .await;
    suite.check(
        "SPEC§4.4",
        "moderation of a finished first-format task is passed",
        checks::field(&r, "/status", &json!("passed")),
    );
    let r = suite
        .send(Req::get("/v1/videos?limit=100").bearer(&key))
        .await;
    let listed = r.json()["data"]
        .as_array()
        .is_some_and(|d| d.iter().any(|t| t["id"] == main_id.as_str()));
    let v = checks::field(&r, "/object", &json!("list")).and_then(|()| {
        if listed {
            Ok(())
        } else {
            Err("expected the task in the list, got none".into())
        }
    });
    suite.check("CONTRACT§1.3", "list holds the task", v);

    // Cancel.
    let multi_id = multi.json()["task_id"]
        .as_str()
        .unwrap_or("missing")
        .to_owned();
    let r = suite
        .send(Req::post(format!("/v1/videos/{multi_id}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        "cancel of a running task answers it cancelled",
        checks::field(&r, "/status", &json!("cancelled")),
    );
    let r = suite
        .send(Req::post(format!("/v1/videos/{multi_id}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        "cancel again: 409 task not cancellable",
        checks::api_error(&r, 409, "task not cancellable"),
    );
    let r = suite
        .send(Req::get(format!("/v1/videos/{multi_id}/content")).bearer(&key))
        .await;
    suite.check(
        "SPEC§3",
        "content of a cancelled task: 409 task not completed",
        checks::api_error(&r, 409, "task not completed"),
    );

    // Failure.
    let fail_id = failing.json()["task_id"]
        .as_str()
        .unwrap_or("missing")
        .to_owned();
    let (r, _) = wait_final(
        suite,
        &format!("/v1/videos/{fail_id}"),
        &["completed", "failed", "cancelled"],
        &["queued", "in_progress", "failed"],
    )
    .await;
    let v = checks::field(&r, "/status", &json!("failed"))
        .and_then(|()| checks::field(&r, "/error/code", &json!("upstream_error")));
    suite.check(
        "CONTRACT§5.3",
        "x-relay-sim fail: failed with upstream_error",
        v,
    );

    // Moderation of a rejected prompt, once the task has ended.
    let rej_id = rejected.json()["task_id"]
        .as_str()
        .unwrap_or("missing")
        .to_owned();
    let _ = wait_final(
        suite,
        &format!("/v1/videos/{rej_id}"),
        &["completed", "failed", "cancelled"],
        &statuses,
    )
    .await;
    let r = suite
        .send(
            Req::post("/api/generation/video/moderation-result")
                .bearer(&key)
                .json(&json!({"task_id": rej_id})),
        )
        .await;
    suite.check(
        "CONTRACT§2.4",
        "x-relay-sim reject: moderation rejected",
        checks::field(&r, "/status", &json!("rejected")),
    );
    let r = suite
        .send(
            Req::post("/api/generation/video/moderation-result")
                .bearer(&key)
                .json(&json!({"task_id": "video_nope"})),
        )
        .await;
    suite.check(
        "CONTRACT§2.4",
        "moderation of an unknown task: 404",
        checks::api_error(&r, 404, "not found"),
    );

    // Timeout.
    match (stuck, stuck_timeout) {
        (Some(stuck), Some(_)) => {
            let id = stuck.json()["task_id"]
                .as_str()
                .unwrap_or("missing")
                .to_owned();
            let (r, _) = wait_final(
                suite,
                &format!("/v1/videos/{id}"),
                &["completed", "failed", "cancelled"],
                &["queued", "in_progress", "failed"],
            )
            .await;
            let v = checks::field(&r, "/status", &json!("failed"))
                .and_then(|()| checks::field(&r, "/error/code", &json!("timeout")));
            suite.check("CONTRACT§1.3", "x-relay-sim stuck: failed with timeout", v);
        }
        _ => suite.skip(
            "CONTRACT§1.3",
            "timeout",
            "the relay's task timeout is not short (give --task-timeout-secs <= 20)",
        ),
    }

    // Framing, list paging, and header and field faults.
    let data_png = format!("data:image/png;base64,{}", base64(PNG_1X1));
    let framing: [(&str, Value, &str); 2] = [
        (
            "no size, no frame: adaptive is 16:9",
            video(json!({"size": null})),
            "16:9",
        ),
        (
            "no size: adaptive follows the first frame",
            video(json!({"size": null, "first_frame": data_png})),
            "1:1",
        ),
    ];
    for (name, body, ratio) in framing {
        let r = suite.send(create("delay_ms=60000", body)).await;
        suite.check(
            "SPEC§4.1",
            name,
            checks::field(&r, "/aspect_ratio", &json!(ratio)),
        );
        let id = id_of(&r, "task_id");
        let _ = suite
            .send(Req::post(format!("/v1/videos/{id}/cancel")).bearer(&key))
            .await;
    }
    let r = suite.send(create("explode", video(json!({})))).await;
    suite.check(
        "CONTRACT§5.3",
        "an unknown x-relay-sim directive: 400 invalid request",
        checks::api_error(&r, 400, "invalid request"),
    );
    let r = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .json(&video(json!({"reference_video_audio": true}))),
        )
        .await;
    suite.check(
        "CONTRACT§1.1",
        "reference_video_audio without reference_video: 400 invalid request",
        checks::api_error(&r, 400, "invalid request"),
    );
    let r = suite
        .send(Req::get("/v1/videos?limit=1").bearer(&key))
        .await;
    let v = checks::field(&r, "/has_more", &json!(true)).and_then(|()| {
        match r.json()["data"].as_array().map(Vec::len) {
            Some(1) => Ok(()),
            other => Err(format!("expected 1 task with limit=1, got {other:?}")),
        }
    });
    suite.check("CONTRACT§1.3", "list limit=1 pages with has_more", v);
    let r = suite
        .send(Req::get("/v1/videos?limit=0").bearer(&key))
        .await;
    suite.check(
        "CONTRACT§1.3",
        "list limit=0: 400 invalid request",
        checks::api_error(&r, 400, "invalid request"),
    );

    // Delete.
    let r = suite
        .send(Req::new(http::Method::DELETE, &path).bearer(&key))
        .await;
    let v = checks::field(&r, "/object", &json!("video.deleted"))
        .and_then(|()| checks::field(&r, "/deleted", &json!(true)));
    suite.check("CONTRACT§0", "delete answers video.deleted", v);
    let r = suite.send(Req::get(&path).bearer(&key)).await;
    suite.check(
        "CONTRACT§1.3",
        "a deleted task is 404",
        checks::api_error(&r, 404, "not found"),
    );
}
