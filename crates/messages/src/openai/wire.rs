//! What chat completions answers and stream chunks look like, why one cannot be converted, and
//! the readings of them a whole answer and a stream share.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::types::{StopReason, Usage};

/// Why an upstream answer could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("chat completions answer is not valid: {0}")]
    Invalid(String),
    #[error("chat completions answer has no choices")]
    NoChoices,
    #[error("chat completions tool call {name}: arguments are not a JSON object: {source_text}")]
    BadArguments { name: String, source_text: String },
    #[error("chat completions stream reported an error: {0}")]
    Upstream(String),
    #[error("chat completions stream ended before it finished")]
    Truncated,
    #[error("chat completions stream: an event longer than {0} bytes")]
    EventTooLarge(usize),
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatAnswer {
    pub(super) choices: Vec<ChatChoice>,
    pub(super) usage: Option<ChatUsage>,
    pub(super) error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatChoice {
    pub(super) message: Option<ChatMessage>,
    pub(super) delta: Option<ChatMessage>,
    pub(super) finish_reason: Option<String>,
    /// vLLM: the stop string that ended the answer.
    pub(super) stop_reason: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatMessage {
    pub(super) content: Option<Value>,
    pub(super) refusal: Option<String>,
    pub(super) tool_calls: Option<Vec<ChatToolCall>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatToolCall {
    pub(super) index: Option<usize>,
    pub(super) id: Option<String>,
    pub(super) function: Option<ChatFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct ChatFunction {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
pub(super) struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    prompt_tokens_details: Option<CachedTokens>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct CachedTokens {
    cached_tokens: Option<u64>,
}

impl ChatUsage {
    pub(super) fn to_usage(self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0)
            .min(self.prompt_tokens);
        Usage {
            input_tokens: self.prompt_tokens - cached,
            output_tokens: self.completion_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

/// The text of a chat message's `content` (a string, or `text` parts).
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

pub(super) fn matched_stop(
    choice_stop: Option<&Value>,
    stop_sequences: &[String],
) -> Option<String> {
    let s = choice_stop?.as_str()?;
    stop_sequences.iter().find(|x| x.as_str() == s).cloned()
}

/// `finish_reason` (and a named stop string) as the vendor's stop reason.
pub fn map_finish(
    finish: Option<&str>,
    matched: Option<String>,
    had_tool_calls: bool,
) -> (StopReason, Option<String>) {
    match finish {
        Some("length") => (StopReason::MaxTokens, None),
        Some("tool_calls") | Some("function_call") => (StopReason::ToolUse, None),
        Some("content_filter") => (StopReason::Refusal, None),
        _ if had_tool_calls => (StopReason::ToolUse, None),
        _ => match matched {
            Some(s) => (StopReason::StopSequence, Some(s)),
            None => (StopReason::EndTurn, None),
        },
    }
}

pub(super) fn parse_arguments(name: &str, arguments: &str) -> Result<Value, ConvertError> {
    if arguments.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(ConvertError::BadArguments {
            name: name.to_owned(),
            source_text: arguments.chars().take(200).collect(),
        }),
    }
}

pub(super) fn tool_id(message_id: &str, i: usize) -> String {
    format!(
        "toolu_{}_{i}",
        message_id.strip_prefix("msg_").unwrap_or(message_id)
    )
}

pub(super) fn error_message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string())
        .chars()
        .take(300)
        .collect()
}
