//! The MP4 probe of `crates/channels` over arbitrary bytes: never a panic; reading from memory
//! and through a buffered reader agree; a probed file has a positive, finite duration and a
//! four-character codec; and a `free` box appended at the top level changes nothing (boxes the
//! probe does not read are stepped over).
#![no_main]

use std::io::{BufReader, Cursor};

use channels::mp4probe::{probe, probe_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let got = probe_bytes(data);
    let buffered = probe(BufReader::with_capacity(7, Cursor::new(data)));
    assert_eq!(
        got.as_ref().map_err(|e| e.to_string()),
        buffered.as_ref().map_err(|e| e.to_string()),
        "in memory and buffered"
    );
    let Ok(info) = got else {
        return;
    };
    assert!(
        info.duration_secs.is_finite() && info.duration_secs > 0.0,
        "{info:?}"
    );
    assert_eq!(info.codec.chars().count(), 4, "{info:?}");
    assert!(!info.brands.is_empty(), "{info:?}");

    if !last_box_runs_to_end(data) {
        let mut longer = data.to_vec();
        longer.extend_from_slice(&[0, 0, 0, 12, b'f', b'r', b'e', b'e', 1, 2, 3, 4]);
        let again = probe_bytes(&longer).map_err(|e| e.to_string());
        assert_eq!(again, Ok(info), "a free box appended");
    }
});

/// Whether a top-level box has size 0 ("to the end of the file"), so appending grows it.
fn last_box_runs_to_end(data: &[u8]) -> bool {
    let mut pos = 0usize;
    while let Some(head) = data.get(pos..pos + 8) {
        let size = match u32::from_be_bytes([head[0], head[1], head[2], head[3]]) {
            0 => return true,
            1 => match data.get(pos + 8..pos + 16) {
                Some(b) => u64::from_be_bytes(b.try_into().unwrap_or_default()),
                None => return false,
            },
            n => u64::from(n),
        };
        match usize::try_from(size).ok().and_then(|s| pos.checked_add(s)) {
            Some(next) if size >= 8 => pos = next,
            _ => return false,
        }
    }
    false
}
