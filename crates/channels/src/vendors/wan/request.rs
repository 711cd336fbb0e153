//! Wan's submission: the body DashScope takes for a job and the path it goes to, by the
//! model's protocol (up to wan2.6, `input.img_url` and the frame fields; wan2.7 and later,
//! `input.media[]`), refusing what a protocol has no field for.

use serde::Serialize;

use crate::video::job::{ReferenceRole, VideoJob};

/// Text and image to video.
pub const SYNTHESIS_PATH: &str = "/api/v1/services/aigc/video-generation/video-synthesis";
/// First-and-last-frame models.
pub const KF2V_PATH: &str = "/api/v1/services/aigc/image2video/video-synthesis";

/// A media item of the newer protocol (wan2.7 and later).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Media {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WanInput {
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative_prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub img_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_frame_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_frame_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<Vec<Media>>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WanParameters {
    /// Text to video up to wan2.6: `"1280*720"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Image to video, first and last frame, and wan2.7: `"720P"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// wan2.7 text to video: `"16:9"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<String>,
    pub duration: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// The body of a submission, as DashScope names its fields.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WanRequest {
    pub model: String,
    pub input: WanInput,
    pub parameters: WanParameters,
}

/// The media of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    pub references: Vec<(ReferenceRole, String)>,
}

/// Whether `model` speaks the newer `input.media[]` protocol (wan2.7 and later).
pub fn is_media_model(model: &str) -> bool {
    let Some(version) = model.strip_prefix("wan") else {
        return false;
    };
    let major_minor: String = version
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = major_minor.split('.');
    let major = parts
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    let minor = parts
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    (major, minor) >= (2, 7)
}

/// The `size` of text to video for a tier (`480p`, `720p`, `1080p`) and ratio, from
/// DashScope's table.
pub fn size_for(tier: &str, ratio: &str) -> Option<&'static str> {
    Some(match (tier, ratio) {
        ("480p", "16:9") => "832*480",
        ("480p", "9:16") => "480*832",
        ("480p", "1:1") => "624*624",
        ("720p", "16:9") => "1280*720",
        ("720p", "9:16") => "720*1280",
        ("720p", "1:1") => "960*960",
        ("720p", "4:3") => "1088*832",
        ("720p", "3:4") => "832*1088",
        ("1080p", "16:9") => "1920*1080",
        ("1080p", "9:16") => "1080*1920",
        ("1080p", "1:1") => "1440*1440",
        ("1080p", "4:3") => "1632*1248",
        ("1080p", "3:4") => "1248*1632",
        _ => return None,
    })
}

