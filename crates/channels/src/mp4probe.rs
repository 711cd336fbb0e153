//! A small MP4 box reader: enough to check that a file is an MP4 and what its video track is.
//!
//! It walks `ftyp`, `moov/mvhd` and `moov/trak/{tkhd, mdia/{mdhd, hdlr, minf/stbl/stsd}}`,
//! skipping everything else (`mdat` is never read, only stepped over). Every length is checked
//! against what is there, so garbage or truncated input gives an error, never a panic; a
//! top-level box that claims to run past the end of the file counts as truncation.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

/// Largest `moov` (or `ftyp`) read into memory; a real index for minutes of video is far smaller.
const MAX_HEADER_BOX: u64 = 64 << 20;

/// What a probe found.
#[derive(Debug, Clone, PartialEq)]
pub struct Mp4Info {
    /// From `mvhd`, or the video track's `mdhd` when `mvhd` gives none.
    pub duration_secs: f64,
    /// The video track's presentation size, from its `tkhd`.
    pub width: u32,
    pub height: u32,
    /// The video track's first sample entry type, e.g. `avc1`.
    pub codec: String,
    /// `ftyp`'s major brand, then its compatible brands not already listed.
    pub brands: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("mp4 probe: read: {0}")]
    Io(#[from] io::Error),
    #[error("mp4 probe: {0} is truncated")]
    Truncated(String),
    #[error("mp4 probe: {what} is malformed: {why}")]
    Malformed { what: String, why: &'static str },
    #[error("mp4 probe: no {0}")]
    Missing(&'static str),
    #[error("mp4 probe: no video track")]
    NoVideoTrack,
    #[error("mp4 probe: {what} box of {size} bytes is too large to read")]
    TooLarge { what: String, size: u64 },
}

/// Probes an MP4 file on disk.
pub fn probe_path(path: &Path) -> Result<Mp4Info, ProbeError> {
    probe(BufReader::new(File::open(path)?))
}

/// Probes MP4 bytes held in memory.
pub fn probe_bytes(bytes: &[u8]) -> Result<Mp4Info, ProbeError> {
    probe(Cursor::new(bytes))
}

/// Probes an MP4 stream, from its start.
pub fn probe(mut reader: impl Read + Seek) -> Result<Mp4Info, ProbeError> {
    let len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    let mut pos = 0u64;
    let mut brands = None;
    let mut moov = None;
    while pos < len {
        let left = len - pos;
        if left < 8 {
            return Err(ProbeError::Truncated("a box header".into()));
        }
        let mut head = [0u8; 8];
        read_exact(&mut reader, &mut head, "a box header")?;
        let kind = [head[4], head[5], head[6], head[7]];
        let name = fourcc(&kind);
        let (header_len, size) = match u32::from_be_bytes([head[0], head[1], head[2], head[3]]) {
            0 => (8, left),
            1 => {
                if left < 16 {
                    return Err(ProbeError::Truncated(format!("{name} box header")));
                }
                let mut large = [0u8; 8];
                read_exact(&mut reader, &mut large, "a box header")?;
                (16, u64::from_be_bytes(large))
            }
            n => (8, u64::from(n)),
        };
        if size < header_len {
            return Err(malformed(
                format!("{name} box"),
                "size smaller than its header",
            ));
        }
        if size > left {
            return Err(ProbeError::Truncated(format!("{name} box")));
        }
        let body_len = size - header_len;
        if &kind == b"ftyp" || &kind == b"moov" {
            if body_len > MAX_HEADER_BOX {
                return Err(ProbeError::TooLarge { what: name, size });
            }
            let mut body = vec![0u8; body_len as usize];
            read_exact(&mut reader, &mut body, &name)?;
            if &kind == b"ftyp" {
                brands.get_or_insert(parse_ftyp(&body)?);
            } else if moov.is_none() {
                moov = Some(body);
            }
        }
        pos += size;
        reader.seek(SeekFrom::Start(pos))?;
    }
    let brands = brands.ok_or(ProbeError::Missing("ftyp box"))?;
    let moov = moov.ok_or(ProbeError::Missing("moov box"))?;
    parse_moov(&moov, brands)
}

fn read_exact(reader: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), ProbeError> {
    reader.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => ProbeError::Truncated(what.to_string()),
        _ => ProbeError::Io(e),
    })
}

fn malformed(what: impl Into<String>, why: &'static str) -> ProbeError {
    ProbeError::Malformed {
        what: what.into(),
        why,
    }
}

fn fourcc(kind: &[u8]) -> String {
    kind.iter()
        .map(|b| {
            if b.is_ascii_graphic() || *b == b' ' {
                char::from(*b)
            } else {
                '?'
            }
        })
        .collect()
}

fn parse_ftyp(body: &[u8]) -> Result<Vec<String>, ProbeError> {
    if body.len() < 8 {
        return Err(ProbeError::Truncated("ftyp box".into()));
    }
    let mut brands = vec![fourcc(&body[..4])];
    for brand in body[8..].chunks_exact(4).map(fourcc) {
        if !brands.contains(&brand) {
            brands.push(brand);
        }
    }
    Ok(brands)
}

