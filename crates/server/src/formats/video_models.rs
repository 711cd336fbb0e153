//! `GET /v1/video/models` and `GET /v1/video/models/{id}`: the video models a key may use, each
//! described from what the validators themselves check (the first format's bounds in
//! `videos-v1`, the second format's catalog in `app.catalog`) narrowed to what the channels
//! of the model can make (their vendor models' capabilities, the same offers routing and the
//! create check read: `Engine::offers`), so the description cannot say other than what a
//! submission meets. Channel names are never shown.

use std::collections::BTreeMap;
use std::sync::Arc;

use channels::{DemandField, ModelCaps, Offer};
use error_codes::{ApiError, ErrorCode};
use serde::Serialize;
use store::Key;
use video_generations::{ModelSpec, Role};
use videos_v1::{MAX_DURATION, MAX_SIDE, MIN_DURATION, MIN_SIDE, REFERENCE_FIELDS, Ratio};

use crate::app::App;
use crate::config::ModelConfig;
use crate::ground::auth::may_use_model;
use crate::ground::http::{Answer, MAX_ID_LEN, error, ok};

/// One video model as `GET /v1/video/models` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct VideoModel {
    pub id: String,
    pub object: &'static str,
    /// `videos` (`POST /v1/videos`) or `generations` (`POST /v1/video/generations`).
    pub format: &'static str,
    /// The channel family (second format); null for the first format, which has none.
    pub family: Option<String>,
    /// Accepted durations in seconds; the first is the default.
    pub durations: Vec<u32>,
    /// Second format: the resolution tiers; first format: one `WxH` size per ratio (any size
    /// within `size_range` is accepted too).
    pub resolutions: Vec<String>,
    /// First format only: the bounds of each side of `size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_range: Option<SizeRange>,
    /// Accepted ratios (`adaptive` among them when the model allows it).
    pub ratios: Vec<String>,
    /// The longest duration at a resolution, where a rule limits it.
    pub max_duration_by_resolution: BTreeMap<String, u32>,
    /// The durations accepted at a tier, where fewer than `durations` (a catalog's joint rule,
    /// or what the channels make at that tier; first format: the tier a size is made at).
    pub durations_by_resolution: BTreeMap<String, Vec<u32>>,
    /// The references a request may give: request fields (first format) or asset roles
    /// (second format).
    pub references: Vec<Reference>,
    /// What the vendor models of the model's channels make together: each list the union of
    /// theirs, each count the largest, each yes/no whether one of them does. Null when a
    /// channel of the model has no catalog entry (the simulator, another relay): it makes
    /// anything the fields above accept.
    pub capabilities: Option<ModelCaps>,
    pub price: Price,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct SizeRange {
    pub min_side: u32,
    pub max_side: u32,
}

/// A kind of reference a request may carry.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// The request field (first format) or the asset role (second format).
    pub name: &'static str,
    /// `image`, `audio` or `video`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// How many one request may give.
    pub max: usize,
}

