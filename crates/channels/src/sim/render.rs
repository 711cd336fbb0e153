//! The simulator's renderer: a moving test pattern encoded as H.264 in an MP4 file, plus the
//! first and last frames as PNG images.
//!
//! Frames are drawn straight into the Y, U and V planes of one reused buffer (4:2:0, BT.709
//! limited range), encoded by openh264 and streamed to the file by our MP4 writer, so memory does
//! not grow with the duration.
//!
//! Sizes: H.264 in 4:2:0 cannot carry an odd width or height (its cropping works in steps of two
//! pixels), so an odd side is encoded one pixel larger; the track header (`tkhd`) still declares
//! the exact requested size and the PNGs have it too. openh264 encodes at most 3840x2160 (or
//! 2160x3840); larger requests are encoded scaled down to fit, with `tkhd` again declaring the
//! requested size. [`Rendered`] tells the caller what the stream itself carries.
//!
//! A first-frame picture ([`RenderSpec::first_frame`]) covers the frame (scaled, and cropped
//! about its centre to the video's ratio; see [`Picture::cover`]) and is converted to the frame's
//! planes once. The first frame is that picture alone, so the thumbnail shows it; from the second
//! frame on it stays as the background under the moving overlays (the text, the frame counter,
//! the progress bar, and a band of the scrolling colour bars above the progress bar).
//!
//! What each frame shows is drawn by `pattern`, into the planes of `yuv`; this module checks
//! the request, drives the encoder and the MP4 writer, and writes the PNGs.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use openh264::encoder::{
    Complexity, Encoder, EncoderConfig, FrameRate, IntraFramePeriod, RateControlMode, UsageType,
    VuiConfig,
};
use openh264::{OpenH264API, Timestamp};

use super::mp4write::{Mp4Writer, MuxError, TrackParams};
use super::pattern::{Backdrop, Pattern};
use super::picture::Picture;
use super::yuv::Frame;

/// Smallest and largest accepted width or height.
pub const MIN_SIDE: u32 = 64;
pub const MAX_SIDE: u32 = 4096;
/// Longest accepted duration, in seconds: a stitched extension's total, which may pass the
/// longest a creation asks for.
pub const MAX_DURATION_SECS: u32 = videos_v1::derive::MAX_EXTENDED_DURATION;
/// Highest accepted frame rate.
pub const MAX_FPS: u32 = 60;

/// openh264 refuses pictures beyond 3840x2160 (either orientation).
const ENCODER_MAX_LONG: u32 = 3840;
const ENCODER_MAX_SHORT: u32 = 2160;

/// What to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderSpec {
    /// 64..=4096 each; odd values are accepted (see the module docs).
    pub width: u32,
    pub height: u32,
    /// Whole seconds, 1..=[`MAX_DURATION_SECS`].
    pub duration_secs: u32,
    /// Frames per second, 1..=60 (the simulator uses 24).
    pub fps: u32,
    /// Drawn on every frame (the prompt's first words).
    pub text: String,
    /// The picture the video starts from (see the module docs), of any size.
    pub first_frame: Option<Picture>,
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rendered {
    /// Size of the MP4 file.
    pub video_bytes: u64,
    /// Number of frames, `duration_secs * fps`.
    pub frames: u32,
    /// The picture size inside the H.264 stream: the requested size rounded up to even, or
    /// scaled down to the encoder's limit. The MP4's `tkhd` and the PNGs carry the requested size.
    pub coded_width: u32,
    pub coded_height: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("render: size {width}x{height}: each side must be {MIN_SIDE}..={MAX_SIDE}")]
    InvalidSize { width: u32, height: u32 },
    #[error("render: duration {0} s: must be 1..={MAX_DURATION_SECS}")]
    InvalidDuration(u32),
    #[error("render: frame rate {0}: must be 1..={MAX_FPS}")]
    InvalidFps(u32),
    #[error("render: create the {what} file: {source}")]
    Create {
        what: &'static str,
        source: io::Error,
    },
    #[error("render: write the {what} file: {source}")]
    Write {
        what: &'static str,
        source: io::Error,
    },
    #[error("render: start the H.264 encoder: openh264 error {0}")]
    EncoderInit(i64),
    #[error("render: encode frame {frame}: openh264 error {code}")]
    Encode { frame: u32, code: i64 },
    #[error("render: mux frame {frame}: {source}")]
    Mux { frame: u32, source: MuxError },
    #[error("render: finish the video file: {0}")]
    Finish(MuxError),
    #[error("render: write the {what} png: {source}")]
    Png {
        what: &'static str,
        source: png::EncodingError,
    },
}

