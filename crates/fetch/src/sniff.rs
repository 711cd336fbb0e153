//! Magic-byte sniffing of reference media. Pure: no I/O, no allocation.
//!
//! The relay never trusts a file name, an extension or a `Content-Type`: what the bytes say is
//! what the file is.

use std::fmt;

use error_codes::ErrorCode;

/// How many leading bytes [`sniff`] and [`image_dimensions`] are designed to look at. Fetch at
/// least this many (e.g. with `Fetcher::fetch_prefix`) to sniff a file that is too big to read.
pub const SNIFF_LEN: usize = 64 * 1024;

/// What a reference is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    Image,
    Audio,
    Video,
}

impl MediaKind {
    /// The wire name (`image`, `audio`, `video`), as in an asset's `type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
        }
    }

    /// The error a reference of this kind gets when it cannot be fetched or is not one of the
    /// accepted formats (`invalid image`, `invalid audio`, `invalid video`).
    pub const fn invalid_code(self) -> ErrorCode {
        match self {
            MediaKind::Image => ErrorCode::InvalidImage,
            MediaKind::Audio => ErrorCode::InvalidAudio,
            MediaKind::Video => ErrorCode::InvalidVideo,
        }
    }

    /// The formats the relay accepts for this kind.
    pub const fn formats(self) -> &'static [Format] {
        match self {
            MediaKind::Image => &[Format::Jpeg, Format::Png, Format::Webp],
            MediaKind::Audio => &[Format::Mp3, Format::Wav, Format::M4a],
            MediaKind::Video => &[Format::Mp4, Format::Mov],
        }
    }
}

impl fmt::Display for MediaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A media format the relay accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Jpeg,
    Png,
    Webp,
    Mp3,
    Wav,
    M4a,
    Mp4,
    Mov,
}

impl Format {
    /// Every format, for tests and documentation.
    pub const ALL: [Format; 8] = [
        Format::Jpeg,
        Format::Png,
        Format::Webp,
        Format::Mp3,
        Format::Wav,
        Format::M4a,
        Format::Mp4,
        Format::Mov,
    ];

    /// The wire name, as in an asset's `format`: `jpeg`, `png`, `webp`, `mp3`, `wav`, `m4a`,
    /// `mp4`, `mov`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
            Format::Webp => "webp",
            Format::Mp3 => "mp3",
            Format::Wav => "wav",
            Format::M4a => "m4a",
            Format::Mp4 => "mp4",
            Format::Mov => "mov",
        }
    }

    pub const fn kind(self) -> MediaKind {
        match self {
            Format::Jpeg | Format::Png | Format::Webp => MediaKind::Image,
            Format::Mp3 | Format::Wav | Format::M4a => MediaKind::Audio,
            Format::Mp4 | Format::Mov => MediaKind::Video,
        }
    }

    /// The MIME type to label the bytes with.
    pub const fn mime(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
            Format::Webp => "image/webp",
            Format::Mp3 => "audio/mpeg",
            Format::Wav => "audio/wav",
            Format::M4a => "audio/mp4",
            Format::Mp4 => "video/mp4",
            Format::Mov => "video/quicktime",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Magic-byte sniffing from the first bytes of a file (up to [`SNIFF_LEN`] are looked at).
///
/// - JPEG `FF D8 FF`, PNG by its 8-byte signature, WEBP by `RIFF....WEBP`, WAV by
///   `RIFF....WAVE` (also `RF64`/`BW64`).
/// - MP3 by an ID3v2 tag (not followed by AAC or FLAC) or an MPEG audio Layer III frame header
///   (checked against the next frame header when that is within the bytes given).
/// - MP4, M4A and MOV by the `ftyp` box's major and compatible brands; a QuickTime file without
///   `ftyp` that starts with `moov`, `mdat`, `wide`, `free`, `skip` or `pnot` atoms is MOV.
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    let bytes = bytes.get(..SNIFF_LEN).unwrap_or(bytes);
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some(Format::Jpeg);
    }
    if bytes.starts_with(PNG_SIGNATURE) {
        return Some(Format::Png);
    }
    if let Some(format) = sniff_riff(bytes) {
        return Some(format);
    }
    if let Some(format) = sniff_iso_bmff(bytes) {
        return Some(format);
    }
    sniff_mp3(bytes)
}

const PNG_SIGNATURE: &[u8] = &[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];

fn sniff_riff(bytes: &[u8]) -> Option<Format> {
    let magic = bytes.get(..4)?;
    let form = bytes.get(8..12)?;
    match (magic, form) {
        (b"RIFF", b"WEBP") => Some(Format::Webp),
        (b"RIFF" | b"RF64" | b"BW64", b"WAVE") => Some(Format::Wav),
        _ => None,
    }
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn le16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn le24(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(3)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], 0]))
}

