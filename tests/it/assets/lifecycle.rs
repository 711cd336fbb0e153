//! Libraries and assets over their lives: created, listed and deleted, expired without a
//! request, deleted with their stored bytes, and kept across a restart that resumes what was
//! still processing.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;

use super::{
    Hanging, WAIT, asset_count, blob_path, create_library, settled, upload_file, upload_url,
};
use crate::harness::{Body, Relay, png, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libraries_create_get_list_delete() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "campaign").await;
    let id = lib["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("lib_"), "{lib}");
    assert_eq!(lib["object"], "asset_library");
    assert_eq!(lib["name"], "campaign");
    assert_eq!(lib["family"], "gen2");
    assert_eq!(lib["asset_count"], 0);
    assert!(lib["created_at"].as_u64().is_some());

    let got = relay.get(&format!("/v1/asset-libraries/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), lib);

    let second = create_library(&relay, "second").await;
    let list = relay.get("/v1/asset-libraries").await.json();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    assert_eq!(list["first_id"], second["id"], "newest first");
    assert_eq!(list["has_more"], false);
    let page = relay
        .get("/v1/asset-libraries?limit=1&order=asc")
        .await
        .json();
    assert_eq!(page["data"][0]["id"], lib["id"]);
    assert_eq!(page["has_more"], true);
    let rest = relay
        .get(&format!("/v1/asset-libraries?limit=1&order=asc&after={id}"))
        .await
        .json();
    assert_eq!(rest["data"][0]["id"], second["id"]);
    assert_eq!(rest["has_more"], false);

    // Request faults.
    relay
        .post_json("/v1/asset-libraries", json!({"name": ""}))
        .await
        .assert_error(400, "invalid request", Some("name"));
    relay
        .call(
            Method::POST,
            "/v1/asset-libraries",
            Body::Raw("text/plain".into(), b"name=x".to_vec()),
        )
        .await
        .assert_error(415, "unsupported media type", None);
    relay.get("/v1/asset-libraries?limit=0").await.assert_error(
        400,
        "invalid request",
        Some("limit"),
    );
    relay
        .get("/v1/asset-libraries/lib_nope")
        .await
        .assert_error(404, "not found", None);
    relay
        .call(
            Method::PUT,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await
        .assert_error(405, "method not allowed", None);

    let deleted = relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "asset_library.deleted", "deleted": true})
    );
    relay
        .get(&format!("/v1/asset-libraries/{id}"))
        .await
        .assert_error(404, "not found", None);
    relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{id}"),
            Body::Empty,
        )
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_assets_expire_without_requests() {
    let relay = Relay::start("[assets]\nttl_secs = 1\n").await;
    let lib = create_library(&relay, "short-lived").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, Some("image"), "f.png", &png(8, 8)).await;
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let active = settled(&relay, &id).await;
    assert_eq!(active["status"], "active", "{active}");
    let expires = active["expires_at"].as_u64().unwrap();

    // Reads never change a status; the sweep does. Look only at the list, by status.
    let path = format!("/v1/asset-libraries/{lib_id}/assets?status=expired");
    let expired = poll_until(Duration::from_secs(15), || async {
        let list = relay.get(&path).await.json();
        list["data"].as_array().and_then(|d| d.first().cloned())
    })
    .await
    .expect("the asset expired");
    assert_eq!(expired["id"], json!(id));
    assert_eq!(expired["status"], "expired");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now >= expires, "expired before its time");

    // Expiry is final and survives a restart.
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), "[assets]\nttl_secs = 1\n").await;
    assert_eq!(
        relay.get(&format!("/v1/assets/{id}")).await.json()["status"],
        "expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_removes_assets_and_their_bytes() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "doomed").await;
    let lib_id = lib["id"].as_str().unwrap().to_owned();
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for n in 0..3 {
        let res = upload_file(&relay, &key, &lib_id, None, "f.png", &png(8 + n, 8)).await;
        ids.push(res.json()["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        assert_eq!(settled(&relay, id).await["status"], "active");
        assert!(blob_path(&relay, id).exists());
    }

    // One asset alone.
    let res = relay
        .call(
            Method::DELETE,
            &format!("/v1/assets/{}", ids[0]),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.json(),
        json!({"id": ids[0], "object": "asset.deleted", "deleted": true})
    );
    assert!(!blob_path(&relay, &ids[0]).exists());
    relay
        .get(&format!("/v1/assets/{}", ids[0]))
        .await
        .assert_error(404, "not found", None);
    assert_eq!(asset_count(&relay, &lib_id).await, 2);

    // The library with the rest.
    let res = relay
        .call(
            Method::DELETE,
            &format!("/v1/asset-libraries/{lib_id}"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    for id in &ids[1..] {
        relay
            .get(&format!("/v1/assets/{id}"))
            .await
            .assert_error(404, "not found", None);
        assert!(!blob_path(&relay, id).exists(), "{id}: bytes left behind");
    }
    relay
        .get(&format!("/v1/asset-libraries/{lib_id}/assets"))
        .await
        .assert_error(404, "not found", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_unfinished_processing_survive_a_restart() {
    // A long fetch limit, so the hanging fetch is still under way when the relay stops.
    let config = "[security]\nurl_fetch_timeout_secs = 30\n";
    let relay = Relay::start(config).await;
    let hanging = Hanging::start().await;
    let lib = create_library(&relay, "kept").await;
    let lib_id = lib["id"].as_str().unwrap().to_owned();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, &lib_id, None, "f.png", &png(20, 10)).await;
    let done_id = res.json()["id"].as_str().unwrap().to_owned();
    let done = settled(&relay, &done_id).await;
    assert_eq!(done["status"], "active");

    let pending = upload_url(&relay, &lib_id, &hanging.url(), None).await;
    let pending_id = pending["id"].as_str().unwrap().to_owned();
    poll_until(WAIT, || async {
        (hanging.hits.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await
    .expect("the relay fetched the URL");

    let stopping = Instant::now();
    let dir = relay.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        stopping.elapsed()
    );
    hanging.serve.store(true, Ordering::SeqCst);
    let relay = Relay::start_in(dir, Some(key), config).await;

    assert_eq!(
        relay.get(&format!("/v1/assets/{done_id}")).await.json(),
        done
    );
    assert_eq!(asset_count(&relay, &lib_id).await, 2);
    // The asset left processing is picked up again at start, with no request needed.
    let resumed = settled(&relay, &pending_id).await;
    assert_eq!(resumed["status"], "active", "{resumed}");
    assert_eq!(resumed["type"], "image");
    assert!(hanging.hits.load(Ordering::SeqCst) >= 2);
}
