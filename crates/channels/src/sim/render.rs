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

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use openh264::encoder::{
    Complexity, Encoder, EncoderConfig, FrameRate, IntraFramePeriod, RateControlMode, UsageType,
    VuiConfig,
};
use openh264::formats::YUVSource;
use openh264::{OpenH264API, Timestamp};

use super::font::{ADVANCE_X, ADVANCE_Y, Canvas, text_width};
use super::mp4write::{Mp4Writer, MuxError, TrackParams};
use super::picture::Picture;

/// Smallest and largest accepted width or height.
pub const MIN_SIDE: u32 = 64;
pub const MAX_SIDE: u32 = 4096;
/// Longest accepted duration, in seconds.
pub const MAX_DURATION_SECS: u32 = 15;
/// Highest accepted frame rate.
pub const MAX_FPS: u32 = 60;

/// openh264 refuses pictures beyond 3840x2160 (either orientation).
const ENCODER_MAX_LONG: u32 = 3840;
const ENCODER_MAX_SHORT: u32 = 2160;

/// Where the shown text is cut, whatever the caller passes.
const MAX_TEXT_CHARS: usize = 80;
/// The text wraps on at most this many lines.
const MAX_TITLE_LINES: usize = 3;

/// What to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderSpec {
    /// 64..=4096 each; odd values are accepted (see the module docs).
    pub width: u32,
    pub height: u32,
    /// Whole seconds, 1..=15.
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
    for index in 0..frames {
        pattern.draw(&mut frame, index);
        if index == 0 {
            write_png(&frame, display, thumbnail_out, "thumbnail")?;
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

/// One 4:2:0 picture, planes without padding.
struct Frame {
    w: usize,
    h: usize,
    y: Vec<u8>,
    u: Vec<u8>,
    v: Vec<u8>,
}

impl Frame {
    /// `w` and `h` are even.
    fn new(w: usize, h: usize) -> Self {
        let chroma = (w / 2) * (h / 2);
        Self {
            w,
            h,
            y: vec![16; w * h],
            u: vec![128; chroma],
            v: vec![128; chroma],
        }
    }

    /// Sets U and V to neutral over the luma rectangle (x, y, w, h), clipped.
    fn neutral_chroma(&mut self, x: usize, y: usize, w: usize, h: usize) {
        let cw = self.w / 2;
        let ch = self.h / 2;
        let (x0, y0) = (x / 2, y / 2);
        let x1 = x.saturating_add(w).div_ceil(2).min(cw);
        let y1 = y.saturating_add(h).div_ceil(2).min(ch);
        if x0 >= x1 {
            return;
        }
        for row in y0..y1 {
            let range = row * cw + x0..row * cw + x1;
            if let Some(line) = self.u.get_mut(range.clone()) {
                line.fill(128);
            }
            if let Some(line) = self.v.get_mut(range) {
                line.fill(128);
            }
        }
    }

    /// Row `dy` of the picture shown at `display` size, as RGB: cropped when the frame is larger
    /// (odd sizes), sampled up when it is smaller (sizes beyond the encoder's limit).
    fn rgb_row(&self, dy: usize, display: (usize, usize), line: &mut [u8]) {
        let (dw, dh) = display;
        let cw = self.w / 2;
        if dw <= self.w && dh <= self.h {
            let luma = &self.y[dy * self.w..dy * self.w + dw];
            let u = &self.u[(dy / 2) * cw..(dy / 2 + 1) * cw];
            let v = &self.v[(dy / 2) * cw..(dy / 2 + 1) * cw];
            for (dx, (px, l)) in line.chunks_exact_mut(3).zip(luma).enumerate() {
                px.copy_from_slice(&bt709_to_rgb(*l, u[dx / 2], v[dx / 2]));
            }
        } else {
            let sy = dy * self.h / dh;
            for (dx, px) in line.chunks_exact_mut(3).enumerate() {
                let sx = dx * self.w / dw;
                let ci = (sy / 2) * cw + sx / 2;
                px.copy_from_slice(&bt709_to_rgb(
                    self.y[sy * self.w + sx],
                    self.u[ci],
                    self.v[ci],
                ));
            }
        }
    }

    fn luma(&mut self) -> Canvas<'_> {
        Canvas {
            pixels: &mut self.y,
            width: self.w,
            height: self.h,
        }
    }
}

impl YUVSource for Frame {
    fn dimensions(&self) -> (usize, usize) {
        (self.w, self.h)
    }

    fn strides(&self) -> (usize, usize, usize) {
        (self.w, self.w / 2, self.w / 2)
    }

    fn y(&self) -> &[u8] {
        &self.y
    }

    fn u(&self) -> &[u8] {
        &self.u
    }

    fn v(&self) -> &[u8] {
        &self.v
    }
}

/// SMPTE-style 75% colour bars in BT.709 limited range (Y, Cb, Cr).
const BARS: [(u8, u8, u8); 7] = [
    (180, 128, 128), // grey
    (168, 44, 136),  // yellow
    (145, 147, 44),  // cyan
    (133, 63, 52),   // green
    (63, 193, 204),  // magenta
    (51, 109, 212),  // red
    (28, 212, 120),  // blue
];

const INK: u8 = 235;
const PAPER: u8 = 16;

/// A pre-drawn luma rectangle, copied onto each frame.
struct Sprite {
    x: usize,
    y: usize,
    w: usize,
    h: usize,
    luma: Vec<u8>,
}

/// The first-frame picture in the frame's planes (coded size), made once per render.
struct Backdrop {
    y: Vec<u8>,
    u: Vec<u8>,
    v: Vec<u8>,
}

impl Backdrop {
    /// `picture` made to cover what is shown: the `display` size, or the `coded` one where
    /// that is smaller (sizes beyond the encoder's limit). An odd side's extra coded row or
    /// column, cropped away on display, repeats the last one. `coded` sides are even.
    fn new(picture: &Picture, coded: (usize, usize), display: (usize, usize)) -> Backdrop {
        let (cw, ch) = coded;
        let (tw, th) = (display.0.min(cw).max(1), display.1.min(ch).max(1));
        let scaled = picture.cover(tw, th);
        let rgb = scaled.rgb();
        let px = |x: usize, y: usize| {
            let i = (y.min(th - 1) * tw + x.min(tw - 1)) * 3;
            [rgb[i], rgb[i + 1], rgb[i + 2]]
        };
        let mut y = Vec::with_capacity(cw * ch);
        for row in 0..ch {
            for col in 0..cw {
                y.push(rgb_to_bt709(px(col, row)).0);
            }
        }
        let (hw, hh) = (cw / 2, ch / 2);
        let mut u = Vec::with_capacity(hw * hh);
        let mut v = Vec::with_capacity(hw * hh);
        for row in 0..hh {
            for col in 0..hw {
                // The chroma of the 2x2 block's mean colour.
                let mut sum = [0u32; 3];
                for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    let p = px(2 * col + dx, 2 * row + dy);
                    for (s, c) in sum.iter_mut().zip(p) {
                        *s += u32::from(c);
                    }
                }
                let (_, cb, cr) = rgb_to_bt709(sum.map(|s| ((s + 2) / 4) as u8));
                u.push(cb);
                v.push(cr);
            }
        }
        Backdrop { y, u, v }
    }
}

