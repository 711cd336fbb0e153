//! The large results of the fake: an MP4 generated while it is sent.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

/// An MP4 of `total` bytes: `ftyp`, a `moov` with one video track, then one `mdat` box,
/// declared in its header, whose payload is the same 64 KiB chunk again and again. Generated
/// while it is sent, so the fake's memory stays flat whatever the size.
pub struct GeneratedMp4 {
    head: Option<Bytes>,
    chunk: Bytes,
    /// Bytes still to send, the head included.
    left: u64,
    /// Whether every byte is sent: only then is the length known to hyper (a shorter body
    /// than the `content-length` it is sent with is cut off where the length is not told).
    whole: bool,
}

impl GeneratedMp4 {
    /// A file of `total` bytes of which the first `sent` are sent (fewer: a truncated body).
    pub fn new(total: u64, sent: u64) -> GeneratedMp4 {
        let head = mp4_head(total);
        let chunk: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        GeneratedMp4 {
            head: Some(Bytes::from(head)),
            chunk: Bytes::from(chunk),
            left: sent,
            whole: sent == total,
        }
    }
}

impl hyper::body::Body for GeneratedMp4 {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let mut data = match this.head.take() {
            Some(head) => head,
            None => this.chunk.clone(),
        };
        data.truncate(
            data.len()
                .min(usize::try_from(this.left).unwrap_or(usize::MAX)),
        );
        this.left -= data.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        if self.whole {
            SizeHint::with_exact(self.left)
        } else {
            SizeHint::default()
        }
    }
}

fn mp4_box(kind: &[u8; 4], parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = 8 + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut v = (len as u32).to_be_bytes().to_vec();
    v.extend_from_slice(kind);
    for part in parts {
        v.extend_from_slice(part);
    }
    v
}

/// `ftyp`, `moov` (a 640x360 `avc1` track of 10 s) and the header of an `mdat` box that fills
/// the file up to `total` bytes (a 64-bit size when it needs one).
fn mp4_head(total: u64) -> Vec<u8> {
    let be32 = |n: u32| n.to_be_bytes();
    let ftyp = mp4_box(b"ftyp", &[b"isom", &be32(0x200), b"isomiso2avc1mp41"]);
    // mvhd v0: times, time scale 1000, duration 10 s, rate 1.0, volume 1.0, identity matrix.
    let mut matrix = [0u8; 36];
    matrix[0..4].copy_from_slice(&be32(0x0001_0000));
    matrix[16..20].copy_from_slice(&be32(0x0001_0000));
    matrix[32..36].copy_from_slice(&be32(0x4000_0000));
    let mvhd = mp4_box(
        b"mvhd",
        &[
            &[0u8; 12],
            &be32(1000),
            &be32(10_000),
            &be32(0x0001_0000),
            &[1, 0],
            &[0u8; 10],
            &matrix,
            &[0u8; 24],
            &be32(2),
        ],
    );
    // tkhd v0 (enabled, in movie): track 1, duration, matrix, 640x360 in 16.16.
    let tkhd = mp4_box(
        b"tkhd",
        &[
            &[0, 0, 0, 3],
            &[0u8; 8],
            &be32(1),
            &[0u8; 4],
            &be32(10_000),
            &[0u8; 16],
            &matrix,
            &be32(640 << 16),
            &be32(360 << 16),
        ],
    );
    let mdhd = mp4_box(
        b"mdhd",
        &[&[0u8; 12], &be32(1000), &be32(10_000), &[0x55, 0xC4, 0, 0]],
    );
    let hdlr = mp4_box(
        b"hdlr",
        &[&[0u8; 8], b"vide", &[0u8; 12], b"VideoHandler\0"],
    );
    let vmhd = mp4_box(b"vmhd", &[&[0, 0, 0, 1], &[0u8; 8]]);
    let mut entry = vec![0u8; 78];
    entry[7] = 1; // data reference index
    entry[24..26].copy_from_slice(&640u16.to_be_bytes());
    entry[26..28].copy_from_slice(&360u16.to_be_bytes());
    entry[28..32].copy_from_slice(&be32(0x0048_0000));
    entry[32..36].copy_from_slice(&be32(0x0048_0000));
    entry[40..42].copy_from_slice(&1u16.to_be_bytes());
    entry[74..76].copy_from_slice(&0x18u16.to_be_bytes());
    entry[76..78].copy_from_slice(&0xFFFFu16.to_be_bytes());
    let avc1 = mp4_box(b"avc1", &[&entry]);
    let stsd = mp4_box(b"stsd", &[&[0u8; 4], &be32(1), &avc1]);
    let empty_table = |kind: &[u8; 4]| mp4_box(kind, &[&[0u8; 8]]);
    let stsz = mp4_box(b"stsz", &[&[0u8; 12]]);
    let stbl = mp4_box(
        b"stbl",
        &[
            &stsd,
            &empty_table(b"stts"),
            &empty_table(b"stsc"),
            &stsz,
            &empty_table(b"stco"),
        ],
    );
    let minf = mp4_box(b"minf", &[&vmhd, &stbl]);
    let mdia = mp4_box(b"mdia", &[&mdhd, &hdlr, &minf]);
    let trak = mp4_box(b"trak", &[&tkhd, &mdia]);
    let moov = mp4_box(b"moov", &[&mvhd, &trak]);
    let mut head = [ftyp, moov].concat();
    let mdat_len = total.saturating_sub(head.len() as u64);
    if mdat_len <= u64::from(u32::MAX) {
        head.extend_from_slice(&be32(mdat_len as u32));
        head.extend_from_slice(b"mdat");
    } else {
        head.extend_from_slice(&be32(1));
        head.extend_from_slice(b"mdat");
        head.extend_from_slice(&mdat_len.to_be_bytes());
    }
    head
}
