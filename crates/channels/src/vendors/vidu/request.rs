//! Vidu's submission: the models it documents with what each takes (endpoints, durations,
//! tiers, ratios), the catalog built from them, and the endpoint and body of a job, refusing
//! what Vidu has no field for.

use serde::Serialize;

use crate::video::caps::ModelCaps;
use crate::video::job::{ReferenceRole, StoredReference, VideoJob};

/// The most reference images reference-to-video takes.
pub const MAX_REFERENCE_IMAGES: usize = 7;

/// Which endpoint a task goes to, by its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Text,
    Image,
    StartEnd,
    Reference,
}

impl Endpoint {
    pub const fn path(self) -> &'static str {
        match self {
            Endpoint::Text => "/ent/v2/text2video",
            Endpoint::Image => "/ent/v2/img2video",
            Endpoint::StartEnd => "/ent/v2/start-end2video",
            Endpoint::Reference => "/ent/v2/reference2video",
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Endpoint::Text => "text to video",
            Endpoint::Image => "image to video",
            Endpoint::StartEnd => "start-end to video",
            Endpoint::Reference => "reference to video",
        }
    }
}

/// What one Vidu model takes, as Vidu documents it.
#[derive(Debug, Clone, Copy)]
pub struct ModelRules {
    pub name: &'static str,
    pub endpoints: &'static [Endpoint],
    pub durations: &'static [u32],
    pub tiers: &'static [&'static str],
    /// Tiers made at fewer durations (`vidu2.0`'s 360p and 1080p at 4 s only).
    pub short_only_tiers: &'static [&'static str],
    /// Aspect ratios of text and reference tasks.
    pub ratios: &'static [&'static str],
    /// Whether its videos have sound (the q3 models' audio, on by default).
    pub audio: bool,
}

const RATIOS_FIVE: &[&str] = &["16:9", "9:16", "1:1", "3:4", "4:3"];
const RATIOS_THREE: &[&str] = &["16:9", "9:16", "1:1"];
const ALL: &[Endpoint] = &[
    Endpoint::Text,
    Endpoint::Image,
    Endpoint::StartEnd,
    Endpoint::Reference,
];
const IMAGES_ONLY: &[Endpoint] = &[Endpoint::Image, Endpoint::StartEnd, Endpoint::Reference];

/// The models Vidu documents, and what each takes.
pub const MODELS: &[ModelRules] = &[
    ModelRules {
        name: "viduq3-pro",
        endpoints: &[Endpoint::Text, Endpoint::Image, Endpoint::StartEnd],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: true,
    },
    ModelRules {
        name: "viduq3-turbo",
        endpoints: &[Endpoint::Text, Endpoint::Image, Endpoint::StartEnd],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: true,
    },
    ModelRules {
        name: "viduq2",
        endpoints: &[Endpoint::Text, Endpoint::Reference],
        durations: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        tiers: &["540p", "720p", "1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_FIVE,
        audio: false,
    },
    ModelRules {
        name: "viduq1",
        endpoints: ALL,
        durations: &[5],
        tiers: &["1080p"],
        short_only_tiers: &[],
        ratios: RATIOS_THREE,
        audio: false,
    },
    ModelRules {
        name: "vidu2.0",
        endpoints: IMAGES_ONLY,
        durations: &[4, 8],
        tiers: &["360p", "720p", "1080p"],
        short_only_tiers: &["360p", "1080p"],
        ratios: RATIOS_THREE,
        audio: false,
    },
    ModelRules {
        name: "vidu1.5",
        endpoints: IMAGES_ONLY,
        durations: &[4, 8],
        tiers: &["360p", "720p", "1080p"],
        short_only_tiers: &["360p", "1080p"],
        ratios: RATIOS_THREE,
        audio: false,
    },
];

/// The rules of `model`, when Vidu documents it.
pub fn rules(model: &str) -> Option<&'static ModelRules> {
    MODELS.iter().find(|m| m.name == model)
}

/// The built-in catalog: each documented model's capabilities.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    MODELS
        .iter()
        .map(|m| {
            let text = m.endpoints.contains(&Endpoint::Text);
            let caps = ModelCaps {
                durations: m.durations.to_vec(),
                resolutions: list(m.tiers),
                ratios: list(m.ratios),
                durations_by_resolution: m
                    .short_only_tiers
                    .iter()
                    .map(|t| ((*t).to_owned(), vec![m.durations[0]]))
                    .collect(),
                first_frame: m.endpoints.contains(&Endpoint::Image),
                last_frame: m.endpoints.contains(&Endpoint::StartEnd),
                image_only_resolutions: if text { Vec::new() } else { list(m.tiers) },
                reference_images: if m.endpoints.contains(&Endpoint::Reference) {
                    MAX_REFERENCE_IMAGES as u32
                } else {
                    0
                },
                audio: m.audio,
                ..ModelCaps::default()
            };
            (m.name, caps)
        })
        .collect()
}

