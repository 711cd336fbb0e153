//! The pure validator of SPEC §4.5's table.
//!
//! Checks run in the table's order: `model`, `messages`, `system`, `max_tokens`, `temperature`,
//! `top_p`, `top_k`, `stream`, `stop_sequences`, `tools`, `tool_choice`, `thinking`,
//! `metadata`. Every failure is `400 invalid request` whose detail (the vendor body's message)
//! is `<field path>: <what is wrong>`. JSON `null` in an optional field is the same as leaving
//! it out. Unknown fields are kept.

use error_codes::{ApiError, ErrorCode};
use serde_json::{Map, Value};

use crate::types::{MessagesRequest, from_value};

/// Which endpoint a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/messages`: `max_tokens` required.
    Messages,
    /// `POST /v1/messages/count_tokens`: `max_tokens` not needed.
    CountTokens,
}

fn bad(path: impl std::fmt::Display, what: impl std::fmt::Display) -> ApiError {
    let path = path.to_string();
    let param = path.split('.').next().unwrap_or(&path).to_owned();
    ApiError::field(ErrorCode::InvalidRequest, param, format!("{path}: {what}"))
}

/// Where a value sits in the body (`messages.0.content.1`), written out only for an error.
#[derive(Debug, Clone, Copy)]
enum Path<'a> {
    Top(&'a str),
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn field<'b>(&'b self, name: &'b str) -> Path<'b> {
        Path::Field(self, name)
    }

    fn index(&self, i: usize) -> Path<'_> {
        Path::Index(self, i)
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Top(name) => f.write_str(name),
            Path::Field(at, name) => write!(f, "{at}.{name}"),
            Path::Index(at, i) => write!(f, "{at}.{i}"),
        }
    }
}

/// The JSON type of a value, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

/// Present and not null.
fn present<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn require_string(obj: &Map<String, Value>, name: &str, path: &Path<'_>) -> Result<(), ApiError> {
    match present(obj, name) {
        None => Err(bad(path.field(name), "is required")),
        Some(Value::String(_)) => Ok(()),
        Some(v) => Err(bad(
            path.field(name),
            format_args!("must be a string, got {}", kind(v)),
        )),
    }
}

fn optional_bool(obj: &Map<String, Value>, name: &str, path: &Path<'_>) -> Result<(), ApiError> {
    match present(obj, name) {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(v) => Err(bad(
            path.field(name),
            format_args!("must be a boolean, got {}", kind(v)),
        )),
    }
}

/// Validates a `/v1/messages` (or `count_tokens`) body and returns it typed.
pub fn validate(body: Value, endpoint: Endpoint) -> Result<MessagesRequest, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(bad(
            "body",
            format_args!("must be a JSON object, got {}", kind(&body)),
        ));
    };
    check_model(obj)?;
    check_messages(obj)?;
    check_system(obj)?;
    check_max_tokens(obj, endpoint)?;
    check_temperature(obj)?;
    check_top_p(obj)?;
    check_top_k(obj)?;
    check_stream(obj)?;
    check_stop_sequences(obj)?;
    check_tools(obj)?;
    check_tool_choice(obj)?;
    check_thinking(obj)?;
    check_metadata(obj)?;
    from_value(body).map_err(|e| bad("body", e))
}

fn check_model(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "model") {
        None => Err(bad("model", "is required")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(bad("model", "must not be empty")),
        Some(Value::String(_)) => Ok(()),
        Some(v) => Err(bad(
            "model",
            format_args!("must be a string, got {}", kind(v)),
        )),
    }
}

fn check_messages(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let messages = match present(obj, "messages") {
        None => return Err(bad("messages", "is required")),
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(bad(
                "messages",
                format_args!("must be an array of messages, got {}", kind(v)),
            ));
        }
    };
    if messages.is_empty() {
        return Err(bad("messages", "must contain at least one message"));
    }
    let top = Path::Top("messages");
    for (i, message) in messages.iter().enumerate() {
        let path = top.index(i);
        let Some(m) = message.as_object() else {
            return Err(bad(
                path,
                format_args!(
                    "must be an object with role and content, got {}",
                    kind(message)
                ),
            ));
        };
        match present(m, "role") {
            None => return Err(bad(path.field("role"), "is required")),
            Some(Value::String(r)) if r == "user" || r == "assistant" => {}
            Some(Value::String(r)) if r == "system" => {
                return Err(bad(
                    path.field("role"),
                    "must be \"user\" or \"assistant\", got \"system\"; a system prompt goes in the top-level system field",
                ));
            }
            Some(v) => {
                return Err(bad(
                    path.field("role"),
                    format_args!("must be \"user\" or \"assistant\", got {}", short(v)),
                ));
            }
        }
        match present(m, "content") {
            None => return Err(bad(path.field("content"), "is required")),
            Some(content) => check_content(content, &path.field("content"))?,
        }
    }
    Ok(())
}

