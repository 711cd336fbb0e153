//! The stream of a streamed chat answer, as bytes ready for the client. What it holds back is
//! bounded: one upstream event (all its lines) and the bytes of an unfinished event may take at
//! most the channel's `max_event_bytes`; past it the stream ends with an `error` event, and
//! what was relayed before is charged.

use std::collections::VecDeque;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use messages::openai::{ChatStream, ConvertError};
use messages::sse::DEFAULT_MAX_EVENT;
use messages::{SseDecoder, StreamEvent, Usage, scan};
use serde_json::Value;

use crate::http::client::{UpstreamBody, UpstreamError};
use crate::http::deadline::Deadline;

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
    /// The relay itself cut a stream the upstream was serving well (an event over the cap):
    /// what was relayed before is charged, as when the client goes away.
    pub charge: bool,
}

impl StreamFailure {
    fn transport(channel: &str, e: &UpstreamError) -> StreamFailure {
        if e.is_timeout() {
            StreamFailure {
                kind: "timeout_error",
                message: "the upstream stopped sending",
                detail: format!("channel {channel}: {e}"),
                reported: false,
                charge: false,
            }
        } else {
            StreamFailure::broken(channel, e)
        }
    }

    fn broken(channel: &str, what: impl std::fmt::Display) -> StreamFailure {
        StreamFailure {
            kind: "api_error",
            message: "upstream error",
            detail: format!("channel {channel}: {what}"),
            reported: false,
            charge: false,
        }
    }

    /// An upstream event (or the bytes of an unfinished one) past `max` bytes.
    fn too_large(channel: &str, max: usize) -> StreamFailure {
        StreamFailure {
            kind: "api_error",
            message: "the upstream sent an event larger than the relay accepts",
            detail: format!("channel {channel}: an event longer than {max} bytes"),
            reported: false,
            charge: true,
        }
    }
}

enum Inner {
    /// Events made in advance (the simulator), sent one by one with a pause between them.
    Prepared {
        events: VecDeque<Bytes>,
        pause: Duration,
        /// The pause before the next event, once it began.
        pausing: Deadline,
        /// Fails after this many events (the simulator's `fail` directive).
        fail_after: Option<usize>,
        sent: usize,
    },
    /// A native upstream: its bytes, passed on as they come, cut only at event boundaries.
    Native { body: UpstreamBody, cut: NativeCut },
    /// A chat completions upstream, converted event by event.
    Converted {
        body: UpstreamBody,
        convert: Converter,
        queue: VecDeque<Bytes>,
        ended: bool,
        /// A failure reported once the events converted before it were sent.
        failed: Option<StreamFailure>,
    },
}

/// The bytes of a native upstream stream, held until an event boundary and read on the way
/// for usage, the end (`message_stop`) and `error` events. No I/O: [`ChatEventStream`] feeds it
/// what the upstream sends. An event past its cap overflows it: the events before go out,
/// the rest is let go ([`NativeCut::overflowed`]).
#[derive(Debug)]
pub struct NativeCut {
    decoder: SseDecoder,
    held: BytesMut,
    finished: bool,
    upstream_error: bool,
}

impl Default for NativeCut {
    fn default() -> Self {
        NativeCut::new()
    }
}

impl NativeCut {
    /// A cut whose events may take at most [`DEFAULT_MAX_EVENT`] bytes each.
    pub fn new() -> NativeCut {
        NativeCut::with_max_event(DEFAULT_MAX_EVENT)
    }

    /// A cut whose events (and the bytes held back of an unfinished one) may take at most
    /// `max_event` bytes.
    pub fn with_max_event(max_event: usize) -> NativeCut {
        NativeCut {
            decoder: SseDecoder::with_max_event(max_event),
            held: BytesMut::new(),
            finished: false,
            upstream_error: false,
        }
    }

