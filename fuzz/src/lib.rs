//! Helpers shared by the fuzz targets in `fuzz_targets/`.
#![forbid(unsafe_code)]

/// Ways to cut `data` into chunks, for properties that must not depend on chunking: whole, one
/// byte at a time (for inputs up to `max_bytewise` bytes), and two pseudo-random cuttings
/// derived from the input itself (so a crash reproduces from its input file alone).
pub fn chunkings(data: &[u8], max_bytewise: usize) -> Vec<Vec<&[u8]>> {
    let mut out = vec![vec![data]];
    if data.len() <= max_bytewise {
        out.push(data.chunks(1).collect());
    }
    let mut seed = fnv(data) | 1;
    for max_chunk in [3usize, 17] {
        let mut chunks = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let take = (seed as usize % max_chunk + 1).min(rest.len());
            let (head, tail) = rest.split_at(take);
            chunks.push(head);
            rest = tail;
        }
        out.push(chunks);
    }
    out
}

/// FNV-1a over `data`.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A small deterministic generator for targets that derive values from their input.
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0, |n, _| n << 8 | u64::from(self.byte()))
    }
}
