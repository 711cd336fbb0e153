//! Wire types and validation of the first format, the OpenAI-style `/v1/videos` API
//! (CONTRACT §1).
//!
//! This is a protocol crate: it does no I/O. The server turns a JSON or multipart body into a
//! [`RawCreate`], calls [`validate`] (the contract's check order, first failure wins), then does
//! the I/O checks itself (fetching or sniffing the images, audio and video), picks the framing
//! with [`resolve_framing`] and answers with a [`VideoObject`].
//!
//! - [`create`]: the create request, as it arrived ([`RawCreate`]) and once valid
//!   ([`ValidCreate`]).
//! - [`character`]: characters, their name, record, list and delete answers.
//! - [`derive`]: the source video of edits and extensions.
//! - [`framing`]: ratios, sizes, adaptive framing and the first/last frame warning.
//! - [`record`]: the task record, the list answer and the delete answer.
//! - [`query`]: query strings of the list and content operations.
#![forbid(unsafe_code)]

pub mod character;
pub mod create;
pub mod derive;
pub mod framing;
pub mod query;
pub mod record;

#[cfg(test)]
mod tests;

pub use character::{
    CHARACTER_VIDEO_FIELD, CharacterList, CharacterObject, DeletedCharacter,
    MAX_CHARACTER_NAME_CHARS, character_name,
};
pub use create::{
    DEFAULT_DURATION, FieldValue, FilePart, MAX_DURATION, MAX_PROMPT_CHARS, MIN_DURATION, MODEL,
    Media, REFERENCE_FIELDS, RawCreate, ValidCreate, first_frame_param, validate,
};
pub use framing::{
    Framing, MAX_SIDE, MIN_SIDE, Ratio, Size, frame_ratio_warning, resolve_framing, snap_ratio,
};
pub use query::{
    DEFAULT_LIST_LIMIT, ListOrder, ListParams, MAX_LIST_LIMIT, Variant, parse_content_query,
    parse_list_query,
};
pub use record::{DeletedVideo, VideoError, VideoList, VideoObject, VideoStatus};