    /// Takes the next upstream chunk; returns the bytes that now end at an event boundary
    /// (none while an event is incomplete). Usage found on the way goes into `usage`. A chunk
    /// that ends at a boundary with nothing held before it is handed out as it came.
    pub fn push(&mut self, chunk: Bytes, usage: &mut Usage) -> Option<Bytes> {
        let (finished, error) = (&mut self.finished, &mut self.upstream_error);
        self.decoder.feed_with(&chunk, |event| {
            // Content events carry no usage and no end: most of a stream is not parsed.
            let content = matches!(
                event.event,
                Some(
                    b"content_block_start"
                        | b"content_block_delta"
                        | b"content_block_stop"
                        | b"ping"
                )
            );
            if !content {
                read_native_event(event.data, usage, finished, error);
            }
        });
        let pending = self.decoder.pending_bytes();
        if self.decoder.overflowed() {
            // The events before the oversized one go out; its bytes are let go.
            let ready = (self.held.len() + chunk.len()).saturating_sub(pending);
            let out = if self.held.is_empty() {
                (ready > 0).then(|| chunk.slice(..ready.min(chunk.len())))
            } else {
                let from_chunk = ready.saturating_sub(self.held.len()).min(chunk.len());
                self.held.extend_from_slice(&chunk[..from_chunk]);
                let ready = ready.min(self.held.len());
                (ready > 0).then(|| self.held.split_to(ready).freeze())
            };
            self.held = BytesMut::new();
            return out;
        }
        if self.held.is_empty() {
            // Everything before this chunk was handed out: what is pending lies in it.
            let ready = chunk.len().saturating_sub(pending);
            if ready == chunk.len() {
                return (ready > 0).then_some(chunk);
            }
            self.hold(&chunk[ready..]);
            return (ready > 0).then(|| chunk.slice(..ready));
        }
        self.hold(&chunk);
        let ready = self.held.len().saturating_sub(pending);
        (ready > 0).then(|| self.held.split_to(ready).freeze())
    }

    /// Holds back `bytes` of an unfinished event, growing the buffer by doubling but never
    /// past the cap (the decoder overflows before the bytes could need more).
    fn hold(&mut self, bytes: &[u8]) {
        let need = self.held.len() + bytes.len();
        if need > self.held.capacity() {
            let cap = self.decoder.max_event();
            let grown = need.max(self.held.capacity() * 2).min(cap.max(need));
            let mut bigger = BytesMut::with_capacity(grown);
            bigger.extend_from_slice(&self.held);
            self.held = bigger;
        }
        self.held.extend_from_slice(bytes);
    }

    /// Whether `message_stop` was seen.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Whether the upstream sent an `error` event.
    pub fn upstream_error(&self) -> bool {
        self.upstream_error
    }

    /// Whether an event went past the cap: nothing more is handed out.
    pub fn overflowed(&self) -> bool {
        self.decoder.overflowed()
    }

    /// The memory held for an unfinished event: its bytes held back, and the decoder's.
    pub fn held_bytes(&self) -> usize {
        self.held.capacity() + self.decoder.held_bytes()
    }
}

/// A chat completions stream converted to the vendor's events: SSE decoding and
/// [`ChatStream`] together. No I/O: [`ChatEventStream`] feeds it what the upstream sends.
#[derive(Debug)]
pub struct Converter {
    decoder: SseDecoder,
    convert: Box<ChatStream>,
}

impl Converter {
    /// A converter whose upstream events may take at most [`DEFAULT_MAX_EVENT`] bytes each.
    pub fn new(convert: ChatStream) -> Converter {
        Converter::with_max_event(convert, DEFAULT_MAX_EVENT)
    }

    /// A converter whose upstream events (all the lines of one) may take at most `max_event`
    /// bytes; past it [`Converter::push`] fails with [`ConvertError::EventTooLarge`].
    pub fn with_max_event(convert: ChatStream, max_event: usize) -> Converter {
        Converter {
            decoder: SseDecoder::with_max_event(max_event),
            convert: Box::new(convert),
        }
    }

    /// The opening events (`message_start`, `ping`), as SSE text.
    pub fn start(&self) -> Vec<Bytes> {
        self.convert
            .start()
            .iter()
            .map(|e| Bytes::from(e.to_sse()))
            .collect()
    }

    /// Takes the next upstream chunk; returns the converted events as SSE text and whether the
    /// stream ended (`[DONE]` seen: the closing events are included), or why the conversion
    /// failed. The text converted before a failure is returned with it, so what reaches the
    /// client does not depend on how the upstream cut its stream into chunks.
    pub fn push(&mut self, chunk: &[u8]) -> (String, Result<bool, ConvertError>) {
        let mut out = String::new();
        for event in self.decoder.feed(chunk) {
            match self.convert.data(&event.data) {
                Ok(events) => out.extend(events.iter().map(StreamEvent::to_sse)),
                Err(e) => return (out, Err(e)),
            }
        }
        if self.decoder.overflowed() {
            return (out, Err(ConvertError::EventTooLarge(self.max_event())));
        }
        if !self.convert.is_done() {
            return (out, Ok(false));
        }
        match self.convert.finish() {
            Ok(events) => {
                out.extend(events.iter().map(StreamEvent::to_sse));
                (out, Ok(true))
            }
            Err(e) => (out, Err(e)),
        }
    }