/// Credits per second of video.
#[derive(Debug, Clone, Serialize)]
pub struct Price {
    pub per_second: Option<u64>,
    pub per_second_by_resolution: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
struct VideoModelList {
    object: &'static str,
    data: Vec<VideoModel>,
}

fn price(config: &ModelConfig) -> Price {
    Price {
        per_second: config.price_per_second,
        per_second_by_resolution: config.price_per_second_by_resolution.clone(),
    }
}

/// The most of `field` one of `offers` takes, at most `max` (the format's own limit).
fn most(offers: &[Offer<'_>], field: DemandField, max: usize) -> usize {
    let most = offers
        .iter()
        .filter_map(|o| o.takes(field))
        .max()
        .unwrap_or(0);
    usize::try_from(most).unwrap_or(usize::MAX).min(max)
}

/// The `ratios` (in their order) one of `offers` makes; `adaptive` stays as long as one
/// other does.
fn ratios_made(offers: &[Offer<'_>], ratios: &[&str]) -> Vec<String> {
    let made = |r: &str| r != "adaptive" && offers.iter().any(|o| o.makes_ratio(r));
    let any = ratios.iter().any(|r| made(r));
    ratios
        .iter()
        .filter(|r| made(r) || (**r == "adaptive" && any))
        .map(|r| (*r).to_owned())
        .collect()
}

/// The first format's one model, by `videos-v1`'s own bounds and what `offers` make.
fn first_format(name: &str, config: &ModelConfig, offers: &[Offer<'_>]) -> VideoModel {
    let made = |d: u32, tier: Option<&str>| {
        offers
            .iter()
            .any(|o| tier.is_none_or(|t| o.makes_tier(t)) && o.makes_duration(d, tier))
    };
    let durations: Vec<u32> = (MIN_DURATION..=MAX_DURATION)
        .filter(|d| made(*d, None))
        .collect();
    let capabilities = merged(offers);
    let tiers = capabilities
        .as_ref()
        .map_or(&[][..], |c| &c.resolutions[..]);
    let durations_by_resolution = tiers
        .iter()
        .filter_map(|t| {
            let at: Vec<u32> = durations
                .iter()
                .copied()
                .filter(|d| made(*d, Some(t)))
                .collect();
            (at != durations).then(|| (t.clone(), at))
        })
        .collect();
    let names: Vec<&str> = Ratio::ALL
        .iter()
        .map(|r| r.as_str())
        .chain(["adaptive"])
        .collect();
    VideoModel {
        id: name.to_owned(),
        object: "video.model",
        format: "videos",
        family: None,
        durations,
        resolutions: Ratio::ALL
            .iter()
            .filter(|r| {
                let size = r.default_size();
                offers
                    .iter()
                    .any(|o| o.makes_ratio(r.as_str()) && o.makes_size(size.width, size.height))
            })
            .map(|r| r.default_size().to_string())
            .collect(),
        size_range: Some(SizeRange {
            min_side: MIN_SIDE,
            max_side: MAX_SIDE,
        }),
        ratios: ratios_made(offers, &names),
        max_duration_by_resolution: BTreeMap::new(),
        durations_by_resolution,
        // Each reference field takes one item (more is `reference limit exceeded`), where a
        // channel takes it at all.
        references: REFERENCE_FIELDS
            .into_iter()
            .map(|name| {
                let (kind, field) = match name {
                    "audio_url" => ("audio", DemandField::ReferenceAudios),
                    "reference_video" => ("video", DemandField::ReferenceVideos),
                    "last_frame" => ("image", DemandField::LastFrame),
                    _ => ("image", DemandField::FirstFrame),
                };
                Reference {
                    name,
                    kind,
                    max: most(offers, field, 1),
                }
            })
            .collect(),
        capabilities,
        price: price(config),
    }
}

/// A second-format model, by the catalog the validator reads and what `offers` make.
fn second_format(spec: &ModelSpec, config: &ModelConfig, offers: &[Offer<'_>]) -> VideoModel {
    let resolutions: Vec<String> = spec
        .resolutions
        .iter()
        .filter(|r| offers.iter().any(|o| o.makes_tier(r)))
        .cloned()
        .collect();
    // The durations accepted at a tier: the catalog's (its joint rule included), where one
    // channel makes them there.
    let at = |tier: &str| -> Vec<u32> {
        spec.durations
            .iter()
            .copied()
            .filter(|d| spec.max_duration_at(tier).is_none_or(|max| *d <= max))
            .filter(|d| {
                offers
                    .iter()
                    .any(|o| o.makes_tier(tier) && o.makes_duration(*d, Some(tier)))
            })
            .collect()
    };
    let by_tier: Vec<(String, Vec<u32>)> = resolutions.iter().map(|r| (r.clone(), at(r))).collect();
    let durations: Vec<u32> = spec
        .durations
        .iter()
        .copied()
        .filter(|d| by_tier.iter().any(|(_, at)| at.contains(d)))
        .collect();
    let names: Vec<&str> = spec.ratios.iter().map(String::as_str).collect();
    VideoModel {
        id: spec.name.clone(),
        object: "video.model",
        format: "generations",
        family: Some(spec.family.clone()),
        max_duration_by_resolution: resolutions
            .iter()
            .filter_map(|r| Some((r.clone(), spec.max_duration_at(r)?)))
            .collect(),
        durations_by_resolution: by_tier
            .into_iter()
            .filter(|(_, at)| *at != durations)
            .collect(),
        durations,
        resolutions,
        size_range: None,
        ratios: ratios_made(offers, &names),
        references: Role::ALL
            .into_iter()
            .map(|role| {
                let field = match role {
                    Role::FirstFrame => DemandField::FirstFrame,
                    Role::LastFrame => DemandField::LastFrame,
                    Role::ReferenceImage => DemandField::ReferenceImages,
                    Role::ReferenceVideo => DemandField::ReferenceVideos,
                    Role::ReferenceAudio => DemandField::ReferenceAudios,
                };
                Reference {
                    name: role.as_str(),
                    kind: role.media().as_str(),
                    max: most(offers, field, role.max_count()),
                }
            })
            .collect(),
        capabilities: merged(offers),
        price: price(config),
    }
}

/// The capabilities of `offers` together; `None` when one of them has none (it makes
/// anything).
fn merged(offers: &[Offer<'_>]) -> Option<ModelCaps> {
    let all: Option<Vec<&ModelCaps>> = offers.iter().map(|o| o.caps).collect();
    channels::video::caps::merge(all?)
}

/// Every video model `key` may use: one its key allows, that a channel serves and, for the
/// second format, of the family of the key's group, described as its channels can make it. In
/// catalog order (by name).
pub fn models_for(app: &App, key: &Key) -> Vec<VideoModel> {
    let family = app.config.groups.get(&key.group);
    app.config
        .models
        .iter()
        .filter(|(name, _)| may_use_model(key, name) && app.engine.channel_for(name).is_some())
        .filter_map(|(name, config)| {
            let offers = app.engine.offers(name);
            if name == videos_v1::MODEL {
                return Some(first_format(name, config, &offers));
            }
            let spec = app.catalog.model(name)?;
            (family == Some(&spec.family)).then(|| second_format(spec, config, &offers))
        })
        .collect()
}

/// `GET /v1/video/models`.
pub fn list(app: &Arc<App>, key: &Key) -> Answer {
    ok(&VideoModelList {
        object: "list",
        data: models_for(app, key),
    })
}

/// `GET /v1/video/models/{id}`: the model, or `404 not found` naming it.
pub fn get(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    let found = (id.len() <= MAX_ID_LEN)
        .then(|| models_for(app, key).into_iter().find(|m| m.id == id))
        .flatten();
    match found {
        Some(model) => ok(&model),
        None => error(&ApiError::field(
            ErrorCode::NotFound,
            "model",
            format!(
                "no video model {} for this key",
                id.chars().take(100).collect::<String>()
            ),
        )),
    }
}
