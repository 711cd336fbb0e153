//! Request and response bodies of `/v1/messages`.
//!
//! Every struct keeps the fields it does not name in `extra`, so a request passes on what a
//! newer client sends. Content blocks of a type this crate does not know stay as raw JSON.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// `POST /v1/messages` (and, without `max_tokens`, `count_tokens`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub messages: Vec<Message>,
    /// Required on `/v1/messages`; absent on `count_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Fields this crate does not name; passed on as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl MessagesRequest {
    pub fn is_stream(&self) -> bool {
        self.stream == Some(true)
    }

    pub fn stop_sequences(&self) -> &[String] {
        self.stop_sequences.as_deref().unwrap_or_default()
    }

    /// The system prompt as one string (text blocks joined with blank lines).
    pub fn system_text(&self) -> Option<String> {
        match self.system.as_ref()? {
            System::Text(s) => Some(s.clone()),
            System::Blocks(blocks) => Some(
                blocks
                    .iter()
                    .filter_map(ContentBlock::as_text)
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Content,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A message's content: a plain string or typed blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl Content {
    /// The content as blocks (a string is one text block).
    pub fn blocks(&self) -> Vec<ContentBlock> {
        match self {
            Content::Text(text) => vec![ContentBlock::text(text)],
            Content::Blocks(blocks) => blocks.clone(),
        }
    }

    /// The text of the content: the string, or its text blocks joined.
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Blocks(blocks) => blocks
                .iter()
                .filter_map(ContentBlock::as_text)
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// The top-level `system` field: a string, or text blocks (the vendor's SDKs send both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum System {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

/// One content block. Known types are typed; any other type is kept as it came.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    Known(KnownBlock),
    Other(Value),
}

/// The block types this crate reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KnownBlock {
    Text {
        text: String,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    Image {
        source: ImageSource,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Content>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: String,
        #[serde(flatten)]
        extra: Map<String, Value>,
    },
}

/// Block types that deserialize as [`KnownBlock`].
pub const KNOWN_BLOCK_TYPES: [&str; 5] = ["text", "image", "tool_use", "tool_result", "thinking"];

/// `{"type": "base64", "media_type", "data"}` or `{"type": "url", "url"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    #[serde(untagged)]
    Other(Value),
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Known(KnownBlock::Text {
            text: text.into(),
            extra: Map::new(),
        })
    }

    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> ContentBlock {
        ContentBlock::Known(KnownBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
            extra: Map::new(),
        })
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Known(KnownBlock::Text { text, .. }) => Some(text),
            _ => None,
        }
    }

    pub fn known(&self) -> Option<&KnownBlock> {
        match self {
            ContentBlock::Known(block) => Some(block),
            ContentBlock::Other(_) => None,
        }
    }
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Known(block) => block.serialize(serializer),
            ContentBlock::Other(value) => value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let kind = value.get("type").and_then(Value::as_str);
        match kind {
            Some(kind) if KNOWN_BLOCK_TYPES.contains(&kind) => serde_json::from_value(value)
                .map(ContentBlock::Known)
                .map_err(D::Error::custom),
            Some(_) => Ok(ContentBlock::Other(value)),
            None => Err(D::Error::custom("a content block needs a string `type`")),
        }
    }
}

/// A tool the model may call. Client tools have `name` and `input_schema`; server tools carry a
/// `type` of their own and are passed on as they came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"type": "auto" | "any" | "tool" | "none", "name"?, "disable_parallel_tool_use"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    pub kind: ToolChoiceKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceKind {
    Auto,
    Any,
    Tool,
    None,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    PauseTurn,
    Refusal,
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Input tokens of every kind (what an input price applies to).
    pub fn all_input(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_creation_input_tokens)
            .saturating_add(self.cache_read_input_tokens)
    }
}

/// The answer of `/v1/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageResponse {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub role: String,
    pub model: String,
    pub content: Vec<ContentBlock>,
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

impl MessageResponse {
    /// A new assistant message.
    pub fn new(id: impl Into<String>, model: impl Into<String>) -> MessageResponse {
        MessageResponse {
            id: id.into(),
            kind: "message".into(),
            role: "assistant".into(),
            model: model.into(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: Usage::default(),
        }
    }
}

/// `POST /v1/messages/count_tokens` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountTokensResponse {
    pub input_tokens: u64,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub display_name: String,
    /// RFC 3339.
    pub created_at: String,
}

/// `GET /v1/models` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    pub data: Vec<ModelInfo>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

/// Reads `usage` out of a whole upstream answer, tolerating anything else in it.
pub fn usage_of(body: &Value) -> Option<Usage> {
    serde_json::from_value(body.get("usage")?.clone()).ok()
}

/// The `usage` of an answer's JSON text, read without building the rest of the answer (a
/// relay passes the body on as it came and needs only this): found by [`crate::scan::member`]
/// (only the usage is decoded), or where that cannot tell, from the answer parsed whole.
pub fn usage_in(body: &[u8]) -> Option<Usage> {
    match crate::scan::member(body, "usage") {
        Some(usage) => serde_json::from_slice::<Option<Usage>>(usage).ok()?,
        None => usage_of(&serde_json::from_slice::<Value>(body).ok()?),
    }
}

/// Deserialising a value that has passed [`crate::validate`] cannot fail; this maps the
/// impossible case to a plain error string anyway.
pub(crate) fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}
