//! The rest of the OpenAI video surface on the simulator: edits and extensions of a completed
//! video (new tasks with their own charge, refunded on failure) and characters.

use std::collections::HashMap;
use std::io::Cursor;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::billing::check_ledger;
use crate::harness::{Body, Multipart, Relay, mp4_head, png};

const WAIT: Duration = Duration::from_secs(60);

/// A multipart body naming `source` as the OpenAI SDK encodes `video={"id": ...}`.
fn derived(prompt: &str, source: &str, seconds: Option<&str>) -> Body {
    let mut form = Multipart::new()
        .text("prompt", prompt)
        .text("video[id]", source);
    if let Some(seconds) = seconds {
        form = form.text("seconds", seconds);
    }
    let (ct, body) = form.build();
    Body::Raw(ct, body)
}

async fn post(
    relay: &Relay,
    key: &str,
    path: &str,
    body: Body,
    headers: &[(&str, &str)],
) -> crate::harness::Answer {
    relay.call_as(key, Method::POST, path, body, headers).await
}

async fn completed_source(relay: &Relay, key: &str) -> String {
    let res = post(
        relay,
        key,
        "/v1/videos",
        Body::Json(
            json!({"model": "model_h3", "prompt": "a red fox", "size": "160x96", "seconds": "6"}),
        ),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        relay.wait_video_as(key, &id, WAIT).await["status"],
        "completed"
    );
    id
}

/// The amount of the key's `prededuct` entry of `task`.
async fn prededuct(relay: &Relay, key_id: &str, task: &str) -> i64 {
    let ledger = relay.ledger(key_id).await;
    ledger
        .iter()
        .find(|e| e["task_id"] == task && e["kind"] == "prededuct")
        .and_then(|e| e["amount"].as_i64())
        .unwrap_or_else(|| panic!("no prededuct of {task}: {ledger:?}"))
}

