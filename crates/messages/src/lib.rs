//! The native messages API (`/v1/messages`): wire types, the pure validator of SPEC §4.5,
//! stream events, an SSE encoder and incremental decoder, the conversion to and from
//! OpenAI-compatible chat completions, the relay's token count and the deterministic
//! `sim-chat` model; the Message Batches API's wire types and the validator of its create body.
//!
//! Pure: no I/O, no tokio, hyper or sled, and no other workspace crate but `error-codes`.
#![forbid(unsafe_code)]

pub mod batches;
pub mod checked;
pub mod events;
pub mod openai;
pub mod scan;
pub mod sim;
pub mod sse;
pub mod tokens;
pub mod types;
pub mod validate;

#[cfg(test)]
mod tests;

pub use checked::{Checked, Summary};
pub use events::{Delta, DeltaUsage, ErrorBody, MessageDeltaBody, StreamEvent};
pub use openai::{ChatStream, ConvertError};
pub use sse::{RawEvent, SseDecoder, SseEvent};
pub use types::*;
pub use validate::{Endpoint, validate};
