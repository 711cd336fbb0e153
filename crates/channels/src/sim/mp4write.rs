//! A streaming MP4 writer for one H.264 video track.
//!
//! Samples go to the file as they come; only the sample tables (a few bytes per frame) stay in
//! memory. The layout is `ftyp`, then room reserved for `moov` (filled at the end, the unused rest
//! becoming a `free` box), then `mdat`. So the file is fast-start (the index before the media, as
//! browsers like it) although it is written in one pass: the number of frames is known up front,
//! which bounds the size of the index.

use std::io::{self, Seek, SeekFrom, Write};

/// Movie timescale (`mvhd`, `tkhd`): milliseconds.
const MOVIE_TIMESCALE: u32 = 1000;
/// Largest SPS plus PPS we accept (openh264's are a few dozen bytes).
const MAX_PARAMETER_SETS: usize = 1024;
/// Room for every box of the index except the per-sample tables, parameter sets included.
const RESERVE_FIXED: u64 = 4096;
/// Per-sample room: `stsz`, `stco` and, at worst, `stss` entries.
const RESERVE_PER_SAMPLE: u64 = 12;

const NAL_IDR: u8 = 5;
const NAL_SPS: u8 = 7;
const NAL_PPS: u8 = 8;
const NAL_AUD: u8 = 9;

#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("write the mp4 file: {0}")]
    Io(#[from] io::Error),
    #[error("sample {index} carries no picture data")]
    EmptySample { index: u32 },
    #[error("the first sample carries no SPS and PPS")]
    MissingParameterSets,
    #[error("the encoder changed its parameter sets mid-stream")]
    ParameterSetsChanged,
    #[error("parameter sets of {0} bytes are too large")]
    ParameterSetsTooLarge(usize),
    #[error("more samples than the {0} announced")]
    TooManySamples(u32),
    #[error("{written} samples written, {announced} announced")]
    SampleCountMismatch { written: u32, announced: u32 },
    #[error("the media data grew past 4 GiB")]
    TooLarge,
}

/// What the track header says.
#[derive(Debug, Clone, Copy)]
pub struct TrackParams {
    /// The picture size the H.264 stream decodes to (after its own cropping).
    pub coded_width: u16,
    pub coded_height: u16,
    /// The presentation size written to `tkhd`.
    pub display_width: u16,
    pub display_height: u16,
    /// Media timescale (`mdhd`) and the duration of every sample in it.
    pub timescale: u32,
    pub sample_delta: u32,
    /// Exactly this many samples will be written.
    pub frame_count: u32,
}

pub struct Mp4Writer<W: Write + Seek> {
    out: W,
    params: TrackParams,
    moov_at: u64,
    reserved: u64,
    mdat_at: u64,
    payload: u64,
    sizes: Vec<u32>,
    sync: Vec<u32>,
    sps: Option<Vec<u8>>,
    pps: Option<Vec<u8>>,
    current_size: u64,
    current_sync: bool,
}

impl<W: Write + Seek> Mp4Writer<W> {
    /// Writes the file's head (`ftyp`, the reserved room, the `mdat` header).
    pub fn new(mut out: W, params: TrackParams) -> Result<Self, MuxError> {
        let ftyp = ftyp();
        out.write_all(&ftyp)?;
        let moov_at = ftyp.len() as u64;
        let reserved = RESERVE_FIXED + RESERVE_PER_SAMPLE * u64::from(params.frame_count);
        write_free(&mut out, reserved)?;
        let mdat_at = moov_at + reserved;
        out.write_all(&[0, 0, 0, 0])?;
        out.write_all(b"mdat")?;
        Ok(Self {
            out,
            params,
            moov_at,
            reserved,
            mdat_at,
            payload: 0,
            sizes: Vec::with_capacity(params.frame_count as usize),
            sync: Vec::new(),
            sps: None,
            pps: None,
            current_size: 0,
            current_sync: false,
        })
    }

    /// Appends one NAL unit (without start code) to the current access unit. Parameter sets go
    /// to the sample description (they must not change), access unit delimiters are dropped.
    pub fn write_nal(&mut self, nal: &[u8]) -> Result<(), MuxError> {
        let index = self.sizes.len() as u32;
        if index >= self.params.frame_count {
            return Err(MuxError::TooManySamples(self.params.frame_count));
        }
        let Some(header) = nal.first() else {
            return Ok(());
        };
        match header & 0x1F {
            NAL_SPS => remember(&mut self.sps, nal)?,
            NAL_PPS => remember(&mut self.pps, nal)?,
            NAL_AUD => {}
            kind => {
                self.current_sync |= kind == NAL_IDR;
                let len = u32::try_from(nal.len()).map_err(|_| MuxError::TooLarge)?;
                self.out.write_all(&len.to_be_bytes())?;
                self.out.write_all(nal)?;
                self.current_size += 4 + u64::from(len);
                if self.mdat_at + 8 + self.payload + self.current_size > u64::from(u32::MAX) {
                    return Err(MuxError::TooLarge);
                }
            }
        }
        Ok(())
    }

