//! The moving test pattern: what each frame of the simulator's video shows. Colour bars
//! scrolling left over a luma ramp scrolling right, or the first-frame picture as a backdrop
//! with a band of the bars; over either, the text in a box at the top left, a frame counter
//! and a progress bar. Everything that does not change from frame to frame is made once.

use super::font::{ADVANCE_X, ADVANCE_Y, Canvas, text_width};
use super::picture::Picture;
use super::yuv::{Frame, rgb_to_bt709};

/// Where the shown text is cut, whatever the caller passes.
const MAX_TEXT_CHARS: usize = 80;
/// The text wraps on at most this many lines.
const MAX_TITLE_LINES: usize = 3;

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
pub(super) struct Backdrop {
    y: Vec<u8>,
    u: Vec<u8>,
    v: Vec<u8>,
}

impl Backdrop {
    /// `picture` made to cover what is shown: the `display` size, or the `coded` one where
    /// that is smaller (sizes beyond the encoder's limit). An odd side's extra coded row or
    /// column, cropped away on display, repeats the last one. `coded` sides are even.
    pub(super) fn new(
        picture: &Picture,
        coded: (usize, usize),
        display: (usize, usize),
    ) -> Backdrop {
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
pub(super) struct Pattern {
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
    pub(super) fn new(
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
    pub(super) fn init(&self, frame: &mut Frame) {
        let cw = self.w / 2;
        let start = (self.bars_end / 2) * cw;
        if let Some(rest) = frame.u.get_mut(start..) {
            rest.fill(128);
        }
        if let Some(rest) = frame.v.get_mut(start..) {
            rest.fill(128);
        }
    }

    pub(super) fn draw(&self, frame: &mut Frame, index: u32) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::yuv::bt709_to_rgb;

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
