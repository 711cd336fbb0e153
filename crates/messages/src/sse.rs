//! Server-sent events: an encoder and an incremental decoder.
//!
//! The decoder follows the HTML living standard's parsing rules: lines end at `\r\n`, `\n` or
//! `\r` (a `\r\n` split across two chunks is one line end), a leading byte order mark is
//! skipped, `:` lines are comments, a field without a colon has an empty value, one space after
//! the colon is dropped, and an empty line dispatches the event. An event split across any
//! chunk boundary (even inside a UTF-8 character) decodes the same as when whole.
//!
//! It is bounded: one event (all its lines, comments included) may take at most
//! [`DEFAULT_MAX_EVENT`] bytes (or what [`SseDecoder::with_max_event`] says). Past it the
//! decoder has *overflowed*: it lets go of what it held, reads nothing more, and says so
//! ([`SseDecoder::overflowed`]); the stream is to end with an error. So neither its buffers
//! nor a consumer holding back the bytes of an unfinished event ([`SseDecoder::pending_bytes`])
//! ever hold more than the cap, whatever an upstream sends.

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

/// An event as it completes, borrowed from the chunk fed (a plain event, read where it lies) or
/// from the decoder's buffers: what [`SseDecoder::feed_with`] hands its callback, with no copy
/// and no UTF-8 check of its own.
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
    /// The most bytes one event may take, its empty line included.
    max_event: usize,
    /// An event went past `max_event`: nothing more is read.
    overflowed: bool,
}

/// The default cap of one event, all its lines together: 16 MiB.
pub const DEFAULT_MAX_EVENT: usize = 16 * 1024 * 1024;

impl SseDecoder {
    /// A decoder with the default cap of one event ([`DEFAULT_MAX_EVENT`]).
    pub fn new() -> SseDecoder {
        SseDecoder::with_max_event(DEFAULT_MAX_EVENT)
    }

    /// A decoder whose events may take at most `max_event` bytes each (at least 1).
    pub fn with_max_event(max_event: usize) -> SseDecoder {
        SseDecoder {
            max_event: max_event.max(1),
            ..SseDecoder::default()
        }
    }

    /// The most bytes one event may take.
    pub fn max_event(&self) -> usize {
        self.max_event
    }

    /// Whether an event went past the cap: the decoder then holds nothing and reads nothing
    /// more, and the stream is to end with an error.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The bytes of the unfinished event the decoder holds (its name, its data lines so far,
    /// the line under way): at most the cap.
    pub fn buffered_bytes(&self) -> usize {
        self.line.len() + self.event.len() + self.data.len()
    }

    /// The memory the decoder's buffers take now (their capacity): at most twice the cap.
    pub fn held_bytes(&self) -> usize {
        self.line.capacity() + self.event.capacity() + self.data.capacity()
    }

    /// Past the cap: what was held is let go, and nothing more is read. `pending` stays the
    /// bytes since the last boundary, so a consumer still hands out the events before it.
    fn overflow(&mut self) {
        self.overflowed = true;
        self.line = Vec::new();
        self.event = Vec::new();
        self.data = Vec::new();
        self.has_event = false;
        self.has_data = false;
        self.after_cr = false;
    }

