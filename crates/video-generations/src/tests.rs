//! Generation-request validation: the fixture walk (`test_data/ok`, `test_data/err`), the asset
//! checks and their order, adaptive ratio.
//!
//! Fixtures: `{"request": <body>, "expect": {<ValidGeneration fields>}}` in `ok`,
//! `{"request": <body>, "code": "...", "param": "..." | null}` in `err`; an optional `"family"`
//! is the key's channel family (default `gen2`; `null`: the key's group has none). The catalog
//! is the contract's default one (CONTRACT §2.1).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use error_codes::{ApiError, ErrorCode};
use serde_json::{Value, json};

use crate::{
    AssetFact, AssetRef, AssetState, Catalog, JointRule, MediaType, ModelSpec, Role,
    ValidGeneration, check_assets, resolve_ratio, validate,
};

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| (*s).to_owned()).collect()
}

/// The contract's default catalog.
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

fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test_data")
        .join(kind);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no fixtures in {}", dir.display());
    paths
}

fn read(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(fixture: &Value) -> Result<ValidGeneration, ApiError> {
    let family = match fixture.get("family") {
        None => Some("gen2"),
        Some(v) => v.as_str(),
    };
    validate(&fixture["request"], &catalog(), family)
}

/// Every fixture, checked; failures are collected so one run reports them all.
#[test]
fn fixtures_ok_and_err() {
    let mut failures = Vec::new();
    for path in fixtures("ok") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture = read(&path);
        match run(&fixture) {
            Err(e) => failures.push(format!("{name}: expected ok, got {e}")),
            Ok(valid) => {
                let got = serde_json::to_value(&valid).unwrap();
                let expect = fixture["expect"].as_object().cloned().unwrap_or_default();
                for (key, want) in expect {
                    if got.get(&key) != Some(&want) {
                        failures.push(format!("{name}: {key}: expected {want}, got {}", got[&key]));
                    }
                }
            }
        }
    }

    let mut codes_seen = BTreeSet::new();
    for path in fixtures("err") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let fixture = read(&path);
        let (code, param) = (&fixture["code"], &fixture["param"]);
        match run(&fixture) {
            Ok(valid) => failures.push(format!("{name}: expected {code}, got ok: {valid:?}")),
            Err(e) => {
                codes_seen.insert(e.code.code());
                if e.code.code() != code || e.param.as_deref() != param.as_str() {
                    failures.push(format!(
                        "{name}: expected {code} on {param}, got {} on {:?} ({})",
                        e.code.code(),
                        e.param,
                        e.detail
                    ));
                }
                if e.detail.is_empty() {
                    failures.push(format!("{name}: empty detail"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));

    // Every error the validator can give has at least one fixture.
    for code in [
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidModel,
        ErrorCode::GroupMismatch,
        ErrorCode::InvalidResolution,
        ErrorCode::InvalidDuration,
        ErrorCode::InvalidRatio,
        ErrorCode::ReferenceLimitExceeded,
        ErrorCode::InvalidPrompt,
    ] {
        assert!(
            codes_seen.contains(code.code()),
            "no err fixture gives {code}"
        );
    }
}

fn err(body: Value, family: Option<&str>) -> ApiError {
    validate(&body, &catalog(), family).unwrap_err()
}

#[test]
fn details_name_the_field_and_the_accepted_values() {
    let e = err(json!({"model": "sora-2", "prompt": "x"}), Some("gen2"));
    assert_eq!(
        e.detail,
        "model must be one of gen2-pro, gen2-lite, motion-1, got \"sora-2\""
    );
    let e = err(json!({"model": "motion-1", "prompt": "x"}), Some("gen2"));
    assert!(e.detail.contains("family motion"), "{}", e.detail);
    assert!(e.detail.contains("family gen2"), "{}", e.detail);
    let e = err(
        json!({"model": "gen2-pro", "resolution": "4k"}),
        Some("gen2"),
    );
    assert_eq!(
        e.detail,
        "resolution must be one of 480p, 720p, 1080p for model gen2-pro, got \"4k\""
    );
    let e = err(json!({"model": "gen2-pro", "duration": 13}), Some("gen2"));
    assert_eq!(
        e.detail,
        "duration must be one of 2 to 12 seconds for model gen2-pro, got 13"
    );
    let e = err(
        json!({"model": "gen2-lite", "duration": "abc"}),
        Some("gen2"),
    );
    assert_eq!(
        e.detail,
        "duration must be one of 5, 10 seconds for model gen2-lite, got \"abc\""
    );
    let e = err(
        json!({"model": "gen2-pro", "resolution": "1080p", "duration": 12}),
        Some("gen2"),
    );
    assert_eq!(
        e.detail,
        "duration must be at most 10 seconds at resolution 1080p for model gen2-pro, got 12"
    );
    let e = err(json!({"model": "gen2-lite", "ratio": "4:3"}), Some("gen2"));
    assert_eq!(
        e.detail,
        "ratio must be one of 16:9, 9:16, 1:1 or adaptive for model gen2-lite, got \"4:3\""
    );
    let e = err(
        json!({"model": "motion-1", "ratio": "adaptive"}),
        Some("motion"),
    );
    assert!(
        e.detail.contains("adaptive is not available"),
        "{}",
        e.detail
    );
    let e = err(
        json!({"model": "gen2-pro", "prompt": "x",
               "assets": [{"id": "a", "role": "reference_video"}, {"id": "b", "role": "reference_video"}]}),
        Some("gen2"),
    );
    assert_eq!(
        e.detail,
        "at most 1 asset may have role reference_video, got 2"
    );
}

#[test]
fn default_duration_respects_joint_rules() {
    let model = ModelSpec {
        name: "m".into(),
        family: "f".into(),
        resolutions: strings(&["720p", "1080p"]),
        durations: vec![12, 10, 5],
        ratios: strings(&["16:9"]),
        joint_rules: vec![JointRule::MaxDuration {
            resolution: "1080p".into(),
            max_secs: 10,
        }],
    };
    let catalog = Catalog::new(vec![model]);
    let valid = validate(
        &json!({"model": "m", "prompt": "x", "resolution": "1080p"}),
        &catalog,
        Some("f"),
    )
    .unwrap();
    assert_eq!(valid.duration, 10);
    let valid = validate(&json!({"model": "m", "prompt": "x"}), &catalog, Some("f")).unwrap();
    assert_eq!((valid.resolution.as_str(), valid.duration), ("720p", 12));
}

fn request(assets: &[(&str, Role)]) -> ValidGeneration {
    ValidGeneration {
        model: "gen2-pro".into(),
        family: "gen2".into(),
        prompt: "x".into(),
        duration: 5,
        resolution: "720p".into(),
        ratio: "16:9".into(),
        assets: assets
            .iter()
            .map(|(id, role)| AssetRef {
                id: (*id).to_owned(),
                role: *role,
            })
            .collect(),
        return_last_frame: false,
        seed: None,
        callback_url: None,
    }
}

fn fact(id: &str, status: AssetState, family: &str, media: MediaType) -> AssetFact {
    AssetFact {
        id: id.into(),
        exists: true,
        status: Some(status),
        family: Some(family.into()),
        media: Some(media),
    }
}

fn missing(id: &str) -> AssetFact {
    AssetFact {
        id: id.into(),
        ..AssetFact::default()
    }
}

use AssetState::{Active, Expired, Failed, Processing};
use MediaType::{Audio, Image, Video};
use Role::{FirstFrame, ReferenceAudio, ReferenceImage, ReferenceVideo};

fn asset_error(assets: &[(&str, Role)], facts: &[AssetFact]) -> (ErrorCode, String) {
    let e = check_assets(&request(assets), facts).unwrap_err();
    assert!(!e.detail.is_empty());
    (e.code, e.param.unwrap_or_default())
}

#[test]
fn usable_assets_pass() {
    let facts = [
        fact("a", Active, "gen2", Image),
        fact("v", Active, "gen2", Video),
        fact("s", Active, "gen2", Audio),
    ];
    let assets = [
        ("a", FirstFrame),
        ("a", ReferenceImage),
        ("v", ReferenceVideo),
        ("s", ReferenceAudio),
    ];
    check_assets(&request(&assets), &facts).unwrap();
    check_assets(&request(&[]), &[]).unwrap();
}

#[test]
fn each_asset_fault_alone() {
    let cases = [
        (missing("a"), ErrorCode::AssetNotFound),
        (
            fact("a", Processing, "gen2", Image),
            ErrorCode::AssetNotActive,
        ),
        (fact("a", Failed, "gen2", Image), ErrorCode::AssetNotActive),
        (fact("a", Expired, "gen2", Image), ErrorCode::AssetNotActive),
        (
            fact("a", Active, "motion", Image),
            ErrorCode::AssetFamilyMismatch,
        ),
        (fact("a", Active, "gen2", Video), ErrorCode::InvalidImage),
    ];
    for (f, code) in cases {
        assert_eq!(
            asset_error(&[("a", FirstFrame)], std::slice::from_ref(&f)),
            (code, "assets[0].id".to_owned()),
            "{f:?}"
        );
    }
    // No fact at all is "not found", too.
    assert_eq!(
        asset_error(&[("a", FirstFrame)], &[]).0,
        ErrorCode::AssetNotFound
    );
    // Wrong type for video and audio roles.
    assert_eq!(
        asset_error(
            &[("v", ReferenceVideo)],
            &[fact("v", Active, "gen2", Audio)]
        )
        .0,
        ErrorCode::InvalidVideo
    );
    assert_eq!(
        asset_error(
            &[("s", ReferenceAudio)],
            &[fact("s", Active, "gen2", Image)]
        )
        .0,
        ErrorCode::InvalidAudio
    );
}

#[test]
fn order_not_found_before_not_active() {
    // The inactive asset comes first in the request; the missing one still wins.
    let facts = [fact("a", Processing, "gen2", Image), missing("b")];
    assert_eq!(
        asset_error(&[("a", FirstFrame), ("b", ReferenceImage)], &facts),
        (ErrorCode::AssetNotFound, "assets[1].id".into())
    );
}

#[test]
fn order_not_active_before_family_mismatch() {
    // Two assets: the cross-family one first, the inactive one second.
    let facts = [
        fact("x", Active, "motion", Image),
        fact("p", Expired, "gen2", Image),
    ];
    assert_eq!(
        asset_error(&[("x", FirstFrame), ("p", ReferenceImage)], &facts),
        (ErrorCode::AssetNotActive, "assets[1].id".into())
    );
    // One asset both inactive and cross-family.
    assert_eq!(
        asset_error(&[("p", FirstFrame)], &[fact("p", Failed, "motion", Image)]).0,
        ErrorCode::AssetNotActive
    );
}

#[test]
fn order_not_found_before_family_mismatch() {
    let facts = [fact("x", Active, "motion", Image)];
    assert_eq!(
        asset_error(&[("x", FirstFrame), ("gone", ReferenceImage)], &facts),
        (ErrorCode::AssetNotFound, "assets[1].id".into())
    );
}

#[test]
fn order_family_mismatch_before_wrong_type() {
    let facts = [
        fact("v", Active, "gen2", Video),
        fact("x", Active, "motion", Image),
    ];
    assert_eq!(
        asset_error(&[("v", FirstFrame), ("x", ReferenceImage)], &facts),
        (ErrorCode::AssetFamilyMismatch, "assets[1].id".into())
    );
}

#[test]
fn order_not_active_before_wrong_type() {
    let facts = [
        fact("v", Active, "gen2", Video),
        fact("p", Processing, "gen2", Image),
    ];
    assert_eq!(
        asset_error(&[("v", FirstFrame), ("p", ReferenceImage)], &facts),
        (ErrorCode::AssetNotActive, "assets[1].id".into())
    );
}

#[test]
fn a_fact_saying_missing_is_not_found_even_with_details() {
    let mut f = fact("a", Active, "gen2", Image);
    f.exists = false;
    assert_eq!(
        asset_error(&[("a", FirstFrame)], &[f]).0,
        ErrorCode::AssetNotFound
    );
}

#[test]
fn asset_details() {
    let e = check_assets(
        &request(&[("a", FirstFrame)]),
        &[fact("a", Processing, "gen2", Image)],
    )
    .unwrap_err();
    assert_eq!(
        e.detail,
        "asset \"a\" is processing, not active; wait until it is active"
    );
    let e = check_assets(
        &request(&[("a", FirstFrame)]),
        &[fact("a", Active, "motion", Image)],
    )
    .unwrap_err();
    assert_eq!(
        e.detail,
        "asset \"a\" belongs to channel family motion; model gen2-pro takes assets of family \
         gen2 only"
    );
    let e = check_assets(
        &request(&[("a", FirstFrame)]),
        &[fact("a", Active, "gen2", Audio)],
    )
    .unwrap_err();
    assert_eq!(
        e.detail,
        "asset \"a\" is of type audio; role first_frame takes an asset of type image"
    );
}

#[test]
fn adaptive_ratio() {
    let catalog = catalog();
    let pro = catalog.model("gen2-pro").unwrap();
    let lite = catalog.model("gen2-lite").unwrap();
    assert_eq!(resolve_ratio(pro, "4:3", Some((100, 100))), "4:3");
    assert_eq!(resolve_ratio(pro, "adaptive", None), "16:9");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((1920, 1080))), "16:9");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((1080, 1920))), "9:16");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((1024, 768))), "4:3");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((2560, 1080))), "21:9");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((512, 500))), "1:1");
    assert_eq!(resolve_ratio(pro, "adaptive", Some((0, 500))), "16:9");
    // gen2-lite has no 4:3: a 5:4 frame snaps to 1:1, a 3:2 one to 16:9.
    assert_eq!(resolve_ratio(lite, "adaptive", Some((1250, 1000))), "1:1");
    assert_eq!(resolve_ratio(lite, "adaptive", Some((1500, 1000))), "16:9");
    assert_eq!(resolve_ratio(lite, "adaptive", Some((3000, 1000))), "16:9");
    let portrait_only = ModelSpec {
        name: "p".into(),
        family: "f".into(),
        resolutions: strings(&["720p"]),
        durations: vec![5],
        ratios: strings(&["9:16", "3:4", "adaptive"]),
        joint_rules: Vec::new(),
    };
    assert_eq!(resolve_ratio(&portrait_only, "adaptive", None), "9:16");
    assert!(portrait_only.allows_adaptive());
    assert!(!catalog.model("motion-1").unwrap().allows_adaptive());
}
