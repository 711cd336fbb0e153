//! The SSE decoder: the same events and the same pending tail whatever the chunking of the
//! input; after every chunk, the input up to the boundary it reports decodes (whole) to exactly
//! the events given so far; and an encoded event decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use messages::sse::{SseDecoder, SseEvent, encode};
use relay_fuzz::chunkings;

fn whole(data: &[u8]) -> (Vec<SseEvent>, usize) {
    let mut decoder = SseDecoder::new();
    let events = decoder.feed(data);
    (events, decoder.pending_bytes())
}

fuzz_target!(|data: &[u8]| {
    let (want, want_pending) = whole(data);
    for (n, chunks) in chunkings(data, 512).into_iter().enumerate() {
        let bytewise = n == 1 && data.len() > 1;
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut fed = 0;
        for chunk in chunks {
            let new = decoder.feed(chunk);
            fed += chunk.len();
            let pending = decoder.pending_bytes();
            assert!(pending <= fed, "pending {pending} of {fed} bytes fed");
            assert_eq!(decoder.at_boundary(), pending == 0);
            events.extend(new);
            if !bytewise {
                let (prefix_events, prefix_pending) = whole(&data[..fed - pending]);
                assert_eq!(
                    prefix_events,
                    events,
                    "events up to the boundary at {}",
                    fed - pending
                );
                assert_eq!(
                    prefix_pending,
                    0,
                    "the reported boundary at {} is none",
                    fed - pending
                );
            }
        }
        assert_eq!(events, want, "events, chunking {n}");
        assert_eq!(
            decoder.pending_bytes(),
            want_pending,
            "pending bytes, chunking {n}"
        );
    }

    // An encoded event decodes to itself: the first line is the name, the rest the data.
    let text = String::from_utf8_lossy(data);
    let (name, payload) = text.split_once('\n').unwrap_or((&text, ""));
    if !name.contains('\r') {
        let payload = payload.replace('\r', "");
        let (events, pending) = whole(encode(Some(name), &payload).as_bytes());
        let expected = SseEvent {
            event: Some(name.to_owned()),
            data: payload,
            id: None,
            retry: None,
        };
        assert_eq!(events, vec![expected]);
        assert_eq!(pending, 0);
    }
});