    /// Decodes `chunk`, returning the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.feed_with(chunk, |event| out.push(event.to_event()));
        out
    }

    /// Decodes `chunk`, handing each event it completes to `emit` where it lies: in `chunk`
    /// for an event of the plainest form met at a boundary, else in the decoder's buffers (no
    /// allocation once they have grown to the stream's events).
    pub fn feed_with(&mut self, chunk: &[u8], mut emit: impl FnMut(RawEvent<'_>)) {
        if self.overflowed {
            return;
        }
        let mut bytes = chunk;
        if !self.started && self.line.is_empty() && bytes.first().is_some_and(|&b| b != 0xEF) {
            // No byte order mark can open this stream: nothing to look for or hold back.
            self.started = true;
        }
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
        if self.pending == 0 && self.line.is_empty() {
            bytes = &bytes[self.plain_events(bytes, &mut emit)..];
        }
        self.pending += bytes.len();
        self.scan(bytes, &mut emit);
    }

    /// At an event boundary: the complete events at the front of `bytes` that have the plainest
    /// form (an `event:` line or none, one `data:` line and an empty line, each line ended by
    /// `\n` alone), handed to `emit` where they lie, without a copy. Returns the bytes they
    /// took; the decoder is at a boundary after them, as before, and reads the rest line by line.
    fn plain_events(&mut self, bytes: &[u8], emit: &mut impl FnMut(RawEvent<'_>)) -> usize {
        // A `\r` ends a line too: only the bytes before the first one are read here.
        let plain = &bytes[..memchr::memchr(b'\r', bytes).unwrap_or(bytes.len())];
        let mut at = 0;
        while let Some(found) = plain_event(&plain[at..], self.max_event) {
            emit(RawEvent {
                event: found.event,
                data: found.data,
                id: self.id.as_deref(),
                retry: self.retry.take(),
            });
            at += found.len;
        }
        at
    }

    /// Reads `bytes` line by line; `self.pending` already counts them. An event whose bytes so
    /// far (its lines up to the one that just ended, or the unended tail) go past the cap
    /// overflows the decoder.
    fn scan(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(RawEvent<'_>)) {
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', bytes) {
            let (head, rest) = bytes.split_at(pos);
            // The event's bytes up to this line's end: what is pending less what follows it.
            if self.pending.saturating_sub(rest.len() - 1) > self.max_event {
                self.overflow();
                return;
            }
            // A line that began in an earlier chunk is put together in `held`; one that lies
            // whole in this chunk is read where it is. `held` keeps its buffer for the next.
            let mut held = std::mem::take(&mut self.line);
            let line: &[u8] = if held.is_empty() {
                head
            } else {
                extend_within(&mut held, head, self.max_event);
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
            self.line = reuse(held);
        }
        if self.pending > self.max_event {
            self.overflow();
            return;
        }
        extend_within(&mut self.line, bytes, self.max_event);
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
                extend_within(&mut self.event, value, self.max_event);
                self.has_event = true;
            }
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                extend_within(&mut self.data, value, self.max_event);
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
        self.event = reuse(std::mem::take(&mut self.event));
        self.data = reuse(std::mem::take(&mut self.data));
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

/// The largest buffer kept for the next line or event: one a rare large event grew is let go,
/// so that a stream does not hold its size for the rest of its life.
const KEEP: usize = 64 * 1024;

/// `buf` emptied for reuse, or a new one when it grew past [`KEEP`].
fn reuse(mut buf: Vec<u8>) -> Vec<u8> {
    if buf.capacity() > KEEP {
        return Vec::new();
    }
    buf.clear();
    buf
}

/// Appends `bytes` to `buf`, growing it (when it must) by doubling but never past `cap`
/// unless the bytes need more: a buffer of a capped event holds about the cap, not twice it.
fn extend_within(buf: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    let need = buf.len() + bytes.len();
    if need > buf.capacity() {
        let grown = need.max(buf.capacity() * 2).min(cap.max(need));
        buf.reserve_exact(grown - buf.len());
    }
    buf.extend_from_slice(bytes);
}

/// An event of the plainest form, as it lies in the input.
struct Plain<'a> {
    event: Option<&'a [u8]>,
    data: &'a [u8],
    /// Its bytes, the empty line that ends it included.
    len: usize,
}

/// The event at the front of `bytes` when it is complete, has the plainest form (see
/// [`SseDecoder::plain_events`]) and takes at most `max_event` bytes (a longer one is left to
/// the line-by-line reading, which overflows on it).
fn plain_event(bytes: &[u8], max_event: usize) -> Option<Plain<'_>> {
    let bytes = &bytes[..bytes.len().min(max_event)];
    let (mut line, mut at) = plain_line(bytes, 0)?;
    let event = field(line, b"event");
    if event.is_some() {
        (line, at) = plain_line(bytes, at)?;
    }
    let data = field(line, b"data")?;
    // The empty line that dispatches it.
    (bytes.get(at) == Some(&b'\n')).then_some(Plain {
        event,
        data,
        len: at + 1,
    })
}

/// The line that starts at `from` (without its `\n`) and where the next one starts, if it ends
/// within `bytes`.
fn plain_line(bytes: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let len = memchr::memchr(b'\n', bytes.get(from..)?)?;
    Some((&bytes[from..from + len], from + len + 1))
}

/// The value of `line` when it is field `name` (one space after the colon dropped).
fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let value = line.strip_prefix(name)?.strip_prefix(b":")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
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

    /// Plain events (read where they lie, at a boundary) among the other forms: the same events
    /// under any two cuts, and after every piece the bytes pending are those since the last
    /// boundary of the input.
    #[test]
    fn plain_events_decode_as_the_others_and_leave_the_right_bytes_pending() {
        let input: &[u8] = b"event: a\ndata: 1\n\ndata:2\n\nevent:\ndata: {\"x\":3}\n\n: note\n\n\
            event: b\ndata: 4\nid: 9\n\nevent: c\ndata: 5\n\nevent: d\ndata: 6\r\n\r\n\
            event: e\nevent: f\ndata: 7\n\ndata: 8\ndata: 9\n\nevent: g\ndata: 10\n\n";
        let whole = decode_in_pieces(input, &[]);
        let expected: Vec<(Option<&str>, &str, Option<&str>)> = vec![
            (Some("a"), "1", None),
            (None, "2", None),
            (Some(""), "{\"x\":3}", None),
            (Some("b"), "4", Some("9")),
            (Some("c"), "5", Some("9")),
            (Some("d"), "6", Some("9")),
            (Some("f"), "7", Some("9")),
            (None, "8\n9", Some("9")),
            (Some("g"), "10", Some("9")),
        ];
        let got: Vec<_> = whole
            .iter()
            .map(|e| (e.event.as_deref(), e.data.as_str(), e.id.as_deref()))
            .collect();
        assert_eq!(got, expected);
        // Where each event's empty line ends (and an empty line with no event).
        let boundaries: Vec<usize> = {
            let text = std::str::from_utf8(input).unwrap();
            let mut ends = Vec::new();
            let mut from = 0;
            for sep in [
                "\n\n", "\n\n", "\n\n", "\n\n", "\n\n", "\n\n", "\r\n\r\n", "\n\n", "\n\n", "\n\n",
            ] {
                let at = from + text[from..].find(sep).unwrap() + sep.len();
                if sep == "\r\n\r\n" {
                    // The second `\r` ends the empty line already; its `\n` follows a boundary.
                    ends.push(at - 1);
                }
                ends.push(at);
                from = at;
            }
            ends
        };
        let pending_at = |p: usize| {
            p - boundaries
                .iter()
                .copied()
                .filter(|&b| b <= p)
                .max()
                .unwrap_or(0)
        };
        for a in 0..=input.len() {
            for b in a..=input.len() {
                let mut decoder = SseDecoder::new();
                let mut events = Vec::new();
                let mut start = 0;
                for cut in [a, b, input.len()] {
                    events.extend(decoder.feed(&input[start..cut]));
                    assert_eq!(
                        decoder.pending_bytes(),
                        pending_at(cut),
                        "cuts {a} {b}, after {cut}"
                    );
                    start = cut;
                }
                assert_eq!(events, whole, "cuts {a} {b}");
            }
        }
    }

    #[test]
    fn plain_events_are_read_where_they_lie() {
        // Up to a form they do not take (a comment here): the rest is read line by line.
        let chunk = b"event: a\ndata: 1\n\ndata: 2\n\n: x\n\nevent: b\ndata: 3\n\n";
        let range = chunk.as_ptr_range();
        let mut inside = Vec::new();
        SseDecoder::new().feed_with(chunk, |e| inside.push(range.contains(&e.data.as_ptr())));
        assert_eq!(inside, [true, true, false]);
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

    /// 40 MB of `data:` lines that never end their event, fed as an upstream sends them: the
    /// decoder overflows as soon as the event passes the cap, its buffers never take more
    /// than twice the cap on the way, and it holds nothing and reads nothing after.
    #[test]
    fn an_event_that_never_ends_overflows_at_the_cap() {
        const CAP: usize = 1 << 20;
        let mut d = SseDecoder::with_max_event(CAP);
        // Events before it are decoded and not counted against it.
        assert_eq!(d.feed(b"event: a\ndata: 1\n\n").len(), 1);
        let chunk = format!("data: {}\n", "x".repeat(1000)).repeat(64);
        let mut fed = 0;
        while fed < 40_000_000 {
            assert!(d.feed(chunk.as_bytes()).is_empty());
            fed += chunk.len();
            assert_eq!(d.overflowed(), fed > CAP, "after {fed} bytes");
            assert!(d.buffered_bytes() <= CAP, "{} buffered", d.buffered_bytes());
            assert!(
                d.held_bytes() <= 2 * CAP,
                "{} held after {fed}",
                d.held_bytes()
            );
        }
        assert_eq!((d.buffered_bytes(), d.held_bytes()), (0, 0));
        // Nothing more is read, not even a whole event.
        assert!(d.feed(b"\n\nevent: b\ndata: 2\n\n").is_empty());
        assert!(d.overflowed());
    }

    /// The cap holds on every path: one line with no end, an event of many small lines, a
    /// plain event whole in one chunk; an event at the cap still decodes.
    #[test]
    fn every_form_of_an_oversized_event_overflows() {
        const CAP: usize = 4096;
        let over = |input: &[u8]| {
            let mut d = SseDecoder::with_max_event(CAP);
            d.feed(input);
            d.overflowed()
        };
        let long = "y".repeat(CAP);
        assert!(
            over(format!("data: {long}").as_bytes()),
            "a line with no end"
        );
        assert!(
            over(format!("data: {long}\n\n").as_bytes()),
            "a plain event"
        );
        assert!(over(format!("event: e\r\ndata: {long}\r\n\r\n").as_bytes()));
        assert!(over(": comment\n".repeat(CAP / 8).as_bytes()), "comments");
        assert!(over("data: z\n".repeat(CAP / 4).as_bytes()), "many lines");
        // At the cap, and split anywhere: decoded.
        let fits = format!("data: {}\n\n", "y".repeat(CAP - 8));
        assert_eq!(fits.len(), CAP);
        for cut in [0, 1, CAP / 2, CAP - 1] {
            let mut d = SseDecoder::with_max_event(CAP);
            let mut events = d.feed(&fits.as_bytes()[..cut]);
            events.extend(d.feed(&fits.as_bytes()[cut..]));
            assert!(!d.overflowed(), "cut {cut}");
            assert_eq!(events.len(), 1, "cut {cut}");
            assert_eq!(events[0].data.len(), CAP - 8);
        }
        // The events before an oversized one in the same chunk are handed out, and the bytes
        // pending are those since the last boundary, for a consumer to hand out the rest.
        let mut d = SseDecoder::with_max_event(CAP);
        let input = format!("data: 1\n\ndata: {long}");
        assert_eq!(d.feed(input.as_bytes()).len(), 1);
        assert!(d.overflowed());
        assert_eq!(d.pending_bytes(), input.len() - "data: 1\n\n".len());
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
