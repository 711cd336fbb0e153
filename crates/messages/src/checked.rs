//! A checked `/v1/messages` body: what a relay reads of every request (model, `max_tokens`,
//! `stream`, its own input-token count), and the whole typed request only for a caller that
//! needs it.
//!
//! [`Checked::new`] first runs [`summarize`], a validating parse straight from the body's
//! bytes that builds no JSON tree and no typed request. It answers only "plainly valid, and
//! here is the summary" or "let the validator decide": a body it does not accept (an error, a
//! duplicate field, a content block type it does not read, ...) goes through [`validate`],
//! which names the field at fault. So `summarize` never decides an error; the one promise it
//! keeps (fuzzed) is that a body it accepts is one `validate` accepts, with the same summary.

use std::borrow::Cow;
use std::fmt;

use error_codes::{ApiError, ErrorCode};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::tokens::{PER_IMAGE, PER_MESSAGE, count_request, count_text};
use crate::types::MessagesRequest;
use crate::validate::{Endpoint, validate};

/// What a relay reads of every valid request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub model: String,
    pub max_tokens: Option<u64>,
    pub stream: bool,
    /// The relay's own count of the input tokens ([`count_request`]).
    pub input_tokens: u64,
}

impl Summary {
    /// The summary of a typed request.
    pub fn of(request: &MessagesRequest) -> Summary {
        Summary {
            model: request.model.clone(),
            max_tokens: request.max_tokens,
            stream: request.is_stream(),
            input_tokens: count_request(request),
        }
    }
}

/// A body that passed the validator.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub summary: Summary,
    /// The typed request when checking built it (the validator's path).
    typed: Option<MessagesRequest>,
}

impl Checked {
    /// Checks a body as [`validate`] does: `400 invalid request` naming the field at fault.
    pub fn new(body: &[u8], endpoint: Endpoint) -> Result<Checked, ApiError> {
        if let Some(summary) = summarize(body, endpoint) {
            return Ok(Checked {
                summary,
                typed: None,
            });
        }
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "body",
                format!("body: not valid JSON: {e}"),
            )
        })?;
        Ok(Checked::from(validate(value, endpoint)?))
    }

    /// The typed request of `body` (the one this was checked from), built now unless checking
    /// built it.
    pub fn typed(&self, body: &[u8]) -> Result<Cow<'_, MessagesRequest>, ApiError> {
        match &self.typed {
            Some(request) => Ok(Cow::Borrowed(request)),
            None => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, format!("body: {e}")))?;
                crate::types::from_value(value)
                    .map(Cow::Owned)
                    .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, format!("body: {e}")))
            }
        }
    }
}

impl From<MessagesRequest> for Checked {
    fn from(request: MessagesRequest) -> Checked {
        Checked {
            summary: Summary::of(&request),
            typed: Some(request),
        }
    }
}

/// The summary of a body [`validate`] accepts, read without building it; `None` for any body
/// this does not plainly accept (the validator decides those).
pub fn summarize(body: &[u8], endpoint: Endpoint) -> Option<Summary> {
    // Checked as UTF-8 once here rather than string by string.
    let text = std::str::from_utf8(body).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let summary = de.deserialize_map(Top { endpoint }).ok()?;
    de.end().ok()?;
    Some(summary)
}

/// The refusal of every visitor here: never shown, it only sends the body to the validator.
fn no<E: de::Error>() -> E {
    E::custom("not plainly valid")
}

/// The fields of one object seen so far: a field seen twice is left to the validator (the
/// JSON tree keeps the last; this would have read both).
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first<E: de::Error>(&mut self, field: u32) -> Result<(), E> {
        let bit = 1 << field;
        if self.0 & bit != 0 {
            return Err(no());
        }
        self.0 |= bit;
        Ok(())
    }
}