    /// The closing events once the upstream stream ended, as SSE text.
    pub fn end(&mut self) -> Result<String, ConvertError> {
        Ok(self
            .convert
            .finish()?
            .iter()
            .map(StreamEvent::to_sse)
            .collect())
    }

    /// Usage so far.
    pub fn usage(&self) -> Usage {
        self.convert.usage()
    }

    /// The cap of one upstream event.
    fn max_event(&self) -> usize {
        self.decoder.max_event()
    }

    /// The memory its decoder holds for an unfinished upstream event.
    pub fn held_bytes(&self) -> usize {
        self.decoder.held_bytes()
    }
}

/// A streamed answer. Call [`ChatEventStream::next`] until it returns `Ok(None)`.
pub struct ChatEventStream {
    channel: String,
    inner: Inner,
    usage: Usage,
    /// The cap of one upstream event, for the failure that names it.
    max_event: usize,
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
                pausing: Deadline::default(),
                fail_after,
                sent: 0,
            },
            usage,
            max_event: DEFAULT_MAX_EVENT,
        }
    }

    /// A native upstream's stream, its events capped at `max_event` bytes.
    pub(crate) fn native(channel: &str, body: UpstreamBody, max_event: usize) -> ChatEventStream {
        ChatEventStream {
            channel: channel.to_owned(),
            inner: Inner::Native {
                body,
                cut: NativeCut::with_max_event(max_event),
            },
            usage: Usage::default(),
            max_event,
        }
    }

    /// A chat completions upstream's stream, converted, its events capped at `max_event`.
    pub(crate) fn converted(
        channel: &str,
        body: UpstreamBody,
        convert: ChatStream,
        max_event: usize,
    ) -> Self {
        let convert = Converter::with_max_event(convert, max_event);
        let queue = convert.start().into();
        let usage = convert.usage();
        ChatEventStream {
            channel: channel.to_owned(),
            inner: Inner::Converted {
                body,
                convert,
                queue,
                ended: false,
                failed: None,
            },
            usage,
            max_event,
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
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`ChatEventStream::next`] as a poll, for a caller that is a body itself: a stream
    /// relayed this way needs no future, and no allocation, per piece.
    pub fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamFailure>> {
        let channel = self.channel.as_str();
        let max_event = self.max_event;
        match &mut self.inner {
            Inner::Prepared {
                events,
                pause,
                pausing,
                fail_after,
                sent,
            } => {
                if events.is_empty() {
                    return Poll::Ready(Ok(None));
                }
                if *sent > 0 && !pause.is_zero() {
                    std::task::ready!(pausing.poll_for(*pause, cx));
                }
                if fail_after.is_some_and(|n| *sent >= n) {
                    events.clear();
                    return Poll::Ready(Err(StreamFailure::broken(channel, "simulated failure")));
                }
                *sent += 1;
                Poll::Ready(Ok(events.pop_front()))
            }
            Inner::Native { body, cut } => loop {
                if cut.overflowed() {
                    // The events before it went out with the last piece.
                    return Poll::Ready(Err(StreamFailure::too_large(channel, max_event)));
                }
                let chunk = match std::task::ready!(body.poll_chunk(cx)) {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        if cut.upstream_error() {
                            let mut failure =
                                StreamFailure::broken(channel, "the upstream sent an error event");
                            failure.reported = true;
                            return Poll::Ready(Err(failure));
                        }
                        if !cut.finished() {
                            return Poll::Ready(Err(StreamFailure::broken(
                                channel,
                                "the upstream stream ended before message_stop",
                            )));
                        }
                        return Poll::Ready(Ok(None));
                    }
                    Err(e) => return Poll::Ready(Err(StreamFailure::transport(channel, &e))),
                };
                if let Some(ready) = cut.push(chunk, &mut self.usage) {
                    return Poll::Ready(Ok(Some(ready)));
                }
            },
            Inner::Converted {
                body,
                convert,
                queue,
                ended,
                failed,
            } => loop {
                if let Some(bytes) = queue.pop_front() {
                    return Poll::Ready(Ok(Some(bytes)));
                }
                if let Some(failure) = failed.take() {
                    *ended = true;
                    return Poll::Ready(Err(failure));
                }
                if *ended {
                    return Poll::Ready(Ok(None));
                }
                let chunk = match std::task::ready!(body.poll_chunk(cx)) {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => {
                        let closing = match convert.end() {
                            Ok(closing) => closing,
                            Err(e) => return Poll::Ready(Err(StreamFailure::broken(channel, e))),
                        };
                        self.usage = convert.usage();
                        if !closing.is_empty() {
                            queue.push_back(Bytes::from(closing));
                        }
                        *ended = true;
                        continue;
                    }
                    Err(e) => return Poll::Ready(Err(StreamFailure::transport(channel, &e))),
                };
                let (out, outcome) = convert.push(&chunk);
                self.usage = convert.usage();
                if !out.is_empty() {
                    queue.push_back(Bytes::from(out));
                }
                match outcome {
                    Ok(done) => *ended = done,
                    Err(ConvertError::EventTooLarge(_)) => {
                        *failed = Some(StreamFailure::too_large(channel, max_event));
                    }
                    Err(e) => *failed = Some(StreamFailure::broken(channel, e)),
                }
            },
        }
    }
}

