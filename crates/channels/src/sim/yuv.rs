//! One picture in the layout the encoder takes: 4:2:0 Y, U and V planes in BT.709 limited
//! range, without padding, and the colour conversions to and from 8-bit RGB. The test pattern
//! draws into it, openh264 encodes it, and the PNGs are read back from it a row at a time.

use openh264::formats::YUVSource;

use super::font::Canvas;

/// One 4:2:0 picture, planes without padding.
pub(super) struct Frame {
    w: usize,
    h: usize,
    pub(super) y: Vec<u8>,
    pub(super) u: Vec<u8>,
    pub(super) v: Vec<u8>,
}

impl Frame {
    /// `w` and `h` are even.
    pub(super) fn new(w: usize, h: usize) -> Self {
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
    pub(super) fn neutral_chroma(&mut self, x: usize, y: usize, w: usize, h: usize) {
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
    pub(super) fn rgb_row(&self, dy: usize, display: (usize, usize), line: &mut [u8]) {
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

    pub(super) fn luma(&mut self) -> Canvas<'_> {
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

/// 8-bit RGB to BT.709 limited range (Y, Cb, Cr).
pub(super) fn rgb_to_bt709([r, g, b]: [u8; 3]) -> (u8, u8, u8) {
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
pub(super) fn bt709_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
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
}
