//! The upstream video vendors, one module each: [`openai_videos`] (another relay or reseller
//! speaking `/v1/videos`) and [`ark`] (Seedance-style content generation tasks); and what every
//! HTTP vendor shares ([`common`]: settings, the classification of answers, upstream ids in
//! paths, references read from the blob store, result URLs).

pub mod ark;
pub mod common;
pub mod kling;
pub mod minimax;
pub mod openai_videos;
pub mod wan;
