//! The second format end to end on the simulator: assets, generation, signed downloads,
//! last frame, moderation; and every error in SPEC §7's order.

use std::io::Cursor;
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Body, Multipart, Relay, png, poll_until};

const WAIT: Duration = Duration::from_secs(60);

/// Creates a library and uploads `bytes` as an image asset; waits until it is active.
pub(crate) async fn active_image(relay: &Relay, key: &str, bytes: &[u8]) -> String {
    let lib = relay
        .call_as(
            key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "lib"})),
            &[],
        )
        .await;
    assert_eq!(lib.status, 200, "{}", lib.text());
    let lib = lib.json()["id"].as_str().unwrap().to_owned();
    let (ct, body) = Multipart::new()
        .file("file", "frame.png", "image/png", bytes)
        .text("type", "image")
        .build();
    let asset = relay
        .call_as(
            key,
            Method::POST,
            &format!("/v1/asset-libraries/{lib}/assets"),
            Body::Raw(ct, body),
            &[],
        )
        .await;
    assert_eq!(asset.status, 200, "{}", asset.text());
    let id = asset.json()["id"].as_str().unwrap().to_owned();
    wait_asset(relay, key, &id, "active").await;
    id
}

async fn wait_asset(relay: &Relay, key: &str, id: &str, want: &str) {
    let path = format!("/v1/assets/{id}");
    poll_until(WAIT, || async {
        let v = relay
            .call_as(key, Method::GET, &path, Body::Empty, &[])
            .await
            .json();
        (v["status"] == want).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("asset {id} did not become {want}"));
}

async fn generate(relay: &Relay, key: &str, body: Value, sim: &str) -> crate::harness::Answer {
    let headers: Vec<(&str, &str)> = if sim.is_empty() {
        vec![]
    } else {
        vec![("x-relay-sim", sim)]
    };
    relay
        .call_as(
            key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(body),
            &headers,
        )
        .await
}

/// The path and query of a signed URL the relay handed out.
pub(crate) fn local(url: &str) -> &str {
    &url[url.find("/files/").expect("a signed /files/ URL")..]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_second_format_flow() {
    let relay = Relay::start("").await;
    let key = relay.key.clone();
    // A portrait first frame: adaptive picks 9:16.
    let asset = active_image(&relay, &key, &png(90, 160)).await;
    let res = generate(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 2, "resolution": "480p",
               "ratio": "adaptive", "assets": [{"id": asset, "role": "first_frame"}],
               "return_last_frame": true, "seed": 42}),
        "",
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    let id = v["task_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("gen_"));
    assert_eq!(v["status"], "queued");
    assert_eq!(v["object"], "video.generation");
    assert_eq!(v["ratio"], "9:16");
    assert_eq!(v["seed"], 42);
    assert_eq!(v["video_url"], Value::Null);

    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["usage"]["duration_seconds"], 2);
    let video_url = done["video_url"].as_str().expect("video_url on success");
    let last_url = done["last_frame_url"]
        .as_str()
        .expect("last_frame_url when asked");
    // Signed URLs need no key.
    let video = relay
        .client
        .send(Method::GET, &relay.url(local(video_url)), Body::Empty, &[])
        .await;
    assert_eq!(video.status, 200);
    let info = channels::mp4probe::probe(Cursor::new(video.body.to_vec())).expect("an MP4");
    assert_eq!((info.width, info.height), (480, 854));
    assert!((info.duration_secs - 2.0).abs() <= 0.1, "{info:?}");
    let last = relay
        .client
        .send(Method::GET, &relay.url(local(last_url)), Body::Empty, &[])
        .await;
    assert_eq!(last.status, 200);
    assert_eq!(last.header("content-type"), Some("image/png"));
    let reader = png::Decoder::new(Cursor::new(last.body.to_vec()))
        .read_info()
        .expect("a PNG");
    assert_eq!((reader.info().width, reader.info().height), (480, 854));

    let moderation = relay
        .post_json(
            "/api/generation/video/moderation-result",
            json!({"task_id": id}),
        )
        .await;
    assert_eq!(moderation.status, 200, "{}", moderation.text());
    let m = moderation.json();
    assert_eq!(m["status"], "passed");
    assert!(m["checked_at"].as_u64().is_some());

    let list = relay.get("/v1/video/generations").await.json();
    assert_eq!(list["data"][0]["task_id"], id.as_str());
    let cancel = relay
        .call(
            Method::POST,
            &format!("/v1/video/generations/{id}/cancel"),
            Body::Empty,
        )
        .await;
    cancel.assert_error(409, "task not cancellable", None);

    // Without return_last_frame there is no last_frame_url; defaults are the model's first values.
    let res = generate(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "p", "duration": 5}),
        "delay_ms=10",
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert_eq!(
        (v["resolution"].as_str(), v["ratio"].as_str()),
        (Some("480p"), Some("16:9"))
    );
    let done = relay
        .wait_generation_as(&key, v["task_id"].as_str().unwrap(), WAIT)
        .await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["last_frame_url"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderation_rejects_blocked_words_and_the_reject_directive() {
    let relay = Relay::start("[simulator]\nblocked_words = [\"forbidden\"]\n").await;
    let key = relay.key.clone();
    let body = |prompt: &str| json!({"model": "gen2-lite", "prompt": prompt, "duration": 5});
    let a = generate(&relay, &key, body("a forbidden dance"), "")
        .await
        .json();
    let b = generate(&relay, &key, body("a calm lake"), "reject")
        .await
        .json();
    let c = generate(&relay, &key, body("a calm lake"), "stuck")
        .await
        .json();
    for v in [&a, &b] {
        let id = v["task_id"].as_str().unwrap();
        relay.wait_generation_as(&key, id, WAIT).await;
        let m = relay
            .post_json(
                "/api/generation/video/moderation-result",
                json!({"task_id": id}),
            )
            .await
            .json();
        assert_eq!(m["status"], "rejected", "{m}");
        assert_eq!(m["categories"][0]["flagged"], true);
    }
    let pending = relay
        .post_json(
            "/api/generation/video/moderation-result",
            json!({"task_id": c["task_id"]}),
        )
        .await
        .json();
    assert_eq!(pending["status"], "pending");
    // First-format tasks too; unknown and malformed ids.
    let v = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "forbidden", "size": "64x64"}),
        )
        .await
        .json();
    relay.wait_video(v["id"].as_str().unwrap(), WAIT).await;
    let m = relay
        .post_json(
            "/api/generation/video/moderation-result",
            json!({"task_id": v["id"]}),
        )
        .await
        .json();
    assert_eq!(m["status"], "rejected");
    relay
        .post_json(
            "/api/generation/video/moderation-result",
            json!({"task_id": "gen_nope"}),
        )
        .await
        .assert_error(404, "not found", None);
    let res = relay
        .post_json(
            "/api/generation/video/moderation-result",
            json!({"task": 1}),
        )
        .await;
    assert_eq!(res.status, 400, "{}", res.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_second_format_error_in_spec_order() {
    let relay = Relay::start("[server]\nmax_body_bytes = 4000\n").await;
    let key = relay.key.clone();
    let motion = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "m", "group": "motion"})),
        )
        .await
        .json();
    let motion_key = motion["key"].as_str().unwrap().to_owned();
    let motion_id = motion["id"].as_str().unwrap().to_owned();
    let image = active_image(&relay, &key, &png(64, 36)).await;
    // An asset of family motion, owned by a key that then moves to group gen2.
    let motion_asset = active_image(&relay, &motion_key, &png(64, 36)).await;
    relay
        .admin(
            Method::PATCH,
            &format!("/admin/keys/{motion_id}"),
            Body::Json(json!({"group": "gen2"})),
        )
        .await;
    let moved_key = motion_key.clone();

    let cases: Vec<(&str, &str, Value, u16, &str, &str)> = vec![
        (
            "unknown model",
            "k",
            json!({"model": "gen9", "prompt": "p"}),
            400,
            "invalid model",
            "model",
        ),
        (
            "bad resolution",
            "k",
            json!({"model": "gen2-pro", "prompt": "p", "resolution": "4k"}),
            400,
            "invalid resolution",
            "resolution",
        ),
        (
            "bad duration",
            "k",
            json!({"model": "gen2-lite", "prompt": "p", "duration": 7}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "joint rule",
            "k",
            json!({"model": "gen2-pro", "prompt": "p", "resolution": "1080p", "duration": 12}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "bad ratio",
            "k",
            json!({"model": "gen2-lite", "prompt": "p", "ratio": "4:3"}),
            400,
            "invalid ratio",
            "ratio",
        ),
        (
            "asset missing",
            "k",
            json!({"model": "gen2-pro", "prompt": "p", "assets": [{"id": "asset_nope", "role": "first_frame"}]}),
            400,
            "asset not found",
            "assets[0].id",
        ),
        (
            "cross family",
            "moved",
            json!({"model": "gen2-pro", "prompt": "p", "assets": [{"id": motion_asset, "role": "first_frame"}]}),
            400,
            "asset family mismatch",
            "assets[0].id",
        ),
        // Pairs: the earlier check wins.
        (
            "group before resolution",
            "k",
            json!({"model": "motion-1", "prompt": "p", "resolution": "480p"}),
            400,
            "group mismatch",
            "model",
        ),
        (
            "resolution before duration",
            "k",
            json!({"model": "gen2-lite", "prompt": "p", "resolution": "1080p", "duration": 7}),
            400,
            "invalid resolution",
            "resolution",
        ),
        (
            "duration before ratio",
            "k",
            json!({"model": "gen2-lite", "prompt": "p", "duration": 7, "ratio": "4:3"}),
            400,
            "invalid duration",
            "duration",
        ),
        (
            "ratio before assets",
            "k",
            json!({"model": "gen2-lite", "prompt": "p", "ratio": "4:3", "assets": [{"id": "asset_nope", "role": "first_frame"}]}),
            400,
            "invalid ratio",
            "ratio",
        ),
        (
            "body size last",
            "k",
            json!({"model": "motion-1", "prompt": "x".repeat(5000)}),
            400,
            "group mismatch",
            "model",
        ),
        (
            "body size",
            "k",
            json!({"model": "gen2-lite", "prompt": "x".repeat(5000)}),
            413,
            "Payload Too Large",
            "",
        ),
    ];
    for (case, who, body, status, message, param) in cases {
        let k = if who == "moved" { &moved_key } else { &key };
        let res = generate(&relay, k, body, "").await;
        assert_eq!(res.status, status, "{case}: {}", res.text());
        if status != 200 {
            let v = res.json();
            assert_eq!(v["error"]["message"], message, "{case}: {v}");
            if !param.is_empty() {
                assert_eq!(v["error"]["param"], param, "{case}: {v}");
            }
        }
    }
    // An asset still processing (its URL hangs), alone and before a cross-family one.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hang_url = format!("http://{}/slow.png", hanging.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hanging.accept().await {
            conns.push(c);
        }
    });
    let lib = relay
        .call_as(
            &moved_key,
            Method::POST,
            "/v1/asset-libraries",
            Body::Json(json!({"name": "l2"})),
            &[],
        )
        .await
        .json();
    let processing = relay
        .call_as(
            &moved_key,
            Method::POST,
            &format!("/v1/asset-libraries/{}/assets", lib["id"].as_str().unwrap()),
            Body::Json(json!({"url": hang_url, "type": "image"})),
            &[],
        )
        .await;
    assert_eq!(processing.status, 200, "{}", processing.text());
    let processing = processing.json()["id"].as_str().unwrap().to_owned();
    let res = generate(
        &relay,
        &moved_key,
        json!({"model": "gen2-pro", "prompt": "p", "assets": [{"id": processing, "role": "first_frame"}]}),
        "",
    )
    .await;
    res.assert_error(400, "asset not active", Some("assets[0].id"));
    let res = generate(
        &relay,
        &moved_key,
        json!({"model": "gen2-pro", "prompt": "p", "assets": [
            {"id": motion_asset, "role": "reference_image"}, {"id": processing, "role": "first_frame"}]}),
        "",
    )
    .await;
    res.assert_error(400, "asset not active", Some("assets[1].id"));
    held.abort();
    // The key's own active asset is accepted.
    let res = generate(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "p", "assets": [{"id": image, "role": "first_frame"}]}),
        "",
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());

    // A motion key asking for gen2-pro; motion-1 does not allow adaptive.
    let fresh_motion = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "m2", "group": "motion"})),
        )
        .await
        .json();
    let res = generate(
        &relay,
        fresh_motion["key"].as_str().unwrap(),
        json!({"model": "gen2-pro", "prompt": "p", "resolution": "bad"}),
        "",
    )
    .await;
    res.assert_error(400, "group mismatch", Some("model"));
    let res = generate(
        &relay,
        fresh_motion["key"].as_str().unwrap(),
        json!({"model": "motion-1", "prompt": "p", "ratio": "adaptive"}),
        "",
    )
    .await;
    res.assert_error(400, "invalid ratio", Some("ratio"));
}
