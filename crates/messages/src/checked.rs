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

/// The fields of one object a visitor reads, and which of them it has seen.
struct Fields<F: 'static> {
    names: &'static [(&'static str, F)],
    seen: u32,
}

impl<F: Copy + PartialEq> Fields<F> {
    fn of(names: &'static [(&'static str, F)]) -> Fields<F> {
        Fields { names, seen: 0 }
    }

    /// The field of the next entry this reads, its value not yet taken; the values of other
    /// fields are skipped. A field seen twice is left to the validator (the JSON tree keeps
    /// the last; this would have read both).
    fn next<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<Option<F>, A::Error> {
        while let Some(key) = map.next_key::<Str>()? {
            let Some(i) = self.names.iter().position(|(name, _)| *name == key.0) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let bit = 1 << i;
            if self.seen & bit != 0 {
                return Err(no());
            }
            self.seen |= bit;
            return Ok(Some(self.names[i].1));
        }
        Ok(None)
    }

    /// Whether `field` was seen.
    fn has(&self, field: F) -> bool {
        let i = self.names.iter().position(|(_, f)| *f == field);
        i.is_some_and(|i| self.seen & (1 << i) != 0)
    }
}

/// Takes the next value of `map` as a `T`, checking only its shape.
fn shape<'de, T: Deserialize<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<T>().map(|_| ())
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

/// The fields a visitor reads, as an enum with the field names in the body: `ALL` is the
/// table [`Fields`] reads keys by.
macro_rules! fields {
    ($($name:ident { $($variant:ident = $text:literal),+ $(,)? })+) => {$(
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum $name { $($variant),+ }
        impl $name {
            const ALL: &'static [(&'static str, $name)] = &[$(($text, $name::$variant)),+];
        }
    )+};
}

fields! {
    TopField {
        Model = "model",
        Messages = "messages",
        System = "system",
        MaxTokens = "max_tokens",
        Temperature = "temperature",
        TopP = "top_p",
        TopK = "top_k",
        Stream = "stream",
        StopSequences = "stop_sequences",
        Tools = "tools",
        ToolChoice = "tool_choice",
        Thinking = "thinking",
        Metadata = "metadata",
    }
    MessageField {
        Role = "role",
        Content = "content",
    }
    BlockField {
        Type = "type",
        Text = "text",
        Source = "source",
        Id = "id",
        Name = "name",
        Input = "input",
        ToolUseId = "tool_use_id",
        Content = "content",
        IsError = "is_error",
        Thinking = "thinking",
        Signature = "signature",
    }
    SourceField {
        Type = "type",
        MediaType = "media_type",
        Data = "data",
        Url = "url",
    }
    ToolField {
        Name = "name",
        Type = "type",
        Description = "description",
        InputSchema = "input_schema",
    }
    ChoiceField {
        Type = "type",
        Name = "name",
        DisableParallelToolUse = "disable_parallel_tool_use",
    }
    ThinkingField {
        Type = "type",
        BudgetTokens = "budget_tokens",
    }
    MetadataField {
        UserId = "user_id",
    }
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
        let mut fields = Fields::of(TopField::ALL);
        let mut model: Option<Str> = None;
        let mut messages: Option<u64> = None;
        let mut system = 0;
        let mut max_tokens: Option<Count> = None;
        let mut stream = None;
        let mut tools = 0;
        while let Some(field) = fields.next(&mut map)? {
            match field {
                TopField::Model => model = map.next_value()?,
                TopField::Messages => messages = map.next_value::<Option<Messages>>()?.map(|m| m.0),
                TopField::System => system = map.next_value::<Option<System>>()?.map_or(0, |s| s.0),
                TopField::MaxTokens => max_tokens = map.next_value()?,
                TopField::Temperature => {
                    if let Some(Number(t)) = map.next_value()?
                        && !(0.0..=1.0).contains(&t)
                    {
                        return Err(no());
                    }
                }
                TopField::TopP => shape::<Option<Number>, _>(&mut map)?,
                TopField::TopK => shape::<Option<Count>, _>(&mut map)?,
                TopField::Stream => stream = map.next_value::<Option<bool>>()?,
                TopField::StopSequences => {
                    for s in map.next_value::<Option<Vec<Str>>>()?.into_iter().flatten() {
                        if s.0.trim().is_empty() {
                            return Err(no());
                        }
                    }
                }
                TopField::Tools => tools = map.next_value::<Option<Tools>>()?.map_or(0, |t| t.0),
                TopField::ToolChoice => shape::<Option<ToolChoice>, _>(&mut map)?,
                TopField::Thinking => shape::<Option<Thinking>, _>(&mut map)?,
                TopField::Metadata => shape::<Option<Metadata>, _>(&mut map)?,
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

/// A value read by a visitor of an object (`map`) or an array (`seq`) with the given body.
macro_rules! visited {
    ($name:ident, $expecting:literal, map, |$arg:ident| $body:block) => {
        visited!(@ $name, $expecting, deserialize_map, visit_map, MapAccess, $arg, $body);
    };
    ($name:ident, $expecting:literal, seq, |$arg:ident| $body:block) => {
        visited!(@ $name, $expecting, deserialize_seq, visit_seq, SeqAccess, $arg, $body);
    };
    (@ $name:ident, $expecting:literal, $deserialize:ident, $visit:ident, $access:ident,
        $arg:ident, $body:block) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($expecting)
                    }
                    fn $visit<A: $access<'de>>(self, mut $arg: A) -> Result<$name, A::Error> {
                        $body
                    }
                }
                d.$deserialize(V)
            }
        }
    };
}

/// `messages`: at least one message; its tokens.
struct Messages(u64);

visited!(Messages, "an array of messages", seq, |seq| {
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
});

/// One message: `role` and `content`; its content's tokens.
struct Message(u64);