    /// Ends the current access unit: it becomes one sample.
    pub fn end_sample(&mut self) -> Result<(), MuxError> {
        let index = self.sizes.len() as u32;
        let size = std::mem::take(&mut self.current_size);
        let sync = std::mem::take(&mut self.current_sync);
        if size == 0 {
            return Err(MuxError::EmptySample { index });
        }
        if index == 0 && (self.sps.is_none() || self.pps.is_none()) {
            return Err(MuxError::MissingParameterSets);
        }
        self.payload += size;
        // write_nal keeps the whole mdat below 4 GiB, so the size fits.
        self.sizes.push(size as u32);
        if sync {
            self.sync.push(index + 1);
        }
        Ok(())
    }

    /// Writes the index into the reserved room and patches the `mdat` size. Returns the file size.
    pub fn finish(mut self) -> Result<u64, MuxError> {
        let written = self.sizes.len() as u32;
        if written != self.params.frame_count {
            return Err(MuxError::SampleCountMismatch {
                written,
                announced: self.params.frame_count,
            });
        }
        let (Some(sps), Some(pps)) = (self.sps.as_deref(), self.pps.as_deref()) else {
            return Err(MuxError::MissingParameterSets);
        };
        let ps_len = sps.len() + pps.len();
        if ps_len > MAX_PARAMETER_SETS || sps.len() < 4 {
            return Err(MuxError::ParameterSetsTooLarge(ps_len));
        }
        let moov = moov(
            &self.params,
            sps,
            pps,
            &self.sizes,
            &self.sync,
            self.mdat_at + 8,
        );
        let moov_len = moov.len() as u64;
        // RESERVE_FIXED covers the fixed boxes with room to spare; this only guards the sums.
        if moov_len + 8 > self.reserved {
            return Err(MuxError::TooLarge);
        }
        self.out.seek(SeekFrom::Start(self.moov_at))?;
        self.out.write_all(&moov)?;
        let free = self.reserved - moov_len;
        self.out.write_all(&(free as u32).to_be_bytes())?;
        self.out.write_all(b"free")?;
        self.out.seek(SeekFrom::Start(self.mdat_at))?;
        self.out
            .write_all(&((8 + self.payload) as u32).to_be_bytes())?;
        self.out.seek(SeekFrom::End(0))?;
        self.out.flush()?;
        Ok(self.mdat_at + 8 + self.payload)
    }
}

fn remember(slot: &mut Option<Vec<u8>>, nal: &[u8]) -> Result<(), MuxError> {
    match slot {
        Some(known) if known.as_slice() != nal => Err(MuxError::ParameterSetsChanged),
        Some(_) => Ok(()),
        None => {
            if nal.len() > MAX_PARAMETER_SETS {
                return Err(MuxError::ParameterSetsTooLarge(nal.len()));
            }
            *slot = Some(nal.to_vec());
            Ok(())
        }
    }
}

fn write_free<W: Write>(out: &mut W, size: u64) -> io::Result<()> {
    static ZEROS: [u8; 4096] = [0; 4096];
    let size32 = u32::try_from(size).map_err(io::Error::other)?;
    out.write_all(&size32.to_be_bytes())?;
    out.write_all(b"free")?;
    let mut left = size.saturating_sub(8);
    while left > 0 {
        let n = left.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// A box buffer: header first, size patched when done.
struct BoxBuf(Vec<u8>);

impl BoxBuf {
    fn new(kind: &[u8; 4]) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0]);
        v.extend_from_slice(kind);
        Self(v)
    }

    fn full(kind: &[u8; 4], version: u8, flags: u32) -> Self {
        let mut b = Self::new(kind);
        b.u32((u32::from(version) << 24) | (flags & 0x00FF_FFFF));
        b
    }

    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn child(&mut self, b: BoxBuf) -> &mut Self {
        let v = b.done();
        self.bytes(&v)
    }
    fn done(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[..4].copy_from_slice(&len.to_be_bytes());
        self.0
    }
}

const MATRIX: [u32; 9] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000];

fn ftyp() -> Vec<u8> {
    let mut b = BoxBuf::new(b"ftyp");
    b.bytes(b"isom").u32(0x200);
    for brand in [b"isom", b"iso2", b"avc1", b"mp41"] {
        b.bytes(brand);
    }
    b.done()
}

