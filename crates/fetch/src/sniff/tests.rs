use super::*;

// Tiny synthetic headers: just enough of each format for the sniffer.

fn png(width: u32, height: u32) -> Vec<u8> {
    let mut b = PNG_SIGNATURE.to_vec();
    b.extend_from_slice(&13u32.to_be_bytes());
    b.extend_from_slice(b"IHDR");
    b.extend_from_slice(&width.to_be_bytes());
    b.extend_from_slice(&height.to_be_bytes());
    b.extend_from_slice(&[8, 2, 0, 0, 0]);
    b.extend_from_slice(&[0; 4]); // CRC, not checked
    b
}

fn jpeg(width: u16, height: u16) -> Vec<u8> {
    let mut b = vec![0xFF, 0xD8];
    // APP0 JFIF
    b.extend_from_slice(&[0xFF, 0xE0, 0x00, 0x10]);
    b.extend_from_slice(b"JFIF\0\x01\x01\x00\x00\x01\x00\x01\x00\x00");
    // DQT (skipped by length), with fill bytes before the marker
    b.extend_from_slice(&[0xFF, 0xFF, 0xDB, 0x00, 0x05, 1, 2, 3]);
    // SOF2 (progressive): length, precision, height, width, components
    b.extend_from_slice(&[0xFF, 0xC2, 0x00, 0x11, 0x08]);
    b.extend_from_slice(&height.to_be_bytes());
    b.extend_from_slice(&width.to_be_bytes());
    b.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
    b.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x02]);
    b
}

