//! What an asset's bytes are: sniffed format, type, image size, and whether the file is whole.
//!
//! Runs on a blocking thread over any `Read + Seek` (a stored file, or fetched bytes in
//! memory). Only headers and the file's end are read, never the whole file: the container
//! checks walk box and chunk headers by seeking.

use std::io::{self, Read, Seek, SeekFrom};

use assets::FailureCode;
use fetch::{Format, MediaKind, SNIFF_LEN};

/// What processing learnt about a file that can become an active asset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    pub format: Format,
    pub kind: MediaKind,
    pub bytes: u64,
    /// Pixel size, for images.
    pub dims: Option<(u32, u32)>,
}

/// Why a file cannot become an active asset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub code: FailureCode,
    pub message: String,
}

fn reject(code: FailureCode, message: impl Into<String>) -> Rejected {
    Rejected {
        code,
        message: message.into(),
    }
}

/// Most top-level boxes walked in an MP4/MOV file before giving up (bounds the work).
const MAX_BOXES: usize = 100_000;
/// How far from the end a JPEG's end-of-image marker may be (some writers pad).
const JPEG_TAIL: u64 = 1024;

/// Inspects a file of `len` bytes: empty, format (sniffed), type against `declared`, image
/// size (and `max_image` bytes), whole container.
pub fn inspect<R: Read + Seek>(
    r: &mut R,
    len: u64,
    declared: Option<MediaKind>,
    max_image: u64,
) -> io::Result<Result<Inspected, Rejected>> {
    if len == 0 {
        return Ok(Err(reject(FailureCode::Empty, "the file is empty")));
    }
    let head = read_at(
        r,
        0,
        SNIFF_LEN.min(usize::try_from(len).unwrap_or(SNIFF_LEN)),
    )?;
    let Some(format) = fetch::sniff(&head) else {
        return Ok(Err(reject(
            FailureCode::UnsupportedFormat,
            "the file is not a supported image (jpeg, png, webp), video (mp4, mov) or audio \
             (mp3, wav, m4a)",
        )));
    };
    let kind = format.kind();
    if let Some(declared) = declared.filter(|d| *d != kind) {
        return Ok(Err(reject(
            FailureCode::TypeMismatch,
            format!(
                "the upload declared type {declared}, but the file is {} {kind} ({format})",
                if kind == MediaKind::Image { "an" } else { "a" }
            ),
        )));
    }
    let mut dims = None;
    if kind == MediaKind::Image {
        if len > max_image {
            return Ok(Err(reject(
                FailureCode::TooLarge,
                format!("the image is {len} bytes; images may be at most {max_image} bytes"),
            )));
        }
        match fetch::image_dimensions(&head) {
            Some(d) if d.0 > 0 && d.1 > 0 => dims = Some(d),
            _ => {
                return Ok(Err(reject(
                    FailureCode::UnsupportedFormat,
                    format!("the {format} image is damaged: its size cannot be read"),
                )));
            }
        }
    }
    if let Some(why) = damaged(r, format, len)? {
        return Ok(Err(reject(
            FailureCode::UnsupportedFormat,
            format!("the {format} file is damaged or truncated: {why}"),
        )));
    }
    Ok(Ok(Inspected {
        format,
        kind,
        bytes: len,
        dims,
    }))
}

/// Why a file of a sniffed format is not whole, if it is not.
fn damaged<R: Read + Seek>(r: &mut R, format: Format, len: u64) -> io::Result<Option<String>> {
    match format {
        Format::Png => {
            const IEND: [u8; 12] = [0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xAE, 0x42, 0x60, 0x82];
            if len < 8 + 12 || read_at(r, len - 12, 12)? != IEND {
                return Ok(Some("it does not end with an IEND chunk".into()));
            }
        }
        Format::Jpeg => {
            let from = len.saturating_sub(JPEG_TAIL);
            let tail = read_at(r, from, usize::try_from(len - from).unwrap_or(0))?;
            if !tail.windows(2).any(|w| w == [0xFF, 0xD9]) {
                return Ok(Some("it has no end-of-image marker".into()));
            }
        }
        Format::Webp | Format::Wav => {
            let head = read_at(r, 0, 12)?;
            let size = head
                .get(4..8)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(|b| u64::from(u32::from_le_bytes(b)));
            if let (true, Some(size)) = (head.starts_with(b"RIFF"), size) {
                // Streaming writers leave 0 or 0xFFFFFFFF when they cannot know the size.
                let unknown = size == 0 || size == u64::from(u32::MAX);
                if !unknown && size + 8 > len {
                    return Ok(Some(format!(
                        "its header says {} bytes, the file has {len}",
                        size + 8
                    )));
                }
            }
        }
        Format::Mp4 | Format::Mov | Format::M4a => return boxes(r, len),
        Format::Mp3 => {}
    }
    Ok(None)
}

