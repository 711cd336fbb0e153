//! `POST /v1/video/generations` and the moderation-result request (`crates/video-generations`)
//! over arbitrary JSON, against the relay's default catalog and a key family picked by the
//! input. Never a panic; a valid request written back as JSON validates to the same request;
//! its values are the model's (resolution, duration within the joint rules, ratio); the asset
//! checks pass exactly when every asset is active, of the family and of the type of every role
//! it is referenced as, and never panic over facts spoilt by the input; an adaptive ratio
//! resolves to a fixed ratio of the model.
//! A moderation request that parses keeps its `task_id`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use video_generations::{
    ADAPTIVE, AssetFact, AssetState, Catalog, JointRule, ModelSpec, ValidGeneration, check_assets,
    parse_moderation_request, resolve_ratio, validate,
};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The catalog of the embedded default configuration.
fn catalog() -> Catalog {
    Catalog::new(vec![
        ModelSpec {
            name: "gen2-pro".into(),
            family: "gen2".into(),
            resolutions: strings(&["480p", "720p", "1080p"]),
            durations: (2..=12).collect(),
            ratios: strings(&["16:9", "4:3", "1:1", "3:4", "9:16", "21:9", "adaptive"]),
            joint_rules: vec![JointRule::MaxDuration {
                resolution: "1080p".into(),
                max_secs: 10,
            }],
        },
        ModelSpec {
            name: "gen2-lite".into(),
            family: "gen2".into(),
            resolutions: strings(&["480p", "720p"]),
            durations: vec![5, 10],
            ratios: strings(&["16:9", "9:16", "1:1", "adaptive"]),
            joint_rules: Vec::new(),
        },
        ModelSpec {
            name: "motion-1".into(),
            family: "motion".into(),
            resolutions: strings(&["720p", "1080p"]),
            durations: vec![5, 10],
            ratios: strings(&["16:9", "9:16", "1:1"]),
            joint_rules: Vec::new(),
        },
    ])
}

fn as_json(valid: &ValidGeneration) -> Value {
    let assets: Vec<Value> = valid
        .assets
        .iter()
        .map(|a| json!({"id": a.id, "role": a.role.as_str()}))
        .collect();
    json!({
        "model": valid.model,
        "prompt": valid.prompt,
        "duration": valid.duration,
        "resolution": valid.resolution,
        "ratio": valid.ratio,
        "assets": assets,
        "return_last_frame": valid.return_last_frame,
        "seed": valid.seed.map_or(-1, |s| s as i64),
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let catalog = catalog();
    if let Ok(request) = parse_moderation_request(&body) {
        assert_eq!(
            body.get("task_id").and_then(Value::as_str),
            Some(request.task_id.as_str())
        );
    }
    let family = match data.len() % 4 {
        0 => None,
        1 => Some("motion"),
        _ => Some("gen2"),
    };
    let Ok(valid) = validate(&body, &catalog, family) else {
        return;
    };
    assert_eq!(Some(valid.family.as_str()), family);
    let again = as_json(&valid);
    assert_eq!(
        validate(&again, &catalog, family).ok().as_ref(),
        Some(&valid),
        "{again}"
    );

    let model = catalog
        .model(&valid.model)
        .expect("a valid request names a catalog model");
    assert!(model.resolutions.contains(&valid.resolution));
    assert!(model.durations.contains(&valid.duration));
    assert!(
        model
            .max_duration_at(&valid.resolution)
            .is_none_or(|m| valid.duration <= m)
    );
    assert!(model.ratios.contains(&valid.ratio));

    // One fact per asset id (an asset may be referenced under several roles), as the store
    // would answer: active, of the family, of the type of the first role it is referenced as.
    let mut good: Vec<AssetFact> = Vec::new();
    for a in &valid.assets {
        if !good.iter().any(|f| f.id == a.id) {
            good.push(AssetFact {
                id: a.id.clone(),
                exists: true,
                status: Some(AssetState::Active),
                family: Some(valid.family.clone()),
                media: Some(a.role.media()),
            });
        }
    }
    let one_type_each = valid.assets.iter().all(|a| {
        good.iter()
            .any(|f| f.id == a.id && f.media == Some(a.role.media()))
    });
    assert_eq!(
        check_assets(&valid, &good).is_ok(),
        one_type_each,
        "{valid:?}"
    );
    // Facts spoilt by the input's bytes: any result, no panic.
    let spoilt: Vec<AssetFact> = good
        .into_iter()
        .zip(data.iter().cycle())
        .map(|(mut fact, b)| {
            fact.exists = b & 1 == 0;
            fact.status = [None, Some(AssetState::Processing), Some(AssetState::Active)]
                .get(usize::from(b >> 1 & 3))
                .copied()
                .flatten();
            fact
        })
        .collect();
    let _ = check_assets(&valid, &spoilt);

    let dims = (u32::from(data[0]) * 31, data.len() as u32);
    let ratio = resolve_ratio(model, &valid.ratio, Some(dims));
    if valid.ratio == ADAPTIVE {
        assert!(model.fixed_ratios().any(|r| r == ratio), "{ratio}");
    } else {
        assert_eq!(ratio, valid.ratio);
    }
});
