//! [`from_chat_response`]: a whole chat completions answer as the vendor's message.

use serde_json::Value;

use super::wire::{
    ChatAnswer, ConvertError, content_text, error_message, map_finish, matched_stop,
    parse_arguments, tool_id,
};
use crate::tokens::count_text;
use crate::types::{ContentBlock, MessageResponse, MessagesRequest, Usage};

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
