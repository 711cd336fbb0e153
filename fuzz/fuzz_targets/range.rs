//! The `Range` parser of `crates/server` (content.rs): any parsed range lies within the file,
//! `start <= end < len`; and a range written the way clients write it (`bytes=a-b`,
//! `bytes=a-`, `bytes=-n`) parses to exactly the bytes it names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_fuzz::Bytes;
use server::ground::content::{ByteRange, RangeAsk, parse_range};

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    // Small lengths are the interesting ones; sometimes a huge one.
    let len = match input.byte() {
        0 => input.u64(),
        n => u64::from(n) - 1,
    };
    let header = std::str::from_utf8(input.0).ok();
    if let RangeAsk::Part(ByteRange { start, end }) = parse_range(header, len) {
        assert!(
            start <= end && end < len,
            "{header:?} of {len}: {start}-{end}"
        );
    }

    let mut nums = Bytes(data);
    let (a, b) = (
        nums.u64() % len.saturating_add(3),
        nums.u64() % len.saturating_add(3),
    );
    let (first, last) = (a.min(b), a.max(b));
    let want = if first < len {
        RangeAsk::Part(ByteRange {
            start: first,
            end: last.min(len - 1),
        })
    } else {
        RangeAsk::Unsatisfiable
    };
    assert_eq!(
        parse_range(Some(&format!("bytes={first}-{last}")), len),
        want
    );
    let want = if first < len {
        RangeAsk::Part(ByteRange {
            start: first,
            end: len - 1,
        })
    } else {
        RangeAsk::Unsatisfiable
    };
    assert_eq!(parse_range(Some(&format!("bytes={first}-")), len), want);
    let want = match (a, len) {
        (0, _) | (_, 0) => RangeAsk::Unsatisfiable,
        (n, len) => RangeAsk::Part(ByteRange {
            start: len.saturating_sub(n),
            end: len - 1,
        }),
    };
    assert_eq!(parse_range(Some(&format!("bytes=-{a}")), len), want);
});