/// Everything about the picture that does not change from frame to frame.
struct Pattern {
    w: usize,
    h: usize,
    frames: u32,
    fps: u32,
    /// Rows `0..bars_end` show the bars scrolling left, the rest a luma ramp scrolling right.
    bars_end: usize,
    /// Luma pixels the pattern moves per frame (even, so chroma moves by whole samples).
    speed: usize,
    /// Each row twice over, so any scroll offset is one contiguous copy.
    bars_y: Vec<u8>,
    bars_u: Vec<u8>,
    bars_v: Vec<u8>,
    ramp_y: Vec<u8>,
    title: Option<Sprite>,
    margin: usize,
    scale: usize,
    bar_h: usize,
    /// The first-frame picture, shown instead of the full-frame bars and ramp.
    backdrop: Option<Backdrop>,
    /// Height of the band of bars drawn over a backdrop, just above the progress bar (even; 0
    /// without a backdrop).
    band_h: usize,
}

impl Pattern {
    fn new(
        w: usize,
        h: usize,
        fps: u32,
        frames: u32,
        text: &str,
        backdrop: Option<Backdrop>,
    ) -> Self {
        let cw = w / 2;
        let mut bars_y = Vec::with_capacity(2 * w);
        for x in 0..2 * w {
            bars_y.push(BARS[(x % w) * BARS.len() / w].0);
        }
        let mut bars_u = Vec::with_capacity(2 * cw);
        let mut bars_v = Vec::with_capacity(2 * cw);
        for cx in 0..2 * cw {
            let (_, u, v) = BARS[(cx % cw) * BARS.len() / cw];
            bars_u.push(u);
            bars_v.push(v);
        }
        // A triangle from black to white and back, so the scroll wraps without a seam.
        let mut ramp_y = Vec::with_capacity(2 * w);
        for x in 0..2 * w {
            let t = (x % w) * 2 * 219 / w; // 0..438
            let level = if t <= 219 { t } else { 438 - t };
            ramp_y.push(16 + level as u8);
        }
        let bars_end = (h * 2 / 3) & !1;
        let speed = ((w / (fps as usize * 4).max(1)) & !1).max(2);
        let short = w.min(h);
        let margin = (short / 40).max(2) & !1;
        let scale = (short / 135).max(1);
        let bar_h = (h / 60).max(2) & !1;
        let band_h = if backdrop.is_some() {
            (h / 12).max(2) & !1
        } else {
            0
        };
        let mut pattern = Self {
            w,
            h,
            frames,
            fps,
            bars_end,
            speed,
            bars_y,
            bars_u,
            bars_v,
            ramp_y,
            title: None,
            margin,
            scale,
            bar_h,
            backdrop,
            band_h,
        };
        pattern.title = pattern.title_sprite(text);
        pattern
    }

