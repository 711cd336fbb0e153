//! Finding top-level members of a JSON object's text (and a member of one of them) without
//! decoding the rest: strings are skipped by their quotes and escapes, nesting by its brackets.
//! For reading a small part of a large answer or event that is passed on as it came.

/// The text of the value of `key` in the object `text`, if `text` is an object that has it
/// (the first such member). `None` also where the scan meets something that is not JSON
/// (the object's members are followed to its end), or a member name with an escape in it (a
/// caller that must see those parses the whole text). The scan checks the shape, not every
/// token: the value found is for a parser to read.
pub fn member<'a>(text: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let [found] = members(text, [key])?;
    found
}

/// The text of the values of several `keys` in the object `text`, in one pass: as
/// [`member`] for each key, or `None` where [`member`] would find nothing for any key because
/// `text` is not an object or the scan meets something that is not JSON.
pub fn members<'a, const N: usize>(text: &'a [u8], keys: [&str; N]) -> Option<Found<'a, N>> {
    let (found, _) = members_within(text, keys, None)?;
    Some(found)
}

/// The values found for each key asked for, in the keys' order.
pub type Found<'a, const N: usize> = [Option<&'a [u8]>; N];

/// [`members`], and the value of member `inner` of the object that is the value of
/// `keys[outer]`, read in the same pass: that object is scanned once, not once to skip it and
/// again to find `inner` in it. The inner value is as [`member`] on the outer value finds it.
pub fn members_within<'a, const N: usize>(
    text: &'a [u8],
    keys: [&str; N],
    within: Option<(usize, &str)>,
) -> Option<(Found<'a, N>, Option<&'a [u8]>)> {
    let at = skip_space(text, 0);
    let (found, inner, end) = object(text, at, keys, within)?;
    (skip_space(text, end) == text.len()).then_some((found, inner))
}

/// The members of the object that opens at `at` (see [`members_within`]), and just past its
/// closing brace.
fn object<'a, const N: usize>(
    text: &'a [u8],
    mut at: usize,
    keys: [&str; N],
    within: Option<(usize, &str)>,
) -> Option<(Found<'a, N>, Option<&'a [u8]>, usize)> {
    let mut found = [None; N];
    let mut inner = None;
    if text.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_space(text, at + 1);
    if text.get(at) == Some(&b'}') {
        return None;
    }
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let (name_end, escaped) = string_end_escaped(text, at)?;
        if escaped {
            return None;
        }
        let name = &text[at + 1..name_end - 1];
        at = skip_space(text, name_end);
        if text.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_space(text, at + 1);
        let wanted = keys
            .iter()
            .position(|k| k.as_bytes() == name)
            .filter(|&i| found[i].is_none());
        let end = match (wanted, within) {
            // The first outer value, when an object: read for `inner` as it is skipped (an
            // object the scan cannot read has no inner value, as for `member`).
            (Some(i), Some((outer, key))) if i == outer && text.get(start) == Some(&b'{') => {
                match object(text, start, [key], None) {
                    Some(([value], _, end)) => {
                        inner = value;
                        end
                    }
                    None => value_end(text, start)?,
                }
            }
            _ => value_end(text, start)?,
        };
        if let Some(i) = wanted {
            found[i] = Some(&text[start..end]);
        }
        at = skip_space(text, end);
        match text.get(at) {
            Some(b',') => at = skip_space(text, at + 1),
            Some(b'}') => return Some((found, inner, at + 1)),
            _ => return None,
        }
    }
}

/// The text of a JSON string without its quotes, where it has no escape (most names and
/// kinds): read without a parser. `None` for anything else.
pub fn plain_str(value: &[u8]) -> Option<&str> {
    let inner = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    if inner.iter().any(|&b| b == b'\\' || b == b'"' || b < 0x20) {
        return None;
    }
    std::str::from_utf8(inner).ok()
}