/// Writes an H.264 MP4 of `spec` to `video_out`, its first frame as PNG to `thumbnail_out` and
/// its last frame as PNG to `last_frame_out`. Blocking and CPU-bound: run it on a blocking thread.
/// On error the files may be left half written; the caller removes them.
pub fn render(
    spec: &RenderSpec,
    video_out: &Path,
    thumbnail_out: &Path,
    last_frame_out: &Path,
) -> Result<Rendered, RenderError> {
    render_with_sheet(spec, video_out, thumbnail_out, last_frame_out, None)
}

/// Tiles across and down a spritesheet.
pub const SHEET_GRID: usize = 3;
/// Widest tile of a spritesheet, in pixels.
const SHEET_TILE_MAX: usize = 320;

/// [`render`], plus a spritesheet: a PNG of [`SHEET_GRID`] x [`SHEET_GRID`] frames spread
/// evenly over the video (first frame first), each scaled down to at most
/// [`SHEET_TILE_MAX`] pixels wide, written to `sheet_out`.
pub fn render_with_sheet(
    spec: &RenderSpec,
    video_out: &Path,
    thumbnail_out: &Path,
    last_frame_out: &Path,
    sheet_out: Option<&Path>,
) -> Result<Rendered, RenderError> {
    let sides = MIN_SIDE..=MAX_SIDE;
    if !sides.contains(&spec.width) || !sides.contains(&spec.height) {
        return Err(RenderError::InvalidSize {
            width: spec.width,
            height: spec.height,
        });
    }
    if !(1..=MAX_DURATION_SECS).contains(&spec.duration_secs) {
        return Err(RenderError::InvalidDuration(spec.duration_secs));
    }
    if !(1..=MAX_FPS).contains(&spec.fps) {
        return Err(RenderError::InvalidFps(spec.fps));
    }
    let frames = spec.duration_secs * spec.fps;
    let (coded_w, coded_h) = coded_size(spec.width, spec.height);
    let display = (spec.width as usize, spec.height as usize);

    let file = File::create(video_out).map_err(|source| RenderError::Create {
        what: "video",
        source,
    })?;
    let params = TrackParams {
        // Every side is at most 4096 here, so the casts are lossless.
        coded_width: coded_w as u16,
        coded_height: coded_h as u16,
        display_width: spec.width as u16,
        display_height: spec.height as u16,
        timescale: spec.fps * 1000,
        sample_delta: 1000,
        frame_count: frames,
    };
    let mut mux = Mp4Writer::new(BufWriter::with_capacity(1 << 18, file), params)
        .map_err(|source| RenderError::Mux { frame: 0, source })?;

    // Rate control off: openh264 then codes at a fixed quantiser (26), which keeps the pattern
    // clean at about 0.5 Mbit/s for 720p, and it never skips a frame. (With rate control on,
    // frames may only be skipped, or openh264 warns on stderr for every encoder it starts.)
    let config = EncoderConfig::new()
        .max_frame_rate(FrameRate::from_hz(spec.fps as f32))
        .rate_control_mode(RateControlMode::Off)
        .skip_frames(false)
        .usage_type(UsageType::CameraVideoRealTime)
        .complexity(Complexity::Low)
        .scene_change_detect(false)
        .adaptive_quantization(false)
        .background_detection(false)
        .intra_frame_period(IntraFramePeriod::from_num_frames(spec.fps * 2))
        .vui(VuiConfig::bt709());
    let mut encoder = Encoder::with_api_config(OpenH264API::from_source(), config)
        .map_err(|e| RenderError::EncoderInit(e.native_code()))?;

    let coded = (coded_w as usize, coded_h as usize);
    let backdrop = spec
        .first_frame
        .as_ref()
        .map(|picture| Backdrop::new(picture, coded, display));
    let pattern = Pattern::new(coded.0, coded.1, spec.fps, frames, &spec.text, backdrop);
    let mut frame = Frame::new(coded_w as usize, coded_h as usize);
    pattern.init(&mut frame);
    let mut sheet = sheet_out.map(|_| Sheet::new(display));
    let tiles = (SHEET_GRID * SHEET_GRID) as u64;
    for index in 0..frames {
        pattern.draw(&mut frame, index);
        if index == 0 {
            write_png(&frame, display, thumbnail_out, "thumbnail")?;
        }
        if let Some(sheet) = &mut sheet {
            // Tile t shows frame t * frames / tiles: the first frame, then evenly on.
            for t in 0..tiles {
                if t * u64::from(frames) / tiles == u64::from(index) {
                    sheet.put(&frame, display, t as usize);
                }
            }
        }
        if index + 1 == frames {
            write_png(&frame, display, last_frame_out, "last frame")?;
        }
        let at = Timestamp::from_millis(u64::from(index) * 1000 / u64::from(spec.fps));
        let stream = encoder
            .encode_at(&frame, at)
            .map_err(|e| RenderError::Encode {
                frame: index,
                code: e.native_code(),
            })?;
        let mux_err = |source| RenderError::Mux {
            frame: index,
            source,
        };
        for l in 0..stream.num_layers() {
            let Some(layer) = stream.layer(l) else {
                continue;
            };
            for n in 0..layer.nal_count() {
                if let Some(nal) = layer.nal_unit(n) {
                    mux.write_nal(strip_start_code(nal)).map_err(mux_err)?;
                }
            }
        }
        mux.end_sample().map_err(mux_err)?;
    }
    let video_bytes = mux.finish().map_err(RenderError::Finish)?;
    if let (Some(sheet), Some(path)) = (sheet, sheet_out) {
        sheet.write(path)?;
    }
    Ok(Rendered {
        video_bytes,
        frames,
        coded_width: coded_w,
        coded_height: coded_h,
    })
}