    /// The text on a black box at the top left, wrapped on up to three lines, as large as fits.
    fn title_sprite(&self, text: &str) -> Option<Sprite> {
        let text: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_TEXT_CHARS)
            .collect();
        let chars = text.trim().chars().count();
        if chars == 0 || self.room() < ADVANCE_X {
            return None;
        }
        let mut scale = self.scale;
        let mut lines = Vec::new();
        while scale >= 1 {
            let (cols, _) = self.fit_at(chars, scale);
            lines = wrap(&text, cols);
            if lines.len() <= MAX_TITLE_LINES || scale == 1 {
                break;
            }
            scale -= 1;
        }
        lines.truncate(MAX_TITLE_LINES);
        let longest = lines.iter().map(|l| l.chars().count()).max()?;
        let pad = scale * 2;
        let w = (text_width(longest, scale) + 2 * pad).min(self.w.saturating_sub(self.margin)) & !1;
        if w == 0 {
            return None;
        }
        let h = ((lines.len() * ADVANCE_Y - 1) * scale + 2 * pad + 1) & !1;
        let mut luma = vec![PAPER; w * h];
        let mut canvas = Canvas {
            pixels: &mut luma,
            width: w,
            height: h,
        };
        for (i, line) in lines.iter().enumerate() {
            canvas.draw_text(line, pad, pad + i * ADVANCE_Y * scale, scale, INK);
        }
        Some(Sprite {
            x: self.margin,
            y: self.margin,
            w,
            h,
            luma,
        })
    }

    /// How many of `chars` characters fit on one line, and at what scale: the base scale, or
    /// smaller down to 1, then fewer characters.
    fn fit(&self, chars: usize) -> Option<(usize, usize)> {
        if chars == 0 || self.room() < ADVANCE_X {
            return None;
        }
        let mut scale = self.scale;
        while scale > 1 && self.fit_at(chars, scale).0 < chars {
            scale -= 1;
        }
        Some(self.fit_at(chars, scale))
    }

    /// How many of `chars` characters (at least one) fit on one line at `scale`.
    fn fit_at(&self, chars: usize, scale: usize) -> (usize, usize) {
        let mut n = chars.max(1);
        while n > 1 && text_width(n, scale) + 4 * scale > self.room() {
            n -= 1;
        }
        (n, scale)
    }

    /// Width available to a text box.
    fn room(&self) -> usize {
        self.w.saturating_sub(2 * self.margin + 4)
    }

    /// Draws what never changes: the neutral chroma of the ramp area.
    fn init(&self, frame: &mut Frame) {
        let cw = self.w / 2;
        let start = (self.bars_end / 2) * cw;
        if let Some(rest) = frame.u.get_mut(start..) {
            rest.fill(128);
        }
        if let Some(rest) = frame.v.get_mut(start..) {
            rest.fill(128);
        }
    }

    fn draw(&self, frame: &mut Frame, index: u32) {
        let w = self.w;
        let shift = (index as usize).wrapping_mul(self.speed) % w;
        if let Some(backdrop) = &self.backdrop {
            frame.y.copy_from_slice(&backdrop.y);
            frame.u.copy_from_slice(&backdrop.u);
            frame.v.copy_from_slice(&backdrop.v);
            if index == 0 {
                // The video starts from the picture alone.
                return;
            }
            let top = self.h - self.bar_h - self.band_h;
            self.draw_bars(frame, top..top + self.band_h, shift);
        } else {
            self.draw_bars(frame, 0..self.bars_end, shift);
            // The ramp moves right.
            let rshift = (w - shift) % w;
            for row in frame.y[self.bars_end * w..].chunks_exact_mut(w) {
                row.copy_from_slice(&self.ramp_y[rshift..rshift + w]);
            }
        }

        if let Some(title) = &self.title {
            for (r, src) in title.luma.chunks_exact(title.w).enumerate() {
                let start = (title.y + r) * w + title.x;
                if let Some(dst) = frame.y.get_mut(start..start + title.w) {
                    dst.copy_from_slice(src);
                }
            }
            frame.neutral_chroma(title.x, title.y, title.w, title.h);
        }

        self.draw_counter(frame, index);

        // Progress bar along the bottom edge.
        let y = self.h - self.bar_h;
        let done = (w * (index as usize + 1) / self.frames.max(1) as usize) & !1;
        let mut luma = frame.luma();
        luma.fill(0, y, done, self.bar_h, INK);
        luma.fill(done, y, w - done, self.bar_h, PAPER);
        frame.neutral_chroma(0, y, w, self.bar_h);
    }

    /// The colour bars on luma rows `rows` (even bounds), moved left by `shift` pixels.
    fn draw_bars(&self, frame: &mut Frame, rows: std::ops::Range<usize>, shift: usize) {
        let (w, cw) = (self.w, self.w / 2);
        for row in frame.y[rows.start * w..rows.end * w].chunks_exact_mut(w) {
            row.copy_from_slice(&self.bars_y[shift..shift + w]);
        }
        let cshift = shift / 2;
        let crows = rows.start / 2 * cw..rows.end / 2 * cw;
        for row in frame.u[crows.clone()].chunks_exact_mut(cw) {
            row.copy_from_slice(&self.bars_u[cshift..cshift + cw]);
        }
        for row in frame.v[crows].chunks_exact_mut(cw) {
            row.copy_from_slice(&self.bars_v[cshift..cshift + cw]);
        }
    }

    /// "frame 12/240 00:00.11" on a black box at the bottom left, above the progress bar.
    fn draw_counter(&self, frame: &mut Frame, index: u32) {
        let secs = index / self.fps;
        let label = format!(
            "frame {}/{} {:02}:{:02}.{:02}",
            index + 1,
            self.frames,
            secs / 60,
            secs % 60,
            index % self.fps
        );
        let Some((chars, scale)) = self.fit(label.len()) else {
            return;
        };
        let pad = scale * 2;
        let bw = (text_width(chars, scale) + 2 * pad).min(self.w.saturating_sub(self.margin)) & !1;
        let bh = (ADVANCE_Y * scale + 2 * pad) & !1;
        let bottom = self
            .h
            .saturating_sub(self.bar_h + self.band_h + self.margin);
        let y = bottom.saturating_sub(bh) & !1;
        let x = self.margin;
        let mut luma = frame.luma();
        luma.fill(x, y, bw, bh, PAPER);
        luma.draw_text(&label[..chars], x + pad, y + pad, scale, INK);
        frame.neutral_chroma(x, y, bw, bh);
    }
}

