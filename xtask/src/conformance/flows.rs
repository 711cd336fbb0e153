//! The suite's request flows: both video formats, assets, moderation and messages.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::checks::{self, Verdict};
use super::client::{Req, Resp, multipart};
use super::{PNG_1X1, Suite};

/// How long a task may take to reach a final status before the suite gives up on it.
const TASK_DEADLINE: Duration = Duration::from_secs(45);

fn video(extra: Value) -> Value {
    let mut body = json!({"model": "model_h3", "prompt": "a conformance test", "size": "64x64"});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v.is_null() {
                b.remove(k);
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    body
}

/// The final record of a task, after polling it; and whether every status seen was one of
/// `allowed` and progress never went down.
async fn wait_final(
    suite: &Suite,
    path: &str,
    finals: &[&str],
    allowed: &[&str],
) -> (Resp, Verdict) {
    let started = Instant::now();
    let mut last_progress = 0;
    let mut verdict = Ok(());
    loop {
        let r = suite.send(Req::get(path).bearer(&suite.args.key)).await;
        let body = r.json();
        let status = body["status"].as_str().unwrap_or_default().to_owned();
        if !allowed.contains(&status.as_str()) && verdict.is_ok() {
            verdict = Err(format!(
                "expected a status in {allowed:?}, got {}",
                r.describe()
            ));
        }
        if let Some(p) = body["progress"].as_u64() {
            if p < last_progress && verdict.is_ok() {
                verdict = Err(format!(
                    "expected progress never to go down, got {last_progress} then {p}"
                ));
            }
            last_progress = p;
        }
        if finals.contains(&status.as_str()) || r.status != 200 {
            return (r, verdict);
        }
        if started.elapsed() > TASK_DEADLINE {
            return (
                r,
                Err(format!(
                    "expected a final status within {TASK_DEADLINE:?}, got {status}"
                )),
            );
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

pub async fn first_format_errors(suite: &mut Suite) {
    let s = "SPEC§7";
    let key = suite.args.key.clone();
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "model other than model_h3",
            video(json!({"model": "sora-2"})),
            400,
            "invalid model",
        ),
        (
            "model missing",
            video(json!({"model": null})),
            400,
            "invalid model",
        ),
        (
            "prompt missing",
            video(json!({"prompt": null})),
            400,
            "invalid prompt",
        ),
        (
            "prompt wrong type",
            video(json!({"prompt": 5})),
            400,
            "invalid prompt",
        ),
        (
            "size malformed",
            video(json!({"size": "big"})),
            400,
            "invalid size",
        ),
        (
            "size out of range",
            video(json!({"size": "10x10"})),
            400,
            "invalid size",
        ),
        (
            "aspect_ratio unknown",
            video(json!({"size": null, "aspect_ratio": "5:5"})),
            400,
            "invalid ratio",
        ),
        (
            "duration 4",
            video(json!({"duration": 4})),
            400,
            "invalid duration",
        ),
        (
            "duration 16",
            video(json!({"duration": 16})),
            400,
            "invalid duration",
        ),
        (
            "duration wrong type",
            video(json!({"duration": "abc"})),
            400,
            "invalid duration",
        ),
        (
            "seconds and duration differ",
            video(json!({"duration": 5, "seconds": "6"})),
            400,
            "invalid duration",
        ),
        (
            "two audio references",
            video(json!({"audio_url": ["http://a.example/1.mp3", "http://a.example/2.mp3"]})),
            400,
            "reference limit exceeded",
        ),
        (
            "two video references",
            video(json!({"reference_video": ["http://a.example/1.mp4", "http://a.example/2.mp4"]})),
            400,
            "reference limit exceeded",
        ),
        (
            "two first frames",
            video(
                json!({"first_frame": "http://a.example/1.png", "input_reference": "http://a.example/2.png"}),
            ),
            400,
            "reference limit exceeded",
        ),
        (
            "image not a URL",
            video(json!({"first_frame": "not a url"})),
            400,
            "invalid image",
        ),
        (
            "image unreachable",
            video(json!({"first_frame": "http://127.0.0.1:9/x.png"})),
            400,
            "invalid image",
        ),
        (
            "image not an image",
            video(json!({"first_frame": "data:text/plain;base64,aGVsbG8="})),
            400,
            "invalid image",
        ),
        (
            "audio of the wrong form",
            video(json!({"audio_url": "ftp://a.example/x.mp3"})),
            400,
            "invalid audio",
        ),
        (
            "video of the wrong form",
            video(json!({"reference_video": "ftp://a.example/x.mp4"})),
            400,
            "invalid video",
        ),
        // The contract's check order: model, prompt, size, aspect_ratio, duration, references.
        (
            "order: model before size",
            video(json!({"model": "x", "size": "big"})),
            400,
            "invalid model",
        ),
        (
            "order: prompt before size",
            video(json!({"prompt": "", "size": "big"})),
            400,
            "invalid prompt",
        ),
        (
            "order: size before duration",
            video(json!({"size": "big", "duration": 99})),
            400,
            "invalid size",
        ),
        (
            "order: ratio before duration",
            video(json!({"size": null, "aspect_ratio": "5:5", "duration": 99})),
            400,
            "invalid ratio",
        ),
        (
            "order: duration before references",
            video(json!({"duration": 99, "audio_url": ["a", "b"]})),
            400,
            "invalid duration",
        ),
        (
            "order: counts before forms",
            video(json!({"audio_url": ["a", "b"], "first_frame": "not a url"})),
            400,
            "reference limit exceeded",
        ),
    ];
    for (name, body, status, message) in cases {
        let r = suite
            .send(Req::post("/v1/videos").bearer(&key).json(&body))
            .await;
        suite.check(
            s,
            &format!("POST /v1/videos {name}: {status} {message}"),
            checks::api_error(&r, status, message),
        );
    }
    let r = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .raw("application/json", "{not json"),
        )
        .await;
    suite.check(
        "CONTRACT§0.2",
        "POST /v1/videos body not JSON: 400 invalid request",
        checks::api_error(&r, 400, "invalid request"),
    );
    let r = suite
        .send(
            Req::post("/v1/videos")
                .bearer(&key)
                .raw("text/plain", "hello"),
        )
        .await;
    suite.check(
        "CONTRACT§0.2",
        "POST /v1/videos text/plain: 415",
        checks::api_error(&r, 415, "unsupported media type"),
    );
    // 413 comes before any field check on this path (CONTRACT §4.3).
    let pad = "x".repeat(suite.args.max_body_bytes + 1024);
    let big = video(json!({"model": "nope", "padding": pad}));
    let r = suite
        .send(Req::post("/v1/videos").bearer(&key).json(&big))
        .await;
    suite.check(
        "SPEC§7",
        "POST /v1/videos over max_body_bytes: 413 before fields",
        checks::api_error(&r, 413, "Payload Too Large"),
    );
}

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

/// Uploads a file asset and returns its id.
async fn upload(suite: &Suite, key: &str, lib: &str, bytes: &[u8]) -> Resp {
    let (ctype, body) = multipart(&[("file", Some("f.png"), "application/octet-stream", bytes)]);
    suite
        .send(
            Req::post(format!("/v1/asset-libraries/{lib}/assets"))
                .bearer(key)
                .raw(&ctype, body),
        )
        .await
}

async fn wait_asset(suite: &Suite, key: &str, id: &str) -> Resp {
    let started = Instant::now();
    loop {
        let r = suite
            .send(Req::get(format!("/v1/assets/{id}")).bearer(key))
            .await;
        if r.json()["status"] != "processing" || started.elapsed() > TASK_DEADLINE {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn id_of(r: &Resp, field: &str) -> String {
    r.json()[field].as_str().unwrap_or("missing").to_owned()
}

pub async fn second_format(suite: &mut Suite) {
    let s = "SPEC§4.4";
    let key = suite.args.key.clone();
    let r = suite
        .send(
            Req::post("/v1/asset-libraries")
                .bearer(&key)
                .json(&json!({"name": "conformance"})),
        )
        .await;
    let v = checks::field(&r, "/object", &json!("asset_library"))
        .and_then(|()| checks::field(&r, "/family", &json!("gen2")));
    suite.check("CONTRACT§2.2", "create a library of the key's family", v);
    let lib = id_of(&r, "id");
    let r = upload(suite, &key, &lib, PNG_1X1).await;
    suite.check(
        "CONTRACT§2.2",
        "upload answers the asset processing",
        checks::field(&r, "/status", &json!("processing")),
    );
    let image = id_of(&r, "id");
    let r = upload(suite, &key, &lib, b"this is not a supported file").await;
    let broken = id_of(&r, "id");
    let r = wait_asset(suite, &key, &image).await;
    suite.check(
        "SPEC§1",
        "an image asset becomes active",
        checks::field(&r, "/status", &json!("active")),
    );
    let r = wait_asset(suite, &key, &broken).await;
    suite.check(
        "SPEC§2.3",
        "an unsupported file becomes failed",
        checks::field(&r, "/status", &json!("failed")),
    );
    let foreign = match suite.args.key_group2.clone() {
        Some(other) => {
            let r = suite
                .send(
                    Req::post("/v1/asset-libraries")
                        .bearer(&other)
                        .json(&json!({"name": "conformance-motion"})),
                )
                .await;
            let motion_lib = id_of(&r, "id");
            let r = upload(suite, &other, &motion_lib, PNG_1X1).await;
            let id = id_of(&r, "id");
            let r = wait_asset(suite, &other, &id).await;
            suite.check(
                "SPEC§2.3",
                "a motion key's asset becomes active",
                checks::field(&r, "/status", &json!("active")),
            );
            let r = suite
                .send(Req::get(format!("/v1/assets/{image}")).bearer(&other))
                .await;
            suite.check(
                "CONTRACT§0",
                "another key's asset is 404",
                checks::api_error(&r, 404, "not found"),
            );
            let body = json!({"model": "gen2-pro", "prompt": "p", "assets": [{"id": id, "role": "first_frame"}]});
            let r = suite
                .send(Req::post("/v1/video/generations").bearer(&key).json(&body))
                .await;
            suite.check(
                "CONTRACT§2.3",
                "another key's asset in a generation: 400 asset not found",
                checks::api_error(&r, 400, "asset not found"),
            );
            Some((other, motion_lib, id))
        }
        None => None,
    };

    // SPEC §7's check order, one pair of faults at a time.
    let generation = |extra: Value| {
        let mut b = json!({"model": "gen2-pro", "prompt": "a conformance test", "duration": 2, "resolution": "480p", "ratio": "16:9"});
        if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        b
    };
    let first = |id: &str| json!([{"id": id, "role": "first_frame"}]);
    let pad = "x".repeat(suite.args.max_body_bytes + 1024);
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "unknown model",
            generation(json!({"model": "nope", "resolution": "4k"})),
            400,
            "invalid model",
        ),
        (
            "model before group",
            generation(json!({"model": "nope"})),
            400,
            "invalid model",
        ),
        (
            "group before resolution",
            generation(json!({"model": "motion-1", "resolution": "480p"})),
            400,
            "group mismatch",
        ),
        (
            "resolution before duration",
            generation(json!({"resolution": "4k", "duration": 99})),
            400,
            "invalid resolution",
        ),
        (
            "duration before ratio",
            generation(json!({"duration": 99, "ratio": "7:7"})),
            400,
            "invalid duration",
        ),
        (
            "joint rule blames duration",
            generation(json!({"resolution": "1080p", "duration": 12})),
            400,
            "invalid duration",
        ),
        (
            "ratio before assets",
            generation(json!({"ratio": "7:7", "assets": first("asset_nope")})),
            400,
            "invalid ratio",
        ),
        (
            "asset not found",
            generation(json!({"assets": first("asset_nope")})),
            400,
            "asset not found",
        ),
        (
            "asset not active",
            generation(json!({"assets": first(&broken)})),
            400,
            "asset not active",
        ),
        (
            "413 is last",
            generation(json!({"ratio": "7:7", "padding": pad.clone()})),
            400,
            "invalid ratio",
        ),
        (
            "body size last",
            generation(json!({"padding": pad.clone()})),
            413,
            "Payload Too Large",
        ),
    ];
    for (name, body, status, message) in cases {
        let r = suite
            .send(Req::post("/v1/video/generations").bearer(&key).json(&body))
            .await;
        suite.check(
            "SPEC§7",
            &format!("generations {name}: {status} {message}"),
            checks::api_error(&r, status, message),
        );
    }
    // One owner with assets of two families: a key whose group the admin API changes between
    // two uploads.
    match two_families(suite).await {
        Ok((k, motion_asset, broken_k)) => {
            let cases = [
                (
                    "asset not active before family",
                    generation(
                        json!({"assets": [{"id": broken_k, "role": "first_frame"}, {"id": motion_asset, "role": "last_frame"}]}),
                    ),
                    400,
                    "asset not active",
                ),
                (
                    "cross-family asset",
                    generation(json!({"assets": first(&motion_asset)})),
                    400,
                    "asset family mismatch",
                ),
                (
                    "family before body size",
                    generation(json!({"assets": first(&motion_asset), "padding": pad.clone()})),
                    400,
                    "asset family mismatch",
                ),
            ];
            for (name, body, status, message) in cases {
                let r = suite
                    .send(Req::post("/v1/video/generations").bearer(&k).json(&body))
                    .await;
                suite.check(
                    "SPEC§7",
                    &format!("generations {name}: {status} {message}"),
                    checks::api_error(&r, status, message),
                );
            }
        }
        Err(why) => suite.skip("SPEC§7", "cross-family asset", &why),
    }
    if let Some((other, _, _)) = &foreign {
        let r = suite
            .send(
                Req::post("/v1/video/generations")
                    .bearer(other)
                    .json(&generation(json!({}))),
            )
            .await;
        suite.check(
            "SPEC§5",
            "a motion key on a gen2 model: 400 group mismatch",
            checks::api_error(&r, 400, "group mismatch"),
        );
    }

    // The full flow: adaptive ratio from a 1x1 first frame, last frame returned.
    let create = |sim: &str, body: Value| {
        Req::post("/v1/video/generations")
            .bearer(&key)
            .header("x-relay-sim", sim)
            .json(&body)
    };
    let main = suite
        .send(create(
            "delay_ms=1000",
            generation(
                json!({"ratio": "adaptive", "assets": first(&image), "return_last_frame": true}),
            ),
        ))
        .await;
    suite.check(
        s,
        "submit answers task_id, queued",
        checks::field(&main, "/status", &json!("queued")).and_then(|()| {
            if main.json()["task_id"].is_string() {
                Ok(())
            } else {
                Err(format!("expected task_id, got {}", main.describe()))
            }
        }),
    );
    let plain = suite
        .send(create(
            "delay_ms=200",
            generation(json!({"model": "gen2-lite", "duration": 5})),
        ))
        .await;
    let failing = suite
        .send(create("fail; delay_ms=200", generation(json!({}))))
        .await;
    let rejected = suite
        .send(create("reject; delay_ms=200", generation(json!({}))))
        .await;
    let slow = suite
        .send(create("delay_ms=60000", generation(json!({}))))
        .await;
    let stuck = match suite.args.task_timeout_secs.filter(|t| *t <= 20) {
        Some(_) => Some(suite.send(create("stuck", generation(json!({})))).await),
        None => None,
    };
    let r = suite
        .send(Req::get(format!("/v1/video/generations/{}", id_of(&slow, "task_id"))).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§0.1a",
        "unfinished generation carries openai-poll-after-ms",
        checks::header(&r, "openai-poll-after-ms", "5000"),
    );

    let allowed = ["queued", "running", "succeeded"];
    let finals = ["succeeded", "failed", "cancelled"];
    let path = format!("/v1/video/generations/{}", id_of(&main, "task_id"));
    let (done, v) = wait_final(suite, &path, &finals, &allowed).await;
    suite.check("CONTRACT§2.3", "statuses queued -> running -> succeeded", v);
    suite.check(
        s,
        "generation reaches succeeded",
        checks::field(&done, "/status", &json!("succeeded")),
    );
    suite.check(
        "CONTRACT§2.3",
        "adaptive ratio follows the first frame",
        checks::field(&done, "/ratio", &json!("1:1")),
    );
    let body = done.json();
    let rel = |url: &str| url.find("/files/").map(|i| url[i..].to_owned());
    match body["video_url"].as_str().and_then(rel) {
        Some(video_path) => {
            let r = suite.send(Req::get(&video_path)).await;
            let whole = r.body.clone();
            suite.check(
                "SPEC§1",
                "video_url downloads without a key",
                checks::status(&r, 200),
            );
            suite.check(
                "SPEC§1",
                "video_url is an MP4 of 480x480",
                checks::mp4(&whole, Some(480), Some(480)),
            );
            if whole.len() > 100 {
                let r = suite
                    .send(Req::get(&video_path).header("range", "bytes=10-59"))
                    .await;
                suite.check(
                    "CONTRACT§2.3",
                    "video_url answers Range",
                    checks::range(&r, &whole, 10, 59),
                );
            }
            let tampered = match video_path.rfind("sig=") {
                Some(i) => format!("{}sig={}", &video_path[..i], "0".repeat(64)),
                None => format!("{video_path}&sig=00"),
            };
            let r = suite.send(Req::get(&tampered)).await;
            suite.check(
                "CONTRACT§2.3",
                "a tampered signature is 404",
                checks::api_error(&r, 404, "not found"),
            );
        }
        None => {
            suite.check(
                "SPEC§2.2",
                "video_url once succeeded",
                Err(format!(
                    "expected a /files/ video_url, got {}",
                    done.describe()
                )),
            );
        }
    }
    match body["last_frame_url"].as_str().and_then(rel) {
        Some(p) => {
            let r = suite.send(Req::get(&p)).await;
            suite.check(
                "SPEC§2.2",
                "last frame is a PNG",
                checks::status(&r, 200).and_then(|()| checks::png(&r.body)),
            );
        }
        None => {
            suite.check(
                "SPEC§2.2",
                "last_frame_url with return_last_frame",
                Err(format!("expected last_frame_url, got {}", done.describe())),
            );
        }
    }
    let r = suite
        .send(
            Req::post("/api/generation/video/moderation-result")
                .bearer(&key)
                .json(&json!({"task_id": id_of(&main, "task_id")})),
        )
        .await;
    let v = checks::field(&r, "/status", &json!("passed")).and_then(|()| {
        if r.json()["categories"].is_array() {
            Ok(())
        } else {
            Err("expected categories".into())
        }
    });
    suite.check("SPEC§4.4", "moderation result passed", v);

    let (r, _) = wait_final(
        suite,
        &format!("/v1/video/generations/{}", id_of(&plain, "task_id")),
        &finals,
        &allowed,
    )
    .await;
    let v = checks::field(&r, "/status", &json!("succeeded")).and_then(|()| {
        match r.json().get("last_frame_url") {
            None | Some(Value::Null) => Ok(()),
            Some(v) => Err(format!(
                "expected no last_frame_url without return_last_frame, got {v}"
            )),
        }
    });
    suite.check("SPEC§2.2", "no last frame unless asked", v);
    let (r, _) = wait_final(
        suite,
        &format!("/v1/video/generations/{}", id_of(&failing, "task_id")),
        &finals,
        &["queued", "running", "failed"],
    )
    .await;
    suite.check(
        "CONTRACT§5.3",
        "x-relay-sim fail: generation failed",
        checks::field(&r, "/status", &json!("failed")),
    );
    let rej = id_of(&rejected, "task_id");
    let _ = wait_final(
        suite,
        &format!("/v1/video/generations/{rej}"),
        &finals,
        &allowed,
    )
    .await;
    let r = suite
        .send(
            Req::post("/api/generation/video/moderation-result")
                .bearer(&key)
                .json(&json!({"task_id": rej})),
        )
        .await;
    suite.check(
        "CONTRACT§2.4",
        "x-relay-sim reject: generation moderation rejected",
        checks::field(&r, "/status", &json!("rejected")),
    );
    let slow_id = id_of(&slow, "task_id");
    let r = suite
        .send(Req::post(format!("/v1/video/generations/{slow_id}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§2.3",
        "cancel a generation",
        checks::field(&r, "/status", &json!("cancelled")),
    );
    let r = suite
        .send(Req::post(format!("/v1/video/generations/{slow_id}/cancel")).bearer(&key))
        .await;
    suite.check(
        "CONTRACT§2.3",
        "cancel again: 409 task not cancellable",
        checks::api_error(&r, 409, "task not cancellable"),
    );
    match stuck {
        Some(stuck) => {
            let path = format!("/v1/video/generations/{}", id_of(&stuck, "task_id"));
            let (r, _) = wait_final(suite, &path, &finals, &["queued", "running", "failed"]).await;
            let v = checks::field(&r, "/status", &json!("failed"))
                .and_then(|()| checks::field(&r, "/error/code", &json!("timeout")));
            suite.check(
                "SPEC§8",
                "x-relay-sim stuck: generation failed with timeout",
                v,
            );
        }
        None => suite.skip(
            "SPEC§8",
            "generation timeout",
            "the relay's task timeout is not short (give --task-timeout-secs <= 20)",
        ),
    }

    // Clean up.
    let r = suite
        .send(Req::new(http::Method::DELETE, format!("/v1/assets/{image}")).bearer(&key))
        .await;
    suite.check(
        "SPEC§1",
        "delete an asset",
        checks::field(&r, "/object", &json!("asset.deleted")),
    );
    let r = suite
        .send(Req::get(format!("/v1/assets/{image}")).bearer(&key))
        .await;
    suite.check(
        "SPEC§1",
        "a deleted asset is 404",
        checks::api_error(&r, 404, "not found"),
    );
    let r = suite
        .send(Req::new(http::Method::DELETE, format!("/v1/asset-libraries/{lib}")).bearer(&key))
        .await;
    suite.check(
        "SPEC§1",
        "delete a library",
        checks::field(&r, "/object", &json!("asset_library.deleted")),
    );
    if let Some((other, motion_lib, _)) = foreign {
        let _ = suite
            .send(
                Req::new(
                    http::Method::DELETE,
                    format!("/v1/asset-libraries/{motion_lib}"),
                )
                .bearer(&other),
            )
            .await;
    }
}

/// A new key owning a failed `gen2` asset and an active `motion` asset, its group `gen2`
/// again: (key, motion asset, failed asset).
async fn two_families(suite: &mut Suite) -> Result<(String, String, String), String> {
    let Some(admin) = suite.args.admin_token.clone() else {
        return Err("no --admin-token to give one key assets of two families".into());
    };
    let r = suite
        .send(
            Req::post("/admin/keys")
                .bearer(&admin)
                .json(&json!({"name": "conformance-families", "group": "gen2"})),
        )
        .await;
    let (id, k) = (id_of(&r, "id"), id_of(&r, "key"));
    let regroup = |group: &str| {
        Req::new(http::Method::PATCH, format!("/admin/keys/{id}"))
            .bearer(&admin)
            .json(&json!({"group": group}))
    };
    let r = suite
        .send(
            Req::post("/v1/asset-libraries")
                .bearer(&k)
                .json(&json!({"name": "conformance-gen2"})),
        )
        .await;
    let broken = id_of(
        &upload(suite, &k, &id_of(&r, "id"), b"not a supported file").await,
        "id",
    );
    let r = suite.send(regroup("motion")).await;
    suite.check(
        "CONTRACT§5.2",
        "change a key's group",
        checks::field(&r, "/group", &json!("motion")),
    );
    let r = suite
        .send(
            Req::post("/v1/asset-libraries")
                .bearer(&k)
                .json(&json!({"name": "conformance-motion"})),
        )
        .await;
    suite.check(
        "CONTRACT§2.2",
        "a library takes the key's group's family",
        checks::field(&r, "/family", &json!("motion")),
    );
    let motion = id_of(&upload(suite, &k, &id_of(&r, "id"), PNG_1X1).await, "id");
    let _ = suite.send(regroup("gen2")).await;
    let r = wait_asset(suite, &k, &motion).await;
    suite.check(
        "SPEC§2.3",
        "an asset of the motion family becomes active",
        checks::field(&r, "/status", &json!("active")),
    );
    let _ = wait_asset(suite, &k, &broken).await;
    Ok((k, motion, broken))
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"model": "sim-chat", "max_tokens": 20, "messages": [{"role": "user", "content": "Hello there relay"}]});
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            if v.is_null() {
                o.remove(k);
            } else {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    b
}

pub async fn messages(suite: &mut Suite) {
    let s = "SPEC§4.5";
    let key = suite.args.key.clone();
    let msg = |body: &Value| {
        Req::post("/v1/messages")
            .bearer(&key)
            .header("vendor-version", "2023-06-01")
            .json(body)
    };
    let r = suite
        .send(
            Req::post("/v1/messages")
                .bearer(&key)
                .json(&chat(json!({}))),
        )
        .await;
    suite.check(
        "SPEC§9",
        "messages without vendor-version: 400",
        checks::vendor_error(
            &r,
            400,
            "invalid_request_error",
            |m| m == "vendor-version: header is required",
            "\"vendor-version: header is required\"",
        ),
    );
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "max_tokens 0",
            chat(json!({"max_tokens": 0})),
            "max_tokens:",
        ),
        (
            "max_tokens missing",
            chat(json!({"max_tokens": null})),
            "max_tokens:",
        ),
        (
            "temperature 1.5",
            chat(json!({"temperature": 1.5})),
            "temperature:",
        ),
        (
            "temperature -0.1",
            chat(json!({"temperature": -0.1})),
            "temperature:",
        ),
        (
            "messages missing",
            chat(json!({"messages": null})),
            "messages",
        ),
        ("model missing", chat(json!({"model": null})), "model"),
        (
            "stop_sequences a string",
            chat(json!({"stop_sequences": "x"})),
            "stop_sequences:",
        ),
    ];
    for (name, body, prefix) in cases {
        let r = suite.send(msg(&body)).await;
        suite.check(
            s,
            &format!("messages {name}: 400 naming the field"),
            checks::vendor_error(
                &r,
                400,
                "invalid_request_error",
                |m| m.starts_with(prefix),
                &format!("\"{prefix}...\""),
            ),
        );
    }
    let r = suite
        .send(msg(&chat(json!({"model": "no-such-model"}))))
        .await;
    suite.check(
        "CONTRACT§3",
        "messages unknown model: 400 invalid model",
        checks::vendor_error(
            &r,
            400,
            "invalid_request_error",
            |m| m == "invalid model",
            "\"invalid model\"",
        ),
    );

    let r = suite.send(msg(&chat(json!({"temperature": 1})))).await;
    let b = r.json();
    let usage_ok = [
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .all(|f| b["usage"][f].is_u64());
    let v = checks::status(&r, 200).and_then(|()| {
        if b["type"] == "message" && b["role"] == "assistant" && b["id"].is_string() && b["content"][0]["type"] == "text" && b["content"][0]["text"].is_string() && b["stop_reason"] == "end_turn" && usage_ok {
            Ok(())
        } else {
            Err(format!("expected a message (type, role, content text, stop_reason end_turn, four usage integers), got {}", r.describe()))
        }
    });
    suite.check(s, "messages answer shape (Bearer)", v);
    let r = suite
        .send(
            Req::post("/v1/messages")
                .header("x-api-key", &key)
                .header("anthropic-version", "2023-06-01")
                .json(&chat(json!({}))),
        )
        .await;
    suite.check(
        "SPEC§5",
        "messages with x-api-key and anthropic-version",
        checks::status(&r, 200),
    );
    let r = suite.send(msg(&chat(json!({"stream": true})))).await;
    let v = checks::status(&r, 200)
        .and_then(|()| match r.header("content-type") {
            Some(t) if t.starts_with("text/event-stream") => Ok(()),
            other => Err(format!("expected text/event-stream, got {other:?}")),
        })
        .and_then(|()| checks::sse_grammar(&String::from_utf8_lossy(&r.body)).map(|_| ()));
    suite.check("CONTRACT§3", "stream event grammar", v);
    let r = suite
        .send(msg(&chat(json!({}))).header("x-relay-sim", "error=500"))
        .await;
    suite.check(
        "CONTRACT§0.1",
        "upstream failure: 500 api_error upstream error",
        checks::vendor_error(
            &r,
            500,
            "api_error",
            |m| m == "upstream error",
            "\"upstream error\"",
        ),
    );
    let v = match (
        r.header("x-should-retry"),
        r.header("retry-after").and_then(|v| v.parse::<u64>().ok()),
        r.header("retry-after-ms")
            .and_then(|v| v.parse::<u64>().ok()),
    ) {
        (Some("true"), Some(secs), Some(_)) if secs < 120 => Ok(()),
        (Some("false"), None, None) => Ok(()),
        other => Err(format!(
            "expected x-should-retry true with retry-after (< 120 s) and retry-after-ms, or false with neither, got {other:?}"
        )),
    };
    suite.check("CONTRACT§0.1a", "a 500 says whether to retry", v);
    let pad = "x".repeat(suite.args.max_body_bytes + 1024);
    let r = suite.send(msg(&chat(json!({"padding": pad})))).await;
    suite.check(
        "CONTRACT§0.2",
        "messages over max_body_bytes: 413 request_too_large",
        checks::vendor_error(
            &r,
            413,
            "request_too_large",
            |m| m == "Payload Too Large",
            "\"Payload Too Large\"",
        ),
    );
    let r = suite
        .send(
            Req::post("/v1/messages/count_tokens")
                .bearer(&key)
                .header("vendor-version", "2023-06-01")
                .json(&chat(json!({"max_tokens": null}))),
        )
        .await;
    suite.check(
        "CONTRACT§3",
        "count_tokens answers input_tokens",
        if r.json()["input_tokens"].is_u64() {
            Ok(())
        } else {
            Err(format!("expected input_tokens, got {}", r.describe()))
        },
    );
    let r = suite.send(Req::get("/v1/models").bearer(&key)).await;
    let listed = r.json()["data"]
        .as_array()
        .is_some_and(|d| d.iter().any(|m| m["id"] == "sim-chat"));
    suite.check(
        "CONTRACT§3",
        "models lists sim-chat",
        if listed {
            Ok(())
        } else {
            Err(format!("expected sim-chat, got {}", r.describe()))
        },
    );
    let r = suite.send(msg(&chat(json!({"max_tokens": 1})))).await;
    suite.check(
        "CONTRACT§3",
        "max_tokens cuts the answer: stop_reason max_tokens",
        checks::field(&r, "/stop_reason", &json!("max_tokens")),
    );
    let r = suite
        .send(msg(&chat(json!({"stream": true}))).header("x-relay-sim", "fail"))
        .await;
    let text = String::from_utf8_lossy(&r.body);
    let v = checks::status(&r, 200).and_then(|()| {
        if text.contains("event: error\n") && !text.contains("event: message_stop") {
            Ok(())
        } else {
            Err(format!(
                "expected a stream ending in an error event without message_stop, got {}",
                r.describe()
            ))
        }
    });
    suite.check(
        "CONTRACT§3",
        "a stream failing after it began ends with an error event",
        v,
    );
}

/// SPEC §7 Billing: failed and cancelled tasks are not billed; the pre-deduction is refunded.
pub async fn billing(suite: &mut Suite) {
    let s = "SPEC§7";
    let Some(admin) = suite.args.admin_token.clone() else {
        suite.skip(s, "billing", "no --admin-token to read a key's ledger");
        return;
    };
    let r = suite
        .send(
            Req::post("/admin/keys")
                .bearer(&admin)
                .json(&json!({"name": "conformance-billing", "group": "gen2", "quota": 1000})),
        )
        .await;
    let (id, k) = (id_of(&r, "id"), id_of(&r, "key"));
    let create = |sim: &str| {
        Req::post("/v1/videos")
            .bearer(&k)
            .header("x-relay-sim", sim)
            .json(&video(json!({})))
    };
    let cancelled = suite.send(create("delay_ms=60000")).await;
    let failing = suite.send(create("fail; delay_ms=200")).await;
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        "CONTRACT§4.1",
        "a task is pre-deducted",
        checks::field(&r, "/quota_remaining", &json!(900)),
    );
    let _ = suite
        .send(
            Req::post(format!(
                "/v1/videos/{}/cancel",
                id_of(&cancelled, "task_id")
            ))
            .bearer(&k),
        )
        .await;
    let started = Instant::now();
    let mut failed = false;
    while !failed && started.elapsed() < TASK_DEADLINE {
        let r = suite
            .send(Req::get(format!("/v1/videos/{}", id_of(&failing, "task_id"))).bearer(&k))
            .await;
        failed = matches!(
            r.json()["status"].as_str(),
            Some("failed" | "completed" | "cancelled")
        );
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}")).bearer(&admin))
        .await;
    suite.check(
        s,
        "failed and cancelled tasks are refunded in full",
        checks::field(&r, "/quota_remaining", &json!(1000)),
    );
    let r = suite
        .send(Req::get(format!("/admin/keys/{id}/ledger")).bearer(&admin))
        .await;
    let kinds: Vec<String> = r.json()["data"]
        .as_array()
        .map(|d| {
            d.iter()
                .map(|e| e["kind"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default();
    let sum: i64 = r.json()["data"]
        .as_array()
        .map(|d| d.iter().filter_map(|e| e["amount"].as_i64()).sum())
        .unwrap_or(-1);
    let v = if sum == 0
        && kinds.iter().filter(|k| *k == "prededuct").count() == 2
        && kinds.iter().filter(|k| *k == "refund").count() == 2
    {
        Ok(())
    } else {
        Err(format!(
            "expected two prededuct and two refund entries summing to 0, got {kinds:?} summing to {sum}"
        ))
    };
    suite.check(s, "the ledger shows each pre-deduction refunded", v);
    let r = suite
        .send(
            Req::new(http::Method::PATCH, format!("/admin/keys/{id}"))
                .bearer(&admin)
                .json(&json!({"quota": 10})),
        )
        .await;
    suite.check(
        "CONTRACT§5.2",
        "change a key's quota",
        checks::status(&r, 200),
    );
    let r = suite.send(create("delay_ms=200")).await;
    suite.check(
        "CONTRACT§0.2",
        "a task the quota cannot cover: 402 insufficient quota",
        checks::api_error(&r, 402, "insufficient quota"),
    );
    let _ = suite
        .send(Req::new(http::Method::DELETE, format!("/admin/keys/{id}")).bearer(&admin))
        .await;
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads() {
        assert_eq!(super::base64(b"hello"), "aGVsbG8=");
        assert_eq!(super::base64(b"hi!"), "aGkh");
        assert_eq!(super::base64(b"h"), "aA==");
    }
}