/// A JSON string, borrowed from the body unless it had escapes.
struct Str<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON integer from 0 to `u64::MAX`, written as one (what `Value::as_u64` reads).
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an unsigned integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Any JSON number, as `f64` (what `Value::as_f64` reads).
struct Number(f64);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
                Ok(Number(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
                Ok(Number(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Tokens of a structured value: its compact JSON text (as [`crate::tokens`] counts it).
fn count_json(value: &Value) -> u64 {
    count_text(&value.to_string())
}

/// The body: an object.
struct Top {
    endpoint: Endpoint,
}

impl<'de> Visitor<'de> for Top {
    type Value = Summary;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a messages request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Summary, A::Error> {
        let mut seen = Seen::default();
        let mut model: Option<Str> = None;
        let mut messages: Option<u64> = None;
        let mut system = 0;
        let mut max_tokens: Option<Count> = None;
        let mut stream = None;
        let mut tools = 0;
        while let Some(key) = map.next_key::<Str>()? {
            match &*key.0 {
                "model" => {
                    seen.first(0)?;
                    model = map.next_value()?;
                }
                "messages" => {
                    seen.first(1)?;
                    messages = map.next_value::<Option<Messages>>()?.map(|m| m.0);
                }
                "system" => {
                    seen.first(2)?;
                    system = map.next_value::<Option<System>>()?.map_or(0, |s| s.0);
                }
                "max_tokens" => {
                    seen.first(3)?;
                    max_tokens = map.next_value()?;
                }
                "temperature" => {
                    seen.first(4)?;
                    if let Some(Number(t)) = map.next_value()?
                        && !(0.0..=1.0).contains(&t)
                    {
                        return Err(no());
                    }
                }
                "top_p" => {
                    seen.first(5)?;
                    map.next_value::<Option<Number>>()?;
                }
                "top_k" => {
                    seen.first(6)?;
                    map.next_value::<Option<Count>>()?;
                }
                "stream" => {
                    seen.first(7)?;
                    stream = map.next_value::<Option<bool>>()?;
                }
                "stop_sequences" => {
                    seen.first(8)?;
                    for s in map.next_value::<Option<Vec<Str>>>()?.into_iter().flatten() {
                        if s.0.trim().is_empty() {
                            return Err(no());
                        }
                    }
                }
                "tools" => {
                    seen.first(9)?;
                    tools = map.next_value::<Option<Tools>>()?.map_or(0, |t| t.0);
                }
                "tool_choice" => {
                    seen.first(10)?;
                    map.next_value::<Option<ToolChoice>>()?;
                }
                "thinking" => {
                    seen.first(11)?;
                    map.next_value::<Option<Thinking>>()?;
                }
                "metadata" => {
                    seen.first(12)?;
                    map.next_value::<Option<Metadata>>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let model = match model {
            Some(m) if !m.0.trim().is_empty() => m.0.into_owned(),
            _ => return Err(no()),
        };
        let messages = messages.ok_or_else(no)?;
        let max_tokens = match (max_tokens, self.endpoint) {
            (Some(Count(0)), _) | (None, Endpoint::Messages) => return Err(no()),
            (Some(Count(n)), _) => Some(n),
            (None, Endpoint::CountTokens) => None,
        };
        Ok(Summary {
            model,
            max_tokens,
            stream: stream == Some(true),
            input_tokens: system + messages + tools,
        })
    }
}

/// Runs `visit` over an object's entries, after checking the value is an object.
macro_rules! object {
    ($name:ident, $out:ty, $expecting:literal, |$map:ident| $body:block) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $out;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, mut $map: A) -> Result<$out, A::Error> {
                        $body
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

/// `messages`: at least one message; its tokens.
struct Messages(u64);

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Messages;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of messages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
                let mut count = 0usize;
                let mut tokens = 0;
                while let Some(Message(t)) = seq.next_element()? {
                    count += 1;
                    tokens += PER_MESSAGE + t;
                }
                if count == 0 {
                    return Err(no());
                }
                Ok(Messages(tokens))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One message: `role` and `content`; its content's tokens.
struct Message(u64);

object!(Message, Message, "a message", |map| {
    let mut seen = Seen::default();
    let mut role = false;
    let mut content = None;
    while let Some(key) = map.next_key::<Str>()? {
        match &*key.0 {
            "role" => {
                seen.first(0)?;
                let r: Str = map.next_value()?;
                if !matches!(&*r.0, "user" | "assistant") {
                    return Err(no());
                }
                role = true;
            }
            "content" => {
                seen.first(1)?;
                content = Some(map.next_value::<Content>()?.0);
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    match content {
        Some(tokens) if role => Ok(Message(tokens)),
        _ => Err(no()),
    }
});

/// A content value: a string, or an array of content blocks; its tokens.
struct Content(u64);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or content blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content(count_text(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
                blocks(seq, false).map(Content)
            }
        }
        d.deserialize_any(V)
    }
}

/// The tokens of an array of content blocks (only text blocks when `only_text`).
fn blocks<'de, A: SeqAccess<'de>>(mut seq: A, only_text: bool) -> Result<u64, A::Error> {
    let mut tokens = 0;
    while let Some(t) = seq.next_element_seed(Block { only_text })? {
        tokens += t;
    }
    Ok(tokens)
}

/// `system`: a string, or text blocks; its tokens.
struct System(u64);

impl<'de> Deserialize<'de> for System {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = System;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or text blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<System, E> {
                Ok(System(count_text(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<System, A::Error> {
                blocks(seq, true).map(System)
            }
        }
        d.deserialize_any(V)
    }
}

/// One content block of a type this reads (`text`, `image`, `tool_use`, `tool_result`,
/// `thinking`); its tokens. The fields any of those types name must have the shape that type
/// gives them, whatever the block's own type (so the order of the fields does not matter).
struct Block {
    only_text: bool,
}

impl<'de> DeserializeSeed<'de> for Block {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Block {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content block")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut seen = Seen::default();
        let mut kind: Option<Str> = None;
        let mut text: Option<Str> = None;
        let mut source = false;
        let mut id = false;
        let mut name: Option<Str> = None;
        let mut input: Option<Value> = None;
        let mut tool_use_id = false;
        let mut content: Option<u64> = None;
        let mut thinking: Option<Str> = None;
        let mut signature = false;
        while let Some(key) = map.next_key::<Str>()? {
            match &*key.0 {
                "type" => {
                    seen.first(0)?;
                    kind = Some(map.next_value()?);
                }
                "text" => {
                    seen.first(1)?;
                    text = Some(map.next_value()?);
                }
                "source" => {
                    seen.first(2)?;
                    map.next_value::<Source>()?;
                    source = true;
                }
                "id" => {
                    seen.first(3)?;
                    map.next_value::<Str>()?;
                    id = true;
                }
                "name" => {
                    seen.first(4)?;
                    name = Some(map.next_value()?);
                }
                "input" => {
                    seen.first(5)?;
                    input = Some(map.next_value()?);
                }
                "tool_use_id" => {
                    seen.first(6)?;
                    map.next_value::<Str>()?;
                    tool_use_id = true;
                }
                "content" => {
                    seen.first(7)?;
                    content = map.next_value::<Option<Content>>()?.map(|c| c.0);
                }
                "is_error" => {
                    seen.first(8)?;
                    map.next_value::<Option<bool>>()?;
                }
                "thinking" => {
                    seen.first(9)?;
                    thinking = Some(map.next_value()?);
                }
                "signature" => {
                    seen.first(10)?;
                    map.next_value::<Str>()?;
                    signature = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(no)?;
        if self.only_text && kind.0 != "text" {
            return Err(no());
        }
        match (&*kind.0, text, name, input, thinking) {
            ("text", Some(text), ..) => Ok(count_text(&text.0)),
            ("image", ..) if source => Ok(PER_IMAGE),
            ("tool_use", _, Some(name), Some(input @ Value::Object(_)), _) if id => {
                Ok(count_text(&name.0) + count_json(&input))
            }
            ("tool_result", ..) if tool_use_id => Ok(content.unwrap_or(0)),
            ("thinking", _, _, _, Some(thinking)) if signature => Ok(count_text(&thinking.0)),
            _ => Err(no()),
        }
    }
}

/// An image's `source`: `base64` with `media_type` and `data`, `url` with `url`, or another
/// type.
struct Source;

object!(Source, Source, "an image source", |map| {
    let mut seen = Seen::default();
    let mut kind: Option<Str> = None;
    let (mut media_type, mut data, mut url) = (false, false, false);
    while let Some(key) = map.next_key::<Str>()? {
        let (field, flag) = match &*key.0 {
            "type" => {
                seen.first(0)?;
                kind = Some(map.next_value()?);
                continue;
            }
            "media_type" => (1, &mut media_type),
            "data" => (2, &mut data),
            "url" => (3, &mut url),
            _ => {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
        };
        seen.first(field)?;
        map.next_value::<Str>()?;
        *flag = true;
    }
    match kind.as_ref().map(|k| &*k.0) {
        Some("base64") if media_type && data => Ok(Source),
        Some("url") if url => Ok(Source),
        Some("base64" | "url") | None => Err(no()),
        Some(_) => Ok(Source),
    }
});

/// `tools`: their tokens.
struct Tools(u64);

impl<'de> Deserialize<'de> for Tools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tools;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of tools")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools, A::Error> {
                let mut tokens = 0;
                while let Some(Tool(t)) = seq.next_element()? {
                    tokens += t;
                }
                Ok(Tools(tokens))
            }
        }
        d.deserialize_seq(V)
    }
}

/// One tool: a non-empty `name`; a client tool (no `type`, or `custom`) has an object
/// `input_schema`. Its tokens.
struct Tool(u64);

object!(Tool, Tool, "a tool", |map| {
    let mut seen = Seen::default();
    let mut name: Option<Str> = None;
    let mut kind: Option<Str> = None;
    let mut description: Option<Str> = None;
    let mut schema: Option<Value> = None;
    while let Some(key) = map.next_key::<Str>()? {
        match &*key.0 {
            "name" => {
                seen.first(0)?;
                name = Some(map.next_value()?);
            }
            "type" => {
                seen.first(1)?;
                kind = map.next_value()?;
            }
            "description" => {
                seen.first(2)?;
                description = map.next_value()?;
            }
            "input_schema" => {
                seen.first(3)?;
                schema = map.next_value()?;
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    let name = name.filter(|n| !n.0.is_empty()).ok_or_else(no)?;
    let custom = kind.as_ref().is_none_or(|k| k.0 == "custom");
    if custom && !matches!(schema, Some(Value::Object(_))) {
        return Err(no());
    }
    Ok(Tool(
        count_text(&name.0)
            + description.map_or(0, |d| count_text(&d.0))
            + schema.as_ref().map_or(0, count_json),
    ))
});

/// `tool_choice`: `type` one of `auto`, `any`, `none`, or `tool` with a `name`.
struct ToolChoice;

object!(ToolChoice, ToolChoice, "a tool choice", |map| {
    let mut seen = Seen::default();
    let mut kind: Option<Str> = None;
    let mut name = false;
    while let Some(key) = map.next_key::<Str>()? {
        match &*key.0 {
            "type" => {
                seen.first(0)?;
                kind = Some(map.next_value()?);
            }
            "name" => {
                seen.first(1)?;
                name = map.next_value::<Option<Str>>()?.is_some();
            }
            "disable_parallel_tool_use" => {
                seen.first(2)?;
                map.next_value::<Option<bool>>()?;
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    match kind.as_ref().map(|k| &*k.0) {
        Some("auto" | "any" | "none") => Ok(ToolChoice),
        Some("tool") if name => Ok(ToolChoice),
        _ => Err(no()),
    }
});

/// `thinking`: a `type`; `enabled` needs `budget_tokens` >= 1.
struct Thinking;

object!(Thinking, Thinking, "a thinking setting", |map| {
    let mut seen = Seen::default();
    let mut kind: Option<Str> = None;
    let mut budget: Option<Value> = None;
    while let Some(key) = map.next_key::<Str>()? {
        match &*key.0 {
            "type" => {
                seen.first(0)?;
                kind = Some(map.next_value()?);
            }
            "budget_tokens" => {
                seen.first(1)?;
                budget = Some(map.next_value()?);
            }
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    match kind.as_ref().map(|k| &*k.0) {
        Some("enabled") if budget.and_then(|b| b.as_u64()).is_some_and(|n| n >= 1) => Ok(Thinking),
        Some("enabled") | None => Err(no()),
        Some(_) => Ok(Thinking),
    }
});

/// `metadata`: `user_id`, if any, a string.
struct Metadata;

object!(Metadata, Metadata, "metadata", |map| {
    let mut seen = Seen::default();
    while let Some(key) = map.next_key::<Str>()? {
        if key.0 == "user_id" {
            seen.first(0)?;
            map.next_value::<Option<Str>>()?;
        } else {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(Metadata)
});

#[cfg(test)]
mod tests {
    use super::*;

    /// `summarize` on `body`, checked against the validator: the same verdict where it
    /// decides, and the same summary.
    fn agree(body: &str, endpoint: Endpoint) -> Option<Summary> {
        let quick = summarize(body.as_bytes(), endpoint);
        let slow = serde_json::from_str(body)
            .ok()
            .and_then(|v| validate(v, endpoint).ok());
        if let Some(summary) = &quick {
            let request = slow.unwrap_or_else(|| panic!("summarized, yet invalid: {body}"));
            assert_eq!(*summary, Summary::of(&request), "{body}");
        }
        quick
    }

    #[test]
    fn the_requests_sdks_send_are_read_without_the_validator() {
        let bodies = [
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}"#,
            r#"{"model":"m","max_tokens":1,"stream":true,"system":"Be brief, please.",
                "messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},
                {"role":"user","content":[{"type":"text","text":"caf\u00e9 42x","cache_control":{"type":"ephemeral"}}]}]}"#,
            r#"{"model":"m","max_tokens":9,"system":[{"type":"text","text":"one two"}],
                "temperature":0.5,"top_p":1,"top_k":5,"stop_sequences":["END"],
                "metadata":{"user_id":"u-1"},"thinking":{"type":"enabled","budget_tokens":1024},
                "tool_choice":{"type":"tool","name":"get_weather"},
                "tools":[{"name":"get_weather","description":"Weather of a city",
                          "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
                         {"type":"web_search_20250305","name":"web_search","max_uses":3}],
                "messages":[{"role":"user","content":[
                    {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},
                    {"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},
                    {"type":"text","text":"What is this?"}]},
                  {"role":"assistant","content":[
                    {"type":"thinking","thinking":"Let me see.","signature":"sig"},
                    {"type":"tool_use","id":"tu_1","name":"get_weather","input":{"city":"Paris"}}]},
                  {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"Sunny"}],"is_error":false},
                    {"type":"tool_result","tool_use_id":"tu_2","content":"Rain"}]}]}"#,
            r#"{"model":"m","max_tokens":8,"temperature":null,"system":null,"unknown":[1,{"a":2}],
                "messages":[{"role":"user","content":"x","name":"extra"}]}"#,
        ];
        for body in bodies {
            let summary = agree(body, Endpoint::Messages);
            assert!(summary.is_some(), "not read: {body}");
        }
        let counted = r#"{"model":"m","messages":[{"role":"user","content":"a b"}]}"#;
        let summary = agree(counted, Endpoint::CountTokens).expect("read");
        assert_eq!((summary.max_tokens, summary.input_tokens), (None, 5));
        assert_eq!(summarize(counted.as_bytes(), Endpoint::Messages), None);
    }

    #[test]
    fn anything_not_plainly_valid_is_left_to_the_validator() {
        let bodies = [
            "",
            "[]",
            "{}",
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"x"}]} x"#,
            r#"{"model":" ","max_tokens":64,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":6.0,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":-0,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user"}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":null}]}"#,
            r#"{"model":"m","model":"n","max_tokens":64,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"temperature":1.5,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"top_k":-1,"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"stream":"yes","messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"stop_sequences":[" "],"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"system":[{"type":"image","source":{"type":"url","url":"u"}}],"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"tools":[{"name":"t"}],"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"tools":[{"name":"","input_schema":{}}],"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"metadata":{"user_id":5},"messages":[{"role":"user","content":"x"}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"x"}}]}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"tool_use","id":"i","name":"n","input":[]}]}]}"#,
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"t"}]}]}"#,
            // Valid, but of a block type this does not read: the validator counts it.
            r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"d"}}]}]}"#,
        ];
        for body in bodies {
            assert_eq!(agree(body, Endpoint::Messages), None, "read: {body}");
        }
    }

    #[test]
    fn checked_bodies_give_their_typed_request_either_way() {
        let body = br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
        let checked = Checked::new(body, Endpoint::Messages).expect("valid");
        let typed = checked.typed(body).expect("typed");
        assert_eq!(typed.model, "m");
        assert_eq!(checked.summary, Summary::of(&typed));
        let odd = br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":[{"type":"document","x":1}]}]}"#;
        let checked = Checked::new(odd, Endpoint::Messages).expect("valid");
        assert!(matches!(checked.typed(odd), Ok(Cow::Borrowed(_))));
        let err = Checked::new(b"{", Endpoint::Messages).expect_err("not JSON");
        assert_eq!(err.param.as_deref(), Some("body"));
        assert!(err.detail.starts_with("body: not valid JSON"), "{err:?}");
        let err = Checked::new(br#"{"model":"m","messages":[]}"#, Endpoint::Messages)
            .expect_err("no messages");
        assert_eq!(err.param.as_deref(), Some("messages"));
    }
}
