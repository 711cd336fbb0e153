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

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::events::{Delta, DeltaUsage, MessageDeltaBody, StreamEvent};
use crate::tokens::count_text;
use crate::types::{
    Content, ContentBlock, ImageSource, KnownBlock, MessageResponse, MessagesRequest, Role,
    StopReason, ToolChoiceKind, Usage,
};

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
}

fn text_of_content(content: &Content) -> String {
    match content {
        Content::Text(text) => text.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(ContentBlock::as_text)
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn image_url(source: &ImageSource) -> Option<String> {
    match source {
        ImageSource::Base64 { media_type, data } => {
            Some(format!("data:{media_type};base64,{data}"))
        }
        ImageSource::Url { url } => Some(url.clone()),
        ImageSource::Other(_) => None,
    }
}

/// The chat completions request for `req`, naming the upstream's model.
pub fn to_chat_request(req: &MessagesRequest, upstream_model: &str) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = req.system_text().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &req.messages {
        match message.role {
            Role::User => user_messages(&message.content, &mut messages),
            Role::Assistant => messages.push(assistant_message(&message.content)),
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(upstream_model));
    out.insert("messages".into(), Value::Array(messages));
    if let Some(max) = req.max_tokens {
        out.insert("max_tokens".into(), json!(max));
    }
    if let Some(t) = req.temperature {
        out.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        out.insert("top_p".into(), json!(p));
    }
    if !req.stop_sequences().is_empty() {
        out.insert("stop".into(), json!(req.stop_sequences()));
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .flatten()
        .filter(|t| t.kind.as_deref().is_none_or(|k| k == "custom"))
        .map(|t| {
            let mut function = Map::new();
            function.insert("name".into(), json!(t.name));
            if let Some(d) = &t.description {
                function.insert("description".into(), json!(d));
            }
            function.insert(
                "parameters".into(),
                t.input_schema
                    .clone()
                    .unwrap_or_else(|| json!({"type": "object"})),
            );
            json!({"type": "function", "function": function})
        })
        .collect();
    let has_tools = !tools.is_empty();
    if has_tools {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        let mapped = match choice.kind {
            ToolChoiceKind::Auto => json!("auto"),
            ToolChoiceKind::Any => json!("required"),
            ToolChoiceKind::None => json!("none"),
            ToolChoiceKind::Tool => {
                json!({"type": "function", "function": {"name": choice.name.clone().unwrap_or_default()}})
            }
        };
        if has_tools {
            out.insert("tool_choice".into(), mapped);
            if choice.disable_parallel_tool_use == Some(true) {
                out.insert("parallel_tool_calls".into(), json!(false));
            }
        }
    }
    if let Some(user) = req
        .metadata
        .as_ref()
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        out.insert("user".into(), json!(user));
    }
    if req.is_stream() {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(out)
}

fn user_messages(content: &Content, out: &mut Vec<Value>) {
    let blocks = match content {
        Content::Text(text) => {
            out.push(json!({"role": "user", "content": text}));
            return;
        }
        Content::Blocks(blocks) => blocks,
    };
    let mut parts = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Known(KnownBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            }) => {
                let mut text = content.as_ref().map(text_of_content).unwrap_or_default();
                if *is_error == Some(true) {
                    text = format!("Error: {text}");
                }
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}));
            }
            ContentBlock::Known(KnownBlock::Text { text, .. }) => {
                parts.push(json!({"type": "text", "text": text}));
            }
            ContentBlock::Known(KnownBlock::Image { source, .. }) => {
                if let Some(url) = image_url(source) {
                    parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                }
            }
            _ => {}
        }
    }
    match parts.as_slice() {
        [] => {}
        [one] if one["type"] == "text" => {
            out.push(json!({"role": "user", "content": one["text"].clone()}));
        }
        _ => out.push(json!({"role": "user", "content": parts})),
    }
}

