//! Ratios, sizes and the choice of framing (CONTRACT §1.1, "Framing").

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Smallest width or height a `size` may ask for.
pub const MIN_SIDE: u32 = 64;
/// Largest width or height a `size` may ask for.
pub const MAX_SIDE: u32 = 4096;

/// First and last frame ratios may differ by this many percent before a warning.
const RATIO_TOLERANCE_PERCENT: u128 = 5;

/// An allowed aspect ratio; on the wire it is the string `"16:9"`, `"9:16"`, ...
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ratio {
    #[serde(rename = "16:9")]
    SixteenNine,
    #[serde(rename = "9:16")]
    NineSixteen,
    #[serde(rename = "1:1")]
    Square,
    #[serde(rename = "4:3")]
    FourThree,
    #[serde(rename = "3:4")]
    ThreeFour,
    #[serde(rename = "21:9")]
    TwentyOneNine,
}

impl Ratio {
    /// Every allowed ratio, in the contract's order (ties in snapping go to the earlier one).
    pub const ALL: [Ratio; 6] = [
        Ratio::SixteenNine,
        Ratio::NineSixteen,
        Ratio::Square,
        Ratio::FourThree,
        Ratio::ThreeFour,
        Ratio::TwentyOneNine,
    ];

    /// The wire name, e.g. `"16:9"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Ratio::SixteenNine => "16:9",
            Ratio::NineSixteen => "9:16",
            Ratio::Square => "1:1",
            Ratio::FourThree => "4:3",
            Ratio::ThreeFour => "3:4",
            Ratio::TwentyOneNine => "21:9",
        }
    }

    /// The ratio of a wire name; `"adaptive"` is not a ratio (the caller handles it).
    pub fn from_wire(name: &str) -> Option<Ratio> {
        Ratio::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// `(width, height)` terms of the ratio, e.g. `(16, 9)`.
    pub const fn terms(self) -> (u32, u32) {
        match self {
            Ratio::SixteenNine => (16, 9),
            Ratio::NineSixteen => (9, 16),
            Ratio::Square => (1, 1),
            Ratio::FourThree => (4, 3),
            Ratio::ThreeFour => (3, 4),
            Ratio::TwentyOneNine => (21, 9),
        }
    }

    /// The 720p-class size used when only the ratio is known.
    pub const fn default_size(self) -> Size {
        let (width, height) = match self {
            Ratio::SixteenNine => (1280, 720),
            Ratio::NineSixteen => (720, 1280),
            Ratio::Square => (720, 720),
            Ratio::FourThree => (960, 720),
            Ratio::ThreeFour => (720, 960),
            Ratio::TwentyOneNine => (1680, 720),
        };
        Size { width, height }
    }

    fn value(self) -> f64 {
        let (w, h) = self.terms();
        f64::from(w) / f64::from(h)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A frame size in pixels; on the wire the string `"<width>x<height>"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

impl Size {
    /// Parses `"<width>x<height>"` with both sides plain decimal integers from [`MIN_SIDE`] to
    /// [`MAX_SIDE`]; `None` for anything else.
    pub fn parse(s: &str) -> Option<Size> {
        let (w, h) = s.split_once('x')?;
        let side = |t: &str| {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse::<u32>()
                .ok()
                .filter(|v| (MIN_SIDE..=MAX_SIDE).contains(v))
        };
        Some(Size {
            width: side(w)?,
            height: side(h)?,
        })
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        let s = String::deserialize(deserializer)?;
        Size::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "size must be \"<width>x<height>\" with both from {MIN_SIDE} to {MAX_SIDE}, got {s:?}"
            ))
        })
    }
}

/// The framing a task runs with; the task record shows it as `size` and `aspect_ratio`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Framing {
    pub width: u32,
    pub height: u32,
    pub ratio: Ratio,
}

impl Framing {
    pub const fn size(&self) -> Size {
        Size {
            width: self.width,
            height: self.height,
        }
    }
}

/// CONTRACT §1.1 framing: an explicit `size` wins (its ratio is that size snapped); else the
/// `aspect_ratio` at its [`Ratio::default_size`]; else adaptive: the first frame's own ratio
/// snapped, at that ratio's default size, and 16:9 without a first frame (or with one whose
/// dimensions are zero).
pub fn resolve_framing(
    size: Option<Size>,
    aspect_ratio: Option<Ratio>,
    first_frame_dims: Option<(u32, u32)>,
) -> Framing {
    if let Some(size) = size {
        return Framing {
            width: size.width,
            height: size.height,
            ratio: snap_ratio(size.width, size.height),
        };
    }
    let ratio = aspect_ratio.unwrap_or_else(|| match first_frame_dims {
        Some((w, h)) if w > 0 && h > 0 => snap_ratio(w, h),
        _ => Ratio::SixteenNine,
    });
    let size = ratio.default_size();
    Framing {
        width: size.width,
        height: size.height,
        ratio,
    }
}

/// The allowed ratio nearest to `width:height`, measured on a log scale so that a portrait and
/// its landscape twin are treated alike. Ties go to the earlier ratio of [`Ratio::ALL`]; a zero
/// side gives 16:9.
pub fn snap_ratio(width: u32, height: u32) -> Ratio {
    if width == 0 || height == 0 {
        return Ratio::SixteenNine;
    }
    let target = (f64::from(width) / f64::from(height)).ln();
    let mut best = Ratio::SixteenNine;
    let mut best_distance = f64::INFINITY;
    for ratio in Ratio::ALL {
        let distance = (ratio.value().ln() - target).abs();
        if distance < best_distance {
            best = ratio;
            best_distance = distance;
        }
    }
    best
}

/// `Some(warning)` when the first and last frames' ratios differ by more than 5% (the larger
/// ratio over the smaller, minus one); `None` when they match closely or a side is zero.
pub fn frame_ratio_warning(first: (u32, u32), last: (u32, u32)) -> Option<String> {
    let ((w1, h1), (w2, h2)) = (first, last);
    if w1 == 0 || h1 == 0 || w2 == 0 || h2 == 0 {
        return None;
    }
    // Compare w1/h1 with w2/h2 exactly, by cross products.
    let (x, y) = (
        u128::from(w1) * u128::from(h2),
        u128::from(w2) * u128::from(h1),
    );
    let (big, small) = (x.max(y), x.min(y));
    if big * 100 <= small * (100 + RATIO_TOLERANCE_PERCENT) {
        return None;
    }
    let ratio = |w: u32, h: u32| f64::from(w) / f64::from(h);
    let percent = (big - small) as f64 / small as f64 * 100.0;
    Some(format!(
        "the first frame ({w1}x{h1}, ratio {:.2}) and the last frame ({w2}x{h2}, ratio {:.2}) \
         differ in aspect ratio by {percent:.1}%, more than {RATIO_TOLERANCE_PERCENT}%; \
         the video may be stretched or cropped",
        ratio(w1, h1),
        ratio(w2, h2),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_wire_names_round_trip() {
        for ratio in Ratio::ALL {
            let json = serde_json::to_value(ratio).unwrap();
            assert_eq!(json, ratio.as_str());
            assert_eq!(serde_json::from_value::<Ratio>(json).unwrap(), ratio);
            assert_eq!(Ratio::from_wire(ratio.as_str()), Some(ratio));
            // The default size is of the ratio it belongs to.
            let size = ratio.default_size();
            assert_eq!(snap_ratio(size.width, size.height), ratio);
        }
        assert_eq!(Ratio::from_wire("adaptive"), None);
        assert!(serde_json::from_value::<Ratio>("2:1".into()).is_err());
    }

    #[test]
    fn size_parsing() {
        let cases = [
            ("1280x720", Some((1280, 720))),
            ("64x64", Some((64, 64))),
            ("4096x4096", Some((4096, 4096))),
            ("0720x1280", Some((720, 1280))),
            ("63x720", None),
            ("1280x4097", None),
            ("1280X720", None),
            ("1280*720", None),
            ("1280x", None),
            ("x720", None),
            (" 1280x720", None),
            ("+1280x720", None),
            ("1280x720x3", None),
            ("99999999999x720", None),
            ("", None),
        ];
        for (input, expected) in cases {
            let got = Size::parse(input).map(|s| (s.width, s.height));
            assert_eq!(got, expected, "{input:?}");
        }
        let size = Size {
            width: 1280,
            height: 720,
        };
        assert_eq!(size.to_string(), "1280x720");
        assert_eq!(serde_json::to_value(size).unwrap(), "1280x720");
        assert!(serde_json::from_value::<Size>("12x720".into()).is_err());
    }

    #[test]
    fn snapping() {
        let cases = [
            ((1920, 1080), Ratio::SixteenNine),
            ((1080, 1920), Ratio::NineSixteen),
            ((1000, 1000), Ratio::Square),
            ((1024, 768), Ratio::FourThree),
            ((768, 1024), Ratio::ThreeFour),
            ((2560, 1080), Ratio::TwentyOneNine),
            ((1100, 1000), Ratio::Square),
            ((1500, 1000), Ratio::FourThree),
            ((1600, 1000), Ratio::SixteenNine),
            ((4096, 64), Ratio::TwentyOneNine),
            ((64, 4096), Ratio::NineSixteen),
            ((0, 720), Ratio::SixteenNine),
        ];
        for ((w, h), expected) in cases {
            assert_eq!(snap_ratio(w, h), expected, "{w}x{h}");
        }
    }

    #[test]
    fn framing_precedence() {
        let size = Some(Size {
            width: 1000,
            height: 1000,
        });
        let f = |w, h, r| Framing {
            width: w,
            height: h,
            ratio: r,
        };
        // Size wins over everything; its ratio is the size snapped.
        assert_eq!(
            resolve_framing(size, Some(Ratio::NineSixteen), Some((1920, 1080))),
            f(1000, 1000, Ratio::Square)
        );
        // Then the aspect ratio, at its default size.
        assert_eq!(
            resolve_framing(None, Some(Ratio::TwentyOneNine), Some((1080, 1920))),
            f(1680, 720, Ratio::TwentyOneNine)
        );
        assert_eq!(
            resolve_framing(None, Some(Ratio::ThreeFour), None),
            f(720, 960, Ratio::ThreeFour)
        );
        // Adaptive: the first frame, snapped.
        assert_eq!(
            resolve_framing(None, None, Some((1080, 1920))),
            f(720, 1280, Ratio::NineSixteen)
        );
        assert_eq!(
            resolve_framing(None, None, Some((800, 600))),
            f(960, 720, Ratio::FourThree)
        );
        // Adaptive without a (usable) first frame: 16:9.
        assert_eq!(
            resolve_framing(None, None, None),
            f(1280, 720, Ratio::SixteenNine)
        );
        assert_eq!(
            resolve_framing(None, None, Some((0, 0))),
            f(1280, 720, Ratio::SixteenNine)
        );
    }

    #[test]
    fn ratio_warning() {
        assert_eq!(frame_ratio_warning((1280, 720), (1920, 1080)), None);
        // 5% exactly is tolerated, a little more is not.
        assert_eq!(frame_ratio_warning((1000, 1000), (1050, 1000)), None);
        assert!(frame_ratio_warning((1000, 1000), (1060, 1000)).is_some());
        // Symmetric.
        assert!(frame_ratio_warning((1060, 1000), (1000, 1000)).is_some());
        let warning = frame_ratio_warning((1280, 720), (720, 1280)).unwrap();
        assert!(warning.contains("1280x720"), "{warning}");
        assert!(warning.contains("720x1280"), "{warning}");
        assert!(warning.contains("5%"), "{warning}");
        assert_eq!(frame_ratio_warning((0, 720), (720, 1280)), None);
    }
}
