//! Conversion to and from OpenAI-compatible `/v1/chat/completions`: the request, the whole
//! answer, and a state machine turning a chunk stream into the vendor's event sequence.
//!
//! What maps:
//!
//! | messages | chat completions |
//! |---|---|
//! | `system` | a first `system` message |
//! | user text and image blocks | a `user` message (a string, or `text` / `image_url` parts) |
//! | `tool_result` blocks | `tool` messages, before the rest of that user turn |
//! | assistant text and `tool_use` | an `assistant` message with `content` and `tool_calls` |
//! | `max_tokens`, `temperature`, `top_p`, `stop_sequences` | `max_tokens`, `temperature`, `top_p`, `stop` |
//! | `tools` (custom), `tool_choice` | `tools` (functions), `tool_choice` (`auto`, `required`, a function, `none`) |
//! | `metadata.user_id` | `user` |
//!
//! Dropped: thinking blocks and `thinking`, `top_k`, server tools, images inside tool results,
//! and block types chat completions has no form for. Back: `finish_reason` `stop` is
//! `end_turn` (or `stop_sequence` when the upstream names the matched string in the choice's
//! `stop_reason`, as vLLM does), `length` is `max_tokens`, `tool_calls` is `tool_use`,
//! `content_filter` is `refusal`; `usage.prompt_tokens` less cached tokens is `input_tokens`,
//! cached tokens are `cache_read_input_tokens`.

mod answer;
mod request;
mod stream;
mod wire;

pub use answer::from_chat_response;
pub use request::to_chat_request;
pub use stream::ChatStream;
pub use wire::{ConvertError, map_finish};