/// The size the encoder works at: even, and within openh264's limit.
fn coded_size(width: u32, height: u32) -> (u32, u32) {
    let (w, h) = (width + (width & 1), height + (height & 1));
    let (long, short) = (w.max(h), w.min(h));
    if long <= ENCODER_MAX_LONG && short <= ENCODER_MAX_SHORT {
        return (w, h);
    }
    let scale = f64::min(
        f64::from(ENCODER_MAX_LONG) / f64::from(long),
        f64::from(ENCODER_MAX_SHORT) / f64::from(short),
    );
    let fit = |side: u32| (((f64::from(side) * scale) as u32) & !1).max(2);
    (fit(w), fit(h))
}

fn strip_start_code(nal: &[u8]) -> &[u8] {
    if let Some(rest) = nal.strip_prefix(&[0, 0, 0, 1]) {
        rest
    } else if let Some(rest) = nal.strip_prefix(&[0, 0, 1]) {
        rest
    } else {
        nal
    }
}

/// Writes `frame` as an RGB PNG of `display` size, row by row.
/// A spritesheet being filled, as RGB rows.
struct Sheet {
    tile: (usize, usize),
    rgb: Vec<u8>,
}

impl Sheet {
    fn new(display: (usize, usize)) -> Sheet {
        let (dw, dh) = display;
        let tw = (dw / SHEET_GRID).clamp(1, SHEET_TILE_MAX);
        let th = (tw * dh / dw.max(1)).max(1);
        Sheet {
            tile: (tw, th),
            rgb: vec![0; tw * th * SHEET_GRID * SHEET_GRID * 3],
        }
    }

    /// Scales `frame` down (nearest pixel) into tile `t`, row by row.
    fn put(&mut self, frame: &Frame, display: (usize, usize), t: usize) {
        let (dw, dh) = display;
        let (tw, th) = self.tile;
        let width = tw * SHEET_GRID;
        let (col, row) = (t % SHEET_GRID, t / SHEET_GRID);
        let mut line = vec![0u8; dw * 3];
        for y in 0..th {
            frame.rgb_row(y * dh / th, display, &mut line);
            let start = ((row * th + y) * width + col * tw) * 3;
            for x in 0..tw {
                let from = (x * dw / tw) * 3;
                self.rgb[start + x * 3..start + x * 3 + 3].copy_from_slice(&line[from..from + 3]);
            }
        }
    }

