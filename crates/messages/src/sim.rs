//! The built-in `sim-chat` model: a deterministic reply built from the last user message.
//!
//! The reply is `You said <the words of the last user message>` (letters and digits only, so
//! every word is one token), or `Tool result received <words>` when that message carries tool
//! results. It honours `max_tokens` (the reply is cut after that many tokens, `stop_reason`
//! `max_tokens`), `stop_sequences` (cut before the earliest match, `stop_reason`
//! `stop_sequence` naming it) and a forced tool choice (`tool_choice` `tool` or `any`: one
//! `tool_use` block whose input fills the tool's schema, `stop_reason` `tool_use`). Usage counts
//! are [`crate::tokens`] counts of what was sent and produced.

use serde_json::{Map, Value, json};

use crate::events::{Delta, DeltaUsage, MessageDeltaBody, StreamEvent};
use crate::tokens::{count_request, count_text};
use crate::types::{
    Content, ContentBlock, KnownBlock, MessageResponse, MessagesRequest, Role, StopReason,
    ToolChoiceKind, Usage,
};

/// What the simulator answers, before it is put in a response or a stream.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReply {
    pub text: Option<String>,
    /// `(id, name, input)` of a forced tool call.
    pub tool: Option<(String, String, Value)>,
    pub stop_reason: StopReason,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// Letters-and-digits words of `text`.
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect()
}

