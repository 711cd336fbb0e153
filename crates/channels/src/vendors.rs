//! The upstream video vendors behind one seam, the [`Vendor`] trait ([`seam`]), one module
//! each: [`openai_videos`] (another relay or reseller speaking `/v1/videos`), [`ark`]
//! (Seedance-style content generation tasks), [`veo`] (Google Veo on the Gemini API),
//! [`vertex_veo`] (Google Veo on Vertex AI), [`kling`] (Kuaishou Kling), [`minimax`] (MiniMax
//! Hailuo), [`wan`] (Alibaba Wan on DashScope), [`xai`] (xAI's Grok Imagine video) and
//! [`vidu`] (Shengshu's Vidu). What every HTTP vendor shares is in [`common`] (settings, the
//! key header, submissions sent again only when nothing of them can have reached the vendor,
//! classification of answers, upstream ids in paths, references read from the blob store,
//! result downloads, channel tests) and [`media`] (references as the vendors take them);
//! [`redact`] makes upstream bodies fit for a log (chat upstreams use it too); [`google_auth`]
//! turns a Google service account's key into access tokens; [`spill`] reads an answer that
//! carries a video as base64 without holding the video.
//!
//! Adding a vendor is one new module implementing [`Vendor`] (its wire as plain serde structs,
//! pure `to_vendor` / `from_vendor` functions tested with the vendor's documented examples),
//! and one line in [`REGISTRY`]: its kind name, default endpoint, the configuration keys it
//! needs, its built-in model catalog and its constructor.

pub mod ark;
pub mod common;
pub mod google_auth;
pub mod kling;
pub mod media;
pub mod minimax;
pub mod openai_videos;
pub mod redact;
pub mod seam;
pub mod spill;
pub mod veo;
pub mod vertex_veo;
pub mod vidu;
pub mod wan;
pub mod xai;

pub use seam::{
    CallbackSettings, KindSettings, Need, Registration, StatusMeaning, Vendor, VendorSettings,
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
    vidu::REGISTRATION,
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
