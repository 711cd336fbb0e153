//! Asset libraries and assets: a library of the key's family, uploads that become active or
//! failed, another key's assets, one key with assets of two families, deletes.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{PNG_1X1, TASK_DEADLINE, id_of};
use crate::conformance::checks;
use crate::conformance::client::{Req, Resp, multipart};
use crate::conformance::suite::Suite;

/// What the second format's checks run on: the key's library with an active image and a
/// failed upload, and another key's library and asset when a `motion` key was given.
pub struct Uploaded {
    pub lib: String,
    pub image: String,
    pub broken: String,
    /// (motion key, its library, its active asset).
    pub foreign: Option<(String, String, String)>,
}

/// Makes a library of the key's family with an image and an unsupported file, and the same
/// for the `motion` key when there is one.
pub async fn setup(suite: &mut Suite) -> Uploaded {
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
    Uploaded {
        lib,
        image,
        broken,
        foreign,
    }
}

/// Deletes the image and the libraries of [`setup`].
pub async fn clean_up(suite: &mut Suite, uploaded: Uploaded) {
    let Uploaded {
        lib,
        image,
        foreign,
        ..
    } = uploaded;
    let key = suite.args.key.clone();
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

/// Uploads a file asset and returns its id.
pub async fn upload(suite: &Suite, key: &str, lib: &str, bytes: &[u8]) -> Resp {
    let (ctype, body) = multipart(&[("file", Some("f.png"), "application/octet-stream", bytes)]);
    suite
        .send(
            Req::post(format!("/v1/asset-libraries/{lib}/assets"))
                .bearer(key)
                .raw(&ctype, body),
        )
        .await
}

pub async fn wait_asset(suite: &Suite, key: &str, id: &str) -> Resp {
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

/// A new key owning a failed `gen2` asset and an active `motion` asset, its group `gen2`
/// again: (key, motion asset, failed asset).
pub async fn two_families(suite: &mut Suite) -> Result<(String, String, String), String> {
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
