//! Wire types and validation of the second format, `/v1/video/generations`, and of the
//! moderation-result call (CONTRACT §2.1, §2.3, §2.4).
//!
//! This is a protocol crate: it does no I/O. The server fills a [`Catalog`] from its
//! configuration, calls [`validate`] on the parsed JSON body with the key's channel family
//! (first failure wins, in the contract's order), looks the referenced assets up itself and
//! hands what it found to [`check_assets`] (the next checks of the same order), chooses the
//! ratio of an `adaptive` request with [`resolve_ratio`], and answers with a
//! [`GenerationObject`].
//!
//! - [`catalog`]: the models of the second format, their tiers and joint rules.
//! - [`request`]: the request, its validation, the asset checks and adaptive ratio.
//! - [`record`]: the task record and the list answer.
//! - [`moderation`]: the moderation-result request and answer.
#![forbid(unsafe_code)]

pub mod catalog;
pub mod moderation;
pub mod record;
pub mod request;

#[cfg(test)]
mod tests;

pub use catalog::{ADAPTIVE, Catalog, JointRule, ModelSpec};
pub use moderation::{
    ModerationCategory, ModerationRequest, ModerationResult, ModerationStatus,
    parse_moderation_request,
};
pub use record::{GenerationError, GenerationList, GenerationObject, GenerationStatus, Usage};
pub use request::{
    AssetFact, AssetRef, AssetState, MAX_PROMPT_CHARS, MAX_SEED, MediaType, Role, ValidGeneration,
    check_assets, resolve_ratio, validate,
};