    fn write(&self, path: &Path) -> Result<(), RenderError> {
        let what = "spritesheet";
        let (tw, th) = self.tile;
        let file = File::create(path).map_err(|source| RenderError::Create { what, source })?;
        let (w, h) = ((tw * SHEET_GRID) as u32, (th * SHEET_GRID) as u32);
        let mut encoder = png::Encoder::new(BufWriter::new(file), w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let png_err = |source| RenderError::Png { what, source };
        let mut writer = encoder.write_header().map_err(png_err)?;
        writer.write_image_data(&self.rgb).map_err(png_err)?;
        writer.finish().map_err(png_err)?;
        Ok(())
    }
}

fn write_png(
    frame: &Frame,
    display: (usize, usize),
    path: &Path,
    what: &'static str,
) -> Result<(), RenderError> {
    let (dw, dh) = display;
    let file = File::create(path).map_err(|source| RenderError::Create { what, source })?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), dw as u32, dh as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let png_err = |source| RenderError::Png { what, source };
    let mut writer = encoder.write_header().map_err(png_err)?;
    let mut stream = writer.stream_writer().map_err(png_err)?;
    let mut line = vec![0u8; dw * 3];
    for dy in 0..dh {
        frame.rgb_row(dy, display, &mut line);
        stream
            .write_all(&line)
            .map_err(|source| RenderError::Write { what, source })?;
    }
    stream.finish().map_err(png_err)?;
    // Writes the end chunk and flushes the file.
    writer.finish().map_err(png_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coded_size_is_even_and_within_the_encoder_limit() {
        assert_eq!(coded_size(160, 90), (160, 90));
        assert_eq!(coded_size(161, 91), (162, 92));
        assert_eq!(coded_size(3840, 2160), (3840, 2160));
        assert_eq!(coded_size(2160, 3840), (2160, 3840));
        for (w, h) in [
            (4096, 4096),
            (4096, 2160),
            (4096, 64),
            (64, 4096),
            (4095, 3001),
        ] {
            let (cw, ch) = coded_size(w, h);
            assert!(cw % 2 == 0 && ch % 2 == 0, "{w}x{h} -> {cw}x{ch}");
            assert!(cw.max(ch) <= ENCODER_MAX_LONG && cw.min(ch) <= ENCODER_MAX_SHORT);
        }
    }
}

/// Renders real files; quick in the dev profile (small sizes, 2 s).
#[cfg(test)]
mod render_tests {
    use super::*;
    use crate::mp4probe;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A scratch directory removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("channels-render-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::BufReader::new(File::open(path).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    /// Renders, then checks the MP4 with our probe and the PNGs with the png crate.
    fn check(width: u32, height: u32, duration_secs: u32, coded: (u32, u32)) {
        let dir = Scratch::new();
        let (video, thumb, last) = (
            dir.0.join("v.mp4"),
            dir.0.join("first.png"),
            dir.0.join("last.png"),
        );
        let spec = RenderSpec {
            width,
            height,
            duration_secs,
            fps: 24,
            text: "A red fox jumps över the lazy dog\n".into(),
            first_frame: None,
        };
        let out = render(&spec, &video, &thumb, &last).unwrap();
        assert_eq!(out.frames, duration_secs * 24);
        assert_eq!((out.coded_width, out.coded_height), coded);
        assert_eq!(out.video_bytes, std::fs::metadata(&video).unwrap().len());

        let info = mp4probe::probe_path(&video).unwrap();
        assert_eq!((info.width, info.height), (width, height));
        assert!(
            (info.duration_secs - f64::from(duration_secs)).abs() < 0.01,
            "{info:?}"
        );
        assert_eq!(info.codec, "avc1");
        assert!(info.brands.iter().any(|b| b == "isom"));

        let (fw, fh, first) = decode_png(&thumb);
        let (lw, lh, last) = decode_png(&last);
        assert_eq!((fw, fh, lw, lh), (width, height, width, height));
        assert_ne!(first, last);
    }

    #[test]
    fn renders_a_small_video() {
        check(160, 90, 2, (160, 90));
    }

    #[test]
    fn renders_odd_sizes_with_the_exact_size_in_the_track_header() {
        check(161, 91, 1, (162, 92));
        check(64, 65, 1, (64, 66));
    }

    /// Four quarters: red, green / blue, yellow.
    fn quarters(w: u32, h: u32) -> Picture {
        const Q: [[u8; 3]; 4] = [[220, 40, 40], [40, 200, 60], [40, 60, 220], [230, 220, 60]];
        let rgb = (0..h)
            .flat_map(|y| {
                (0..w).flat_map(move |x| Q[usize::from(y >= h / 2) * 2 + usize::from(x >= w / 2)])
            })
            .collect();
        Picture::from_rgb(w, h, rgb).unwrap()
    }

    fn rgb_at(png: &(u32, u32, Vec<u8>), x: u32, y: u32) -> [u8; 3] {
        let i = ((y * png.0 + x) * 3) as usize;
        [png.2[i], png.2[i + 1], png.2[i + 2]]
    }

    #[test]
    fn starts_from_the_first_frame_picture() {
        for (width, height) in [(160, 90), (161, 91), (90, 160)] {
            let dir = Scratch::new();
            let (video, thumb, last) = (
                dir.0.join("v.mp4"),
                dir.0.join("first.png"),
                dir.0.join("last.png"),
            );
            // A 4:3 picture, so the video crops it.
            let picture = quarters(64, 48);
            let spec = RenderSpec {
                width,
                height,
                duration_secs: 1,
                fps: 12,
                text: "x".into(),
                first_frame: Some(picture.clone()),
            };
            render(&spec, &video, &thumb, &last).unwrap();
            let info = mp4probe::probe_path(&video).unwrap();
            assert_eq!((info.width, info.height), (width, height));

            // The thumbnail is the picture scaled to cover the frame, give or take the YUV
            // round trip; 4:2:0 chroma blurs the edges between the quarters, so those are only
            // checked loosely.
            let first = decode_png(&thumb);
            assert_eq!((first.0, first.1), (width, height));
            let want = picture.cover(width as usize, height as usize);
            for y in 0..height {
                for x in 0..width {
                    let got = rgb_at(&first, x, y);
                    let diff = got
                        .iter()
                        .zip(want.pixel(x, y).unwrap())
                        .map(|(a, b)| a.abs_diff(b))
                        .max()
                        .unwrap();
                    let near_edge = x.abs_diff(width / 2) <= 3 || y.abs_diff(height / 2) <= 3;
                    let limit = if near_edge { 128 } else { 6 };
                    assert!(diff <= limit, "{width}x{height} at {x},{y}: {got:?}");
                }
            }

            // The last frame moved on, over the same picture.
            let last = decode_png(&last);
            assert_ne!(first.2, last.2);
            let (x, y) = (width * 3 / 4, height / 2 - 2);
            assert_eq!(rgb_at(&last, x, y), rgb_at(&first, x, y));
        }
    }

    #[test]
    fn the_file_is_fast_start_and_every_truncation_fails_the_probe() {
        let dir = Scratch::new();
        let (video, thumb, last) = (
            dir.0.join("v.mp4"),
            dir.0.join("first.png"),
            dir.0.join("last.png"),
        );
        let spec = RenderSpec {
            width: 96,
            height: 64,
            duration_secs: 1,
            fps: 24,
            text: "x".into(),
            first_frame: None,
        };
        render(&spec, &video, &thumb, &last).unwrap();
        let bytes = std::fs::read(&video).unwrap();
        let tops: Vec<&[u8]> = {
            let mut at = 0;
            let mut v = Vec::new();
            while at + 8 <= bytes.len() {
                let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                v.push(&bytes[at + 4..at + 8]);
                at += size;
            }
            v
        };
        assert_eq!(tops, [b"ftyp".as_slice(), b"moov", b"free", b"mdat"]);
        for cut in [bytes.len() - 1, bytes.len() / 2, 40, 7] {
            assert!(
                mp4probe::probe_bytes(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // Damage anywhere in the header boxes: errors or odd values, never a panic.
        let head = 32 + u32::from_be_bytes(bytes[32..36].try_into().unwrap()) as usize;
        for i in 0..head {
            let mut bad = bytes.clone();
            bad[i] ^= 0xA5;
            let _ = mp4probe::probe_bytes(&bad);
        }
    }

    /// 1280x720, 10 s: what a typical task costs. `RUN_SLOW_TESTS=1` to run it.
    #[test]
    fn renders_720p_for_ten_seconds() {
        if std::env::var_os("RUN_SLOW_TESTS").is_none() {
            return;
        }
        let started = std::time::Instant::now();
        check(1280, 720, 10, (1280, 720));
        eprintln!(
            "1280x720, 10 s at 24 fps rendered and checked in {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn refuses_what_it_cannot_render() {
        let dir = Scratch::new();
        let p = |n: &str| dir.0.join(n);
        let base = RenderSpec {
            width: 160,
            height: 90,
            duration_secs: 1,
            fps: 24,
            text: String::new(),
            first_frame: None,
        };
        for spec in [
            RenderSpec {
                width: 63,
                ..base.clone()
            },
            RenderSpec {
                height: 4097,
                ..base.clone()
            },
            RenderSpec {
                duration_secs: 0,
                ..base.clone()
            },
            RenderSpec {
                duration_secs: MAX_DURATION_SECS + 1,
                ..base.clone()
            },
            RenderSpec {
                fps: 0,
                ..base.clone()
            },
        ] {
            assert!(
                render(&spec, &p("v.mp4"), &p("a.png"), &p("b.png")).is_err(),
                "{spec:?}"
            );
        }
        let missing = dir.0.join("no-such-dir").join("v.mp4");
        let err = render(&base, &missing, &p("a.png"), &p("b.png")).unwrap_err();
        assert!(err.to_string().contains("create the video file"), "{err}");
    }
}