/// A whole number as JSON writes it (digits, no leading zero) that fits a `u64`, read from
/// its text; `None` for anything else.
pub fn whole_number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || (text.len() > 1 && text[0] == b'0') {
        return None;
    }
    text.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn skip_space(text: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = text.get(at) {
        at += 1;
    }
    at
}

/// Just past the closing quote of the string that opens at `at`.
fn string_end(text: &[u8], at: usize) -> Option<usize> {
    string_end_escaped(text, at).map(|(end, _)| end)
}

/// [`string_end`], and whether the string has an escape in it.
fn string_end_escaped(text: &[u8], at: usize) -> Option<(usize, bool)> {
    let mut i = at + 1;
    let mut escaped = false;
    // Most strings (names, kinds, ids) are short: read eight bytes at a time for a quote or
    // a backslash, a long one by memchr.
    let short = text.len().min(i + 32);
    while i + 8 <= short {
        let word = u64::from_le_bytes(text[i..i + 8].try_into().ok()?);
        let found = has_byte(word, b'"') | has_byte(word, b'\\');
        if found == 0 {
            i += 8;
            continue;
        }
        i += (found.trailing_zeros() / 8) as usize;
        if text[i] == b'"' {
            return Some((i + 1, escaped));
        }
        // An escape: the next byte is escaped, whatever it is.
        escaped = true;
        i += 2;
    }
    while i < short {
        match text[i] {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => i += 1,
        }
    }
    loop {
        i += memchr::memchr2(b'"', b'\\', text.get(i..)?)?;
        if text[i] == b'"' {
            return Some((i + 1, escaped));
        }
        escaped = true;
        i += 2;
    }
}

/// The high bit of each byte of `word` that equals `byte` (and maybe of bytes after the
/// first such one: only the lowest bit set is sure).
fn has_byte(word: u64, byte: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & (ONES << 7)
}

/// What [`value_end`] stops at inside an object or array: quotes and brackets.
const STRUCTURE: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'{' as usize] = true;
    table[b'[' as usize] = true;
    table[b'}' as usize] = true;
    table[b']' as usize] = true;
    table
};

/// Just past the value that starts at `at`.
fn value_end(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at)? {
        b'"' => string_end(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                while !STRUCTURE[usize::from(*text.get(i)?)] {
                    i += 1;
                }
                match text[i] {
                    b'"' => {
                        i = string_end(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = text[at..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(text.len() - at);
            (len > 0).then_some(at + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of the string at the front of `text` and whether it has an escape, read a byte
    /// at a time: what the word-at-a-time reading must agree with.
    fn reference(text: &[u8]) -> Option<(usize, bool)> {
        let (mut i, mut escaped) = (1, false);
        while i < text.len() {
            match text[i] {
                b'"' => return Some((i + 1, escaped)),
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        None
    }

    #[test]
    fn strings_end_where_a_byte_at_a_time_reading_ends_them() {
        // Every length to past the word-at-a-time part, quotes and escapes at every place
        // (high bytes among them, which the word test must not take for a quote).
        let fillers: [&[u8]; 5] = [b"a", b"\\\"", b"\\\\", "é".as_bytes(), b"\xff"];
        for len in 0..80 {
            for (k, filler) in fillers.iter().enumerate() {
                for at in 0..len.max(1) {
                    let mut text = b"\"".to_vec();
                    for i in 0..len {
                        text.extend_from_slice(if i == at { filler } else { b"x" });
                    }
                    for tail in [&b"\""[..], b"\" , \"more\"", b""] {
                        let mut t = text.clone();
                        t.extend_from_slice(tail);
                        assert_eq!(
                            string_end_escaped(&t, 0),
                            reference(&t),
                            "len {len}, filler {k} at {at}, tail {tail:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn values_end_where_their_brackets_close() {
        let text = br#"{"a":[1,{"b":"}]\""}],"c":{"d":"{"}} ,"#;
        assert_eq!(value_end(text, 0), Some(text.len() - 2));
        assert_eq!(value_end(br#"["a""#, 0), None);
        assert_eq!(value_end(b"123,", 0), Some(3));
    }
}