/// Greedy word wrap at `cols` characters; words longer than a line are split.
fn wrap(text: &str, cols: usize) -> Vec<String> {
    let cols = cols.max(1);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while !word.is_empty() {
            let room = if len == 0 {
                cols
            } else {
                cols.saturating_sub(len + 1)
            };
            if word.len() <= room {
                if len > 0 {
                    line.push(' ');
                    len += 1;
                }
                line.extend(word.iter());
                len += word.len();
                word.clear();
            } else if len > 0 {
                lines.push(std::mem::take(&mut line));
                len = 0;
            } else {
                line.extend(word.drain(..cols));
                lines.push(std::mem::take(&mut line));
            }
        }
    }
    if len > 0 {
        lines.push(line);
    }
    lines
}

/// Writes `frame` as an RGB PNG of `display` size, row by row.
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

/// 8-bit RGB to BT.709 limited range (Y, Cb, Cr).
fn rgb_to_bt709([r, g, b]: [u8; 3]) -> (u8, u8, u8) {
    const KR: f32 = 0.2126;
    const KB: f32 = 0.0722;
    let (r, g, b) = (f32::from(r), f32::from(g), f32::from(b));
    let luma = KR * r + (1.0 - KR - KB) * g + KB * b;
    let y = 16.0 + luma * 219.0 / 255.0;
    let cb = 128.0 + (b - luma) / (2.0 * (1.0 - KB)) * 224.0 / 255.0;
    let cr = 128.0 + (r - luma) / (2.0 * (1.0 - KR)) * 224.0 / 255.0;
    let q = |x: f32| x.round().clamp(0.0, 255.0) as u8;
    (q(y), q(cb), q(cr))
}

