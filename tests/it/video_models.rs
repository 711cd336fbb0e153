//! `GET /v1/video/models`: what each key may use, and a description that cannot drift from the
//! validators: every advertised value is accepted by a real submission, and the values just
//! outside are refused.

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Body, Relay};

/// A key of `group` (allowed `models`, or all), through the admin API.
async fn key(relay: &Relay, group: &str, models: Value) -> String {
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": group, "group": group, "quota": null, "models": models})),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["key"].as_str().unwrap().to_owned()
}

async fn models(relay: &Relay, key: &str) -> Vec<Value> {
    let res = relay
        .call_as(key, Method::GET, "/v1/video/models", Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    assert_eq!(v["object"], "list");
    assert!(!res.text().contains("simulator"), "a channel name leaked");
    v["data"].as_array().unwrap().clone()
}

fn ids(models: &[Value]) -> Vec<&str> {
    models.iter().map(|m| m["id"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_by_key_group_and_allowed_models() {
    let relay = Relay::start("").await;
    let gen2 = models(&relay, &relay.key).await;
    assert_eq!(ids(&gen2), ["gen2-lite", "gen2-pro", "model_h3"]);
    let motion_key = key(&relay, "motion", Value::Null).await;
    assert_eq!(
        ids(&models(&relay, &motion_key).await),
        ["model_h3", "motion-1"]
    );
    let only_h3 = key(&relay, "gen2", json!(["model_h3"])).await;
    assert_eq!(ids(&models(&relay, &only_h3).await), ["model_h3"]);

    let pro = relay.get("/v1/video/models/gen2-pro").await;
    assert_eq!(pro.status, 200, "{}", pro.text());
    let pro = pro.json();
    assert_eq!(pro["object"], "video.model");
    assert_eq!(pro["format"], "generations");
    assert_eq!(pro["family"], "gen2");
    assert_eq!(pro["resolutions"], json!(["480p", "720p", "1080p"]));
    assert_eq!(pro["max_duration_by_resolution"], json!({"1080p": 10}));
    assert_eq!(
        pro["durations_by_resolution"],
        json!({"1080p": [2, 3, 4, 5, 6, 7, 8, 9, 10]})
    );
    // The simulator has no catalog of its own: it makes what the validators accept.
    assert_eq!(pro["capabilities"], Value::Null);
    assert_eq!(
        pro["price"],
        json!({"per_second": null, "per_second_by_resolution": {"480p": 5, "720p": 8, "1080p": 12}})
    );
    let h3 = relay.get("/v1/video/models/model_h3").await.json();
    assert_eq!(h3["format"], "videos");
    assert_eq!(h3["family"], Value::Null);
    assert_eq!(h3["price"]["per_second"], 10);
    assert_eq!(h3["size_range"], json!({"min_side": 64, "max_side": 4096}));
    assert_eq!(h3["durations"], json!((5..=15).collect::<Vec<u32>>()));
    assert_eq!(h3["durations_by_resolution"], json!({}));
    assert_eq!(h3["capabilities"], Value::Null);

    // Another group's model and an unknown one: 404 naming the model.
    relay
        .get("/v1/video/models/motion-1")
        .await
        .assert_error(404, "not found", Some("model"));
    relay
        .get("/v1/video/models/sora-2")
        .await
        .assert_error(404, "not found", Some("model"));
    relay
        .call_as(
            &only_h3,
            Method::GET,
            "/v1/video/models/gen2-pro",
            Body::Empty,
            &[],
        )
        .await
        .assert_error(404, "not found", Some("model"));
    let unauthenticated = relay
        .send(Method::GET, "/v1/video/models", Body::Empty, &[])
        .await;
    unauthenticated.assert_error(401, "unauthorized", None);
}

/// Submits `body` to the model's format and asserts the answer: `Ok(())` is the model's
/// "accepted" marker (a later check fails on purpose, so no task is made), `Err(msg)` the
/// refusal naming `param`.
async fn submit(
    relay: &Relay,
    key: &str,
    path: &str,
    body: Value,
    expect: Result<(), (&str, &str)>,
) {
    let res = relay
        .call_as(key, Method::POST, path, Body::Json(body.clone()), &[])
        .await;
    let accepted = if path == "/v1/videos" {
        "reference limit exceeded"
    } else {
        "asset not found"
    };
    match expect {
        Ok(()) => {
            assert_eq!(res.status, 400, "{body}: {}", res.text());
            assert_eq!(
                res.json()["error"]["message"],
                accepted,
                "{body}: {}",
                res.text()
            );
        }
        Err((message, param)) => {
            assert_eq!(
                res.json()["error"]["message"],
                message,
                "{body}: {}",
                res.text()
            );
            res.assert_error(400, message, Some(param));
        }
    }
}

fn with(base: &Value, field: &str, value: Value) -> Value {
    let mut body = base.clone();
    body[field] = value;
    body
}

async fn check_first_format(relay: &Relay, key: &str, m: &Value) {
    let path = "/v1/videos";
    // Two first-frame images: `reference limit exceeded`, checked after every field below.
    let base = json!({"model": m["id"], "prompt": "a fox",
        "first_frame": "http://127.0.0.1:9/a.png", "input_reference": "http://127.0.0.1:9/b.png"});
    let durations: Vec<u64> = m["durations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    for d in &durations {
        submit(relay, key, path, with(&base, "duration", json!(d)), Ok(())).await;
        submit(
            relay,
            key,
            path,
            with(&base, "seconds", json!(d.to_string())),
            Ok(()),
        )
        .await;
    }
    let (lo, hi) = (durations[0], *durations.last().unwrap());
    for d in [lo - 1, hi + 1] {
        let refused = Err(("invalid duration", "duration"));
        submit(relay, key, path, with(&base, "duration", json!(d)), refused).await;
    }
    for size in m["resolutions"].as_array().unwrap() {
        submit(relay, key, path, with(&base, "size", size.clone()), Ok(())).await;
    }
    let min = m["size_range"]["min_side"].as_u64().unwrap();
    let max = m["size_range"]["max_side"].as_u64().unwrap();
    for (w, h, ok) in [
        (min, min, true),
        (max, max, true),
        (min - 1, min, false),
        (min, max + 1, false),
    ] {
        let expect = if ok {
            Ok(())
        } else {
            Err(("invalid size", "size"))
        };
        submit(
            relay,
            key,
            path,
            with(&base, "size", json!(format!("{w}x{h}"))),
            expect,
        )
        .await;
    }
    for ratio in m["ratios"].as_array().unwrap() {
        submit(
            relay,
            key,
            path,
            with(&base, "aspect_ratio", ratio.clone()),
            Ok(()),
        )
        .await;
    }
    let refused = Err(("invalid ratio", "aspect_ratio"));
    submit(
        relay,
        key,
        path,
        with(&base, "aspect_ratio", json!("2:1")),
        refused,
    )
    .await;
    // Each reference field takes at most its `max`.
    for r in m["references"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap();
        let max = r["max"].as_u64().unwrap() as usize;
        let body = json!({"model": m["id"], "prompt": "a fox",
            name: vec!["http://127.0.0.1:9/x"; max + 1]});
        if name == "input_reference" {
            // Counted with first_frame, and refused under the first frame's name.
            let res = relay
                .call_as(key, Method::POST, path, Body::Json(body), &[])
                .await;
            assert_eq!(res.json()["error"]["message"], "reference limit exceeded");
            continue;
        }
        let refused = Err(("reference limit exceeded", name));
        submit(relay, key, path, body, refused).await;
    }
}

async fn check_second_format(relay: &Relay, key: &str, m: &Value) {
    let path = "/v1/video/generations";
    let list = |field: &str| m[field].as_array().unwrap().clone();
    // An asset that does not exist: `asset not found`, checked after every field below.
    let base = json!({"model": m["id"], "prompt": "a fox",
        "assets": [{"id": "asset_missing", "role": "first_frame"}]});
    let durations: Vec<u64> = list("durations")
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    for d in &durations {
        submit(relay, key, path, with(&base, "duration", json!(d)), Ok(())).await;
    }
    let (lo, hi) = (durations[0], *durations.last().unwrap());
    for d in (lo - 1..=hi + 1).filter(|d| !durations.contains(d)) {
        let refused = Err(("invalid duration", "duration"));
        submit(relay, key, path, with(&base, "duration", json!(d)), refused).await;
    }
    let resolutions = list("resolutions");
    for r in &resolutions {
        submit(
            relay,
            key,
            path,
            with(&base, "resolution", r.clone()),
            Ok(()),
        )
        .await;
    }
    for r in ["360p", "480p", "720p", "1080p", "1440p", "2160p"] {
        if !resolutions.contains(&json!(r)) {
            let refused = Err(("invalid resolution", "resolution"));
            submit(
                relay,
                key,
                path,
                with(&base, "resolution", json!(r)),
                refused,
            )
            .await;
        }
    }
    let ratios = list("ratios");
    for r in &ratios {
        submit(relay, key, path, with(&base, "ratio", r.clone()), Ok(())).await;
    }
    for r in [
        "16:9", "9:16", "1:1", "4:3", "3:4", "21:9", "adaptive", "2:1",
    ] {
        if !ratios.contains(&json!(r)) {
            let refused = Err(("invalid ratio", "ratio"));
            submit(relay, key, path, with(&base, "ratio", json!(r)), refused).await;
        }
    }
    for (resolution, max) in m["max_duration_by_resolution"].as_object().unwrap() {
        let max = max.as_u64().unwrap();
        let at = with(&base, "resolution", json!(resolution));
        submit(relay, key, path, with(&at, "duration", json!(max)), Ok(())).await;
        if durations.contains(&(max + 1)) {
            let refused = Err(("invalid duration", "duration"));
            submit(
                relay,
                key,
                path,
                with(&at, "duration", json!(max + 1)),
                refused,
            )
            .await;
        }
    }
    for r in m["references"].as_array().unwrap() {
        let role = r["name"].as_str().unwrap();
        let max = r["max"].as_u64().unwrap() as usize;
        let assets = |n: usize| {
            (0..n)
                .map(|i| json!({"id": format!("asset_missing{i}"), "role": role}))
                .collect::<Vec<_>>()
        };
        submit(
            relay,
            key,
            path,
            with(&base, "assets", json!(assets(max))),
            Ok(()),
        )
        .await;
        let refused = Err(("reference limit exceeded", "assets"));
        submit(
            relay,
            key,
            path,
            with(&base, "assets", json!(assets(max + 1))),
            refused,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_value_is_accepted_and_the_next_refused() {
    let relay = Relay::start("").await;
    let motion_key = key(&relay, "motion", Value::Null).await;
    let mut seen = Vec::new();
    for key in [relay.key.clone(), motion_key] {
        for m in models(&relay, &key).await {
            match m["format"].as_str().unwrap() {
                "videos" => check_first_format(&relay, &key, &m).await,
                "generations" => check_second_format(&relay, &key, &m).await,
                other => panic!("format {other}"),
            }
            seen.push(m["id"].as_str().unwrap().to_owned());
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["gen2-lite", "gen2-pro", "model_h3", "motion-1"]);
    // Nothing was made: every submission stopped at a check.
    let tasks = relay.get("/v1/videos").await.json();
    assert_eq!(tasks["data"], json!([]));
}