/// The child boxes of a container body.
struct Boxes<'a> {
    data: &'a [u8],
    failed: bool,
}

impl<'a> Boxes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            failed: false,
        }
    }
}

impl<'a> Iterator for Boxes<'a> {
    type Item = Result<([u8; 4], &'a [u8]), ProbeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.data.is_empty() {
            return None;
        }
        let item = split_box(self.data);
        match &item {
            Ok((_, _, rest)) => self.data = rest,
            Err(_) => self.failed = true,
        }
        Some(item.map(|(kind, body, _)| (kind, body)))
    }
}

/// One box off the front of `data`: its type, its body and what follows it.
#[allow(clippy::type_complexity)]
fn split_box(data: &[u8]) -> Result<([u8; 4], &[u8], &[u8]), ProbeError> {
    let head = data
        .get(..8)
        .ok_or_else(|| ProbeError::Truncated("a box header".into()))?;
    let kind = [head[4], head[5], head[6], head[7]];
    let (header_len, size) = match be_u32(head, 0) {
        Some(0) => (8, data.len() as u64),
        Some(1) => {
            let large = data
                .get(8..16)
                .and_then(|b| be_u64(b, 0))
                .ok_or_else(|| ProbeError::Truncated(format!("{} box header", fourcc(&kind))))?;
            (16, large)
        }
        Some(n) => (8, u64::from(n)),
        None => return Err(ProbeError::Truncated("a box header".into())),
    };
    if size < header_len {
        return Err(malformed(
            format!("{} box", fourcc(&kind)),
            "size smaller than its header",
        ));
    }
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s <= data.len())
        .ok_or_else(|| ProbeError::Truncated(format!("{} box", fourcc(&kind))))?;
    Ok((kind, &data[header_len as usize..size], &data[size..]))
}

fn be_u32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be_u64(data: &[u8], at: usize) -> Option<u64> {
    let b = data.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}