fn duration_of(video: &[u8]) -> f64 {
    channels::mp4probe::probe(Cursor::new(video.to_vec()))
        .expect("an MP4")
        .duration_secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_and_extend_a_completed_video() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let source = completed_source(&relay, &key).await;
    let mut statuses = HashMap::from([(source.clone(), "completed".to_owned())]);

    // An edit: a re-render with the new prompt, the source's model, size and seconds.
    let res = post(
        &relay,
        &key,
        "/v1/videos/edits",
        derived("the fox, at night", &source, None),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("openai-poll-after-ms"), Some("5000"));
    let v = res.json();
    let edit = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["status"], "queued");
    assert_eq!(v["edited_from_video_id"], source.as_str());
    assert_eq!(v["extended_from_video_id"], Value::Null);
    assert_eq!(v["remixed_from_video_id"], Value::Null);
    assert_eq!(v["prompt"], "the fox, at night");
    assert_eq!(
        (v["size"].as_str(), v["seconds"].as_str()),
        (Some("160x96"), Some("6"))
    );
    let done = relay.wait_video_as(&key, &edit, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["edited_from_video_id"], source.as_str());
    let video = relay
        .call_as(
            &key,
            Method::GET,
            &format!("/v1/videos/{edit}/content"),
            Body::Empty,
            &[],
        )
        .await;
    assert!((duration_of(&video.body) - 6.0).abs() <= 0.1);
    assert_eq!(prededuct(&relay, &key_id, &edit).await, -60);
    statuses.insert(edit, "completed".into());

    // The JSON form of the source works too.
    let res = post(
        &relay,
        &key,
        "/v1/videos/edits",
        Body::Json(json!({"prompt": "in JSON", "video": {"id": source}})),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let json_edit = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video_as(&key, &json_edit, WAIT).await;
    statuses.insert(json_edit, done["status"].as_str().unwrap().to_owned());

    // An extension: charged for its new seconds; its record shows the stitched total, and
    // its video starts from the source's last frame.
    let res = post(
        &relay,
        &key,
        "/v1/videos/extensions",
        derived("it runs on", &source, Some("5")),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.header("openai-poll-after-ms"), Some("5000"));
    let v = res.json();
    let ext = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["extended_from_video_id"], source.as_str());
    assert_eq!(v["edited_from_video_id"], Value::Null);
    assert_eq!(
        (
            v["size"].as_str(),
            v["seconds"].as_str(),
            v["duration"].as_u64()
        ),
        (Some("160x96"), Some("11"), Some(11))
    );
    assert_eq!(prededuct(&relay, &key_id, &ext).await, -50);
    let task = relay.app.store.task(&ext).await.unwrap().unwrap();
    let params: Value =
        serde_json::from_str(&serde_json::to_string(&task.params).unwrap()).unwrap();
    let first = params["first_frame"]
        .as_str()
        .expect("a first frame")
        .to_owned();
    assert_eq!(first, format!("{ext}/first_frame.png"));
    let done = relay.wait_video_as(&key, &ext, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let video = relay
        .call_as(
            &key,
            Method::GET,
            &format!("/v1/videos/{ext}/content"),
            Body::Empty,
            &[],
        )
        .await;
    assert!((duration_of(&video.body) - 11.0).abs() <= 0.1);
    statuses.insert(ext.clone(), "completed".into());

    // Extending an extension adds to its total.
    let res = post(
        &relay,
        &key,
        "/v1/videos/extensions",
        derived("more", &ext, Some("5")),
        &[],
    )
    .await;
    assert_eq!(res.json()["seconds"], "16", "{}", res.text());
    let again = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video_as(&key, &again, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    statuses.insert(again.clone(), "completed".into());

    // A 16 s video is longer than a creation may be: an edit of it says how long it is.
    post(
        &relay,
        &key,
        "/v1/videos/edits",
        derived("p", &again, None),
        &[],
    )
    .await
    .assert_error(400, "invalid duration", Some("seconds"));
    let res = post(
        &relay,
        &key,
        "/v1/videos/edits",
        derived("p", &again, Some("5")),
        &[],
    )
    .await;
    assert_eq!(res.json()["seconds"], "5", "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    statuses.insert(id, done["status"].as_str().unwrap().to_owned());

    // The 60 s cap on an extended total is `videos_v1::derive::check_extended`'s (its own
    // tests): reaching it here would render 31 and 46 s videos.

    // A failed edit and a failed extension are refunded.
    for path in ["/v1/videos/edits", "/v1/videos/extensions"] {
        let res = post(
            &relay,
            &key,
            path,
            derived("doomed", &source, Some("5")),
            &[("x-relay-sim", "fail")],
        )
        .await;
        assert_eq!(res.status, 200, "{}", res.text());
        let id = res.json()["id"].as_str().unwrap().to_owned();
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "failed", "{done}");
        statuses.insert(id, "failed".into());
    }
    check_ledger(&relay, &key_id, 10_000, 0, &statuses).await;

    // Every record reads with a first-format status.
    let list = relay
        .call_as(&key, Method::GET, "/v1/videos?limit=100", Body::Empty, &[])
        .await
        .json();
    for v in list["data"].as_array().unwrap() {
        let status = v["status"].as_str().unwrap();
        assert!(
            ["queued", "in_progress", "completed", "failed"].contains(&status),
            "{v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_and_extensions_refuse_bad_sources_naming_the_field() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(10_000)).await;
    let source = completed_source(&relay, &key).await;
    let before = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();

    for path in ["/v1/videos/edits", "/v1/videos/extensions"] {
        let seconds = Some("5");
        // No source, or an uploaded file (the relay edits only videos it made).
        let (ct, body) = Multipart::new()
            .text("prompt", "p")
            .text("seconds", "5")
            .build();
        post(&relay, &key, path, Body::Raw(ct, body), &[])
            .await
            .assert_error(400, "invalid request", Some("video"));
        let (ct, body) = Multipart::new()
            .text("prompt", "p")
            .text("seconds", "5")
            .file("video", "a.mp4", "video/mp4", &mp4_head())
            .build();
        let res = post(&relay, &key, path, Body::Raw(ct, body), &[]).await;
        res.assert_error(400, "invalid request", Some("video"));
        assert!(res.text().contains("uploaded file"), "{}", res.text());
        post(
            &relay,
            &key,
            path,
            Body::Json(json!({"prompt": "p", "video": "video_x"})),
            &[],
        )
        .await
        .assert_error(400, "invalid request", Some("video"));
        // Unknown, or another key's: 404 naming the field.
        post(&relay, &key, path, derived("p", "video_nope", seconds), &[])
            .await
            .assert_error(404, "not found", Some("video"));
        let other = relay.key.clone();
        post(&relay, &other, path, derived("p", &source, seconds), &[])
            .await
            .assert_error(404, "not found", Some("video"));
        // No prompt.
        let (ct, body) = Multipart::new()
            .text("video[id]", &source)
            .text("seconds", "5")
            .build();
        post(&relay, &key, path, Body::Raw(ct, body), &[])
            .await
            .assert_error(400, "invalid prompt", Some("prompt"));
        // Neither JSON nor multipart.
        post(
            &relay,
            &key,
            path,
            Body::Raw("text/plain".into(), b"p".to_vec()),
            &[],
        )
        .await
        .assert_error(415, "unsupported media type", None);
        // Not a POST.
        relay
            .call_as(&key, Method::GET, path, Body::Empty, &[])
            .await
            .assert_error(405, "method not allowed", None);
    }

    // An extension says how long it is, within the creation's bounds.
    let (ct, body) = Multipart::new()
        .text("prompt", "p")
        .text("video[id]", &source)
        .build();
    post(
        &relay,
        &key,
        "/v1/videos/extensions",
        Body::Raw(ct, body),
        &[],
    )
    .await
    .assert_error(400, "invalid duration", Some("seconds"));
    post(
        &relay,
        &key,
        "/v1/videos/extensions",
        derived("p", &source, Some("99")),
        &[],
    )
    .await
    .assert_error(400, "invalid duration", Some("seconds"));

    // A source still running: 409.
    let stuck = post(
        &relay,
        &key,
        "/v1/videos",
        Body::Json(json!({"model": "model_h3", "prompt": "stuck", "size": "96x96"})),
        &[("x-relay-sim", "stuck")],
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for path in ["/v1/videos/edits", "/v1/videos/extensions"] {
        let res = post(&relay, &key, path, derived("p", &stuck, Some("5")), &[]).await;
        res.assert_error(409, "task not completed", None);
    }
    relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{stuck}/cancel"),
            Body::Empty,
            &[],
        )
        .await;

    // None of the refusals charged anything: the key's balance is what it was (the stuck
    // source was refunded on cancel).
    let after = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(
        after["quota_remaining"], before["quota_remaining"],
        "{after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_beyond_the_quota_is_refused_whole() {
    let relay = Relay::start("").await;
    let (key_id, key) = relay.new_key("k", Some(70)).await;
    let source = completed_source(&relay, &key).await;
    // 60 spent on the source; an edit of its 6 s costs 60 more.
    let res = post(
        &relay,
        &key,
        "/v1/videos/edits",
        derived("p", &source, None),
        &[],
    )
    .await;
    res.assert_error(402, "insufficient quota", None);
    let list = relay
        .call_as(&key, Method::GET, "/v1/videos", Body::Empty, &[])
        .await
        .json();
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
    let key_record = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(key_record["quota_remaining"], 10, "{key_record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn characters_are_kept_per_key() {
    let relay = Relay::start("").await;
    let (_, key) = relay.new_key("k", None).await;
    let (ct, body) = Multipart::new()
        .text("name", "Ann")
        .file("video", "ann.mp4", "video/mp4", &mp4_head())
        .build();
    let res = post(
        &relay,
        &key,
        "/v1/videos/characters",
        Body::Raw(ct, body),
        &[],
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let c = res.json();
    let id = c["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("char_"), "{c}");
    assert_eq!(c["name"], "Ann");
    assert_eq!(c["object"], "video.character");
    assert!(c["created_at"].as_u64().is_some());
    let path = format!("/v1/videos/characters/{id}");
    let got = relay
        .call_as(&key, Method::GET, &path, Body::Empty, &[])
        .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.json(), c);

    // Another key's, or unknown: 404.
    relay.get(&path).await.assert_error(404, "not found", None);
    relay
        .call_as(
            &key,
            Method::GET,
            "/v1/videos/characters/char_nope",
            Body::Empty,
            &[],
        )
        .await
        .assert_error(404, "not found", None);

    // Bad input names its field.
    let cases: Vec<(Multipart, u16, &str, &str)> = vec![
        (
            Multipart::new().file("video", "a.mp4", "video/mp4", &mp4_head()),
            400,
            "invalid request",
            "name",
        ),
        (
            Multipart::new()
                .text("name", " ")
                .file("video", "a.mp4", "video/mp4", &mp4_head()),
            400,
            "invalid request",
            "name",
        ),
        (
            Multipart::new().text("name", "Ann"),
            400,
            "invalid video",
            "video",
        ),
        (
            Multipart::new()
                .text("name", "Ann")
                .file("video", "a.png", "image/png", &png(8, 8)),
            400,
            "invalid video",
            "video",
        ),
        (
            Multipart::new()
                .text("name", "Ann")
                .text("video", "not a file"),
            400,
            "invalid video",
            "video",
        ),
    ];
    for (form, status, message, field) in cases {
        let (ct, body) = form.build();
        post(
            &relay,
            &key,
            "/v1/videos/characters",
            Body::Raw(ct, body),
            &[],
        )
        .await
        .assert_error(status, message, Some(field));
    }
    post(
        &relay,
        &key,
        "/v1/videos/characters",
        Body::Json(json!({"name": "Ann"})),
        &[],
    )
    .await
    .assert_error(415, "unsupported media type", None);

    // Durable: there after a restart.
    let first_key = relay.key.clone();
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(first_key), "").await;
    let got = relay
        .call_as(&key, Method::GET, &path, Body::Empty, &[])
        .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.json(), c);
}