/// A content value: a string or an array of blocks.
fn check_content(content: &Value, path: &Path<'_>) -> Result<(), ApiError> {
    match content {
        Value::String(_) => Ok(()),
        Value::Array(blocks) => {
            for (j, block) in blocks.iter().enumerate() {
                check_block(block, &path.index(j))?;
            }
            Ok(())
        }
        v => Err(bad(
            path,
            format_args!(
                "must be a string or an array of content blocks, got {}",
                kind(v)
            ),
        )),
    }
}

fn check_block(block: &Value, path: &Path<'_>) -> Result<(), ApiError> {
    let Some(b) = block.as_object() else {
        return Err(bad(
            path,
            format_args!("must be a content block object, got {}", kind(block)),
        ));
    };
    let kind_path = path.field("type");
    let block_type = match present(b, "type") {
        None => return Err(bad(kind_path, "is required")),
        Some(Value::String(t)) => t.as_str(),
        Some(v) => {
            return Err(bad(
                kind_path,
                format_args!("must be a string, got {}", kind(v)),
            ));
        }
    };
    match block_type {
        "text" => require_string(b, "text", path),
        "image" => {
            let source_path = path.field("source");
            let Some(source) = present(b, "source") else {
                return Err(bad(source_path, "is required"));
            };
            let Some(s) = source.as_object() else {
                return Err(bad(
                    source_path,
                    format_args!("must be an object, got {}", kind(source)),
                ));
            };
            match present(s, "type").and_then(Value::as_str) {
                Some("base64") => {
                    require_string(s, "media_type", &source_path)?;
                    require_string(s, "data", &source_path)
                }
                Some("url") => require_string(s, "url", &source_path),
                Some(_) => Ok(()),
                None => Err(bad(
                    source_path.field("type"),
                    "is required (\"base64\" or \"url\")",
                )),
            }
        }
        "tool_use" => {
            require_string(b, "id", path)?;
            require_string(b, "name", path)?;
            match present(b, "input") {
                None => Err(bad(path.field("input"), "is required")),
                Some(Value::Object(_)) => Ok(()),
                Some(v) => Err(bad(
                    path.field("input"),
                    format_args!("must be an object, got {}", kind(v)),
                )),
            }
        }
        "tool_result" => {
            require_string(b, "tool_use_id", path)?;
            if let Some(content) = present(b, "content") {
                check_content(content, &path.field("content"))?;
            }
            optional_bool(b, "is_error", path)
        }
        "thinking" => {
            require_string(b, "thinking", path)?;
            require_string(b, "signature", path)
        }
        // Other block types (documents, server tool results, ...) are passed on as they came.
        _ => Ok(()),
    }
}

fn check_system(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "system") {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            let top = Path::Top("system");
            for (i, block) in blocks.iter().enumerate() {
                let path = top.index(i);
                check_block(block, &path)?;
                if block.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(bad(path.field("type"), "must be \"text\""));
                }
            }
            Ok(())
        }
        Some(v) => Err(bad(
            "system",
            format_args!(
                "must be a string or an array of text blocks, got {}",
                kind(v)
            ),
        )),
    }
}

fn check_max_tokens(obj: &Map<String, Value>, endpoint: Endpoint) -> Result<(), ApiError> {
    match present(obj, "max_tokens") {
        None if endpoint == Endpoint::CountTokens => Ok(()),
        None => Err(bad("max_tokens", "is required")),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(()),
            _ => Err(bad(
                "max_tokens",
                format_args!("must be an integer >= 1, got {}", short(v)),
            )),
        },
    }
}

fn check_temperature(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "temperature") {
        None => Ok(()),
        Some(v) => match v.as_f64() {
            Some(t) if (0.0..=1.0).contains(&t) => Ok(()),
            _ => Err(bad(
                "temperature",
                format_args!("must be a number from 0 to 1, got {}", short(v)),
            )),
        },
    }
}

fn check_top_p(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "top_p") {
        None | Some(Value::Number(_)) => Ok(()),
        Some(v) => Err(bad(
            "top_p",
            format_args!("must be a number, got {}", kind(v)),
        )),
    }
}

fn check_top_k(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "top_k") {
        None => Ok(()),
        Some(v) if v.as_u64().is_some() => Ok(()),
        Some(v) => Err(bad(
            "top_k",
            format_args!("must be a non-negative integer, got {}", short(v)),
        )),
    }
}

