//! Chat channels for `/v1/messages`: the built-in `sim-chat` simulator, a native upstream of
//! the same format (pass-through), and an OpenAI-compatible chat completions upstream (the
//! request, the answer and the stream converted both ways).
//!
//! A call answers with a whole JSON body or a [`ChatEventStream`], or fails before anything
//! was sent with an [`UpstreamFailure`]. A stream that fails later reports a
//! [`StreamFailure`]; the server turns it into an `error` event.

mod anthropic;
mod call;
mod openai_chat;
mod sim;
mod stream;

pub use anthropic::AnthropicChat;
pub use call::{
    ChatAnswer, ChatCall, ChatSettings, FailureKind, MAX_ANSWER_BYTES, UpstreamFailure,
};
pub use openai_chat::OpenaiChat;
pub use sim::SimChat;
pub use stream::{ChatEventStream, Converter, NativeCut, StreamFailure};

use crate::video::job::{ChannelCheck, CheckVerdict};

/// A configured chat channel. An enum: the set of kinds is closed and small.
#[derive(Debug)]
pub enum ChatChannel {
    Simulator(SimChat),
    Anthropic(AnthropicChat),
    OpenaiChat(OpenaiChat),
}

impl ChatChannel {
    pub fn settings(&self) -> &ChatSettings {
        match self {
            ChatChannel::Simulator(c) => &c.settings,
            ChatChannel::Anthropic(c) => &c.settings,
            ChatChannel::OpenaiChat(c) => &c.settings,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings().name
    }

    /// The channel kind as configured.
    pub fn kind(&self) -> &'static str {
        match self {
            ChatChannel::Simulator(_) => "simulator",
            ChatChannel::Anthropic(_) => "anthropic",
            ChatChannel::OpenaiChat(_) => "openai-chat",
        }
    }

    pub fn serves(&self, model: &str) -> bool {
        self.settings().serves(model)
    }

    /// Whether the channel honours `x-relay-sim`.
    pub fn is_simulator(&self) -> bool {
        matches!(self, ChatChannel::Simulator(_))
    }

    /// Runs one `/v1/messages` call.
    pub async fn messages(&self, call: ChatCall<'_>) -> Result<ChatAnswer, UpstreamFailure> {
        match self {
            ChatChannel::Simulator(c) => c.messages(call),
            ChatChannel::Anthropic(c) => c.messages(call).await,
            ChatChannel::OpenaiChat(c) => c.messages(call).await,
        }
    }

    /// Input tokens of a `count_tokens` call: the native upstream's own count, the relay's
    /// count elsewhere.
    pub async fn count_tokens(&self, call: ChatCall<'_>) -> Result<u64, UpstreamFailure> {
        match self {
            ChatChannel::Anthropic(c) => c.count_tokens(call).await,
            ChatChannel::Simulator(_) | ChatChannel::OpenaiChat(_) => Ok(call.input_estimate()),
        }
    }

    /// The channel test: the cheapest authenticated call the upstream offers (its model
    /// list), generating nothing; the simulator has nothing to call.
    pub async fn check(&self) -> ChannelCheck {
        match self {
            ChatChannel::Simulator(_) => ChannelCheck {
                verdict: CheckVerdict::Ok,
                detail: "built in (the simulator runs inside the relay)".into(),
            },
            ChatChannel::Anthropic(c) => c.check().await,
            ChatChannel::OpenaiChat(c) => c.check().await,
        }
    }
}
