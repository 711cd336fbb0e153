//! Both adapters end to end: what the relay sends each upstream (every reference asset with
//! its role, to ark), and the copies of the results it keeps and serves; result URLs off the
//! channel go through the address guard.

use http::Method;
use serde_json::{Value, json};

use super::{WAIT, ark_channel, assert_clean, config, openai_channel, quota};
use crate::fake_video::{FakeVideo, JPEG_HEAD, fake_mp4};
use crate::harness::{Body, Multipart, Relay, base64, mp4_head, png, poll_until, wav};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_format_over_openai_videos_keeps_its_own_copy() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let (ct, body) = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "a lighthouse at dusk")
        .text("seconds", "5")
        .text("size", "64x64")
        .file("input_reference", "ref.png", "image/png", &png(64, 64))
        .build();
    let res = relay
        .call(Method::POST, "/v1/videos", Body::Raw(ct, body))
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_clean(&done.to_string(), &fake);

    // An upstream's video is not remixed as if it were a new one: refused, naming the channel.
    let remix = relay
        .post_json(
            &format!("/v1/videos/{id}/remix"),
            json!({"prompt": "again"}),
        )
        .await;
    remix.assert_error(400, "invalid request", Some("video_id"));
    assert!(remix.text().contains("channel up"), "{}", remix.text());
    // Nor edited or extended; nothing is submitted for them.
    for path in ["/v1/videos/edits", "/v1/videos/extensions"] {
        let (ct, body) = Multipart::new()
            .text("prompt", "again")
            .text("seconds", "5")
            .text("video[id]", &id)
            .build();
        let res = relay.call(Method::POST, path, Body::Raw(ct, body)).await;
        res.assert_error(400, "invalid request", Some("video"));
        assert!(res.text().contains("channel up"), "{}", res.text());
    }

    // The submission carried the task id as its Idempotency-Key, so a resubmission after a
    // crash is a replay at an upstream that honours it.
    assert_eq!(fake.idempotency_keys(), vec![id.clone()]);
    // The upstream got the SDK's multipart with the image as a file part.
    let sent = fake.bodies();
    let sent = String::from_utf8_lossy(&sent[0]);
    assert!(
        sent.contains("name=\"input_reference\"; filename="),
        "{sent}"
    );
    assert!(sent.contains("64x64"), "{sent}");

    // The relay serves its own copy, even once the upstream's URL has expired.
    fake.set(&fake.switches.expire_results, true);
    let content = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(content.status, 200);
    assert_eq!(content.body.as_ref(), fake_mp4().as_slice());
    let thumb = relay
        .get(&format!("/v1/videos/{id}/content?variant=thumbnail"))
        .await;
    assert_eq!(thumb.status, 200);
    assert!(thumb.body.starts_with(b"\x89PNG"));
    assert_eq!(thumb.header("content-type"), Some("image/png"));
    // The content URL is the upstream's own API: the key went along.
    assert!(fake.downloads().iter().all(|(_, auth)| *auth));

    // A JPEG thumbnail is kept and served as a JPEG.
    fake.set(&fake.switches.expire_results, false);
    fake.set(&fake.switches.jpeg_images, true);
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a jpeg thumbnail", "size": "64x64"}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let thumb = relay
        .get(&format!("/v1/videos/{id}/content?variant=thumbnail"))
        .await;
    assert_eq!(thumb.status, 200);
    assert_eq!(thumb.header("content-type"), Some("image/jpeg"));
    assert!(thumb.body.starts_with(b"\xFF\xD8\xFF"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_format_over_ark_keeps_video_and_last_frame() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&ark_channel("ark", &fake))).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 2,
                   "resolution": "480p", "ratio": "16:9", "return_last_frame": true, "seed": 7}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_clean(&done.to_string(), &fake);

    assert_eq!(fake.idempotency_keys(), vec![id.clone()]);
    let sent: Value = serde_json::from_slice(&fake.bodies()[0]).unwrap();
    assert_eq!(sent["model"], "seedance-pro");
    assert_eq!(sent["resolution"], "480p");
    assert_eq!(sent["ratio"], "16:9");
    assert_eq!(sent["duration"], 2);
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["return_last_frame"], true);
    assert_eq!(sent["content"][0]["type"], "text");

    fake.set(&fake.switches.expire_results, true);
    let url = done["video_url"].as_str().expect("video_url");
    let path = &url[url.find("/files/").unwrap()..];
    let video = relay.get(path).await;
    assert_eq!(video.status, 200);
    assert_eq!(video.body.as_ref(), fake_mp4().as_slice());
    let url = done["last_frame_url"].as_str().expect("last_frame_url");
    let frame = relay.get(&url[url.find("/files/").unwrap()..]).await;
    assert_eq!(frame.status, 200);
    assert!(frame.body.starts_with(b"\x89PNG"));
    // The result URLs are on another host than the API: no key went there.
    assert!(!fake.downloads().is_empty());
    assert!(fake.downloads().iter().all(|(_, auth)| !*auth));
}