/// Reads usage, the end and errors out of one native event (its `data:` JSON).
fn read_native_event(text: &[u8], usage: &mut Usage, finished: &mut bool, error: &mut bool) {
    // The type and the usage (a `message_start`'s in its message) found by one scan, without a
    // tree of the rest; an event the scan cannot read so is parsed whole.
    let ([kind, _, usage_member], message_usage) =
        scan::members_within(text, ["type", "message", "usage"], Some((1, "usage")))
            .unwrap_or_default();
    // The kind's text compared as it is written: a kind written with an escape is read by the
    // parser below.
    let usage_at = match kind {
        Some(b"\"message_start\"") => message_usage,
        Some(b"\"message_delta\"") => usage_member,
        Some(b"\"message_stop\"") => {
            *finished = true;
            return;
        }
        Some(b"\"error\"") => {
            *error = true;
            return;
        }
        Some(other) if scan::plain_str(other).is_some() => return,
        _ => None,
    };
    match usage_at {
        Some(u) => apply_usage_text(u, usage),
        None => read_parsed_event(text, usage, finished, error),
    }
}

/// [`read_native_event`] on the event parsed whole.
fn read_parsed_event(data: &[u8], usage: &mut Usage, finished: &mut bool, error: &mut bool) {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match value.get("type").and_then(Value::as_str) {
        Some("message_start") => {
            if let Some(u) = value.pointer("/message/usage") {
                apply_usage(u, usage);
            }
        }
        Some("message_delta") => {
            if let Some(u) = value.get("usage") {
                apply_usage(u, usage);
            }
        }
        Some("message_stop") => *finished = true,
        Some("error") => *error = true,
        _ => {}
    }
}

/// The counts a usage object can give, in the order [`set_count`] takes them.
const COUNTS: [&str; 4] = [
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
];

fn set_count(usage: &mut Usage, which: usize, n: u64) {
    match which {
        0 => usage.input_tokens = n,
        1 => usage.output_tokens = n,
        2 => usage.cache_creation_input_tokens = n,
        _ => usage.cache_read_input_tokens = n,
    }
}

/// The counts a usage object gives (each one only where it is a whole number).
fn apply_usage(u: &Value, usage: &mut Usage) {
    for (which, key) in COUNTS.iter().enumerate() {
        if let Some(n) = u.get(key).and_then(Value::as_u64) {
            set_count(usage, which, n);
        }
    }
}

