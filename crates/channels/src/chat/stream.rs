//! The stream of a streamed chat answer, as bytes ready for the client.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use messages::openai::ChatStream;
use messages::{SseDecoder, StreamEvent, Usage};
use serde_json::Value;

use crate::upstream_http::{UpstreamBody, UpstreamError};

/// A stream that failed after it began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFailure {
    /// The vendor's error type for the `error` event (`api_error`, `overloaded_error`, ...).
    pub kind: &'static str,
    /// For the `error` event: a fixed sentence, never upstream text.
    pub message: &'static str,
    /// For logs only.
    pub detail: String,
    /// The upstream already sent its own `error` event to the client: none is to be added.
    pub reported: bool,
}

impl StreamFailure {
    fn transport(channel: &str, e: &UpstreamError) -> StreamFailure {
        if e.is_timeout() {
            StreamFailure {
                kind: "timeout_error",
                message: "the upstream stopped sending",
                detail: format!("channel {channel}: {e}"),
                reported: false,
            }
        } else {
            StreamFailure {
                kind: "api_error",
                message: "upstream error",
                detail: format!("channel {channel}: {e}"),
                reported: false,
            }
        }
    }

    fn broken(channel: &str, what: impl std::fmt::Display) -> StreamFailure {
        StreamFailure {
            kind: "api_error",
            message: "upstream error",
            detail: format!("channel {channel}: {what}"),
            reported: false,
        }
    }
}

enum Inner {
    /// Events made in advance (the simulator), sent one by one with a pause between them.
    Prepared {
        events: VecDeque<Bytes>,
        pause: Duration,
        /// Fails after this many events (the simulator's `fail` directive).
        fail_after: Option<usize>,
        sent: usize,
    },
    /// A native upstream: its bytes, passed on as they come, cut only at event boundaries.
    Native {
        body: UpstreamBody,
        decoder: SseDecoder,
        held: BytesMut,
        finished: bool,
        upstream_error: bool,
    },
    /// A chat completions upstream, converted event by event.
    Converted {
        body: UpstreamBody,
        decoder: SseDecoder,
        convert: Box<ChatStream>,
        queue: VecDeque<Bytes>,
        ended: bool,
    },
}

/// A streamed answer. Call [`ChatEventStream::next`] until it returns `Ok(None)`.
pub struct ChatEventStream {
    channel: String,
    inner: Inner,
    usage: Usage,
}

impl std::fmt::Debug for ChatEventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatEventStream")
            .field("channel", &self.channel)
            .field("usage", &self.usage)
            .finish_non_exhaustive()
    }
}

impl ChatEventStream {
    pub(crate) fn prepared(
        channel: &str,
        events: &[StreamEvent],
        pause: Duration,
        fail_after: Option<usize>,
        usage: Usage,
    ) -> ChatEventStream {
        ChatEventStream {
            channel: channel.to_owned(),
            inner: Inner::Prepared {
                events: events.iter().map(|e| Bytes::from(e.to_sse())).collect(),
                pause,
                fail_after,
                sent: 0,
            },
            usage,
        }
    }

    pub(crate) fn native(channel: &str, body: UpstreamBody) -> ChatEventStream {
        ChatEventStream {
            channel: channel.to_owned(),
            inner: Inner::Native {
                body,
                decoder: SseDecoder::new(),
                held: BytesMut::new(),
                finished: false,
                upstream_error: false,
            },
            usage: Usage::default(),
        }
    }

    pub(crate) fn converted(channel: &str, body: UpstreamBody, convert: ChatStream) -> Self {
        let queue = convert
            .start()
            .iter()
            .map(|e| Bytes::from(e.to_sse()))
            .collect();
        let usage = convert.usage();
        ChatEventStream {
            channel: channel.to_owned(),
            inner: Inner::Converted {
                body,
                decoder: SseDecoder::new(),
                convert: Box::new(convert),
                queue,
                ended: false,
            },
            usage,
        }
    }

    /// Usage seen so far (the whole answer's once the stream ended).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Whether the bytes handed out so far end at an event boundary (always true: partial
    /// events are held back), so an extra event such as a `ping` may be sent now.
    pub fn at_boundary(&self) -> bool {
        true
    }