/// Uploads `bytes` as an asset of `kind` into library `lib` and waits until it is active.
async fn active_asset(relay: &Relay, lib: &str, kind: &str, bytes: &[u8]) -> String {
    let (ct, body) = Multipart::new()
        .text("type", kind)
        .file("file", "reference", "application/octet-stream", bytes)
        .build();
    let res = relay
        .call(
            Method::POST,
            &format!("/v1/asset-libraries/{lib}/assets"),
            Body::Raw(ct, body),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().expect("asset id").to_owned();
    let active = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/assets/{id}")).await.json();
        (v["status"] == "active").then_some(())
    })
    .await;
    assert!(active.is_some(), "asset {id} never became active");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reference_asset_reaches_ark_with_its_role() {
    let fake = FakeVideo::start().await;
    // A public address: references over the inline cap go as the relay's signed URLs.
    let channel = format!(
        "[server]\npublic_base_url = \"https://relay.example\"\n{}max_inline_bytes = 1024\n",
        ark_channel("ark", &fake)
    );
    let relay = Relay::start(&config(&channel)).await;
    let lib = relay
        .post_json("/v1/asset-libraries", json!({"name": "refs"}))
        .await;
    assert_eq!(lib.status, 200, "{}", lib.text());
    let lib = lib.json()["id"].as_str().expect("library id").to_owned();
    let (first, image_a, image_b) = (png(8, 8), png(4, 4), png(6, 6));
    assert!(first.len() <= 1024 && wav().len() > 1024 && mp4_head().len() <= 1024);
    let first_id = active_asset(&relay, &lib, "image", &first).await;
    let image_a_id = active_asset(&relay, &lib, "image", &image_a).await;
    let image_b_id = active_asset(&relay, &lib, "image", &image_b).await;
    let video_id = active_asset(&relay, &lib, "video", &mp4_head()).await;
    let audio_id = active_asset(&relay, &lib, "audio", &wav()).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron and its references", "duration": 2,
            "resolution": "480p", "ratio": "16:9", "assets": [
                {"id": image_a_id, "role": "reference_image"},
                {"id": audio_id, "role": "reference_audio"},
                {"id": first_id, "role": "first_frame"},
                {"id": video_id, "role": "reference_video"},
                {"id": image_b_id, "role": "reference_image"},
            ]}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");

    // What the fake received: the prompt, the first frame, then the references in request
    // order, each with its role; small ones inline, the audio (over the cap) as a signed URL.
    let contents = fake.ark_contents();
    let content = contents[0].as_array().expect("a content array");
    let data = |mime: &str, bytes: &[u8]| format!("data:{mime};base64,{}", base64(bytes));
    let item =
        |kind: &str, role: &str, url: &str| json!({"type": kind, "role": role, kind: {"url": url}});
    assert_eq!(content.len(), 6, "{content:?}");
    assert_eq!(
        content[0],
        json!({"type": "text", "text": "a heron and its references"})
    );
    assert_eq!(
        content[1],
        item("image_url", "first_frame", &data("image/png", &first))
    );
    assert_eq!(
        content[2],
        item("image_url", "reference_image", &data("image/png", &image_a))
    );
    assert_eq!(
        content[4],
        item(
            "video_url",
            "reference_video",
            &data("video/mp4", &mp4_head())
        )
    );
    assert_eq!(
        content[5],
        item("image_url", "reference_image", &data("image/png", &image_b))
    );
    assert_eq!(content[3]["type"], "audio_url");
    assert_eq!(content[3]["role"], "reference_audio");
    let url = content[3]["audio_url"]["url"]
        .as_str()
        .expect("an audio URL");
    assert!(url.starts_with("https://relay.example/files/"), "{url}");
    assert!(url.contains("sig="), "{url}");
    // The signed URL serves the asset's bytes, without a key.
    let served = relay
        .client
        .send(
            Method::GET,
            &relay.url(&url["https://relay.example".len()..]),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body.as_ref(), wav().as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jpeg_last_frame_is_kept_and_served_as_a_jpeg() {
    let fake = FakeVideo::start().await;
    fake.set(&fake.switches.jpeg_images, true);
    let relay = Relay::start(&config(&ark_channel("ark", &fake))).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron at night", "duration": 2,
                   "resolution": "480p", "return_last_frame": true}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let url = done["last_frame_url"].as_str().expect("last_frame_url");
    let frame = relay.get(&url[url.find("/files/").unwrap()..]).await;
    assert_eq!(frame.status, 200);
    assert_eq!(frame.header("content-type"), Some("image/jpeg"));
    assert_eq!(frame.body.as_ref(), JPEG_HEAD);
    // Ranges work on it as on any file.
    let part = relay
        .client
        .send(
            Method::GET,
            &relay.url(&url[url.find("/files/").unwrap()..]),
            Body::Empty,
            &[("range", "bytes=0-2".to_owned())],
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body.as_ref(), &JPEG_HEAD[..3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_urls_off_the_channel_go_through_the_address_guard() {
    // The fake hands out result URLs on a second loopback address: to a relay that does not
    // allow private URLs, an internal host that an upstream (or whoever controls its answers)
    // points it at.
    let fake = FakeVideo::start().await;
    let files = fake.serve_files_elsewhere().await;
    let closed = format!(
        "[security]\nallow_private_urls = false\n{}",
        config(&ark_channel("ark", &fake))
    );
    let relay = Relay::start(&closed).await;
    let (key_id, key) = relay.new_key("guarded", Some(10_000)).await;
    let body = json!({"model": "gen2-pro", "prompt": "an internal file", "duration": 5,
                      "resolution": "720p"});
    let res = relay
        .call_as(
            &key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(body.clone()),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_clean(&done.to_string(), &fake);
    assert!(
        fake.downloads().is_empty(),
        "the guarded address was reached: {:?}",
        fake.downloads()
    );
    // Refunded in full.
    assert_eq!(quota(&relay, &key_id).await["quota_remaining"], 10_000);

    // A host the channel trusts is fetched (closed networks name their file hosts).
    let authority = files.trim_start_matches("http://").to_owned();
    let trusting = closed.replace(
        "family = \"gen2\"\n",
        &format!("family = \"gen2\"\ntrusted_hosts = [\"{authority}\"]\n"),
    );
    assert_ne!(trusting, closed);
    let relay = Relay::start(&trusting).await;
    let res = relay.post_json("/v1/video/generations", body).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(!fake.downloads().is_empty());
}