fn moov(
    p: &TrackParams,
    sps: &[u8],
    pps: &[u8],
    sizes: &[u32],
    sync: &[u32],
    first_offset: u64,
) -> Vec<u8> {
    let media_duration = u64::from(p.sample_delta) * sizes.len() as u64;
    let movie_duration = (media_duration * u64::from(MOVIE_TIMESCALE))
        .checked_div(u64::from(p.timescale))
        .unwrap_or(0);
    let movie_duration = u32::try_from(movie_duration).unwrap_or(u32::MAX);
    let media_duration = u32::try_from(media_duration).unwrap_or(u32::MAX);

    let mut mvhd = BoxBuf::full(b"mvhd", 0, 0);
    mvhd.u32(0).u32(0).u32(MOVIE_TIMESCALE).u32(movie_duration);
    mvhd.u32(0x0001_0000).u16(0x0100).zeros(10);
    for m in MATRIX {
        mvhd.u32(m);
    }
    mvhd.zeros(24).u32(2);

    let mut tkhd = BoxBuf::full(b"tkhd", 0, 0x3);
    tkhd.u32(0).u32(0).u32(1).u32(0).u32(movie_duration);
    tkhd.zeros(8).u16(0).u16(0).u16(0).u16(0);
    for m in MATRIX {
        tkhd.u32(m);
    }
    tkhd.u32(u32::from(p.display_width) << 16);
    tkhd.u32(u32::from(p.display_height) << 16);

    let mut mdhd = BoxBuf::full(b"mdhd", 0, 0);
    mdhd.u32(0).u32(0).u32(p.timescale).u32(media_duration);
    mdhd.u16(0x55C4).u16(0); // language "und"

    let mut hdlr = BoxBuf::full(b"hdlr", 0, 0);
    hdlr.u32(0)
        .bytes(b"vide")
        .zeros(12)
        .bytes(b"VideoHandler\0");

    let mut vmhd = BoxBuf::full(b"vmhd", 0, 1);
    vmhd.zeros(8);

    let mut url = BoxBuf::full(b"url ", 0, 1);
    url.zeros(0);
    let mut dref = BoxBuf::full(b"dref", 0, 0);
    dref.u32(1).child(url);
    let mut dinf = BoxBuf::new(b"dinf");
    dinf.child(dref);

    let mut avcc = BoxBuf::new(b"avcC");
    avcc.u8(1)
        .u8(sps[1])
        .u8(sps[2])
        .u8(sps[3])
        .u8(0xFF)
        .u8(0xE1);
    avcc.u16(sps.len() as u16).bytes(sps);
    avcc.u8(1).u16(pps.len() as u16).bytes(pps);
    if matches!(sps[1], 100 | 110 | 122 | 144) {
        // High profiles: chroma 4:2:0, 8-bit luma and chroma, no SPS extensions.
        avcc.u8(0xFD).u8(0xF8).u8(0xF8).u8(0);
    }

    let mut avc1 = BoxBuf::new(b"avc1");
    avc1.zeros(6).u16(1).u16(0).u16(0).zeros(12);
    avc1.u16(p.coded_width).u16(p.coded_height);
    avc1.u32(0x0048_0000).u32(0x0048_0000).u32(0).u16(1);
    let mut compressor = [0u8; 32];
    let name = b"relay simulator";
    compressor[0] = name.len() as u8;
    compressor[1..=name.len()].copy_from_slice(name);
    avc1.bytes(&compressor).u16(0x0018).u16(0xFFFF);
    avc1.child(avcc);

    let mut stsd = BoxBuf::full(b"stsd", 0, 0);
    stsd.u32(1).child(avc1);

    let mut stts = BoxBuf::full(b"stts", 0, 0);
    stts.u32(1).u32(sizes.len() as u32).u32(p.sample_delta);

    let mut stss = BoxBuf::full(b"stss", 0, 0);
    stss.u32(sync.len() as u32);
    for s in sync {
        stss.u32(*s);
    }

    let mut stsc = BoxBuf::full(b"stsc", 0, 0);
    stsc.u32(1).u32(1).u32(1).u32(1);

    let mut stsz = BoxBuf::full(b"stsz", 0, 0);
    stsz.u32(0).u32(sizes.len() as u32);
    for s in sizes {
        stsz.u32(*s);
    }

    // The caller checked that the whole mdat stays below 4 GiB, so every offset fits.
    let mut stco = BoxBuf::full(b"stco", 0, 0);
    stco.u32(sizes.len() as u32);
    let mut offset = first_offset;
    for s in sizes {
        stco.u32(offset as u32);
        offset += u64::from(*s);
    }

    let mut stbl = BoxBuf::new(b"stbl");
    stbl.child(stsd)
        .child(stts)
        .child(stss)
        .child(stsc)
        .child(stsz)
        .child(stco);
    let mut minf = BoxBuf::new(b"minf");
    minf.child(vmhd).child(dinf).child(stbl);
    let mut mdia = BoxBuf::new(b"mdia");
    mdia.child(mdhd).child(hdlr).child(minf);
    let mut trak = BoxBuf::new(b"trak");
    trak.child(tkhd).child(mdia);
    let mut moov = BoxBuf::new(b"moov");
    moov.child(mvhd).child(trak);
    moov.done()
}
