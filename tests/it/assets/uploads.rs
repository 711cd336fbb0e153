//! Uploads, by multipart and by URL: to `active` with what was found out about the file, to
//! `failed` with the reason, and refused over the size limit.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};

use super::{
    Hanging, asset_count, blob_path, create_library, media, settled, upload_file, upload_url,
};
use crate::harness::{Body, MediaServer, Multipart, Relay, mp4_head, png, wav};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_by_multipart_and_url_become_active() {
    let relay = Relay::start("").await;
    let server = MediaServer::start(media()).await;
    let lib = create_library(&relay, "refs").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();

    // Multipart, type declared.
    let image = png(64, 48);
    let res = upload_file(&relay, &key, lib_id, Some("image"), "frame.png", &image).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let up = res.json();
    let image_id = up["id"].as_str().unwrap().to_owned();
    assert!(image_id.starts_with("asset_"));
    assert_eq!(up["object"], "asset");
    assert_eq!(up["library_id"], lib["id"]);
    assert_eq!(up["family"], "gen2");
    assert_eq!(up["type"], "image");
    assert_eq!(up["status"], "processing");
    assert_eq!(up["error"], Value::Null);
    let done = settled(&relay, &image_id).await;
    assert_eq!(done["status"], "active", "{done}");
    assert_eq!(done["format"], "png");
    assert_eq!(done["bytes"], image.len());
    let created = done["created_at"].as_u64().unwrap();
    let expires = done["expires_at"].as_u64().unwrap();
    assert!(
        (created + 604_800..=created + 604_800 + 60).contains(&expires),
        "{done}"
    );
    assert_eq!(std::fs::read(blob_path(&relay, &image_id)).unwrap(), image);
    // An active asset is not polled any more.
    let polled = relay.get(&format!("/v1/assets/{image_id}")).await;
    assert_eq!(polled.header("openai-poll-after-ms"), None);

    // Multipart without a type: derived from the bytes.
    let res = upload_file(&relay, &key, lib_id, None, "clip", &mp4_head()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["type"], Value::Null);
    let video_id = res.json()["id"].as_str().unwrap().to_owned();

    // By URL, with and without a type.
    let audio = upload_url(&relay, lib_id, &server.url("/voice.wav"), None).await;
    let audio_id = audio["id"].as_str().unwrap().to_owned();
    let frame = upload_url(&relay, lib_id, &server.url("/frame.png"), Some("image")).await;
    let frame_id = frame["id"].as_str().unwrap().to_owned();

    let video = settled(&relay, &video_id).await;
    assert_eq!(
        (&video["status"], &video["type"], &video["format"]),
        (&json!("active"), &json!("video"), &json!("mp4")),
        "{video}"
    );
    let audio = settled(&relay, &audio_id).await;
    assert_eq!(
        (&audio["status"], &audio["type"], &audio["format"]),
        (&json!("active"), &json!("audio"), &json!("wav")),
        "{audio}"
    );
    assert_eq!(audio["bytes"], wav().len());
    assert_eq!(settled(&relay, &frame_id).await["status"], "active");
    assert_eq!(std::fs::read(blob_path(&relay, &audio_id)).unwrap(), wav());

    // Listing with filters.
    let path = format!("/v1/asset-libraries/{lib_id}/assets");
    let all = relay.get(&path).await.json();
    assert_eq!(all["object"], "list");
    assert_eq!(all["data"].as_array().unwrap().len(), 4);
    assert_eq!(all["first_id"], json!(frame_id), "newest first");
    let images = relay
        .get(&format!("{path}?type=image&status=active&order=asc"))
        .await
        .json();
    let ids: Vec<&str> = images["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [image_id.as_str(), frame_id.as_str()]);
    let page = relay.get(&format!("{path}?limit=3")).await.json();
    assert_eq!(page["has_more"], true);
    let rest = relay
        .get(&format!(
            "{path}?limit=3&after={}",
            page["last_id"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(rest["data"][0]["id"], json!(image_id));
    assert_eq!(rest["has_more"], false);
    assert_eq!(
        relay.get(&format!("{path}?status=failed")).await.json()["data"],
        json!([])
    );
    relay
        .get(&format!("{path}?status=done"))
        .await
        .assert_error(400, "invalid request", Some("status"));
    relay
        .get(&format!("{path}?type=pdf"))
        .await
        .assert_error(400, "invalid request", Some("type"));
    assert_eq!(asset_count(&relay, lib_id).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_uploads_say_why() {
    let relay = Relay::start("").await;
    let server = MediaServer::start(media()).await;
    let hanging = Hanging::start().await;
    let lib = create_library(&relay, "bad").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();

    let mut uploads = Vec::new();
    let whole = png(64, 64);
    for (kind, name, bytes, code) in [
        (None, "empty.png", Vec::new(), "empty"),
        (Some("video"), "frame.png", png(16, 16), "type_mismatch"),
        (Some("audio"), "clip.mp4", mp4_head(), "type_mismatch"),
        (
            None,
            "cut.png",
            whole[..whole.len() / 2].to_vec(),
            "unsupported_format",
        ),
        (
            None,
            "junk.bin",
            b"\x00\x01garbage bytes".to_vec(),
            "unsupported_format",
        ),
    ] {
        let res = upload_file(&relay, &key, lib_id, kind, name, &bytes).await;
        assert_eq!(res.status, 200, "{}", res.text());
        uploads.push((res.json()["id"].as_str().unwrap().to_owned(), code, name));
    }
    for (url, kind, code) in [
        (server.url("/missing.png"), Some("image"), "unreachable_url"),
        (server.url("/notes.txt"), None, "unsupported_format"),
        (
            "http://127.0.0.1:9/nothing.png".to_owned(),
            None,
            "unreachable_url",
        ),
    ] {
        let v = upload_url(&relay, lib_id, &url, kind).await;
        uploads.push((v["id"].as_str().unwrap().to_owned(), code, "url"));
    }
    // A URL that never answers fails once the fetch time limit (2 s here) is up.
    let started = Instant::now();
    let hang = upload_url(&relay, lib_id, &hanging.url(), Some("image")).await;
    let hang_id = hang["id"].as_str().unwrap().to_owned();

    for (id, code, name) in &uploads {
        let v = settled(&relay, id).await;
        assert_eq!(v["status"], "failed", "{name}: {v}");
        assert_eq!(v["error"]["code"], *code, "{name}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
        assert_eq!(v["format"], Value::Null);
        assert!(!blob_path(&relay, id).exists(), "{name}: bytes kept");
    }
    let v = settled(&relay, &hang_id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["error"]["code"], "unreachable_url", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{v}"
    );
    assert!(hanging.hits.load(Ordering::SeqCst) >= 1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let failed = relay
        .get(&format!(
            "/v1/asset-libraries/{lib_id}/assets?status=failed&limit=100"
        ))
        .await
        .json();
    assert_eq!(failed["data"].as_array().unwrap().len(), uploads.len() + 1);

    // Request faults are answered at once.
    let path = format!("/v1/asset-libraries/{lib_id}/assets");
    relay
        .post_json(&path, json!({"type": "image"}))
        .await
        .assert_error(400, "invalid request", Some("url"));
    relay
        .post_json(&path, json!({"url": "ftp://example.com/a.png"}))
        .await
        .assert_error(400, "invalid request", Some("url"));
    relay
        .post_json(
            &path,
            json!({"url": server.url("/frame.png"), "type": "picture"}),
        )
        .await
        .assert_error(400, "invalid request", Some("type"));
    let (ct, body) = Multipart::new().text("type", "image").build();
    relay
        .call(Method::POST, &path, Body::Raw(ct, body))
        .await
        .assert_error(400, "invalid request", Some("file"));
    relay
        .call(
            Method::POST,
            &path,
            Body::Raw("text/plain".into(), b"x".to_vec()),
        )
        .await
        .assert_error(415, "unsupported media type", None);
    relay
        .post_json(
            "/v1/asset-libraries/lib_nope/assets",
            json!({"url": server.url("/frame.png")}),
        )
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_over_the_limit_are_refused() {
    let relay = Relay::start("[server]\nmax_upload_bytes = 4096\n").await;
    let lib = create_library(&relay, "small").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, None, "big.png", &vec![0u8; 8192]).await;
    res.assert_error(413, "Payload Too Large", None);
    assert_eq!(asset_count(&relay, lib_id).await, 0);
}