fn riff(form: &[u8; 4], chunk: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut b = b"RIFF".to_vec();
    b.extend_from_slice(&(4 + 8 + payload.len() as u32).to_le_bytes());
    b.extend_from_slice(form);
    b.extend_from_slice(chunk);
    b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

fn webp_vp8(width: u16, height: u16) -> Vec<u8> {
    let mut p = vec![0x30, 0x01, 0x00, 0x9D, 0x01, 0x2A];
    p.extend_from_slice(&width.to_le_bytes());
    p.extend_from_slice(&height.to_le_bytes());
    p.extend_from_slice(&[0; 8]);
    riff(b"WEBP", b"VP8 ", &p)
}

fn webp_vp8l(width: u32, height: u32) -> Vec<u8> {
    let bits = (width - 1) | ((height - 1) << 14);
    let mut p = vec![0x2F];
    p.extend_from_slice(&bits.to_le_bytes());
    p.extend_from_slice(&[0; 3]);
    riff(b"WEBP", b"VP8L", &p)
}

fn webp_vp8x(width: u32, height: u32) -> Vec<u8> {
    let mut p = vec![0x10, 0, 0, 0];
    p.extend_from_slice(&(width - 1).to_le_bytes()[..3]);
    p.extend_from_slice(&(height - 1).to_le_bytes()[..3]);
    riff(b"WEBP", b"VP8X", &p)
}

fn wav() -> Vec<u8> {
    riff(
        b"WAVE",
        b"fmt ",
        &[1, 0, 2, 0, 0x44, 0xAC, 0, 0, 0x10, 0xB1, 2, 0, 4, 0, 16, 0],
    )
}

/// Two MPEG-1 Layer III frames, 128 kbit/s, 44.1 kHz: 417 bytes each.
fn mp3_frames() -> Vec<u8> {
    let mut frame = vec![0xFF, 0xFB, 0x90, 0x64];
    frame.resize(417, 0);
    [frame.clone(), frame].concat()
}

fn id3(then: &[u8]) -> Vec<u8> {
    let mut b = b"ID3\x04\x00\x00\x00\x00\x00\x0A".to_vec();
    b.extend_from_slice(b"TIT2\x00\x00\x00\x00\x00\x00");
    b.extend_from_slice(then);
    b
}

fn ftyp(major: &[u8; 4], compatible: &[&[u8; 4]]) -> Vec<u8> {
    let size = 16 + 4 * compatible.len() as u32;
    let mut b = size.to_be_bytes().to_vec();
    b.extend_from_slice(b"ftyp");
    b.extend_from_slice(major);
    b.extend_from_slice(&[0, 0, 2, 0]);
    for brand in compatible {
        b.extend_from_slice(*brand);
    }
    b.extend_from_slice(b"\x00\x00\x00\x08free\x00\x00\x00\x10mdat");
    b
}

fn atoms(kinds: &[(&[u8; 4], u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (kind, size) in kinds {
        b.extend_from_slice(&size.to_be_bytes());
        b.extend_from_slice(*kind);
        b.resize(b.len() + (*size as usize).saturating_sub(8).min(64), 0);
    }
    b
}

fn check(name: &str, bytes: &[u8], expected: Option<Format>) {
    assert_eq!(sniff(bytes), expected, "{name}");
}

#[test]
fn sniffs_every_format() {
    use Format::*;
    let cases: Vec<(&str, Vec<u8>, Format)> = vec![
        ("jpeg", jpeg(640, 480), Jpeg),
        (
            "jpeg, bare SOI + marker",
            vec![0xFF, 0xD8, 0xFF, 0xDB],
            Jpeg,
        ),
        ("png", png(1, 1), Png),
        ("webp vp8", webp_vp8(320, 240), Webp),
        ("webp vp8l", webp_vp8l(5, 7), Webp),
        ("webp vp8x", webp_vp8x(4000, 3000), Webp),
        ("wav", wav(), Wav),
        (
            "wav rf64",
            [b"RF64".as_slice(), &[0xFF; 4], b"WAVEds64"].concat(),
            Wav,
        ),
        ("mp3 frames", mp3_frames(), Mp3),
        (
            "mp3 single frame header",
            vec![0xFF, 0xFB, 0x90, 0x64, 0, 0],
            Mp3,
        ),
        ("mp3 mpeg-2", vec![0xFF, 0xF3, 0x84, 0xC4, 0, 0], Mp3),
        ("mp3 mpeg-2.5", vec![0xFF, 0xE3, 0x84, 0xC4, 0, 0], Mp3),
        ("mp3 free format", vec![0xFF, 0xFB, 0x00, 0x64, 0xFF], Mp3),
        ("mp3 id3 + frames", id3(&mp3_frames()), Mp3),
        (
            "mp3 id3 tag longer than the prefix",
            b"ID3\x03\x00\x00\x00\x7F\x7F\x7F".to_vec(),
            Mp3,
        ),
        ("m4a", ftyp(b"M4A ", &[b"M4A ", b"mp42", b"isom"]), M4a),
        ("m4b", ftyp(b"M4B ", &[b"M4B ", b"mp42"]), M4a),
        (
            "m4a under a generic major",
            ftyp(b"isom", &[b"M4A ", b"isom"]),
            M4a,
        ),
        (
            "mp4 isom",
            ftyp(b"isom", &[b"isom", b"iso2", b"avc1", b"mp41"]),
            Mp4,
        ),
        ("mp4 mp42", ftyp(b"mp42", &[b"mp42", b"isom"]), Mp4),
        ("mp4 mp41", ftyp(b"mp41", &[]), Mp4),
        (
            "mp4 iso5 (fragmented)",
            ftyp(b"iso5", &[b"iso5", b"dash"]),
            Mp4,
        ),
        ("mp4 avc1", ftyp(b"avc1", &[b"isom"]), Mp4),
        ("mp4 m4v", ftyp(b"M4V ", &[b"M4V ", b"M4A ", b"mp42"]), Mp4),
        (
            "mp4 generic major, M4A and avc1",
            ftyp(b"mp42", &[b"M4A ", b"avc1"]),
            Mp4,
        ),
        ("mp4 3gp with isom", ftyp(b"3gp4", &[b"3gp4", b"isom"]), Mp4),
        ("mov ftyp", ftyp(b"qt  ", &[b"qt  "]), Mov),
        ("mov vendor major", ftyp(b"XXXX", &[b"qt  "]), Mov),
        ("mov moov first", atoms(&[(b"moov", 100)]), Mov),
        ("mov mdat first", atoms(&[(b"mdat", 0)]), Mov),
        (
            "mov wide then mdat",
            atoms(&[(b"wide", 8), (b"mdat", 1000)]),
            Mov,
        ),
        (
            "mov free then moov",
            atoms(&[(b"free", 16), (b"moov", 1000)]),
            Mov,
        ),
        (
            "mov skip running past the prefix",
            atoms(&[(b"skip", 100_000)]),
            Mov,
        ),
        (
            "mov pnot then moov",
            atoms(&[(b"pnot", 20), (b"moov", 100)]),
            Mov,
        ),
        (
            "mp4 after a wide atom",
            [atoms(&[(b"wide", 8)]), ftyp(b"isom", &[])].concat(),
            Mp4,
        ),
    ];
    for (name, bytes, format) in cases {
        check(name, &bytes, Some(format));
    }
}

#[test]
fn refuses_other_things() {
    let mut noise = Vec::with_capacity(4096);
    let mut x: u32 = 0x1234_5678;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push((x >> 24) as u8);
    }
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("text", b"hello, world".to_vec()),
        ("html", b"<!DOCTYPE html><html>".to_vec()),
        ("json", br#"{"error": "not found"}"#.to_vec()),
        ("gif", b"GIF89a\x01\x00\x01\x00".to_vec()),
        ("pdf", b"%PDF-1.7\n".to_vec()),
        ("bmp", b"BM\x00\x00\x00\x00".to_vec()),
        ("avi", riff(b"AVI ", b"LIST", &[0; 8])),
        ("riff truncated", b"RIFF\x00\x00".to_vec()),
        ("ogg", b"OggS\x00\x02".to_vec()),
        ("flac", b"fLaC\x00\x00\x00\x22".to_vec()),
        ("webm", vec![0x1A, 0x45, 0xDF, 0xA3, 0x9F]),
        ("aac adts", vec![0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC]),
        (
            "id3 then aac",
            id3(&[0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC]),
        ),
        ("id3 then flac", id3(b"fLaC\x00\x00\x00\x22")),
        (
            "id3 bad version",
            b"ID3\x09\x00\x00\x00\x00\x00\x00".to_vec(),
        ),
        ("id3 bad size", b"ID3\x04\x00\x00\x80\x00\x00\x00".to_vec()),
        ("mpeg layer ii", vec![0xFF, 0xFD, 0x90, 0x64, 0, 0]),
        ("mpeg reserved version", vec![0xFF, 0xEB, 0x90, 0x64, 0, 0]),
        ("mpeg bad bitrate", vec![0xFF, 0xFB, 0xF0, 0x64, 0, 0]),
        ("mpeg bad sample rate", vec![0xFF, 0xFB, 0x9C, 0x64, 0, 0]),
        (
            "mpeg frame then garbage",
            [&mp3_frames()[..417], b"garbage!"].concat(),
        ),
        ("jpeg too short", vec![0xFF, 0xD8]),
        ("png truncated signature", PNG_SIGNATURE[..6].to_vec()),
        ("heic", ftyp(b"heic", &[b"mif1", b"heic"])),
        ("avif", ftyp(b"avif", &[b"avif", b"mif1", b"miaf"])),
        ("ftyp unknown brands", ftyp(b"abcd", &[b"efgh"])),
        (
            "ftyp unknown with image compat",
            ftyp(b"abcd", &[b"mif1", b"isom"]),
        ),
        ("ftyp truncated", b"\x00\x00\x00\x18ftyp".to_vec()),
        ("atom that is not a qt atom", atoms(&[(b"abcd", 8)])),
        ("free then unknown", atoms(&[(b"free", 8), (b"abcd", 8)])),
        ("atom with bad size", atoms(&[(b"wide", 4), (b"moov", 8)])),
        ("noise", noise),
        ("zeros", vec![0; 1024]),
    ];
    for (name, bytes) in cases {
        check(name, &bytes, None);
    }
}

#[test]
fn looks_at_the_first_64_kib_only() {
    let mut bytes = vec![b'x'; SNIFF_LEN];
    bytes.extend_from_slice(&png(1, 1));
    check("png after 64 KiB", &bytes, None);
    let mut bytes = ftyp(b"isom", &[]);
    bytes.resize(1 << 20, 0);
    check("large mp4", &bytes, Some(Format::Mp4));
}

#[test]
fn formats_have_names_kinds_and_mimes() {
    let names: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
    assert_eq!(
        names,
        ["jpeg", "png", "webp", "mp3", "wav", "m4a", "mp4", "mov"]
    );
    for kind in [MediaKind::Image, MediaKind::Audio, MediaKind::Video] {
        for format in kind.formats() {
            assert_eq!(format.kind(), kind);
            assert!(format.mime().starts_with(kind.as_str()), "{format}");
        }
    }
    assert_eq!(Format::Mov.mime(), "video/quicktime");
    assert_eq!(Format::M4a.to_string(), "m4a");
    assert_eq!(MediaKind::Audio.invalid_code(), ErrorCode::InvalidAudio);
    assert_eq!(MediaKind::Image.invalid_code().message(), "invalid image");
}

#[test]
fn image_dimensions_of_each_format() {
    type Case = (&'static str, Vec<u8>, Option<(u32, u32)>);
    let cases: Vec<Case> = vec![
        ("png", png(1920, 1080), Some((1920, 1080))),
        ("png 1x1", png(1, 1), Some((1, 1))),
        ("jpeg", jpeg(1280, 720), Some((1280, 720))),
        ("jpeg portrait", jpeg(720, 1280), Some((720, 1280))),
        ("webp vp8", webp_vp8(320, 240), Some((320, 240))),
        (
            "webp vp8 with scale bits",
            webp_vp8(0x4000 | 320, 0x8000 | 240),
            Some((320, 240)),
        ),
        ("webp vp8l", webp_vp8l(1000, 16384), Some((1000, 16384))),
        ("webp vp8x", webp_vp8x(4096, 2160), Some((4096, 2160))),
        ("png zero width", png(0, 10), None),
        ("jpeg zero height (DNL)", jpeg(10, 0), None),
        (
            "jpeg truncated before SOF",
            jpeg(10, 10)[..30].to_vec(),
            None,
        ),
        (
            "jpeg without SOF",
            vec![0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02],
            None,
        ),
        ("png truncated", png(10, 10)[..20].to_vec(), None),
        (
            "webp vp8 without start code",
            riff(b"WEBP", b"VP8 ", &[0; 16]),
            None,
        ),
        (
            "webp vp8l without signature",
            riff(b"WEBP", b"VP8L", &[0; 8]),
            None,
        ),
        ("webp unknown chunk", riff(b"WEBP", b"ALPH", &[0; 16]), None),
        ("not an image", mp3_frames(), None),
        ("garbage", b"garbage".to_vec(), None),
    ];
    for (name, bytes, expected) in cases {
        assert_eq!(image_dimensions(&bytes), expected, "{name}");
    }
}