/// Brands of plain MP4 video files (ISO base media and its common video profiles).
const MP4_BRANDS: &[&[u8; 4]] = &[
    b"isom", b"iso2", b"iso3", b"iso4", b"iso5", b"iso6", b"iso7", b"iso8", b"iso9", b"mp41",
    b"mp42", b"avc1", b"hvc1", b"hev1", b"av01", b"dash", b"M4V ", b"M4VH", b"M4VP", b"mmp4",
    b"MSNV", b"XAVC", b"f4v ",
];
/// Brands that only say "ISO base media", not whether there is a video track.
const GENERIC_BRANDS: &[&[u8; 4]] = &[
    b"isom", b"iso2", b"iso3", b"iso4", b"iso5", b"iso6", b"iso7", b"iso8", b"iso9", b"mp41",
    b"mp42",
];
const M4A_BRANDS: &[&[u8; 4]] = &[b"M4A ", b"M4B "];
/// Still images in an ISO base media box structure (HEIF, AVIF): not a video.
const IMAGE_BRANDS: &[&[u8; 4]] = &[
    b"mif1", b"msf1", b"heic", b"heix", b"heim", b"heis", b"avif", b"avis",
];
/// QuickTime atoms that may open a file written before `ftyp` existed.
const QT_LEADING_ATOMS: &[&[u8; 4]] = &[b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"];

fn is_in(brand: &[u8], set: &[&[u8; 4]]) -> bool {
    set.iter().any(|b| b.as_slice() == brand)
}

fn sniff_iso_bmff(bytes: &[u8]) -> Option<Format> {
    // Walk a few leading atoms: old QuickTime files may open with padding atoms.
    let mut at = 0usize;
    for index in 0..4 {
        if index > 0 && bytes.len() < at.saturating_add(8) {
            // The previous padding atom ran to (or past) the end of what we were given.
            return Some(Format::Mov);
        }
        let size = be32(bytes, at)?;
        let kind = bytes.get(at + 4..at + 8)?;
        if kind == b"ftyp" {
            return ftyp_format(bytes.get(at..)?, size);
        }
        if !is_in(kind, QT_LEADING_ATOMS) {
            return None;
        }
        if kind == b"moov" || kind == b"mdat" {
            return Some(Format::Mov);
        }
        let step = match size {
            // Size 0: the atom runs to the end of the file; size 1: a 64-bit size follows.
            0 | 1 => return Some(Format::Mov),
            2..=7 => return None,
            n => usize::try_from(n).ok()?,
        };
        at = at.checked_add(step)?;
    }
    Some(Format::Mov)
}

fn ftyp_format(ftyp: &[u8], size: u32) -> Option<Format> {
    let major = ftyp.get(8..12)?;
    let end = usize::try_from(size).ok()?.clamp(16, ftyp.len().max(16));
    let compatible: Vec<&[u8]> = ftyp.get(16..end).unwrap_or(&[]).chunks_exact(4).collect();
    let has = |set: &[&[u8; 4]]| compatible.iter().any(|b| is_in(b, set));

    if major == b"qt  " {
        return Some(Format::Mov);
    }
    if is_in(major, M4A_BRANDS) {
        return Some(Format::M4a);
    }
    if is_in(major, IMAGE_BRANDS) {
        return None;
    }
    if is_in(major, GENERIC_BRANDS) {
        // A generic major brand: an audio-only file says so with a compatible M4A brand.
        let video_brand = compatible
            .iter()
            .any(|b| is_in(b, MP4_BRANDS) && !is_in(b, GENERIC_BRANDS));
        if has(M4A_BRANDS) && !video_brand {
            return Some(Format::M4a);
        }
        return Some(Format::Mp4);
    }
    if is_in(major, MP4_BRANDS) {
        return Some(Format::Mp4);
    }
    // An unknown major brand (3GPP, a vendor's): decide by what it claims to be compatible with.
    if has(IMAGE_BRANDS) {
        None
    } else if compatible.iter().any(|b| *b == b"qt  ") {
        Some(Format::Mov)
    } else if has(MP4_BRANDS) {
        Some(Format::Mp4)
    } else if has(M4A_BRANDS) {
        Some(Format::M4a)
    } else {
        None
    }
}

fn sniff_mp3(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(b"ID3") {
        let major = *bytes.get(3)?;
        let flags = *bytes.get(5)?;
        let size = bytes.get(6..10)?;
        if !(2..=4).contains(&major) || size.iter().any(|b| b & 0x80 != 0) {
            return None;
        }
        let size = size
            .iter()
            .fold(0usize, |acc, b| (acc << 7) | usize::from(*b));
        let footer = if flags & 0x10 != 0 { 10 } else { 0 };
        let after = 10 + size + footer;
        // What follows the tag, when we have it, must not be another audio format.
        return match bytes.get(after..) {
            Some(rest) if is_adts(rest) || rest.starts_with(b"fLaC") => None,
            _ => Some(Format::Mp3),
        };
    }
    let frame = mpeg_frame_len(bytes)?;
    if frame == 0 {
        return Some(Format::Mp3);
    }
    match bytes.get(frame..) {
        // A second frame header, when within reach, must be one too.
        Some(next) if next.len() >= 4 => mpeg_frame_len(next).map(|_| Format::Mp3),
        _ => Some(Format::Mp3),
    }
}

fn is_adts(bytes: &[u8]) -> bool {
    // 12-bit sync, then layer bits 00 (MPEG audio Layer III has 01).
    matches!(bytes, [0xFF, b1, ..] if b1 & 0xF6 == 0xF0)
}

/// The length of the MPEG-1/2/2.5 Layer III frame whose header opens `bytes`. Free-format
/// frames (bitrate index 0) have no computable length: 0 is returned for them.
fn mpeg_frame_len(bytes: &[u8]) -> Option<usize> {
    let &[b0, b1, b2, _, ..] = bytes else {
        return None;
    };
    if b0 != 0xFF || b1 & 0xE0 != 0xE0 {
        return None;
    }
    let version = (b1 >> 3) & 0b11; // 00: MPEG-2.5, 01: reserved, 10: MPEG-2, 11: MPEG-1
    let layer = (b1 >> 1) & 0b11; // 01: Layer III
    let bitrate_index = usize::from(b2 >> 4);
    let rate_index = usize::from((b2 >> 2) & 0b11);
    let padding = usize::from((b2 >> 1) & 1);
    if version == 0b01 || layer != 0b01 || bitrate_index == 15 || rate_index == 3 {
        return None;
    }
    const MPEG1_KBPS: [usize; 15] = [
        0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
    ];
    const MPEG2_KBPS: [usize; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
    let (kbps, rates, coefficient) = match version {
        0b11 => (MPEG1_KBPS, [44100, 48000, 32000], 144),
        0b10 => (MPEG2_KBPS, [22050, 24000, 16000], 72),
        _ => (MPEG2_KBPS, [11025, 12000, 8000], 72),
    };
    let kbps = kbps[bitrate_index];
    if kbps == 0 {
        return Some(0);
    }
    Some(coefficient * kbps * 1000 / rates[rate_index] + padding)
}

/// `(width, height)` of a JPEG (from its SOFn segment), PNG (IHDR) or WEBP (VP8, VP8L or VP8X)
/// from its first bytes. `None` for other formats, truncated headers and zero sizes.
pub fn image_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let dims = match sniff(bytes)? {
        Format::Png => png_dimensions(bytes),
        Format::Jpeg => jpeg_dimensions(bytes),
        Format::Webp => webp_dimensions(bytes),
        _ => None,
    }?;
    (dims.0 > 0 && dims.1 > 0).then_some(dims)
}

fn png_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.get(12..16)? != b"IHDR" {
        return None;
    }
    Some((be32(bytes, 16)?, be32(bytes, 20)?))
}

