//! The relay's own token count: used by the simulator (where it is the truth), by
//! `count_tokens` on channels that have no count of their own, and for billing estimates.
//!
//! A token is a run of letters and digits, or one other non-space character. So
//! `"Hello, world!"` is 4 tokens. Every message adds 3 tokens, an image 256, and structured
//! values (tool inputs, schemas) count as their compact JSON text.

use serde_json::Value;

use crate::types::{Content, ContentBlock, ImageSource, KnownBlock, MessagesRequest, System};

/// Tokens of one message's framing (role, separators).
pub const PER_MESSAGE: u64 = 3;
/// Tokens of one image.
pub const PER_IMAGE: u64 = 256;

/// Tokens in `text`.
pub fn count_text(text: &str) -> u64 {
    let mut count = 0u64;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if !in_word {
                count += 1;
                in_word = true;
            }
        } else {
            in_word = false;
            if !c.is_whitespace() {
                count += 1;
            }
        }
    }
    count
}

fn count_json(value: &Value) -> u64 {
    count_text(&value.to_string())
}

/// Tokens of one content block.
pub fn count_block(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Known(KnownBlock::Text { text, .. }) => count_text(text),
        ContentBlock::Known(KnownBlock::Image { source, .. }) => match source {
            ImageSource::Base64 { .. } | ImageSource::Url { .. } | ImageSource::Other(_) => {
                PER_IMAGE
            }
        },
        ContentBlock::Known(KnownBlock::ToolUse { name, input, .. }) => {
            count_text(name) + count_json(input)
        }
        ContentBlock::Known(KnownBlock::ToolResult { content, .. }) => {
            content.as_ref().map(count_content).unwrap_or(0)
        }
        ContentBlock::Known(KnownBlock::Thinking { thinking, .. }) => count_text(thinking),
        ContentBlock::Other(value) => count_json(value),
    }
}

pub fn count_content(content: &Content) -> u64 {
    match content {
        Content::Text(text) => count_text(text),
        Content::Blocks(blocks) => blocks.iter().map(count_block).sum(),
    }
}

/// Input tokens of a request: system prompt, messages, tools.
pub fn count_request(req: &MessagesRequest) -> u64 {
    let system = match &req.system {
        Some(System::Text(text)) => count_text(text),
        Some(System::Blocks(blocks)) => blocks.iter().map(count_block).sum(),
        None => 0,
    };
    let messages: u64 = req
        .messages
        .iter()
        .map(|m| PER_MESSAGE + count_content(&m.content))
        .sum();
    let tools: u64 = req
        .tools
        .iter()
        .flatten()
        .map(|t| {
            count_text(&t.name)
                + t.description.as_deref().map(count_text).unwrap_or(0)
                + t.input_schema.as_ref().map(count_json).unwrap_or(0)
        })
        .sum();
    system + messages + tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_punctuation() {
        assert_eq!(count_text(""), 0);
        assert_eq!(count_text("Hello, world!"), 4);
        assert_eq!(count_text("  two   words "), 2);
        assert_eq!(count_text("caf\u{e9} 42x"), 2);
    }
}
