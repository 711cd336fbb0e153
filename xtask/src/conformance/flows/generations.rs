//! The second format, `/v1/video/generations`: SPEC §7's check order one pair of faults at a
//! time (assets of two families included), then the full flow: adaptive ratio, signed result
//! URLs with ranges, the last frame, moderation, failure, cancel, timeout.

use serde_json::{Value, json};

use super::assets::{self, Uploaded, two_families};
use super::{id_of, wait_final};
use crate::conformance::checks;
use crate::conformance::client::Req;
use crate::conformance::suite::Suite;

pub async fn second_format(suite: &mut Suite) {
    let uploaded = assets::setup(suite).await;
    check_order(suite, &uploaded).await;
    full_flow(suite, &uploaded).await;
    assets::clean_up(suite, uploaded).await;
}

/// A valid generation body with `extra`'s fields set.
fn generation(extra: Value) -> Value {
    let mut b = json!({"model": "gen2-pro", "prompt": "a conformance test", "duration": 2, "resolution": "480p", "ratio": "16:9"});
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    b
}

/// `assets` with `id` as the first frame.
fn first(id: &str) -> Value {
    json!([{"id": id, "role": "first_frame"}])
}

/// SPEC §7's check order, one pair of faults at a time.
async fn check_order(suite: &mut Suite, uploaded: &Uploaded) {
    let key = suite.args.key.clone();
    let (broken, foreign) = (&uploaded.broken, &uploaded.foreign);
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
            generation(json!({"assets": first(broken)})),
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
}

/// The full flow: adaptive ratio from a 1x1 first frame, last frame returned.
async fn full_flow(suite: &mut Suite, uploaded: &Uploaded) {
    let s = "SPEC§4.4";
    let key = suite.args.key.clone();
    let image = &uploaded.image;
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
                json!({"ratio": "adaptive", "assets": first(image), "return_last_frame": true}),
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
}
