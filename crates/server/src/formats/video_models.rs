//! `GET /v1/video/models` and `GET /v1/video/models/{id}`: the video models a key may use, each
//! described from what the validators themselves check (the first format's bounds in
//! `videos-v1`, the second format's catalog in `app.catalog`), so the description cannot say
//! other than what a submission meets. Channel names are never shown.

use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// The references a request may give: request fields (first format) or asset roles
    /// (second format).
    pub references: Vec<Reference>,
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

/// The first format's one model, by `videos-v1`'s own bounds.
fn first_format(name: &str, config: &ModelConfig) -> VideoModel {
    VideoModel {
        id: name.to_owned(),
        object: "video.model",
        format: "videos",
        family: None,
        durations: (MIN_DURATION..=MAX_DURATION).collect(),
        resolutions: Ratio::ALL
            .iter()
            .map(|r| r.default_size().to_string())
            .collect(),
        size_range: Some(SizeRange {
            min_side: MIN_SIDE,
            max_side: MAX_SIDE,
        }),
        ratios: Ratio::ALL
            .iter()
            .map(|r| r.as_str().to_owned())
            .chain(["adaptive".to_owned()])
            .collect(),
        max_duration_by_resolution: BTreeMap::new(),
        // Each reference field takes one item (more is `reference limit exceeded`).
        references: REFERENCE_FIELDS
            .into_iter()
            .map(|name| Reference {
                name,
                kind: match name {
                    "audio_url" => "audio",
                    "reference_video" => "video",
                    _ => "image",
                },
                max: 1,
            })
            .collect(),
        price: price(config),
    }
}

/// A second-format model, by the catalog the validator reads.
fn second_format(spec: &ModelSpec, config: &ModelConfig) -> VideoModel {
    VideoModel {
        id: spec.name.clone(),
        object: "video.model",
        format: "generations",
        family: Some(spec.family.clone()),
        durations: spec.durations.clone(),
        resolutions: spec.resolutions.clone(),
        size_range: None,
        ratios: spec.ratios.clone(),
        max_duration_by_resolution: spec
            .resolutions
            .iter()
            .filter_map(|r| Some((r.clone(), spec.max_duration_at(r)?)))
            .collect(),
        references: Role::ALL
            .into_iter()
            .map(|role| Reference {
                name: role.as_str(),
                kind: role.media().as_str(),
                max: role.max_count(),
            })
            .collect(),
        price: price(config),
    }
}

/// Every video model `key` may use: one its key allows, that a channel serves and, for the
/// second format, of the family of the key's group. In catalog order (by name).
pub fn models_for(app: &App, key: &Key) -> Vec<VideoModel> {
    let family = app.config.groups.get(&key.group);
    app.config
        .models
        .iter()
        .filter(|(name, _)| may_use_model(key, name) && app.engine.channel_for(name).is_some())
        .filter_map(|(name, config)| {
            if name == videos_v1::MODEL {
                return Some(first_format(name, config));
            }
            let spec = app.catalog.model(name)?;
            (family == Some(&spec.family)).then(|| second_format(spec, config))
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
