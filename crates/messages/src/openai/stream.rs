//! [`ChatStream`]: the state machine from chat completion chunks to the vendor's stream events,
//! with block indexes.

use std::collections::BTreeMap;

use serde_json::json;

use super::wire::{
    ChatAnswer, ChatToolCall, ChatUsage, ConvertError, content_text, error_message, map_finish,
    matched_stop, tool_id,
};
use crate::events::{Delta, DeltaUsage, MessageDeltaBody, StreamEvent};
use crate::tokens::count_text;
use crate::types::{ContentBlock, MessageResponse, MessagesRequest, Usage};

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
