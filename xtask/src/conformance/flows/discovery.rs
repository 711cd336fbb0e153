//! Discovery agrees with validation: every model `GET /v1/video/models` lists reads the same at
//! `/v1/video/models/{id}`, and the durations, ratios and resolutions it lists are what a
//! submission of that model may give, while one outside them is refused. No task is created:
//! each probe carries a fault the validator finds only after the field under test (a second
//! `audio_url` in the first format, an unknown `ratio` or a malformed `assets` in the second),
//! so an accepted value shows as that later error.

use serde_json::{Value, json};

use crate::conformance::checks::{self, Verdict};
use crate::conformance::client::{Req, Resp};
use crate::conformance::suite::Suite;

const S: &str = "docs/api.md#video-models-get-v1videomodels";

/// `r` is the 400 `want`, or the error its probe expects after an accepted field.
fn refused_with(r: &Resp, want: &str, what: &str) -> Verdict {
    checks::api_error(r, 400, want).map_err(|e| format!("{what}: {e}"))
}

pub async fn discovery(suite: &mut Suite) {
    let key = suite.args.key.clone();
    let list = suite.send(Req::get("/v1/video/models").bearer(&key)).await;
    let models: Vec<Value> = list.json()["data"].as_array().cloned().unwrap_or_default();
    let v = checks::status(&list, 200).and_then(|()| {
        if list.json()["object"] == "list" && !models.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "expected a non-empty list of models, got {}",
                list.describe()
            ))
        }
    });
    suite.check(S, "GET /v1/video/models lists the key's models", v);
    let r = suite
        .send(Req::get("/v1/video/models/no-such-model").bearer(&key))
        .await;
    suite.check(
        S,
        "an unknown model is 404",
        checks::api_error(&r, 404, "not found"),
    );
    for model in &models {
        let id = model["id"].as_str().unwrap_or("missing").to_owned();
        let one = suite
            .send(Req::get(format!("/v1/video/models/{id}")).bearer(&key))
            .await;
        let v = checks::status(&one, 200).and_then(|()| {
            if one.json() == *model {
                Ok(())
            } else {
                Err(format!("expected {model}, got {}", one.describe()))
            }
        });
        suite.check(S, &format!("{id}: GET by id reads as listed"), v);
        let v = match model["format"].as_str() {
            Some("videos") => first_format(suite, &key, model).await,
            Some("generations") => second_format(suite, &key, model).await,
            other => Err(format!(
                "expected format videos or generations, got {other:?}"
            )),
        };
        suite.check(
            S,
            &format!("{id}: listed durations, ratios and resolutions are what a submission takes"),
            v,
        );
    }
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `POST /v1/videos` probes: two `audio_url`s are `reference limit exceeded`, checked after
/// size, ratio and duration.
async fn first_format(suite: &Suite, key: &str, model: &Value) -> Verdict {
    let id = model["id"].as_str().unwrap_or_default();
    let durations = numbers(&model["durations"]);
    let (Some(&min), Some(&max)) = (durations.iter().min(), durations.iter().max()) else {
        return Err(format!("{id} lists no durations"));
    };
    let probe = |fields: Value| {
        let mut body = json!({"model": id, "prompt": "discovery probe", "audio_url": ["a", "b"]});
        if let (Some(b), Some(f)) = (body.as_object_mut(), fields.as_object()) {
            b.extend(f.clone());
        }
        Req::post("/v1/videos").bearer(key).json(&body)
    };
    let later = "reference limit exceeded";
    for d in &durations {
        let r = suite.send(probe(json!({"duration": d}))).await;
        refused_with(&r, later, &format!("listed duration {d}"))?;
        let r = suite.send(probe(json!({"seconds": d.to_string()}))).await;
        refused_with(&r, later, &format!("listed seconds \"{d}\""))?;
    }
    for d in [max + 1].into_iter().chain(min.checked_sub(1)) {
        let r = suite.send(probe(json!({"duration": d}))).await;
        refused_with(&r, "invalid duration", &format!("unlisted duration {d}"))?;
    }
    for ratio in strings(&model["ratios"]) {
        let r = suite.send(probe(json!({"aspect_ratio": ratio}))).await;
        refused_with(&r, later, &format!("listed ratio {ratio}"))?;
    }
    for size in strings(&model["resolutions"]) {
        let r = suite.send(probe(json!({"size": size}))).await;
        refused_with(&r, later, &format!("listed size {size}"))?;
    }
    if let Some(side) = model["size_range"]["max_side"].as_u64() {
        let size = format!("{}x64", side + 1);
        let r = suite.send(probe(json!({"size": size}))).await;
        refused_with(&r, "invalid size", &format!("size {size} past max_side"))?;
    }
    Ok(())
}

/// `POST /v1/video/generations` probes: an unknown `ratio` is `invalid ratio`, checked after
/// resolution and duration (and their joint rule); a malformed `assets` is `invalid request`,
/// checked after the ratio.
async fn second_format(suite: &Suite, key: &str, model: &Value) -> Verdict {
    let id = model["id"].as_str().unwrap_or_default();
    let durations = numbers(&model["durations"]);
    let Some(&max) = durations.iter().max() else {
        return Err(format!("{id} lists no durations"));
    };
    let probe = |fields: Value| {
        let mut body = json!({"model": id, "prompt": "discovery probe", "ratio": "no-such-ratio"});
        if let (Some(b), Some(f)) = (body.as_object_mut(), fields.as_object()) {
            b.extend(f.clone());
        }
        Req::post("/v1/video/generations").bearer(key).json(&body)
    };
    for resolution in strings(&model["resolutions"]) {
        let cap = model["max_duration_by_resolution"][&resolution].as_u64();
        for d in &durations {
            let r = suite
                .send(probe(json!({"resolution": resolution, "duration": d})))
                .await;
            let (want, what) = match cap {
                Some(cap) if *d > cap => ("invalid duration", "past its resolution's limit"),
                _ => ("invalid ratio", "listed"),
            };
            refused_with(&r, want, &format!("{what} duration {d} at {resolution}"))?;
        }
        let r = suite
            .send(probe(
                json!({"resolution": resolution, "duration": max + 1}),
            ))
            .await;
        refused_with(
            &r,
            "invalid duration",
            &format!("unlisted duration {}", max + 1),
        )?;
    }
    let r = suite
        .send(probe(json!({"resolution": "no-such-resolution"})))
        .await;
    refused_with(&r, "invalid resolution", "an unlisted resolution")?;
    for ratio in strings(&model["ratios"]) {
        let r = suite
            .send(probe(json!({"ratio": ratio, "assets": "not an array"})))
            .await;
        refused_with(&r, "invalid request", &format!("listed ratio {ratio}"))?;
    }
    Ok(())
}
