//! The first format end to end on the simulator: create, poll, download, list, cancel, delete.

use std::collections::HashMap;
use std::io::Cursor;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::harness::{Body, MediaServer, Multipart, Relay, png, poll_until};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_create_poll_download() {
    let relay = Relay::start("").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a red fox runs through snow", "size": "160x96", "duration": 5}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert!(res.header("x-request-id").is_some());
    assert_eq!(res.header("x-request-id"), res.header("request-id"));
    let v = res.json();
    let id = v["task_id"].as_str().unwrap().to_owned();
    assert_eq!(v["id"], v["task_id"]);
    assert!(id.starts_with("video_"));
    assert_eq!(v["object"], "video");
    assert_eq!(v["status"], "queued");
    // The SDK's create_and_poll reads the poll interval from the create answer too.
    assert_eq!(res.header("openai-poll-after-ms"), Some("5000"));
    assert_eq!(v["size"], "160x96");
    assert_eq!(v["aspect_ratio"], "16:9");
    assert_eq!(v["duration"], 5);
    assert_eq!(v["seconds"], "5");
    assert_eq!(v["progress"], 0);
    assert_eq!(v["error"], serde_json::Value::Null);

    // Before completion: 409, and the poll header while unfinished.
    let early = relay.get(&format!("/v1/videos/{id}/content")).await;
    if early.status != 200 {
        early.assert_error(409, "task not completed", None);
    }
    let polled = relay.get(&format!("/v1/videos/{id}")).await;
    if polled.json()["status"] != "completed" {
        assert_eq!(polled.header("openai-poll-after-ms"), Some("5000"));
    }

    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["progress"], 100);
    assert!(done["completed_at"].as_u64().is_some());
    assert!(done["expires_at"].as_u64().is_some());

    let video = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(video.status, 200);
    assert_eq!(video.header("content-type"), Some("video/mp4"));
    assert_eq!(video.header("accept-ranges"), Some("bytes"));
    assert_eq!(
        video.header("content-length"),
        Some(video.body.len().to_string().as_str())
    );
    let info = channels::mp4probe::probe(Cursor::new(video.body.to_vec())).expect("an MP4");
    assert_eq!((info.width, info.height), (160, 96));
    assert!((info.duration_secs - 5.0).abs() <= 0.1, "{info:?}");
    assert_eq!(info.codec, "avc1");

    // Range answers.
    let part = relay
        .call_as(
            &relay.key.clone(),
            Method::GET,
            &format!("/v1/videos/{id}/content"),
            Body::Empty,
            &[("range", "bytes=0-99")],
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body.len(), 100);
    assert_eq!(&part.body[..], &video.body[..100]);
    let total = video.body.len();
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 0-99/{total}").as_str())
    );
    let tail = relay
        .call_as(
            &relay.key.clone(),
            Method::GET,
            &format!("/v1/videos/{id}/content"),
            Body::Empty,
            &[("range", "bytes=-10")],
        )
        .await;
    assert_eq!(tail.status, 206);
    assert_eq!(&tail.body[..], &video.body[total - 10..]);
    let beyond = relay
        .call_as(
            &relay.key.clone(),
            Method::GET,
            &format!("/v1/videos/{id}/content"),
            Body::Empty,
            &[("range", &format!("bytes={}-", total + 5))],
        )
        .await;
    assert_eq!(beyond.status, 416);

    let thumb = relay
        .get(&format!("/v1/videos/{id}/content?variant=thumbnail"))
        .await;
    assert_eq!(thumb.status, 200);
    assert_eq!(thumb.header("content-type"), Some("image/png"));
    let decoder = png::Decoder::new(Cursor::new(thumb.body.to_vec()));
    let reader = decoder.read_info().expect("a PNG thumbnail");
    assert_eq!((reader.info().width, reader.info().height), (160, 96));

    // The spritesheet: 3x3 frames spread over the video, each a third of the frame across.
    let sheet = relay
        .get(&format!("/v1/videos/{id}/content?variant=spritesheet"))
        .await;
    assert_eq!(sheet.status, 200, "{}", sheet.text());
    assert_eq!(sheet.header("content-type"), Some("image/png"));
    let decoder = png::Decoder::new(Cursor::new(sheet.body.to_vec()));
    let mut reader = decoder.read_info().expect("a PNG spritesheet");
    let (w, h) = (reader.info().width as usize, reader.info().height as usize);
    assert_eq!((w, h), (159, 93));
    let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
    reader.next_frame(&mut rgb).unwrap();
    let tile = |t: usize| -> Vec<u8> {
        let (tw, th) = (w / 3, h / 3);
        (0..th)
            .flat_map(|y| {
                let start = ((t / 3 * th + y) * w + t % 3 * tw) * 3;
                rgb[start..start + tw * 3].to_vec()
            })
            .collect()
    };
    assert_ne!(
        tile(0),
        tile(8),
        "the first and last tiles show different frames"
    );
    assert!(tile(8).iter().any(|&b| b != 0), "every tile is filled");

    let bad = relay
        .get(&format!("/v1/videos/{id}/content?variant=poster"))
        .await;
    bad.assert_error(400, "invalid request", Some("variant"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_like_the_openai_sdk_with_adaptive_framing() {
    let relay = Relay::start("").await;
    // A portrait first frame: adaptive framing picks 9:16.
    let (ct, body) = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "a lighthouse at dusk")
        .text("seconds", "6")
        .file("input_reference", "frame.png", "image/png", &png(90, 160))
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert_eq!(v["aspect_ratio"], "9:16");
    assert_eq!(v["duration"], 6);
    assert_eq!(v["seconds"], "6");
    let size = v["size"].as_str().unwrap();
    let (w, h) = size.split_once('x').unwrap();
    assert!(
        w.parse::<u32>().unwrap() < h.parse::<u32>().unwrap(),
        "{size}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_urls_and_frame_warnings() {
    let mut files = HashMap::new();
    files.insert("/wide.png", ("image/png", png(64, 36)));
    files.insert("/square.png", ("image/png", png(40, 40)));
    let media = MediaServer::start(files).await;
    let relay = Relay::start("").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "first_frame": media.url("/wide.png"),
                   "last_frame": media.url("/square.png"), "size": "160x96"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");

    // Adaptive from a wide image without size or ratio.
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "first_frame": media.url("/wide.png")}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["aspect_ratio"], "16:9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_and_owners_are_isolated() {
    let relay = Relay::start("[simulator]\ntask_secs = 30\n").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let res = relay
            .post_json(
                "/v1/videos",
                json!({"model": "model_h3", "prompt": format!("clip {i}"), "size": "64x64"}),
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        ids.push(res.json()["id"].as_str().unwrap().to_owned());
    }
    // Newest first by default, paging with after=last_id until has_more is false.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/videos?limit=2&after={a}"),
            None => "/v1/videos?limit=2".to_owned(),
        };
        let page = relay.get(&path).await.json();
        assert_eq!(page["object"], "list");
        for item in page["data"].as_array().unwrap() {
            seen.push(item["id"].as_str().unwrap().to_owned());
        }
        if !page["has_more"].as_bool().unwrap() {
            break;
        }
        after = page["last_id"].as_str().map(str::to_owned);
    }
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    let asc = relay.get("/v1/videos?order=asc&limit=100").await.json();
    let asc: Vec<_> = asc["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(asc, ids);
    relay
        .get("/v1/videos?limit=0")
        .await
        .assert_error(400, "invalid request", Some("limit"));

    // Another key sees none of them: 404, never 403, and an empty list.
    let (_, other) = relay.new_key("other", None).await;
    for id in &ids {
        for (method, path) in [
            (Method::GET, format!("/v1/videos/{id}")),
            (Method::GET, format!("/v1/videos/{id}/content")),
            (Method::POST, format!("/v1/videos/{id}/cancel")),
            (Method::DELETE, format!("/v1/videos/{id}")),
        ] {
            let res = relay.call_as(&other, method, &path, Body::Empty, &[]).await;
            res.assert_error(404, "not found", None);
        }
    }
    let list = relay
        .call_as(&other, Method::GET, "/v1/videos", Body::Empty, &[])
        .await
        .json();
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_refunds_and_final_tasks_refuse_cancel() {
    let relay = Relay::start("[simulator]\ntask_secs = 30\n").await;
    let (key_id, key) = relay.new_key("billed", Some(1000)).await;
    let res = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64", "duration": 8})),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 1000 - 80);
    // Polled twice before the cancel (the second answer may be the record as last rendered),
    // and after it: the record follows the task.
    let poll = || async {
        let res = relay
            .call_as(
                &key,
                Method::GET,
                &format!("/v1/videos/{id}"),
                Body::Empty,
                &[],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        (
            res.header("openai-poll-after-ms").map(str::to_owned),
            res.json(),
        )
    };
    for _ in 0..2 {
        let (header, record) = poll().await;
        assert!(
            record["status"] == "queued" || record["status"] == "in_progress",
            "{record}"
        );
        assert_eq!(header.as_deref(), Some("5000"));
    }

    let cancelled = relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text());
    assert_eq!(cancelled.json()["status"], "cancelled");
    let again = relay
        .call_as(
            &key,
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    again.assert_error(409, "task not cancellable", None);
    let (after_header, after) = poll().await;
    assert_eq!(after["status"], "cancelled", "{after}");
    assert_eq!(after_header, None);
    let content = relay
        .call_as(
            &key,
            Method::GET,
            &format!("/v1/videos/{id}/content"),
            Body::Empty,
            &[],
        )
        .await;
    content.assert_error(409, "task not completed", None);

    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 1000);
    assert_eq!(k["quota_used"], 0);
    let kinds: Vec<_> = relay
        .ledger(&key_id)
        .await
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![("prededuct".into(), -80), ("refund".into(), 80)]
    );

    // A task that cannot be covered is refused with 402 and nothing is stored.
    let (_, poor) = relay.new_key("poor", Some(10)).await;
    let res = relay
        .call_as(
            &poor,
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
            &[],
        )
        .await;
    res.assert_error(402, "insufficient quota", None);
    let list = relay
        .call_as(&poor, Method::GET, "/v1/videos", Body::Empty, &[])
        .await
        .json();
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_failures_timeouts_and_upstream_errors() {
    let relay = Relay::start("[tasks]\ntimeout_secs = 2\nsubmit_attempts = 2\n").await;
    let create = |sim: &'static str| {
        let relay = &relay;
        async move {
            let res = relay
                .call_as(
                    &relay.key.clone(),
                    Method::POST,
                    "/v1/videos",
                    Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
                    &[("x-relay-sim", sim)],
                )
                .await;
            assert_eq!(res.status, 200, "{}", res.text());
            res.json()["id"].as_str().unwrap().to_owned()
        }
    };
    let failing = create("fail").await;
    let stuck = create("stuck").await;
    let erroring = create("error=500").await;

    let v = relay.wait_video(&failing, WAIT).await;
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["code"], "upstream_error");
    let v = relay.wait_video(&stuck, WAIT).await;
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["code"], "timeout");
    let v = relay.wait_video(&erroring, WAIT).await;
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["code"], "upstream_error");

    let bad = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p"})),
            &[("x-relay-sim", "explode")],
        )
        .await;
    bad.assert_error(400, "invalid request", Some("x-relay-sim"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_removes_record_and_content() {
    let relay = Relay::start("").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    relay.wait_video(&id, WAIT).await;
    let deleted = relay
        .call(Method::DELETE, &format!("/v1/videos/{id}"), Body::Empty)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let v = deleted.json();
    assert_eq!(v["object"], "video.deleted");
    assert_eq!(v["deleted"], true);
    assert_eq!(v["id"], id.as_str());
    relay
        .get(&format!("/v1/videos/{id}"))
        .await
        .assert_error(404, "not found", None);
    relay
        .get(&format!("/v1/videos/{id}/content"))
        .await
        .assert_error(404, "not found", None);

    // A running task is cancelled, then deleted.
    let res = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "p", "size": "64x64"})),
            &[("x-relay-sim", "stuck")],
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let deleted = relay
        .call(Method::DELETE, &format!("/v1/videos/{id}"), Body::Empty)
        .await;
    assert_eq!(deleted.status, 200);
    let gone = poll_until(WAIT, || async {
        (relay.get(&format!("/v1/videos/{id}")).await.status == 404).then_some(())
    })
    .await;
    assert!(gone.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_and_restart_resume_unfinished_tasks() {
    let relay = Relay::start("[simulator]\ntask_secs = 1\n").await;
    let key = relay.key.clone();
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), "[simulator]\ntask_secs = 1\n").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_stops_at_expiry() {
    let relay = Relay::start("[tasks]\ncontent_ttl_secs = 0\n").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["expires_at"], done["completed_at"]);
    relay
        .get(&format!("/v1/videos/{id}/content"))
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_mode_hands_out_signed_urls() {
    let relay = Relay::start("[server]\ncontent_mode = \"redirect\"\n").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    relay.wait_video(&id, WAIT).await;
    let redirect = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(redirect.status, 302, "{}", redirect.text());
    let location = redirect.header("location").unwrap().to_owned();
    let path = &location[location.find("/files/").expect("a /files/ URL")..];
    assert!(path.contains("expires=") && path.contains("sig="), "{path}");
    // No key needed; Range works.
    let file = relay
        .client
        .send(Method::GET, &relay.url(path), Body::Empty, &[])
        .await;
    assert_eq!(file.status, 200);
    assert_eq!(file.header("content-type"), Some("video/mp4"));
    channels::mp4probe::probe(Cursor::new(file.body.to_vec())).expect("an MP4");
    let part = relay
        .client
        .send(
            Method::GET,
            &relay.url(path),
            Body::Empty,
            &[("range", "bytes=0-9".to_owned())],
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body.len(), 10);
    // A tampered signature, another file, or no signature: 404, telling nothing.
    let tampered = path.replace("sig=", "sig=0");
    let tampered = &tampered[..tampered.len() - 1];
    for bad in [
        tampered.to_owned(),
        path.replace("video.mp4", "thumbnail.png"),
        format!("/files/{id}/video.mp4"),
    ] {
        let res = relay
            .client
            .send(Method::GET, &relay.url(&bad), Body::Empty, &[])
            .await;
        res.assert_error(404, "not found", None);
    }
    // Expired links are refused.
    let relay =
        Relay::start("[server]\ncontent_mode = \"redirect\"\nsigned_url_ttl_secs = 0\n").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "p", "size": "64x64"}),
        )
        .await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    relay.wait_video(&id, WAIT).await;
    let location = relay.get(&format!("/v1/videos/{id}/content")).await;
    let location = location.header("location").unwrap().to_owned();
    let path = &location[location.find("/files/").unwrap()..];
    let res = relay
        .client
        .send(Method::GET, &relay.url(path), Body::Empty, &[])
        .await;
    res.assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remix_a_completed_video() {
    let relay = Relay::start("").await;
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a red fox", "size": "160x96", "seconds": "6"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let source = res.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(relay.wait_video(&source, WAIT).await["status"], "completed");

    let remix = relay
        .post_json(
            &format!("/v1/videos/{source}/remix"),
            json!({"prompt": "the same fox, at night"}),
        )
        .await;
    assert_eq!(remix.status, 200, "{}", remix.text());
    assert_eq!(remix.header("openai-poll-after-ms"), Some("5000"));
    let v = remix.json();
    let id = v["id"].as_str().unwrap().to_owned();
    assert_ne!(id, source);
    assert_eq!(v["status"], "queued");
    assert_eq!(v["remixed_from_video_id"], source.as_str());
    assert_eq!(v["prompt"], "the same fox, at night");
    assert_eq!(
        (v["size"].as_str(), v["seconds"].as_str()),
        (Some("160x96"), Some("6"))
    );
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["remixed_from_video_id"], source.as_str());
    let video = relay.get(&format!("/v1/videos/{id}/content")).await;
    let info = channels::mp4probe::probe(Cursor::new(video.body.to_vec())).expect("an MP4");
    assert_eq!((info.width, info.height), (160, 96));
    assert!((info.duration_secs - 6.0).abs() <= 0.1, "{info:?}");
    // The source is no remix; the list shows both.
    let original = relay.get(&format!("/v1/videos/{source}")).await.json();
    assert_eq!(original["remixed_from_video_id"], serde_json::Value::Null);
    assert_eq!(
        relay.get("/v1/videos").await.json()["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Given values replace the source's, and are validated like a creation.
    let longer = relay
        .post_json(
            &format!("/v1/videos/{source}/remix"),
            json!({"prompt": "longer", "seconds": "8", "size": "96x96"}),
        )
        .await
        .json();
    assert_eq!(
        (longer["size"].as_str(), longer["seconds"].as_str()),
        (Some("96x96"), Some("8"))
    );
    relay
        .post_json(
            &format!("/v1/videos/{source}/remix"),
            json!({"prompt": "x", "seconds": "99"}),
        )
        .await
        .assert_error(400, "invalid duration", Some("seconds"));
    relay
        .post_json(&format!("/v1/videos/{source}/remix"), json!({}))
        .await
        .assert_error(400, "invalid prompt", Some("prompt"));

    // Unfinished: 409; another key's or unknown: 404.
    let stuck = relay
        .call_as(
            &relay.key.clone(),
            Method::POST,
            "/v1/videos",
            Body::Json(json!({"model": "model_h3", "prompt": "stuck", "size": "96x96"})),
            &[("x-relay-sim", "stuck")],
        )
        .await
        .json();
    relay
        .post_json(
            &format!("/v1/videos/{}/remix", stuck["id"].as_str().unwrap()),
            json!({"prompt": "x"}),
        )
        .await
        .assert_error(409, "task not completed", None);
    let (_, other) = relay.new_key("other", None).await;
    relay
        .call_as(
            &other,
            Method::POST,
            &format!("/v1/videos/{source}/remix"),
            Body::Json(json!({"prompt": "mine now"})),
            &[],
        )
        .await
        .assert_error(404, "not found", None);
    relay
        .post_json("/v1/videos/video_nope/remix", json!({"prompt": "x"}))
        .await
        .assert_error(404, "not found", None);
}