/// [`apply_usage`] on the usage object's text, read by a scan: a count is taken where its
/// text is a whole number as JSON writes it (digits, no leading zero) that fits a `u64`. As
/// the scan checks the object's shape and not every token, a malformed object may still give
/// its well-formed counts, where a parse would give none.
fn apply_usage_text(u: &[u8], usage: &mut Usage) {
    let Some(found) = scan::members(u, COUNTS) else {
        return;
    };
    for (which, text) in found.into_iter().enumerate() {
        if let Some(n) = text.and_then(scan::whole_number) {
            set_count(usage, which, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use messages::MessagesRequest;
    use serde_json::json;

    use super::*;

    fn converter() -> Converter {
        let req: MessagesRequest = serde_json::from_value(json!({
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        Converter::new(ChatStream::new("msg_1", "m", &req, 3))
    }

    const TEXT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n";
    const ERROR: &str = "data: {\"error\":{\"message\":\"overloaded\"}}\n\n";

    /// The scan of a native event reads what parsing it whole reads: its usage, its end, an
    /// upstream error.
    #[test]
    fn native_events_read_by_a_scan_as_parsed_whole() {
        let events = [
            r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":12,"output_tokens":1,"cache_read_input_tokens":4}}}"#,
            r#"{"message":{"usage":{"input_tokens":7}},"type":"message_start"}"#,
            r#"{"type":"message_start","message":{"id":"m"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":-1,"input_tokens":2.5,"cache_creation_input_tokens":3}}"#,
            r#"{"type":"message_delta","usage":null}"#,
            r#"{"type":"message_stop"}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","usage":{"output_tokens":3}}"#,
            r#"{"type":"message_\u0073top"}"#,
            r#"{"type":7}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":0,"input_tokens":1e2,"cache_read_input_tokens":12.0,"cache_creation_input_tokens":18446744073709551616}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":{"a":1},"input_tokens":"3","cache_read_input_tokens":true,"cache_creation_input_tokens":[]}}"#,
            r#"{"type":"message_start","message":{"usage":{"output_tokens":18446744073709551615}},"usage":{"output_tokens":2}}"#,
            r#"{"type":"message_delta","usage":{"output_tokens":5},"message":{"usage":{"output_tokens":6}}}"#,
            r#"{}"#,
            r#"not json"#,
        ];
        for event in events {
            let read = |f: fn(&[u8], &mut Usage, &mut bool, &mut bool)| {
                let (mut usage, mut finished, mut error) = (Usage::default(), false, false);
                f(event.as_bytes(), &mut usage, &mut finished, &mut error);
                (usage, finished, error)
            };
            assert_eq!(read(read_native_event), read(read_parsed_event), "{event}");
        }
        let (mut usage, mut finished, mut error) = (Usage::default(), false, false);
        read_native_event(events[0].as_bytes(), &mut usage, &mut finished, &mut error);
        assert_eq!((usage.input_tokens, usage.cache_read_input_tokens), (12, 4));
        read_native_event(events[10].as_bytes(), &mut usage, &mut finished, &mut error);
        assert!(finished, "an escaped type is still read");
    }

    /// A native stream is handed out at event boundaries only, wherever its chunks end (a
    /// `\r\n` split across chunks included).
    #[test]
    fn native_pieces_end_at_event_boundaries() {
        let mut cut = NativeCut::new();
        let mut usage = Usage::default();
        let mut push = |chunk: &'static [u8]| cut.push(Bytes::from_static(chunk), &mut usage);
        assert_eq!(push(b"event: ping\r"), None);
        assert_eq!(push(b"\ndata: {}"), None);
        let piece = push(b"\r\n\r");
        assert_eq!(
            piece.as_deref(),
            Some(&b"event: ping\r\ndata: {}\r\n\r"[..])
        );
        assert_eq!(push(b"\nevent: x\r").as_deref(), Some(&b"\n"[..]));
        assert_eq!(push(b"\n"), None);
        assert_eq!(
            push(b"data: {}\n\nevent: y").as_deref(),
            Some(&b"event: x\r\ndata: {}\n\n"[..])
        );
        // Nothing held: a whole chunk goes out as it came, its start up to the last boundary.
        let whole = Bytes::from_static(b"\ndata: {}\n\n");
        let mut fresh = NativeCut::new();
        let out = fresh.push(whole.clone(), &mut usage).unwrap();
        assert_eq!(out.as_ptr(), whole.as_ptr(), "not copied");
        let out = fresh.push(Bytes::from_static(b"data: 1\n\ndata: 2"), &mut usage);
        assert_eq!(out.as_deref(), Some(&b"data: 1\n\n"[..]));
        assert_eq!(
            fresh
                .push(Bytes::from_static(b"\n\n"), &mut usage)
                .as_deref(),
            Some(&b"data: 2\n\n"[..])
        );
    }

    /// However a native stream is cut into chunks, the pieces handed out are the stream, and
    /// its usage and end are read the same.
    #[test]
    fn native_stream_read_the_same_at_every_cut() {
        let stream: &[u8] = b"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\r\n\r\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"h\xc3\xa9\"}}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\n\
            data: \"usage\":{\"output_tokens\":9}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let read = |cuts: &[usize]| {
            let (mut cut, mut usage, mut out) = (NativeCut::new(), Usage::default(), Vec::new());
            let mut start = 0;
            for &end in cuts.iter().chain([&stream.len()]) {
                let chunk = Bytes::copy_from_slice(&stream[start..end]);
                if let Some(piece) = cut.push(chunk, &mut usage) {
                    out.extend_from_slice(&piece);
                }
                start = end;
            }
            (out, usage, cut.finished())
        };
        let (out, usage, finished) = read(&[]);
        assert_eq!(out, stream);
        assert_eq!((usage.input_tokens, usage.output_tokens), (12, 9));
        assert!(finished);
        for a in 0..=stream.len() {
            for b in (a..=stream.len()).step_by(7) {
                assert_eq!(read(&[a, b]), (out.clone(), usage, true), "cuts {a} {b}");
            }
        }
    }

    /// A native event that never ends: the events before it go out (with the piece that
    /// completed them), the cut never holds more than the cap's bytes twice over (held back,
    /// and decoded), overflows once the event passes it, and then holds and hands out nothing.
    #[test]
    fn a_native_event_past_the_cap_overflows_the_cut() {
        const CAP: usize = 64 * 1024;
        let mut cut = NativeCut::with_max_event(CAP);
        let mut usage = Usage::default();
        let start: &[u8] = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\nevent: content_block_delta\n";
        let out = cut.push(Bytes::from_static(start), &mut usage).unwrap();
        assert!(out.ends_with(b"}}}\n\n"), "{out:?}");
        assert_eq!(usage.input_tokens, 5);
        let piece = Bytes::from("data: xxxxxxxx\n".repeat(512));
        let mut fed = "event: content_block_delta\n".len();
        while !cut.overflowed() {
            assert_eq!(cut.push(piece.clone(), &mut usage), None);
            fed += piece.len();
            assert!(cut.held_bytes() <= 4 * CAP, "{} held", cut.held_bytes());
            assert!(fed <= CAP + piece.len(), "{fed} fed without overflowing");
        }
        assert!(fed > CAP);
        assert_eq!(cut.held_bytes(), 0);
        let after = Bytes::from_static(b"\n\nevent: x\ndata: {}\n\n");
        assert_eq!(cut.push(after, &mut usage), None);
        // Whole events in the piece that overflows, and held ones before it, still go out.
        for held_first in [false, true] {
            let mut cut = NativeCut::with_max_event(CAP);
            let mut piece = Vec::new();
            if held_first {
                assert_eq!(cut.push(Bytes::from_static(b"data: 1"), &mut usage), None);
                piece.extend_from_slice(b"\n\n");
            }
            piece.extend_from_slice(b"data: 2\n\n");
            piece.extend_from_slice("data: z\n".repeat(CAP).as_bytes());
            let out = cut.push(Bytes::from(piece), &mut usage);
            assert!(cut.overflowed());
            let expected: &[u8] = if held_first {
                b"data: 1\n\ndata: 2\n\n"
            } else {
                b"data: 2\n\n"
            };
            assert_eq!(out.as_deref(), Some(expected));
        }
    }

    /// A chat completions event that never ends: what converted before it goes out, then the
    /// conversion fails as too large.
    #[test]
    fn a_converted_event_past_the_cap_fails_the_conversion() {
        let req: MessagesRequest = serde_json::from_value(json!({
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let mut convert = Converter::with_max_event(ChatStream::new("msg_1", "m", &req, 3), 4096);
        let (out, outcome) = convert.push(TEXT.as_bytes());
        assert_eq!(outcome, Ok(false));
        assert!(out.contains("partial"));
        let flood = "data: {\"choices\":[]}\n".repeat(400);
        let (out, outcome) = convert.push(flood.as_bytes());
        assert_eq!(out, "");
        assert_eq!(outcome, Err(ConvertError::EventTooLarge(4096)));
        assert!(convert.held_bytes() == 0);
    }

    /// What converted before a failure is handed out with it, whether it came in the same
    /// chunk as the failure or in an earlier one.
    #[test]
    fn text_before_a_failure_is_kept_whatever_the_chunking() {
        let mut whole = converter();
        let (out, outcome) = whole.push(format!("{TEXT}{ERROR}").as_bytes());
        assert!(outcome.is_err());
        let mut split = converter();
        let (first, ok) = split.push(TEXT.as_bytes());
        assert_eq!(ok, Ok(false));
        let (second, outcome) = split.push(ERROR.as_bytes());
        assert!(outcome.is_err());
        assert!(first.contains("partial"), "{first}");
        assert_eq!(out, format!("{first}{second}"));
    }
}