/// BT.709 limited range to 8-bit RGB, in 16.16 fixed point.
fn bt709_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let c = (i32::from(y) - 16) * 76_309; // 1.1644
    let d = i32::from(u) - 128;
    let e = i32::from(v) - 128;
    let r = c + 117_504 * e; // 1.7927
    let g = c - 13_954 * d - 34_903 * e; // 0.2132, 0.5329
    let b = c + 138_453 * d; // 2.1124
    let clamp = |x: i32| ((x + 32_768) >> 16).clamp(0, 255) as u8;
    [clamp(r), clamp(g), clamp(b)]
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

    #[test]
    fn wrap_breaks_at_words_and_splits_long_ones() {
        assert_eq!(wrap("a cat on a mat", 6), ["a cat", "on a", "mat"]);
        assert_eq!(wrap("  abcdefgh ij ", 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap("x", 0), ["x"]);
        assert!(wrap("   ", 5).is_empty());
    }

    #[test]
    fn colour_conversion_hits_the_corners() {
        assert_eq!(bt709_to_rgb(16, 128, 128), [0, 0, 0]);
        assert_eq!(bt709_to_rgb(235, 128, 128), [255, 255, 255]);
        let [r, g, b] = bt709_to_rgb(BARS[5].0, BARS[5].1, BARS[5].2);
        assert!(r > 180 && g < 10 && b < 10, "75% red came out {r},{g},{b}");
    }

    #[test]
    fn the_pattern_moves_and_keeps_its_overlays_inside() {
        for (w, h) in [(64, 64), (160, 90), (162, 92), (1280, 720), (720, 1280)] {
            let pattern = Pattern::new(w, h, 24, 48, "a cat on a mat in the sun, at dawn", None);
            let mut frame = Frame::new(w, h);
            pattern.init(&mut frame);
            pattern.draw(&mut frame, 0);
            let first = frame.y.clone();
            pattern.draw(&mut frame, 47);
            assert_ne!(first, frame.y, "{w}x{h}");
            let title = pattern.title.as_ref().map(|t| (t.x + t.w, t.y + t.h));
            if let Some((right, bottom)) = title {
                assert!(right <= w && bottom <= h);
            }
        }
    }

    #[test]
    fn colour_conversion_round_trips() {
        for r in (0..=255).step_by(15) {
            for g in (0..=255).step_by(15) {
                for b in (0..=255).step_by(15) {
                    let (y, u, v) = rgb_to_bt709([r, g, b]);
                    let back = bt709_to_rgb(y, u, v);
                    for (was, now) in [r, g, b].into_iter().zip(back) {
                        assert!(was.abs_diff(now) <= 3, "{r},{g},{b} came back {back:?}");
                    }
                }
            }
        }
        assert_eq!(rgb_to_bt709([0, 0, 0]), (16, 128, 128));
        assert_eq!(rgb_to_bt709([255, 255, 255]), (235, 128, 128));
    }

    /// Left half `left`, right half `right`.
    fn halves(w: u32, h: u32, left: [u8; 3], right: [u8; 3]) -> Picture {
        let rgb = (0..h)
            .flat_map(|_| (0..w).flat_map(move |x| if x < w / 2 { left } else { right }))
            .collect();
        Picture::from_rgb(w, h, rgb).unwrap()
    }

    #[test]
    fn a_backdrop_fills_the_coded_frame() {
        let (red, blue) = ([200, 30, 30], [30, 30, 200]);
        let picture = halves(40, 30, red, blue);
        let (ry, ru, rv) = rgb_to_bt709(red);
        let (by, bu, bv) = rgb_to_bt709(blue);
        for (coded, display) in [
            ((64, 48), (64, 48)),
            ((162, 92), (161, 91)),
            // Beyond the encoder's limit the coded frame is the smaller one.
            ((3840, 2160), (4096, 2304)),
        ] {
            let b = Backdrop::new(&picture, coded, display);
            let (cw, ch) = coded;
            assert_eq!(b.y.len(), cw * ch);
            assert_eq!((b.u.len(), b.v.len()), (cw * ch / 4, cw * ch / 4));
            // Left and right quarters, top and bottom rows, the padding column included.
            for row in [0, ch / 2, ch - 1] {
                assert_eq!(b.y[row * cw + cw / 4], ry, "{coded:?}");
                assert_eq!(b.y[row * cw + cw - 1], by, "{coded:?}");
                let c = (row / 2) * (cw / 2);
                assert_eq!((b.u[c], b.v[c]), (ru, rv), "{coded:?}");
                assert_eq!((b.u[c + cw / 2 - 1], b.v[c + cw / 2 - 1]), (bu, bv));
            }
        }
    }

    #[test]
    fn over_a_picture_the_first_frame_is_the_picture_and_later_ones_move() {
        let (w, h) = (160, 90);
        let picture = halves(32, 18, [200, 30, 30], [30, 30, 200]);
        let backdrop = Backdrop::new(&picture, (w, h), (w, h));
        let (y0, u0, v0) = (backdrop.y.clone(), backdrop.u.clone(), backdrop.v.clone());
        let pattern = Pattern::new(w, h, 24, 48, "x", Some(backdrop));
        let mut frame = Frame::new(w, h);
        pattern.init(&mut frame);
        pattern.draw(&mut frame, 0);
        assert_eq!((&frame.y, &frame.u, &frame.v), (&y0, &u0, &v0));
        pattern.draw(&mut frame, 1);
        let second = frame.y.clone();
        assert_ne!(second, y0);
        pattern.draw(&mut frame, 47);
        assert_ne!(frame.y, second);
        // The middle rows, clear of the overlays, are still the picture.
        let mid = (h / 2) * w..(h / 2 + 1) * w;
        assert_eq!(frame.y[mid.clone()], y0[mid]);
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
                duration_secs: 16,
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
