//! The upstream video vendors, one module each: [`openai_videos`] (another relay or reseller
//! speaking `/v1/videos`) and [`ark`] (Seedance-style content generation tasks); what every
//! HTTP vendor shares ([`common`]: settings, the classification of answers, upstream ids in
//! paths, references read from the blob store, result URLs); and [`redact`], upstream bodies
//! made fit for a log (chat upstreams use it too).

pub mod ark;
pub mod common;
pub mod openai_videos;
pub mod redact;
