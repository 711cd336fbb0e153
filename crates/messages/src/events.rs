//! The stream events of `/v1/messages` with `stream: true`.

use serde::{Deserialize, Serialize};

use crate::sse;
use crate::types::{ContentBlock, MessageResponse, StopReason};

/// One event. Its SSE `event:` name is its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: MessageResponse,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: DeltaUsage,
    },
    MessageStop,
    Error {
        error: ErrorBody,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    TextDelta { text: String },
    InputJsonDelta { partial_json: String },
    ThinkingDelta { thinking: String },
    SignatureDelta { signature: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDeltaBody {
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
}

/// `message_delta.usage`: cumulative; `output_tokens` always present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaUsage {
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

impl StreamEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::Ping => "ping",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Error { .. } => "error",
        }
    }

    /// An `error` event of the vendor's `type` (`api_error`, `overloaded_error`, ...).
    pub fn error(kind: &str, message: &str) -> StreamEvent {
        StreamEvent::Error {
            error: ErrorBody {
                kind: kind.to_owned(),
                message: message.to_owned(),
            },
        }
    }

    /// The event as SSE text: `event: <name>\ndata: <json>\n\n`.
    pub fn to_sse(&self) -> String {
        // Serialising these plain structs cannot fail; an empty object is the fallback.
        let data = serde_json::to_string(self).unwrap_or_else(|_| "{}".into());
        sse::encode(Some(self.name()), &data)
    }
}

/// Encodes a run of events.
pub fn encode_all(events: &[StreamEvent]) -> String {
    events.iter().map(StreamEvent::to_sse).collect()
}
