//! The upstream video vendors behind one seam, the [`Vendor`] trait ([`seam`]), one module
//! each: [`openai_videos`] (another relay or reseller speaking `/v1/videos`), [`ark`]
//! (Seedance-style content generation tasks), [`veo`] (Google Veo on the Gemini API),
//! [`vertex_veo`] (Google Veo on Vertex AI), [`kling`] (Kuaishou Kling), [`minimax`] (MiniMax
//! Hailuo), [`wan`] (Alibaba Wan on DashScope), [`xai`] (xAI's Grok Imagine video) and
//! [`runway`] (Runway's developer API), [`vidu`] (Shengshu's Vidu) and [`jimeng`] (ByteDance
//! Jimeng on Volcengine's visual API, requests signed HMAC-SHA256). What every HTTP vendor
//! shares is in [`common`] (settings, the key header, submissions sent again only when nothing
//! of them can have reached the vendor, classification of answers, upstream ids in paths,
//! references read from the blob store, result downloads, channel tests) and [`media`]
//! (references as the vendors take them); [`redact`] makes upstream bodies fit for a log (chat
//! upstreams use it too); [`google_auth`] turns a Google service account's key into access
//! tokens; [`spill`] reads an answer that carries a video as base64 without holding the video.
//!
//! Adding a vendor is one new module implementing [`Vendor`] (its wire as plain serde structs,
//! pure `to_vendor` / `from_vendor` functions tested with the vendor's documented examples),
//! and one line in [`REGISTRY`]: its kind name, default endpoint, the configuration keys it
//! needs, its built-in model catalog and its constructor.

pub mod ark;
pub mod common;
pub mod google_auth;
pub mod jimeng;
pub mod kling;
pub mod media;
pub mod minimax;
pub mod openai_videos;
pub mod redact;
pub mod runway;
pub mod seam;
pub mod spill;
pub mod veo;
pub mod vertex_veo;
pub mod vidu;
pub mod wan;
pub mod xai;

pub use seam::{
    CallbackSettings, InboundCallback, KindSettings, Need, Registration, StatusMeaning, Vendor,
    VendorSettings,
};

use std::collections::BTreeMap;

use crate::video::caps::ModelCaps;

/// Every vendor kind.
pub static REGISTRY: &[Registration] = &[
    openai_videos::REGISTRATION,
    ark::REGISTRATION,
    veo::REGISTRATION,
    vertex_veo::REGISTRATION,
    kling::REGISTRATION,
    minimax::REGISTRATION,
    wan::REGISTRATION,
    xai::REGISTRATION,
    runway::REGISTRATION,
    vidu::REGISTRATION,
    jimeng::REGISTRATION,
];

/// The registration of `kind`.
pub fn registration(kind: &str) -> Option<&'static Registration> {
    REGISTRY.iter().find(|r| r.kind == kind)
}

/// The capabilities of each vendor model of `kind`: its built-in catalog, with the
/// configuration's entries (`overrides`, by vendor model) added or replacing.
pub fn catalog(
    registration: &Registration,
    overrides: &BTreeMap<String, ModelCaps>,
) -> BTreeMap<String, ModelCaps> {
    let mut all: BTreeMap<String, ModelCaps> = (registration.models)()
        .into_iter()
        .map(|(name, caps)| (name.to_owned(), caps))
        .collect();
    for (name, caps) in overrides {
        all.insert(name.clone(), caps.clone());
    }
    all
}

/// The capabilities table of docs/channels.md ("Every kind at a glance"), rendered from each
/// kind's built-in catalog so the page cannot drift from what routing uses.
pub fn glance_table() -> String {
    let mut out = String::from(
        "| kind | built-in models | durations (s) | tiers | first frame | last frame | reference images | reference videos | audio track | sound |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for registration in REGISTRY {
        let models = (registration.models)();
        if models.is_empty() {
            out.push_str(&format!(
                "| `{}` | none: what the relay's validators accept goes to it (its section says what it maps) | any | any | | | | | | |\n",
                registration.kind
            ));
            continue;
        }
        let all = |f: &dyn Fn(&ModelCaps) -> bool| {
            let n = models.iter().filter(|(_, c)| f(c)).count();
            match n {
                0 => "no".to_owned(),
                n if n == models.len() => "yes".to_owned(),
                n => format!("{n} of {}", models.len()),
            }
        };
        let most = |f: &dyn Fn(&ModelCaps) -> u32| match models.iter().map(|(_, c)| f(c)).max() {
            Some(0) | None => "no".to_owned(),
            Some(n) => format!("up to {n}"),
        };
        // Models that take any value, named after the range of the others.
        let open =
            |f: &dyn Fn(&ModelCaps) -> bool| match models.iter().filter(|(_, c)| f(c)).count() {
                0 => String::new(),
                n => format!(" (any: {n} of {})", models.len()),
            };
        let durations: Vec<u32> = models
            .iter()
            .flat_map(|(_, c)| c.durations.iter().copied())
            .collect();
        let any_duration = open(&|c| c.durations.is_empty());
        let durations = match (durations.iter().min(), durations.iter().max()) {
            (Some(lo), Some(hi)) if lo == hi => format!("{lo}{any_duration}"),
            (Some(lo), Some(hi)) => format!("{lo} to {hi}{any_duration}"),
            _ => "any".to_owned(),
        };
        let order = [
            "360p", "480p", "512p", "540p", "720p", "768p", "1080p", "4k",
        ];
        let mut tiers: Vec<&str> = models
            .iter()
            .flat_map(|(_, c)| c.resolutions.iter().map(String::as_str))
            .collect();
        tiers.sort_by_key(|t| order.iter().position(|o| o == t).unwrap_or(order.len()));
        tiers.dedup();
        let tiers = if tiers.is_empty() {
            "any".to_owned()
        } else {
            format!(
                "{}{}",
                tiers.join(", "),
                open(&|c| c.resolutions.is_empty())
            )
        };
        let names: Vec<String> = models.iter().map(|(m, _)| format!("`{m}`")).collect();
        out.push_str(&format!(
            "| `{}` | {} | {durations} | {tiers} | {} | {} | {} | {} | {} | {} |\n",
            registration.kind,
            names.join(", "),
            all(&|c| c.first_frame),
            all(&|c| c.last_frame),
            most(&|c| c.reference_images),
            most(&|c| c.reference_videos),
            most(&|c| c.reference_audios),
            all(&|c| c.audio),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    /// docs/channels.md's capabilities table is the one the catalogs render.
    #[test]
    fn the_glance_table_in_the_docs_is_the_catalogs() {
        let page = include_str!("../../../docs/channels.md");
        let start =
            "<!-- the table below is rendered from the catalogs: vendors::glance_table -->\n";
        let at = page
            .find(start)
            .expect("the table's marker in docs/channels.md")
            + start.len();
        let end = page[at..].find("\n\n").map_or(page.len(), |e| at + e + 1);
        let expected = super::glance_table();
        assert!(
            page[at..end] == expected,
            "docs/channels.md's table differs from the catalogs; it should read:\n{expected}"
        );
    }
}