fn check_stream(obj: &Map<String, Value>) -> Result<(), ApiError> {
    match present(obj, "stream") {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(v) => Err(bad(
            "stream",
            format_args!("must be a boolean, got {}", kind(v)),
        )),
    }
}

fn check_stop_sequences(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let items = match present(obj, "stop_sequences") {
        None => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(bad(
                "stop_sequences",
                format_args!("must be an array of strings, got {}", kind(v)),
            ));
        }
    };
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) if s.trim().is_empty() => {
                return Err(bad(
                    format!("stop_sequences.{i}"),
                    "must contain a non-whitespace character",
                ));
            }
            Value::String(_) => {}
            v => {
                return Err(bad(
                    format!("stop_sequences.{i}"),
                    format_args!("must be a string, got {}", kind(v)),
                ));
            }
        }
    }
    Ok(())
}

fn check_tools(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let tools = match present(obj, "tools") {
        None => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(v) => {
            return Err(bad(
                "tools",
                format_args!("must be an array of tools, got {}", kind(v)),
            ));
        }
    };
    let top = Path::Top("tools");
    for (i, tool) in tools.iter().enumerate() {
        let path = top.index(i);
        let Some(t) = tool.as_object() else {
            return Err(bad(
                path,
                format_args!("must be an object, got {}", kind(tool)),
            ));
        };
        require_string(t, "name", &path)?;
        if t.get("name").and_then(Value::as_str) == Some("") {
            return Err(bad(format!("{path}.name"), "must not be empty"));
        }
        let custom = match present(t, "type") {
            None => true,
            Some(Value::String(kind)) => kind == "custom",
            Some(v) => {
                return Err(bad(
                    format!("{path}.type"),
                    format_args!("must be a string, got {}", kind(v)),
                ));
            }
        };
        if let Some(v) = present(t, "description")
            && !v.is_string()
        {
            return Err(bad(
                format!("{path}.description"),
                format_args!("must be a string, got {}", kind(v)),
            ));
        }
        if custom {
            match present(t, "input_schema") {
                None => return Err(bad(format!("{path}.input_schema"), "is required")),
                Some(Value::Object(_)) => {}
                Some(v) => {
                    return Err(bad(
                        format!("{path}.input_schema"),
                        format_args!("must be a JSON schema object, got {}", kind(v)),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn check_tool_choice(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let choice = match present(obj, "tool_choice") {
        None => return Ok(()),
        Some(Value::Object(c)) => c,
        Some(v) => {
            return Err(bad(
                "tool_choice",
                format_args!("must be an object, got {}", kind(v)),
            ));
        }
    };
    match present(choice, "type") {
        None => Err(bad("tool_choice.type", "is required")),
        Some(Value::String(t)) if matches!(t.as_str(), "auto" | "any" | "none") => optional_bool(
            choice,
            "disable_parallel_tool_use",
            &Path::Top("tool_choice"),
        ),
        Some(Value::String(t)) if t == "tool" => {
            require_string(choice, "name", &Path::Top("tool_choice"))?;
            optional_bool(
                choice,
                "disable_parallel_tool_use",
                &Path::Top("tool_choice"),
            )
        }
        Some(v) => Err(bad(
            "tool_choice.type",
            format_args!(
                "must be \"auto\", \"any\", \"tool\" or \"none\", got {}",
                short(v)
            ),
        )),
    }
}

fn check_thinking(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let thinking = match present(obj, "thinking") {
        None => return Ok(()),
        Some(Value::Object(t)) => t,
        Some(v) => {
            return Err(bad(
                "thinking",
                format_args!("must be an object, got {}", kind(v)),
            ));
        }
    };
    match present(thinking, "type") {
        None => Err(bad("thinking.type", "is required")),
        Some(Value::String(t)) if t == "enabled" => match present(thinking, "budget_tokens") {
            None => Err(bad("thinking.budget_tokens", "is required")),
            Some(v) if v.as_u64().is_some_and(|n| n >= 1) => Ok(()),
            Some(v) => Err(bad(
                "thinking.budget_tokens",
                format_args!("must be an integer >= 1, got {}", short(v)),
            )),
        },
        Some(Value::String(_)) => Ok(()),
        Some(v) => Err(bad(
            "thinking.type",
            format_args!("must be a string, got {}", kind(v)),
        )),
    }
}

fn check_metadata(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let metadata = match present(obj, "metadata") {
        None => return Ok(()),
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(bad(
                "metadata",
                format_args!("must be an object, got {}", kind(v)),
            ));
        }
    };
    match present(metadata, "user_id") {
        None | Some(Value::String(_)) => Ok(()),
        Some(v) => Err(bad(
            "metadata.user_id",
            format_args!("must be a string, got {}", kind(v)),
        )),
    }
}