fn assistant_message(content: &Content) -> Value {
    let blocks = match content {
        Content::Text(text) => return json!({"role": "assistant", "content": text}),
        Content::Blocks(blocks) => blocks,
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block {
            ContentBlock::Known(KnownBlock::Text { text: t, .. }) => text.push_str(t),
            ContentBlock::Known(KnownBlock::ToolUse {
                id, name, input, ..
            }) => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
            _ => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        json!(text)
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}

// --- Answers -----------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChatAnswer {
    choices: Vec<ChatChoice>,
    usage: Option<ChatUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChatChoice {
    message: Option<ChatMessage>,
    delta: Option<ChatMessage>,
    finish_reason: Option<String>,
    /// vLLM: the stop string that ended the answer.
    stop_reason: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChatMessage {
    content: Option<Value>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ChatToolCall>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChatToolCall {
    index: Option<usize>,
    id: Option<String>,
    function: Option<ChatFunction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ChatFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct ChatUsage {
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
    fn to_usage(self) -> Usage {
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
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn matched_stop(choice_stop: Option<&Value>, stop_sequences: &[String]) -> Option<String> {
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

fn parse_arguments(name: &str, arguments: &str) -> Result<Value, ConvertError> {
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

/// A whole chat completions answer as the vendor's message. `id` and `model` are what the
/// client sees; `input_estimate` stands in when the upstream reports no usage.
pub fn from_chat_response(
    body: &Value,
    id: &str,
    model: &str,
    req: &MessagesRequest,
    input_estimate: u64,
) -> Result<MessageResponse, ConvertError> {
    let answer: ChatAnswer =
        serde_json::from_value(body.clone()).map_err(|e| ConvertError::Invalid(e.to_string()))?;
    if let Some(error) = answer.error {
        return Err(ConvertError::Upstream(error_message(&error)));
    }
    let choice = answer
        .choices
        .into_iter()
        .next()
        .ok_or(ConvertError::NoChoices)?;
    let message = choice.message.unwrap_or_default();
    let mut out = MessageResponse::new(id, model);
    let mut text = content_text(message.content.as_ref());
    if text.is_empty() {
        text = message.refusal.clone().unwrap_or_default();
    }
    let mut produced = count_text(&text);
    if !text.is_empty() {
        out.content.push(ContentBlock::text(text));
    }
    let calls = message.tool_calls.unwrap_or_default();
    for (i, call) in calls.iter().enumerate() {
        let function = call.function.as_ref();
        let name = function.and_then(|f| f.name.clone()).unwrap_or_default();
        let arguments = function
            .and_then(|f| f.arguments.clone())
            .unwrap_or_default();
        produced += count_text(&name) + count_text(&arguments);
        let input = parse_arguments(&name, &arguments)?;
        let call_id = call.id.clone().unwrap_or_else(|| tool_id(id, i));
        out.content
            .push(ContentBlock::tool_use(call_id, name, input));
    }
    let matched = matched_stop(choice.stop_reason.as_ref(), req.stop_sequences());
    let (reason, sequence) =
        map_finish(choice.finish_reason.as_deref(), matched, !calls.is_empty());
    out.stop_reason = Some(reason);
    out.stop_sequence = sequence;
    out.usage = match answer.usage {
        Some(u) => u.to_usage(),
        None => Usage {
            input_tokens: input_estimate,
            output_tokens: produced,
            ..Usage::default()
        },
    };
    Ok(out)
}

fn tool_id(message_id: &str, i: usize) -> String {
    format!(
        "toolu_{}_{i}",
        message_id.strip_prefix("msg_").unwrap_or(message_id)
    )
}

fn error_message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string())
        .chars()
        .take(300)
        .collect()
}

// --- Streams -----------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(usize),
    Tool(usize),
}

/// Turns chat completion chunks into the vendor's stream events with correct block indexes.
///
/// Call [`ChatStream::start`] once the upstream answered `200`, [`ChatStream::data`] with each
/// SSE `data:` payload, and [`ChatStream::finish`] when the upstream stream ended.
#[derive(Debug)]
pub struct ChatStream {
    id: String,
    model: String,
    input_estimate: u64,
    stop_sequences: Vec<String>,
    next_index: usize,
    open: Option<Open>,
    /// Upstream tool call index -> (block index, tool name).
    tools: BTreeMap<usize, (usize, String)>,
    finish: Option<String>,
    matched: Option<String>,
    usage: Option<ChatUsage>,
    produced: u64,
    done: bool,
    had_tool_calls: bool,
}

impl ChatStream {
    pub fn new(id: &str, model: &str, req: &MessagesRequest, input_estimate: u64) -> ChatStream {
        ChatStream {
            id: id.to_owned(),
            model: model.to_owned(),
            input_estimate,
            stop_sequences: req.stop_sequences().to_vec(),
            next_index: 0,
            open: None,
            tools: BTreeMap::new(),
            finish: None,
            matched: None,
            usage: None,
            produced: 0,
            done: false,
            had_tool_calls: false,
        }
    }

    /// `message_start` and a `ping`.
    pub fn start(&self) -> Vec<StreamEvent> {
        let mut message = MessageResponse::new(self.id.clone(), self.model.clone());
        message.usage.input_tokens = self.input_estimate;
        vec![StreamEvent::MessageStart { message }, StreamEvent::Ping]
    }

    /// Whether `[DONE]` was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Usage so far: the upstream's when it reported it, else the relay's own count.
    pub fn usage(&self) -> Usage {
        match self.usage {
            Some(u) => u.to_usage(),
            None => Usage {
                input_tokens: self.input_estimate,
                output_tokens: self.produced,
                ..Usage::default()
            },
        }
    }

    fn close(&mut self, events: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            let index = match open {
                Open::Text(i) | Open::Tool(i) => i,
            };
            events.push(StreamEvent::ContentBlockStop { index });
        }
    }

    fn text(&mut self, text: &str, events: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Some(Open::Text(i)) => i,
            _ => {
                self.close(events);
                let i = self.next_index;
                self.next_index += 1;
                self.open = Some(Open::Text(i));
                events.push(StreamEvent::ContentBlockStart {
                    index: i,
                    content_block: ContentBlock::text(""),
                });
                i
            }
        };
        self.produced += count_text(text);
        events.push(StreamEvent::ContentBlockDelta {
            index,
            delta: Delta::TextDelta {
                text: text.to_owned(),
            },
        });
    }

    /// A tool call's piece. A call continued (with arguments) after another block began cannot
    /// be expressed in the vendor's events (a block's deltas come between its start and stop),
    /// so it fails the stream rather than sending a delta of a closed block.
    fn tool_call(
        &mut self,
        position: usize,
        call: &ChatToolCall,
        events: &mut Vec<StreamEvent>,
    ) -> Result<(), ConvertError> {
        self.had_tool_calls = true;
        let upstream_index = call.index.unwrap_or(position);
        let function = call.function.as_ref();
        let block = match self.tools.get(&upstream_index) {
            Some((block, _)) => *block,
            None => {
                self.close(events);
                let block = self.next_index;
                self.next_index += 1;
                let name = function.and_then(|f| f.name.clone()).unwrap_or_default();
                let id = call
                    .id
                    .clone()
                    .unwrap_or_else(|| tool_id(&self.id, upstream_index));
                self.produced += count_text(&name);
                self.tools.insert(upstream_index, (block, name.clone()));
                self.open = Some(Open::Tool(block));
                events.push(StreamEvent::ContentBlockStart {
                    index: block,
                    content_block: ContentBlock::tool_use(id, name, json!({})),
                });
                block
            }
        };
        if let Some(arguments) = function.and_then(|f| f.arguments.as_deref())
            && !arguments.is_empty()
        {
            if self.open != Some(Open::Tool(block)) {
                return Err(ConvertError::Invalid(format!(
                    "tool call {upstream_index} continued after another content block began"
                )));
            }
            self.produced += count_text(arguments);
            events.push(StreamEvent::ContentBlockDelta {
                index: block,
                delta: Delta::InputJsonDelta {
                    partial_json: arguments.to_owned(),
                },
            });
        }
        Ok(())
    }

    /// One SSE `data:` payload of the upstream stream. Nothing after `[DONE]` counts (what a
    /// consumer that stops reading at `[DONE]` never sees must not change the stream either).
    pub fn data(&mut self, data: &str) -> Result<Vec<StreamEvent>, ConvertError> {
        if self.done {
            return Ok(Vec::new());
        }
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: ChatAnswer =
            serde_json::from_str(data).map_err(|e| ConvertError::Invalid(e.to_string()))?;
        if let Some(error) = chunk.error {
            return Err(ConvertError::Upstream(error_message(&error)));
        }
        let mut events = Vec::new();
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        if let Some(choice) = chunk.choices.into_iter().next() {
            if let Some(delta) = choice.delta.or(choice.message) {
                let text = content_text(delta.content.as_ref());
                self.text(&text, &mut events);
                if let Some(refusal) = delta.refusal.as_deref() {
                    self.text(refusal, &mut events);
                }
                for (position, call) in delta.tool_calls.iter().flatten().enumerate() {
                    self.tool_call(position, call, &mut events)?;
                }
            }
            if let Some(finish) = choice.finish_reason {
                self.finish = Some(finish);
            }
            if let Some(m) = matched_stop(choice.stop_reason.as_ref(), &self.stop_sequences) {
                self.matched = Some(m);
            }
        }
        Ok(events)
    }

    /// The closing events, once the upstream stream ended. A stream that ended with neither
    /// `[DONE]` nor a `finish_reason` was cut off: [`ConvertError::Truncated`].
    pub fn finish(&mut self) -> Result<Vec<StreamEvent>, ConvertError> {
        if !self.done && self.finish.is_none() {
            return Err(ConvertError::Truncated);
        }
        let mut events = Vec::new();
        self.close(&mut events);
        let (reason, sequence) = map_finish(
            self.finish.as_deref(),
            self.matched.clone(),
            self.had_tool_calls,
        );
        let usage = self.usage();
        events.push(StreamEvent::MessageDelta {
            delta: MessageDeltaBody {
                stop_reason: Some(reason),
                stop_sequence: sequence,
            },
            usage: DeltaUsage {
                output_tokens: usage.output_tokens,
                input_tokens: Some(usage.input_tokens),
            },
        });
        events.push(StreamEvent::MessageStop);
        Ok(events)
    }
}