visited!(Message, "a message", map, |map| {
    let mut fields = Fields::of(MessageField::ALL);
    let mut role = false;
    let mut content = None;
    while let Some(field) = fields.next(&mut map)? {
        if field == MessageField::Role {
            let r: Str = map.next_value()?;
            if !matches!(&*r.0, "user" | "assistant") {
                return Err(no());
            }
            role = true;
        } else {
            content = Some(map.next_value::<Content>()?.0);
        }
    }
    match content {
        Some(tokens) if role => Ok(Message(tokens)),
        _ => Err(no()),
    }
});

/// A content value: a string, or an array of content blocks (only text blocks when
/// `ONLY_TEXT`); its tokens.
struct Text<const ONLY_TEXT: bool>(u64);

/// A message's or a tool result's `content`.
type Content = Text<false>;

/// `system`.
type System = Text<true>;

impl<'de, const ONLY_TEXT: bool> Deserialize<'de> for Text<ONLY_TEXT> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const ONLY_TEXT: bool>;
        impl<'de, const ONLY_TEXT: bool> Visitor<'de> for V<ONLY_TEXT> {
            type Value = Text<ONLY_TEXT>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or content blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(count_text(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut tokens = 0;
                while let Some(t) = seq.next_element_seed(Block {
                    only_text: ONLY_TEXT,
                })? {
                    tokens += t;
                }
                Ok(Text(tokens))
            }
        }
        d.deserialize_any(V::<ONLY_TEXT>)
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
        let mut fields = Fields::of(BlockField::ALL);
        let mut kind: Option<Str> = None;
        let mut text: Option<Str> = None;
        let mut name: Option<Str> = None;
        let mut input: Option<Value> = None;
        let mut content: Option<u64> = None;
        let mut thinking: Option<Str> = None;
        while let Some(field) = fields.next(&mut map)? {
            match field {
                BlockField::Type => kind = Some(map.next_value()?),
                BlockField::Text => text = Some(map.next_value()?),
                BlockField::Source => shape::<Source, _>(&mut map)?,
                BlockField::Id | BlockField::ToolUseId | BlockField::Signature => {
                    shape::<Str, _>(&mut map)?
                }
                BlockField::Name => name = Some(map.next_value()?),
                BlockField::Input => input = Some(map.next_value()?),
                BlockField::Content => content = map.next_value::<Option<Content>>()?.map(|c| c.0),
                BlockField::IsError => shape::<Option<bool>, _>(&mut map)?,
                BlockField::Thinking => thinking = Some(map.next_value()?),
            }
        }
        // Each of these was read, and had its shape, if seen.
        let [source, id, tool_use_id, signature] = [
            BlockField::Source,
            BlockField::Id,
            BlockField::ToolUseId,
            BlockField::Signature,
        ]
        .map(|f| fields.has(f));
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

visited!(Source, "an image source", map, |map| {
    let mut fields = Fields::of(SourceField::ALL);
    let mut kind: Option<Str> = None;
    while let Some(field) = fields.next(&mut map)? {
        if field == SourceField::Type {
            kind = Some(map.next_value()?);
        } else {
            shape::<Str, _>(&mut map)?;
        }
    }
    let has = |field| fields.has(field);
    match kind.as_ref().map(|k| &*k.0) {
        Some("base64") if has(SourceField::MediaType) && has(SourceField::Data) => Ok(Source),
        Some("url") if has(SourceField::Url) => Ok(Source),
        Some("base64" | "url") | None => Err(no()),
        Some(_) => Ok(Source),
    }
});

/// `tools`: their tokens.
struct Tools(u64);

visited!(Tools, "an array of tools", seq, |seq| {
    let mut tokens = 0;
    while let Some(Tool(t)) = seq.next_element()? {
        tokens += t;
    }
    Ok(Tools(tokens))
});

/// One tool: a non-empty `name`; a client tool (no `type`, or `custom`) has an object
/// `input_schema`. Its tokens.
struct Tool(u64);

visited!(Tool, "a tool", map, |map| {
    let mut fields = Fields::of(ToolField::ALL);
    let mut name: Option<Str> = None;
    let mut kind: Option<Str> = None;
    let mut description: Option<Str> = None;
    let mut schema: Option<Value> = None;
    while let Some(field) = fields.next(&mut map)? {
        match field {
            ToolField::Name => name = Some(map.next_value()?),
            ToolField::Type => kind = map.next_value()?,
            ToolField::Description => description = map.next_value()?,
            ToolField::InputSchema => schema = map.next_value()?,
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

visited!(ToolChoice, "a tool choice", map, |map| {
    let mut fields = Fields::of(ChoiceField::ALL);
    let mut kind: Option<Str> = None;
    let mut name = false;
    while let Some(field) = fields.next(&mut map)? {
        match field {
            ChoiceField::Type => kind = Some(map.next_value()?),
            ChoiceField::Name => name = map.next_value::<Option<Str>>()?.is_some(),
            ChoiceField::DisableParallelToolUse => shape::<Option<bool>, _>(&mut map)?,
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

visited!(Thinking, "a thinking setting", map, |map| {
    let mut fields = Fields::of(ThinkingField::ALL);
    let mut kind: Option<Str> = None;
    let mut budget: Option<Value> = None;
    while let Some(field) = fields.next(&mut map)? {
        if field == ThinkingField::Type {
            kind = Some(map.next_value()?);
        } else {
            budget = Some(map.next_value()?);
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

visited!(Metadata, "metadata", map, |map| {
    let mut fields = Fields::of(MetadataField::ALL);
    while fields.next(&mut map)?.is_some() {
        map.next_value::<Option<Str>>()?;
    }
    Ok(Metadata)
});

#[cfg(test)]
mod tests;