fn jpeg_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let mut at = 2; // after SOI
    loop {
        if *bytes.get(at)? != 0xFF {
            return None;
        }
        // Any number of 0xFF fill bytes may precede a marker.
        while *bytes.get(at)? == 0xFF {
            at += 1;
        }
        let marker = *bytes.get(at)?;
        at += 1;
        match marker {
            // Standalone markers: TEM, RSTn, SOI.
            0x01 | 0xD0..=0xD8 => continue,
            // EOI, or SOS before any frame header: no dimensions to find.
            0xD9 | 0xDA => return None,
            // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                // length (2), precision (1), height (2), width (2)
                let height = be16(bytes, at + 3)?;
                let width = be16(bytes, at + 5)?;
                return Some((u32::from(width), u32::from(height)));
            }
            _ => {
                let len = usize::from(be16(bytes, at)?);
                if len < 2 {
                    return None;
                }
                at += len;
            }
        }
    }
}

fn webp_dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let chunk = bytes.get(12..16)?;
    match chunk {
        b"VP8 " => {
            // frame tag (3), start code 9D 01 2A, then 14-bit width and height (+2 scale bits).
            if bytes.get(23..26)? != [0x9D, 0x01, 0x2A] {
                return None;
            }
            let width = le16(bytes, 26)? & 0x3FFF;
            let height = le16(bytes, 28)? & 0x3FFF;
            Some((u32::from(width), u32::from(height)))
        }
        b"VP8L" => {
            if *bytes.get(20)? != 0x2F {
                return None;
            }
            let b = bytes.get(21..25)?;
            let bits = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Some((le24(bytes, 24)? + 1, le24(bytes, 27)? + 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