    /// The next bytes for the client; `Ok(None)` when the stream ended as it should.
    /// Cancel-safe: dropping the future loses nothing.
    pub async fn next(&mut self) -> Result<Option<Bytes>, StreamFailure> {
        let channel = self.channel.as_str();
        match &mut self.inner {
            Inner::Prepared {
                events,
                pause,
                fail_after,
                sent,
            } => {
                if events.is_empty() {
                    return Ok(None);
                }
                if *sent > 0 && !pause.is_zero() {
                    tokio::time::sleep(*pause).await;
                }
                if fail_after.is_some_and(|n| *sent >= n) {
                    events.clear();
                    return Err(StreamFailure::broken(channel, "simulated failure"));
                }
                *sent += 1;
                Ok(events.pop_front())
            }
            Inner::Native {
                body,
                decoder,
                held,
                finished,
                upstream_error,
            } => loop {
                let chunk = match body.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        if *upstream_error {
                            let mut failure =
                                StreamFailure::broken(channel, "the upstream sent an error event");
                            failure.reported = true;
                            return Err(failure);
                        }
                        if !*finished {
                            return Err(StreamFailure::broken(
                                channel,
                                "the upstream stream ended before message_stop",
                            ));
                        }
                        return Ok(None);
                    }
                    Err(e) => return Err(StreamFailure::transport(channel, &e)),
                };
                held.extend_from_slice(&chunk);
                for event in decoder.feed(&chunk) {
                    // Content events carry no usage and no end: most of a stream is not parsed.
                    let content = matches!(
                        event.event.as_deref(),
                        Some(
                            "content_block_start"
                                | "content_block_delta"
                                | "content_block_stop"
                                | "ping"
                        )
                    );
                    if !content {
                        read_native_event(&event.data, &mut self.usage, finished, upstream_error);
                    }
                }
                let ready = held.len().saturating_sub(decoder.pending_bytes());
                if ready > 0 {
                    return Ok(Some(held.split_to(ready).freeze()));
                }
            },
            Inner::Converted {
                body,
                decoder,
                convert,
                queue,
                ended,
            } => loop {
                if let Some(bytes) = queue.pop_front() {
                    return Ok(Some(bytes));
                }
                if *ended {
                    return Ok(None);
                }
                let chunk = match body.chunk().await {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        let events = convert
                            .finish()
                            .map_err(|e| StreamFailure::broken(channel, e))?;
                        self.usage = convert.usage();
                        queue.extend(events.iter().map(|e| Bytes::from(e.to_sse())));
                        *ended = true;
                        continue;
                    }
                    Err(e) => return Err(StreamFailure::transport(channel, &e)),
                };
                let mut out = String::new();
                for event in decoder.feed(&chunk) {
                    let events = convert
                        .data(&event.data)
                        .map_err(|e| StreamFailure::broken(channel, e))?;
                    for e in &events {
                        out.push_str(&e.to_sse());
                    }
                }
                self.usage = convert.usage();
                if convert.is_done() {
                    let events = convert
                        .finish()
                        .map_err(|e| StreamFailure::broken(channel, e))?;
                    self.usage = convert.usage();
                    for e in &events {
                        out.push_str(&e.to_sse());
                    }
                    *ended = true;
                }
                if !out.is_empty() {
                    queue.push_back(Bytes::from(out));
                }
            },
        }
    }
}

/// Reads usage, the end and errors out of one native event (its `data:` JSON).
fn read_native_event(data: &str, usage: &mut Usage, finished: &mut bool, error: &mut bool) {
    let Ok(value) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let number = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64);
    let apply = |u: &Value, usage: &mut Usage| {
        if let Some(n) = number(u, "input_tokens") {
            usage.input_tokens = n;
        }
        if let Some(n) = number(u, "output_tokens") {
            usage.output_tokens = n;
        }
        if let Some(n) = number(u, "cache_creation_input_tokens") {
            usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = number(u, "cache_read_input_tokens") {
            usage.cache_read_input_tokens = n;
        }
    };
    match value.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            if let Some(u) = value.pointer("/message/usage") {
                apply(u, usage);
            }
        }
        Some("message_delta") => {
            if let Some(u) = value.get("usage") {
                apply(u, usage);
            }
        }
        Some("message_stop") => *finished = true,
        Some("error") => *error = true,
        _ => {}
    }
}