/// The path and body for `job`, its media already encoded. Refuses what the model's protocol
/// has no field for rather than dropping it.
pub fn to_vendor(job: &VideoJob, media: Inputs) -> Result<(&'static str, WanRequest), String> {
    let tier = job.tier(&[(540, "480p"), (900, "720p")], "1080p");
    let negative_prompt = None;
    let audio = media
        .references
        .iter()
        .find(|(role, _)| *role == ReferenceRole::Audio)
        .map(|(_, url)| url.clone())
        .or_else(|| job.audio_url.clone());
    let images: Vec<String> = media
        .references
        .iter()
        .filter(|(role, _)| *role == ReferenceRole::Image)
        .map(|(_, url)| url.clone())
        .collect();
    let videos: Vec<String> = media
        .references
        .iter()
        .filter(|(role, _)| *role == ReferenceRole::Video)
        .map(|(_, url)| url.clone())
        .chain(job.reference_video.clone())
        .collect();
    if media
        .references
        .iter()
        .filter(|(role, _)| *role == ReferenceRole::Audio)
        .count()
        + usize::from(job.audio_url.is_some())
        > 1
    {
        return Err("wan takes one audio track".into());
    }
    if media.last_frame.is_some() && media.first_frame.is_none() {
        return Err("wan needs a first frame with a last frame".into());
    }
    let parameters =
        |size: Option<String>, resolution: Option<String>, ratio: Option<String>| WanParameters {
            size,
            resolution,
            ratio,
            duration: job.duration_secs,
            seed: job.seed,
        };
    if is_media_model(&job.model) {
        let item = |kind: &str, url: String| Media {
            kind: kind.into(),
            url,
        };
        let mut items: Vec<Media> = Vec::new();
        items.extend(media.first_frame.clone().map(|u| item("first_frame", u)));
        items.extend(media.last_frame.clone().map(|u| item("last_frame", u)));
        items.extend(images.into_iter().map(|u| item("reference_image", u)));
        items.extend(videos.into_iter().map(|u| item("reference_video", u)));
        let has_media = !items.is_empty();
        if has_media && let Some(url) = audio.clone() {
            items.push(item("driving_audio", url));
        }
        let text_only = !has_media;
        let request = WanRequest {
            model: job.model.clone(),
            input: WanInput {
                prompt: job.prompt.clone(),
                negative_prompt,
                // Text to video takes its audio as `audio_url`.
                audio_url: audio.filter(|_| text_only),
                media: (!text_only).then_some(items),
                ..WanInput::default()
            },
            parameters: parameters(
                None,
                Some(tier.to_ascii_uppercase()),
                (text_only || media.first_frame.is_none())
                    .then(|| job.ratio.clone())
                    .filter(|r| r != "adaptive"),
            ),
        };
        return Ok((SYNTHESIS_PATH, request));
    }
    if !images.is_empty() || !videos.is_empty() {
        return Err(format!(
            "{} takes no reference images or videos (wan2.7 and later do)",
            job.model
        ));
    }
    let kf2v = job.model.contains("kf2v");
    match (media.first_frame, media.last_frame, kf2v) {
        (first, last, true) => {
            let Some(first) = first else {
                return Err(format!("{} needs a first frame", job.model));
            };
            let request = WanRequest {
                model: job.model.clone(),
                input: WanInput {
                    prompt: job.prompt.clone(),
                    negative_prompt,
                    first_frame_url: Some(first),
                    last_frame_url: last,
                    ..WanInput::default()
                },
                parameters: parameters(None, Some(tier.to_ascii_uppercase()), None),
            };
            Ok((KF2V_PATH, request))
        }
        (Some(_), Some(_), false) => Err(format!(
            "{} takes no last frame (first-and-last-frame models are *-kf2v-*)",
            job.model
        )),
        (Some(first), None, false) => {
            let request = WanRequest {
                model: job.model.clone(),
                input: WanInput {
                    prompt: job.prompt.clone(),
                    negative_prompt,
                    img_url: Some(first),
                    audio_url: audio,
                    ..WanInput::default()
                },
                parameters: parameters(None, Some(tier.to_ascii_uppercase()), None),
            };
            Ok((SYNTHESIS_PATH, request))
        }
        (None, _, false) => {
            let size = size_for(&tier, &job.ratio)
                .map(str::to_owned)
                .or_else(|| {
                    // A first-format size (no tier asked) the table has as it is.
                    if job.resolution.is_some() {
                        return None;
                    }
                    let asked = format!("{}*{}", job.width, job.height);
                    ["480p", "720p", "1080p"]
                        .iter()
                        .flat_map(|t| {
                            ["16:9", "9:16", "1:1", "4:3", "3:4"]
                                .iter()
                                .filter_map(move |r| size_for(t, r))
                        })
                        .find(|s| *s == asked)
                        .map(str::to_owned)
                })
                .ok_or_else(|| format!("wan has no {tier} size for ratio {}", job.ratio))?;
            let request = WanRequest {
                model: job.model.clone(),
                input: WanInput {
                    prompt: job.prompt.clone(),
                    negative_prompt,
                    audio_url: audio,
                    ..WanInput::default()
                },
                parameters: parameters(Some(size), None, None),
            };
            Ok((SYNTHESIS_PATH, request))
        }
    }
}
