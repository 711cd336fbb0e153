//! The chat stream converters of `crates/channels` (`Converter`: chat completions chunks to the
//! vendor's events; `NativeCut`: a native stream passed on, cut at event boundaries) over
//! arbitrary upstream bytes.
//!
//! Converted: the output is a well-formed event sequence (message_start, ping, blocks opened
//! one at a time with indexes 0, 1, 2..., deltas of the open block's type only, then
//! message_delta and message_stop; a prefix of that when the conversion failed), and the same
//! bytes and outcome whatever the chunking. Native: every piece handed out ends at an event
//! boundary, the pieces are the input up to its last boundary, and usage, end and error flags
//! do not depend on the chunking. Whole chat completions answers convert without panicking.
#![no_main]

use channels::chat::{Converter, NativeCut};
use libfuzzer_sys::fuzz_target;
use messages::openai::{ChatStream, from_chat_response};
use messages::{MessagesRequest, SseDecoder, Usage};
use relay_fuzz::chunkings;
use serde_json::{Value, json};

fn request() -> MessagesRequest {
    serde_json::from_value(json!({
        "model": "conv-chat",
        "max_tokens": 64,
        "stop_sequences": ["STOP"],
        "messages": [{"role": "user", "content": "hi"}],
    }))
    .expect("a fixed, valid request")
}

/// The converted output of one chunking and whether it ended well.
fn convert(chunks: &[&[u8]], req: &MessagesRequest) -> (Vec<u8>, Result<(), String>) {
    let mut converter = Converter::new(ChatStream::new("msg_fuzz", "conv-chat", req, 7));
    let mut out: Vec<u8> = converter.start().concat();
    for chunk in chunks {
        let (text, outcome) = converter.push(chunk);
        out.extend_from_slice(text.as_bytes());
        match outcome {
            Ok(true) => return (out, Ok(())),
            Ok(false) => {}
            Err(e) => return (out, Err(e.to_string())),
        }
    }
    match converter.end() {
        Ok(text) => {
            out.extend_from_slice(text.as_bytes());
            (out, Ok(()))
        }
        Err(e) => (out, Err(e.to_string())),
    }
}

/// Checks the vendor's event grammar over `bytes`; `complete` when the stream ended well.
fn check_events(bytes: &[u8], complete: bool) {
    let mut decoder = SseDecoder::new();
    let events = decoder.feed(bytes);
    assert!(decoder.at_boundary(), "output ends inside an event");
    let mut open: Option<(u64, String)> = None;
    let mut next_index = 0u64;
    let mut stopped = false;
    let mut delta_seen = false;
    for (i, event) in events.iter().enumerate() {
        let data: Value = serde_json::from_str(&event.data).expect("event data is JSON");
        let kind = data["type"].as_str().expect("event has a type");
        assert_eq!(event.event.as_deref(), Some(kind), "event name is its type");
        assert!(!stopped, "{kind} after message_stop");
        match (i, kind) {
            (0, "message_start") | (1, "ping") => continue,
            (0 | 1, other) => panic!("stream opens with {other}"),
            _ => {}
        }
        match kind {
            "ping" => {}
            "content_block_start" => {
                assert!(!delta_seen, "block after message_delta");
                assert!(open.is_none(), "block {next_index} opened inside {open:?}");
                assert_eq!(data["index"].as_u64(), Some(next_index), "block index");
                let block = data["content_block"]["type"].as_str().unwrap_or_default();
                assert!(matches!(block, "text" | "tool_use"), "block type {block}");
                open = Some((next_index, block.to_owned()));
                next_index += 1;
            }
            "content_block_delta" => {
                let (index, block) = open.as_ref().expect("delta outside a block");
                assert_eq!(
                    data["index"].as_u64(),
                    Some(*index),
                    "delta of a closed block"
                );
                let wanted = if block == "text" {
                    "text_delta"
                } else {
                    "input_json_delta"
                };
                assert_eq!(data["delta"]["type"].as_str(), Some(wanted), "delta type");
            }
            "content_block_stop" => {
                let (index, _) = open.take().expect("stop outside a block");
                assert_eq!(data["index"].as_u64(), Some(index), "stop of another block");
            }
            "message_delta" => {
                assert!(open.is_none(), "message_delta inside a block");
                assert!(!delta_seen, "two message_delta events");
                assert!(data["delta"]["stop_reason"].is_string(), "no stop_reason");
                delta_seen = true;
            }
            "message_stop" => {
                assert!(delta_seen, "message_stop without message_delta");
                stopped = true;
            }
            other => panic!("unexpected event {other}"),
        }
    }
    if complete {
        assert!(stopped, "a stream that ended well has message_stop");
    }
}

/// What a native pass-through handed out for one chunking, and what it read.
fn native(chunks: &[&[u8]], data: &[u8], check_cuts: bool) -> (Vec<u8>, Usage, bool, bool) {
    let mut cut = NativeCut::new();
    let mut usage = Usage::default();
    let mut out = Vec::new();
    for chunk in chunks {
        if let Some(ready) = cut.push(bytes::Bytes::copy_from_slice(chunk), &mut usage) {
            out.extend_from_slice(&ready);
            assert!(out.len() <= data.len());
            assert_eq!(out, &data[..out.len()], "pass-through changed the bytes");
            if check_cuts {
                let mut decoder = SseDecoder::new();
                decoder.feed(&out);
                assert!(decoder.at_boundary(), "a piece ends inside an event");
            }
        }
    }
    (out, usage, cut.finished(), cut.upstream_error())
}

fuzz_target!(|data: &[u8]| {
    let req = request();
    let ways = chunkings(data, 256);
    let (want, outcome) = convert(&ways[0], &req);
    check_events(&want, outcome.is_ok());
    for (n, chunks) in ways.iter().enumerate().skip(1) {
        let (got, got_outcome) = convert(chunks, &req);
        assert_eq!(
            got_outcome.is_ok(),
            outcome.is_ok(),
            "outcome, chunking {n}"
        );
        assert!(
            got == want,
            "converted bytes, chunking {n}:\n{}\n--- whole:\n{}",
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }

    let want = native(&ways[0], data, true);
    let mut decoder = SseDecoder::new();
    decoder.feed(data);
    assert_eq!(want.0.len(), data.len() - decoder.pending_bytes());
    for (n, chunks) in ways.iter().enumerate().skip(1) {
        let got = native(chunks, data, n != 1);
        assert_eq!(got, want, "native pass-through, chunking {n}");
    }

    if let Ok(body) = serde_json::from_slice::<Value>(data) {
        let _ = from_chat_response(&body, "msg_fuzz", "conv-chat", &req, 7);
    }
});