/// The first child of type `kind`.
fn child<'a>(body: &'a [u8], kind: &[u8; 4]) -> Result<Option<&'a [u8]>, ProbeError> {
    for item in Boxes::new(body) {
        let (k, b) = item?;
        if &k == kind {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// A time scale and a duration in it, from `mvhd` or `mdhd` (same layout up to there).
fn timing(body: &[u8], what: &'static str) -> Result<(u32, u64), ProbeError> {
    let truncated = || ProbeError::Truncated(format!("{what} box"));
    let version = *body.first().ok_or_else(truncated)?;
    match version {
        0 => {
            let scale = be_u32(body, 12).ok_or_else(truncated)?;
            let duration = be_u32(body, 16).ok_or_else(truncated)?;
            // All ones means "unknown".
            let duration = if duration == u32::MAX {
                0
            } else {
                u64::from(duration)
            };
            Ok((scale, duration))
        }
        1 => {
            let scale = be_u32(body, 20).ok_or_else(truncated)?;
            let duration = be_u64(body, 24).ok_or_else(truncated)?;
            let duration = if duration == u64::MAX { 0 } else { duration };
            Ok((scale, duration))
        }
        _ => Err(malformed(format!("{what} box"), "unknown version")),
    }
}

fn seconds((scale, duration): (u32, u64)) -> Option<f64> {
    (scale > 0 && duration > 0).then(|| duration as f64 / f64::from(scale))
}

struct VideoTrack {
    width: u32,
    height: u32,
    codec: String,
    duration: Option<f64>,
}

fn parse_moov(moov: &[u8], brands: Vec<String>) -> Result<Mp4Info, ProbeError> {
    let mut movie_duration = None;
    let mut video = None;
    for item in Boxes::new(moov) {
        let (kind, body) = item?;
        match &kind {
            b"mvhd" if movie_duration.is_none() => movie_duration = Some(timing(body, "mvhd")?),
            b"trak" if video.is_none() => video = parse_trak(body)?,
            _ => {}
        }
    }
    let movie_duration = movie_duration.ok_or(ProbeError::Missing("mvhd box"))?;
    let video = video.ok_or(ProbeError::NoVideoTrack)?;
    let duration_secs = seconds(movie_duration)
        .or(video.duration)
        .ok_or(ProbeError::Missing("duration in mvhd or mdhd"))?;
    Ok(Mp4Info {
        duration_secs,
        width: video.width,
        height: video.height,
        codec: video.codec,
        brands,
    })
}

/// The track, if it is a video track.
fn parse_trak(trak: &[u8]) -> Result<Option<VideoTrack>, ProbeError> {
    let Some(mdia) = child(trak, b"mdia")? else {
        return Ok(None);
    };
    let Some(hdlr) = child(mdia, b"hdlr")? else {
        return Ok(None);
    };
    if hdlr.get(8..12) != Some(b"vide".as_slice()) {
        return Ok(None);
    }
    let tkhd = child(trak, b"tkhd")?.ok_or(ProbeError::Missing("tkhd box in the video track"))?;
    let truncated = || ProbeError::Truncated("tkhd box".into());
    let size_at = match tkhd.first() {
        Some(0) => 76,
        Some(1) => 88,
        Some(_) => return Err(malformed("tkhd box", "unknown version")),
        None => return Err(truncated()),
    };
    // 16.16 fixed point; the fraction is dropped.
    let width = be_u32(tkhd, size_at).ok_or_else(truncated)? >> 16;
    let height = be_u32(tkhd, size_at + 4).ok_or_else(truncated)? >> 16;

    let duration = match child(mdia, b"mdhd")? {
        Some(mdhd) => seconds(timing(mdhd, "mdhd")?),
        None => None,
    };

    let stsd = child(mdia, b"minf")?
        .map(|minf| child(minf, b"stbl"))
        .transpose()?
        .flatten()
        .map(|stbl| child(stbl, b"stsd"))
        .transpose()?
        .flatten()
        .ok_or(ProbeError::Missing("stsd box in the video track"))?;
    let entries = be_u32(stsd, 4).ok_or_else(|| ProbeError::Truncated("stsd box".into()))?;
    if entries == 0 {
        return Err(malformed("stsd box", "no sample entry"));
    }
    let first = stsd.get(8..).unwrap_or_default();
    let (kind, _, _) = split_box(first)?;
    Ok(Some(VideoTrack {
        width,
        height,
        codec: fourcc(&kind),
        duration,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bx(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut v = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(kind);
        v.extend_from_slice(body);
        v
    }

    fn full(kind: &[u8; 4], version: u8, body: &[u8]) -> Vec<u8> {
        let mut b = vec![version, 0, 0, 0];
        b.extend_from_slice(body);
        bx(kind, &b)
    }

    /// A minimal file: ftyp, moov with a v1 mvhd (unknown duration) and one video trak.
    fn sample_file() -> Vec<u8> {
        let ftyp = bx(b"ftyp", b"isom\0\0\x02\0isomavc1");
        let mut mvhd = vec![0u8; 16];
        mvhd.extend_from_slice(&1000u32.to_be_bytes());
        mvhd.extend_from_slice(&u64::MAX.to_be_bytes());
        mvhd.extend_from_slice(&[0u8; 80]);
        let mvhd = full(b"mvhd", 1, &mvhd);
        let mut tkhd = vec![0u8; 72];
        tkhd.extend_from_slice(&(640u32 << 16).to_be_bytes());
        tkhd.extend_from_slice(&(360u32 << 16).to_be_bytes());
        let tkhd = full(b"tkhd", 0, &tkhd);
        let mut mdhd = vec![0u8; 8];
        mdhd.extend_from_slice(&24_000u32.to_be_bytes());
        mdhd.extend_from_slice(&60_000u32.to_be_bytes());
        mdhd.extend_from_slice(&[0u8; 4]);
        let mdhd = full(b"mdhd", 0, &mdhd);
        let hdlr = full(b"hdlr", 0, b"\0\0\0\0vide\0\0\0\0\0\0\0\0\0\0\0\0v\0");
        let mut stsd = 1u32.to_be_bytes().to_vec();
        stsd.extend_from_slice(&bx(b"hvc1", &[0u8; 78]));
        let stsd = full(b"stsd", 0, &stsd);
        let stbl = bx(b"stbl", &stsd);
        let minf = bx(b"minf", &stbl);
        let mdia = bx(b"mdia", &[mdhd, hdlr, minf].concat());
        let trak = bx(b"trak", &[tkhd, mdia].concat());
        let moov = bx(b"moov", &[mvhd, trak].concat());
        let mdat = bx(b"mdat", &[0u8; 100]);
        [ftyp, mdat, moov].concat()
    }

    #[test]
    fn reads_a_hand_built_file() {
        let info = probe_bytes(&sample_file()).unwrap();
        assert_eq!(info.width, 640);
        assert_eq!(info.height, 360);
        assert_eq!(info.codec, "hvc1");
        // mvhd says "unknown", so the duration comes from mdhd.
        assert!((info.duration_secs - 2.5).abs() < 1e-9);
        assert_eq!(info.brands, ["isom", "avc1"]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let file = sample_file();
        for cut in 0..file.len() {
            assert!(probe_bytes(&file[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let file = sample_file();
        // Flip every byte in turn: whatever comes out, nothing panics.
        for i in 0..file.len() {
            for flip in [0xFF, 0x80, 0x01] {
                let mut bad = file.clone();
                bad[i] ^= flip;
                let _ = probe_bytes(&bad);
            }
        }
        // A pseudo-random stream, and boxes that claim absurd sizes.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(probe_bytes(&noise).is_err());
        assert!(probe_bytes(b"").is_err());
        assert!(
            probe_bytes(&[
                0, 0, 0, 1, b'm', b'o', b'o', b'v', 0xFF, 0, 0, 0, 0, 0, 0, 0
            ])
            .is_err()
        );
        assert!(probe_bytes(&[0, 0, 0, 4, b'f', b't', b'y', b'p']).is_err());
        let nested = bx(b"moov", &bx(b"trak", &[0, 0, 0, 0, b'm', b'd', b'i', b'a']));
        assert!(probe_bytes(&[bx(b"ftyp", b"isom\0\0\0\0"), nested].concat()).is_err());
    }
}