fn content_words(content: &Content, out: &mut Vec<String>, tool_result: &mut bool) {
    match content {
        Content::Text(text) => out.extend(words(text).into_iter().map(str::to_owned)),
        Content::Blocks(blocks) => {
            for block in blocks {
                match block {
                    ContentBlock::Known(KnownBlock::Text { text, .. }) => {
                        out.extend(words(text).into_iter().map(str::to_owned));
                    }
                    ContentBlock::Known(KnownBlock::ToolResult { content, .. }) => {
                        *tool_result = true;
                        if let Some(content) = content {
                            content_words(content, out, &mut false);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The full reply text before any cut.
pub fn reply_text(req: &MessagesRequest) -> String {
    let mut said = Vec::new();
    let mut tool_result = false;
    if let Some(last) = req.messages.iter().rev().find(|m| m.role == Role::User) {
        content_words(&last.content, &mut said, &mut tool_result);
    }
    let lead = if tool_result {
        "Tool result received"
    } else {
        "You said"
    };
    if said.is_empty() {
        format!("{lead} nothing")
    } else {
        format!("{lead} {}", said.join(" "))
    }
}

/// A value for a JSON schema: strings get `text`, numbers 1, booleans true, an enum its first
/// value, objects their properties filled the same way.
fn fill(schema: &Value, text: &str, depth: usize) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Value::String(text.to_owned()),
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => Value::Bool(true),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => {
            let mut out = Map::new();
            if depth < 4
                && let Some(props) = schema.get("properties").and_then(Value::as_object)
            {
                for (name, prop) in props {
                    out.insert(name.clone(), fill(prop, text, depth + 1));
                }
            }
            Value::Object(out)
        }
    }
}

/// The tool a request forces, if any: `tool_choice` `tool` names it, `any` takes the first.
fn forced_tool(req: &MessagesRequest) -> Option<(String, Value)> {
    let choice = req.tool_choice.as_ref()?;
    let tools = req.tools.as_ref()?;
    let tool = match choice.kind {
        ToolChoiceKind::Tool => tools
            .iter()
            .find(|t| Some(t.name.as_str()) == choice.name.as_deref())?,
        ToolChoiceKind::Any => tools.first()?,
        ToolChoiceKind::Auto | ToolChoiceKind::None => return None,
    };
    Some((
        tool.name.clone(),
        tool.input_schema.clone().unwrap_or_else(|| json!({})),
    ))
}

/// The simulator's answer to `req`; `id` is the message id (tool ids derive from it).
pub fn reply(req: &MessagesRequest, id: &str) -> SimReply {
    let input_tokens = count_request(req);
    let full = reply_text(req);
    if let Some((name, schema)) = forced_tool(req) {
        let said = full.split_once(' ').map(|x| x.1).unwrap_or(&full);
        let said = said.split_once(' ').map(|x| x.1).unwrap_or(said);
        let input = fill(&schema, said, 0);
        let output_tokens = count_text(&name) + count_text(&input.to_string());
        let tool_id = format!("toolu_{}", id.strip_prefix("msg_").unwrap_or(id));
        return SimReply {
            text: None,
            tool: Some((tool_id, name, input)),
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage {
                input_tokens,
                output_tokens,
                ..Usage::default()
            },
        };
    }
    let max = req.max_tokens.unwrap_or(u64::MAX);
    // The longest prefix of whole words within max_tokens.
    let mut allowed = full.len();
    let mut truncated = false;
    let mut tokens = 0u64;
    for (start, word) in word_spans(&full) {
        tokens += count_text(word);
        if tokens > max {
            allowed = full[..start].trim_end().len();
            truncated = true;
            break;
        }
    }
    let stop = req
        .stop_sequences()
        .iter()
        .filter_map(|s| full.find(s.as_str()).map(|at| (at, s)))
        .filter(|(at, s)| at + s.len() <= allowed)
        .min_by_key(|(at, _)| *at);
    let (text, stop_reason, stop_sequence) = match stop {
        Some((at, s)) => (&full[..at], StopReason::StopSequence, Some(s.clone())),
        None if truncated => (&full[..allowed], StopReason::MaxTokens, None),
        None => (full.as_str(), StopReason::EndTurn, None),
    };
    SimReply {
        text: Some(text.to_owned()),
        tool: None,
        stop_reason,
        stop_sequence,
        usage: Usage {
            input_tokens,
            output_tokens: count_text(text),
            ..Usage::default()
        },
    }
}

/// `(byte offset, word)` of each space-separated word.
fn word_spans(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split(' ').scan(0usize, |at, word| {
        let start = *at;
        *at += word.len() + 1;
        Some((start, word))
    })
}

/// The reply as a whole message.
pub fn response(req: &MessagesRequest, id: &str) -> MessageResponse {
    let r = reply(req, id);
    let mut message = MessageResponse::new(id, req.model.clone());
    if let Some(text) = r.text.filter(|t| !t.is_empty()) {
        message.content.push(ContentBlock::text(text));
    }
    if let Some((tool_id, name, input)) = r.tool {
        message
            .content
            .push(ContentBlock::tool_use(tool_id, name, input));
    }
    message.stop_reason = Some(r.stop_reason);
    message.stop_sequence = r.stop_sequence;
    message.usage = r.usage;
    message
}

/// The reply as stream events: text word by word, a tool call's input in pieces.
pub fn stream(req: &MessagesRequest, id: &str) -> Vec<StreamEvent> {
    let r = reply(req, id);
    let mut start = MessageResponse::new(id, req.model.clone());
    start.usage.input_tokens = r.usage.input_tokens;
    let mut events = vec![
        StreamEvent::MessageStart { message: start },
        StreamEvent::Ping,
    ];
    let mut index = 0;
    if let Some(text) = r.text.filter(|t| !t.is_empty()) {
        events.push(StreamEvent::ContentBlockStart {
            index,
            content_block: ContentBlock::text(""),
        });
        // "You said hi" goes out word by word: "You ", "said ", "hi".
        for piece in text.split_inclusive(' ') {
            events.push(StreamEvent::ContentBlockDelta {
                index,
                delta: Delta::TextDelta {
                    text: piece.to_owned(),
                },
            });
        }
        events.push(StreamEvent::ContentBlockStop { index });
        index += 1;
    }
    if let Some((tool_id, name, input)) = r.tool {
        events.push(StreamEvent::ContentBlockStart {
            index,
            content_block: ContentBlock::tool_use(tool_id, name, json!({})),
        });
        let json_text = input.to_string();
        for piece in split_in(&json_text, 3) {
            events.push(StreamEvent::ContentBlockDelta {
                index,
                delta: Delta::InputJsonDelta {
                    partial_json: piece.to_owned(),
                },
            });
        }
        events.push(StreamEvent::ContentBlockStop { index });
    }
    events.push(StreamEvent::MessageDelta {
        delta: MessageDeltaBody {
            stop_reason: Some(r.stop_reason),
            stop_sequence: r.stop_sequence,
        },
        usage: DeltaUsage {
            output_tokens: r.usage.output_tokens,
            input_tokens: Some(r.usage.input_tokens),
        },
    });
    events.push(StreamEvent::MessageStop);
    events
}

/// `text` in about `n` pieces, cut at character boundaries.
fn split_in(text: &str, n: usize) -> Vec<&str> {
    let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let step = chars.len().div_ceil(n.max(1)).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for k in (step..chars.len()).step_by(step) {
        out.push(&text[start..chars[k]]);
        start = chars[k];
    }
    out.push(&text[start..]);
    out
}
