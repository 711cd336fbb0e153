//! Server-sent events: an encoder and an incremental decoder.
//!
//! The decoder follows the HTML living standard's parsing rules: lines end at `\r\n`, `\n` or
//! `\r` (a `\r\n` split across two chunks is one line end), a leading byte order mark is
//! skipped, `:` lines are comments, a field without a colon has an empty value, one space after
//! the colon is dropped, and an empty line dispatches the event. An event split across any
//! chunk boundary (even inside a UTF-8 character) decodes the same as when whole.

/// One decoded event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when the event had none.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    pub id: Option<String>,
    pub retry: Option<u64>,
}

/// `event: <name>\ndata: <line>\n...\n\n`; a multi-line `data` gets one `data:` line per line.
pub fn encode(event: Option<&str>, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + 32);
    if let Some(name) = event {
        out.push_str("event: ");
        out.push_str(name);
        out.push('\n');
    }
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.strip_suffix('\r').unwrap_or(line));
        out.push('\n');
    }
    out.push('\n');
    out
}

/// An event as the decoder holds it when it completes, borrowed from the decoder: what
/// [`SseDecoder::feed_with`] hands its callback, with no copy and no UTF-8 check of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEvent<'a> {
    /// The `event:` field's bytes; `None` when the event had none.
    pub event: Option<&'a [u8]>,
    /// The `data:` lines' bytes joined with `\n`.
    pub data: &'a [u8],
    pub id: Option<&'a str>,
    pub retry: Option<u64>,
}

impl RawEvent<'_> {
    /// The event with its text made UTF-8 (an invalid sequence becomes U+FFFD).
    pub fn to_event(&self) -> SseEvent {
        SseEvent {
            event: self.event.map(|e| String::from_utf8_lossy(e).into_owned()),
            data: String::from_utf8_lossy(self.data).into_owned(),
            id: self.id.map(str::to_owned),
            retry: self.retry,
        }
    }
}

/// An incremental decoder: feed it chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` starting the next one belongs to that line end.
    after_cr: bool,
    /// Whether the stream's first bytes (a possible BOM) were looked at.
    started: bool,
    /// The `event:` field of the event being read; `has_event` tells an empty one from none.
    event: Vec<u8>,
    has_event: bool,
    data: Vec<u8>,
    has_data: bool,
    id: Option<String>,
    retry: Option<u64>,
    /// Bytes fed since the last empty line (an event boundary).
    pending: usize,
    /// The longest line accepted; longer lines are cut (a guard against a runaway upstream).
    max_line: usize,
}