/// The body of a submission, as Vidu names its fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ViduRequest {
    pub model: String,
    /// First frame, first and last frame, or reference images: URLs or `data:` URIs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    pub duration: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    pub resolution: String,
    /// Where Vidu posts the task when its state changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

/// The images of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub reference_images: Vec<String>,
}

/// The endpoint of `inputs`: reference images, first and last frame, first frame, or text.
pub fn endpoint_of(inputs: &Inputs) -> Result<Endpoint, String> {
    match (
        &inputs.first_frame,
        &inputs.last_frame,
        inputs.reference_images.is_empty(),
    ) {
        (None, None, true) => Ok(Endpoint::Text),
        (Some(_), None, true) => Ok(Endpoint::Image),
        (Some(_), Some(_), true) => Ok(Endpoint::StartEnd),
        (None, None, false) => Ok(Endpoint::Reference),
        (None, Some(_), _) => Err("vidu takes a last frame only after a first frame".into()),
        _ => Err("vidu takes frames or reference images, not both".into()),
    }
}

/// The endpoint and body for `job`, its images already encoded. Refuses what Vidu has no
/// field for (audio, reference videos) rather than dropping it, and a model, endpoint,
/// duration, tier or ratio Vidu does not document together.
pub fn to_vendor(
    job: &VideoJob,
    inputs: Inputs,
    references: &[StoredReference],
) -> Result<(Endpoint, ViduRequest), String> {
    if job.audio_url.is_some() || references.iter().any(|r| r.role == ReferenceRole::Audio) {
        return Err("vidu takes no audio track".into());
    }
    if job.reference_video.is_some() || references.iter().any(|r| r.role == ReferenceRole::Video) {
        return Err("vidu takes no reference video".into());
    }
    if inputs.reference_images.len() > MAX_REFERENCE_IMAGES {
        return Err(format!(
            "vidu takes at most {MAX_REFERENCE_IMAGES} reference images, not {}",
            inputs.reference_images.len()
        ));
    }
    let endpoint = endpoint_of(&inputs)?;
    let model = job.model.as_str();
    let Some(rules) = rules(model) else {
        return Err(format!("vidu documents no model {model:?}"));
    };
    if !rules.endpoints.contains(&endpoint) {
        return Err(format!("vidu's {model} makes no {}", endpoint.name()));
    }
    if !rules.durations.contains(&job.duration_secs) {
        return Err(format!(
            "vidu's {model} makes {:?} s, not {} s",
            rules.durations, job.duration_secs
        ));
    }
    let tier = job.tier(&[(400, "360p"), (600, "540p"), (900, "720p")], "1080p");
    if !rules.tiers.contains(&tier.as_str()) {
        return Err(format!(
            "vidu's {model} makes {}, not {tier}",
            rules.tiers.join(", ")
        ));
    }
    if rules.short_only_tiers.contains(&tier.as_str()) && job.duration_secs != rules.durations[0] {
        return Err(format!(
            "vidu's {model} makes {tier} at {} s only",
            rules.durations[0]
        ));
    }
    // Text and reference tasks name a ratio; frames set the picture.
    let aspect_ratio = match endpoint {
        Endpoint::Text | Endpoint::Reference => match job.ratio.as_str() {
            r if rules.ratios.contains(&r) => Some(r.to_owned()),
            "adaptive" if endpoint == Endpoint::Reference => None,
            r => return Err(format!("vidu's {model} has no aspect ratio {r}")),
        },
        Endpoint::Image | Endpoint::StartEnd => None,
    };
    if endpoint == Endpoint::Text && job.prompt.trim().is_empty() {
        return Err("vidu needs a prompt for text to video".into());
    }
    let images = match endpoint {
        Endpoint::Text => Vec::new(),
        Endpoint::Image | Endpoint::StartEnd => inputs
            .first_frame
            .into_iter()
            .chain(inputs.last_frame)
            .collect(),
        Endpoint::Reference => inputs.reference_images,
    };
    Ok((
        endpoint,
        ViduRequest {
            model: model.to_owned(),
            images,
            prompt: job.prompt.clone(),
            duration: job.duration_secs,
            seed: job.seed.filter(|s| *s >= 0),
            aspect_ratio,
            resolution: tier,
            callback_url: None,
        },
    ))
}