/// Walks the top-level ISO-BMFF boxes: each must end within the file.
fn boxes<R: Read + Seek>(r: &mut R, len: u64) -> io::Result<Option<String>> {
    let mut at = 0u64;
    for _ in 0..MAX_BOXES {
        if len - at < 8 {
            // Fewer bytes than a box header left: the end of the file.
            return Ok(None);
        }
        let header = read_at(r, at, 16.min(usize::try_from(len - at).unwrap_or(16)))?;
        if header.len() < 8 {
            return Ok(Some("the file is shorter than it was".into()));
        }
        let size32 = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        let name = String::from_utf8_lossy(&header[4..8])
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .collect::<String>();
        let size = match size32 {
            // The last box, to the end of the file.
            0 => return Ok(None),
            1 if header.len() >= 16 => u64::from_be_bytes([
                header[8], header[9], header[10], header[11], header[12], header[13], header[14],
                header[15],
            ]),
            1 => return Ok(Some(format!("box {name} has a cut header"))),
            n => u64::from(n),
        };
        let min = if size32 == 1 { 16 } else { 8 };
        if size < min {
            return Ok(Some(format!("box {name} has an impossible size {size}")));
        }
        let end = at.saturating_add(size);
        if end > len {
            return Ok(Some(format!(
                "box {name} ends at byte {end}, past the end of the file ({len} bytes)"
            )));
        }
        if end == len {
            return Ok(None);
        }
        at = end;
    }
    Ok(Some(format!("more than {MAX_BOXES} top-level boxes")))
}

/// Up to `n` bytes from `at` (fewer at the end of the file).
fn read_at<R: Read + Seek>(r: &mut R, at: u64, n: usize) -> io::Result<Vec<u8>> {
    r.seek(SeekFrom::Start(at))?;
    let mut buf = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    fn run(bytes: &[u8], declared: Option<MediaKind>) -> Result<Inspected, Rejected> {
        inspect(
            &mut Cursor::new(bytes),
            bytes.len() as u64,
            declared,
            1 << 20,
        )
        .unwrap()
    }

    fn code(bytes: &[u8], declared: Option<MediaKind>) -> FailureCode {
        run(bytes, declared).unwrap_err().code
    }

    /// A PNG's chunk structure (CRCs are not checked by inspection).
    fn png(w: u32, h: u32) -> Vec<u8> {
        let chunk = |name: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            c.extend(name);
            c.extend(data);
            c.extend([0xAE, 0x42, 0x60, 0x82]);
            c
        };
        let mut ihdr = w.to_be_bytes().to_vec();
        ihdr.extend(h.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]);
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        out.extend(chunk(b"IHDR", &ihdr));
        out.extend(chunk(b"IDAT", &vec![7u8; 64 + (w * h) as usize % 1000]));
        out.extend(chunk(b"IEND", &[]));
        out
    }

    fn mp4() -> Vec<u8> {
        let mut v = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isommp41".to_vec();
        v.extend(b"\x00\x00\x00\x10moov\x00\x00\x00\x08free");
        v.extend(b"\x00\x00\x00\x10mdat01234567");
        v
    }

    fn wav() -> Vec<u8> {
        let mut v = b"RIFF\x24\x08\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x08\x00\x00".to_vec();
        v.extend(std::iter::repeat_n(0u8, 2048));
        v
    }

    #[test]
    fn whole_files_pass() {
        let got = run(&png(40, 30), Some(MediaKind::Image)).unwrap();
        assert_eq!(
            (got.format, got.kind, got.dims),
            (Format::Png, MediaKind::Image, Some((40, 30)))
        );
        let got = run(&mp4(), None).unwrap();
        assert_eq!((got.format, got.dims), (Format::Mp4, None));
        assert_eq!(
            run(&wav(), Some(MediaKind::Audio)).unwrap().format,
            Format::Wav
        );
        // An ftyp box alone, and a last box of size 0 ("to the end"), are whole.
        let mut to_end = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isommp41".to_vec();
        assert!(run(&to_end, None).is_ok());
        to_end.extend(b"\x00\x00\x00\x00mdat0123456789");
        assert!(run(&to_end, None).is_ok());
    }

    #[test]
    fn faults() {
        assert_eq!(code(b"", None), FailureCode::Empty);
        assert_eq!(code(b"hello, world", None), FailureCode::UnsupportedFormat);
        assert_eq!(
            code(&png(4, 4), Some(MediaKind::Video)),
            FailureCode::TypeMismatch
        );
        assert_eq!(
            code(&mp4(), Some(MediaKind::Audio)),
            FailureCode::TypeMismatch
        );
        let whole = png(64, 64);
        assert_eq!(
            code(&whole[..whole.len() / 2], None),
            FailureCode::UnsupportedFormat
        );
        assert_eq!(code(&whole[..20], None), FailureCode::UnsupportedFormat);
        let video = mp4();
        assert_eq!(
            code(&video[..video.len() - 3], None),
            FailureCode::UnsupportedFormat
        );
        let w = wav();
        assert_eq!(
            code(&w[..w.len() - 100], None),
            FailureCode::UnsupportedFormat
        );
        let big = run(&png(4, 4), None).unwrap().bytes;
        let tiny_limit = inspect(&mut Cursor::new(png(4, 4)), big, None, big - 1)
            .unwrap()
            .unwrap_err();
        assert_eq!(tiny_limit.code, FailureCode::TooLarge);
        // A box claiming a size below its header.
        let mut bad = mp4();
        bad[24..28].copy_from_slice(&[0, 0, 0, 4]);
        assert_eq!(code(&bad, None), FailureCode::UnsupportedFormat);
    }

    #[test]
    fn messages_say_what_is_wrong() {
        let e = run(&png(4, 4), Some(MediaKind::Audio)).unwrap_err();
        assert_eq!(
            e.message,
            "the upload declared type audio, but the file is an image (png)"
        );
        let video = mp4();
        let e = run(&video[..video.len() - 3], None).unwrap_err();
        assert!(e.message.contains("box mdat"), "{}", e.message);
    }
}
