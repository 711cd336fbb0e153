//! [`to_chat_request`]: a messages request as a chat completions request.

use serde_json::{Map, Value, json};

use crate::types::{
    Content, ContentBlock, ImageSource, KnownBlock, MessagesRequest, Role, ToolChoiceKind,
};

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