/// Default cap of one line: 16 MiB.
const MAX_LINE: usize = 16 * 1024 * 1024;

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder {
            max_line: MAX_LINE,
            ..SseDecoder::default()
        }
    }

    /// Decodes `chunk`, returning the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.feed_with(chunk, |event| out.push(event.to_event()));
        out
    }

    /// Decodes `chunk`, handing each event it completes to `emit` as the decoder holds it
    /// (no allocation once the decoder's buffers have grown to the stream's events).
    pub fn feed_with(&mut self, chunk: &[u8], mut emit: impl FnMut(RawEvent<'_>)) {
        let mut bytes = chunk;
        if !self.started && !bytes.is_empty() {
            // A BOM may itself be split; wait for three bytes before deciding.
            let mut probe = std::mem::take(&mut self.line);
            probe.extend_from_slice(bytes);
            if probe.len() < 3 && b"\xEF\xBB\xBF".starts_with(&probe) {
                self.pending += chunk.len();
                self.line = probe;
                return;
            }
            self.started = true;
            let probe = probe
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(&probe)
                .to_vec();
            self.pending += chunk.len();
            self.scan(&probe, &mut emit);
            return;
        }
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                // The end of the line the previous chunk ended; it belongs to that event. Inside
                // an event it is pending like the rest of it; after an empty line the event was
                // complete already (and nothing is pending).
                if self.pending > 0 {
                    self.pending += 1;
                }
                bytes = rest;
            }
        }
        self.pending += bytes.len();
        self.scan(bytes, &mut emit);
    }

    fn scan(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(RawEvent<'_>)) {
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (head, rest) = bytes.split_at(pos);
            // A line that began in an earlier chunk is put together in `held`; one that lies
            // whole in this chunk is read where it is. `held` keeps its buffer for the next.
            let mut held = std::mem::take(&mut self.line);
            let line: &[u8] = if held.is_empty() {
                &head[..head.len().min(self.max_line)]
            } else {
                let room = self.max_line.saturating_sub(held.len());
                held.extend_from_slice(&head[..head.len().min(room)]);
                &held
            };
            let ended_cr = rest[0] == b'\r';
            bytes = &rest[1..];
            if ended_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if line.is_empty() {
                self.dispatch(emit);
                // What follows this line end belongs to the next event.
                self.pending = bytes.len();
            } else {
                self.line_done(line);
            }
            held.clear();
            self.line = held;
        }
        self.push_line_bytes(bytes);
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) {
        let room = self.max_line.saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn line_done(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
                self.has_event = true;
            }
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, emit: &mut impl FnMut(RawEvent<'_>)) {
        let has_event = std::mem::take(&mut self.has_event);
        let retry = self.retry.take();
        if std::mem::take(&mut self.has_data) {
            emit(RawEvent {
                event: has_event.then_some(&self.event[..]),
                data: &self.data,
                id: self.id.as_deref(),
                retry,
            });
        }
        self.event.clear();
        self.data.clear();
    }

    /// Bytes fed since the last event boundary: the tail of the input that belongs to an event
    /// not complete yet.
    pub fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// Whether the input so far ends exactly at an event boundary.
    pub fn at_boundary(&self) -> bool {
        self.pending == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(input: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            events.extend(decoder.feed(&input[start..cut]));
            start = cut;
        }
        events
    }

    #[test]
    fn every_split_decodes_the_same() {
        let input = "\u{feff}event: message_start\r\ndata: {\"a\":\"h\u{e9}llo\"}\r\n\r\n: comment\n\nevent: ping\ndata: {}\n\ndata: one\ndata: two\rid: 7\rretry: 10\r\revent: x\ndata\n\n"
            .as_bytes();
        let whole = decode_in_pieces(input, &[]);
        assert_eq!(whole.len(), 4, "{whole:?}");
        assert_eq!(whole[0].event.as_deref(), Some("message_start"));
        assert_eq!(whole[0].data, "{\"a\":\"h\u{e9}llo\"}");
        assert_eq!(whole[1].event.as_deref(), Some("ping"));
        assert_eq!(whole[2].event, None);
        assert_eq!(whole[2].data, "one\ntwo");
        assert_eq!(whole[2].id.as_deref(), Some("7"));
        assert_eq!(whole[2].retry, Some(10));
        assert_eq!(whole[3].data, "");
        for a in 0..=input.len() {
            for b in a..=input.len() {
                assert_eq!(decode_in_pieces(input, &[a, b]), whole, "cuts {a} {b}");
            }
        }
        // One byte at a time.
        let cuts: Vec<usize> = (1..input.len()).collect();
        assert_eq!(decode_in_pieces(input, &cuts), whole);
    }

    #[test]
    fn data_lines_around_an_event_line_decode_the_same() {
        // Data lines before and after the event's name, joined; lone ones; any two cuts.
        let input =
            b"data: a\nevent: late\ndata: b\ndata: c\n\ndata: solo\n\nevent: e\ndata: x\n\n";
        let whole = decode_in_pieces(input, &[]);
        assert_eq!(whole.len(), 3, "{whole:?}");
        assert_eq!(whole[0].event.as_deref(), Some("late"));
        assert_eq!(whole[0].data, "a\nb\nc");
        assert_eq!(whole[1].data, "solo");
        assert_eq!(whole[2].event.as_deref(), Some("e"));
        assert_eq!(whole[2].data, "x");
        for a in 0..=input.len() {
            for b in a..=input.len() {
                assert_eq!(decode_in_pieces(input, &[a, b]), whole, "cuts {a} {b}");
            }
        }
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        let mut d = SseDecoder::new();
        assert!(d.feed(b"event: a\ndata: 1\n").is_empty());
        assert!(!d.at_boundary());
        assert_eq!(d.feed(b"\n").len(), 1);
        assert!(d.at_boundary());
        assert!(d.feed(b"data: 2").is_empty());
        assert_eq!(d.pending_bytes(), 7);
    }

    /// A `\r\n` split after `\r` inside an event: the `\n` is pending like the rest of the
    /// event, as when the input comes whole (else a consumer cutting at the boundary hands out
    /// the first byte of an unfinished event).
    #[test]
    fn a_line_end_split_inside_an_event_is_pending() {
        let mut whole = SseDecoder::new();
        whole.feed(b"data: x\r\n");
        assert_eq!(whole.pending_bytes(), 9);
        let mut split = SseDecoder::new();
        split.feed(b"data: x\r");
        split.feed(b"\n");
        assert_eq!(split.pending_bytes(), 9);
        // After an empty line the event is complete: nothing pending either way.
        let mut split = SseDecoder::new();
        assert_eq!(split.feed(b"data: x\r\r").len(), 1);
        split.feed(b"\n");
        assert!(split.at_boundary());
        split.feed(b"data: y\r");
        split.feed(b"\ndata: z");
        assert_eq!(split.pending_bytes(), b"data: y\r\ndata: z".len());
    }

    #[test]
    fn encode_round_trips() {
        let text = encode(Some("e"), "line1\nline2");
        assert_eq!(text, "event: e\ndata: line1\ndata: line2\n\n");
        let events = SseDecoder::new().feed(text.as_bytes());
        assert_eq!(events[0].data, "line1\nline2");
        assert_eq!(encode(None, "x"), "data: x\n\n");
    }
}
