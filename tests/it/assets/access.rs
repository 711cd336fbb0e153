//! Who may see and fill a library: another key's libraries and assets are not found, and a key
//! whose group has no model family cannot hold assets.

use http::Method;
use serde_json::json;

use super::{asset_count, create_library, key_in_group, new_library_as, settled, upload_file};
use crate::harness::{Body, Relay, png};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_keys_libraries_and_assets_are_not_found() {
    let relay = Relay::start("").await;
    let lib = create_library(&relay, "mine").await;
    let lib_id = lib["id"].as_str().unwrap();
    let key = relay.key.clone();
    let res = upload_file(&relay, &key, lib_id, None, "f.png", &png(8, 8)).await;
    let asset_id = res.json()["id"].as_str().unwrap().to_owned();
    settled(&relay, &asset_id).await;

    let (_, other) = relay.new_key("other", None).await;
    let as_other = |method: Method, path: String, body: Body| {
        let relay = &relay;
        let other = other.clone();
        async move { relay.call_as(&other, method, &path, body, &[]).await }
    };
    for (method, path) in [
        (Method::GET, format!("/v1/asset-libraries/{lib_id}")),
        (Method::DELETE, format!("/v1/asset-libraries/{lib_id}")),
        (Method::GET, format!("/v1/asset-libraries/{lib_id}/assets")),
        (Method::GET, format!("/v1/assets/{asset_id}")),
        (Method::DELETE, format!("/v1/assets/{asset_id}")),
    ] {
        as_other(method.clone(), path.clone(), Body::Empty)
            .await
            .assert_error(404, "not found", None);
    }
    let res = upload_file(&relay, &other, lib_id, None, "f.png", &png(8, 8)).await;
    res.assert_error(404, "not found", None);
    let theirs = as_other(Method::GET, "/v1/asset-libraries".into(), Body::Empty).await;
    assert_eq!(theirs.json()["data"], json!([]));
    // Still there for the owner.
    assert_eq!(
        relay.get(&format!("/v1/assets/{asset_id}")).await.status,
        200
    );
    assert_eq!(asset_count(&relay, lib_id).await, 1);
    // No key at all.
    let res = relay
        .send(
            Method::GET,
            &format!("/v1/assets/{asset_id}"),
            Body::Empty,
            &[],
        )
        .await;
    res.assert_error(401, "unauthorized", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_family_cannot_hold_assets() {
    let relay = Relay::start("").await;
    let key = key_in_group(&relay, "loose", "no-such-group").await;
    new_library_as(&relay, &key, "x")
        .await
        .assert_error(400, "group mismatch", None);
    // A motion key's library is of the motion family.
    let key = key_in_group(&relay, "m", "motion").await;
    let lib = new_library_as(&relay, &key, "x").await;
    assert_eq!(lib.json()["family"], "motion");
}
