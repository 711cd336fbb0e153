//! [`resolve_ratio`]: the ratio an `adaptive` request runs at.

use crate::catalog::{ADAPTIVE, ModelSpec};

/// The ratio a task runs at. A fixed `requested` ratio is kept; [`ADAPTIVE`] takes the first
/// frame's ratio (`first_frame` is its `(width, height)`) snapped to the nearest fixed ratio
/// the model allows (nearest in log scale, ties to the earlier listed), and without a first
/// frame `16:9` (or the model's first fixed ratio when it does not allow `16:9`).
pub fn resolve_ratio(
    model: &ModelSpec,
    requested: &str,
    first_frame: Option<(u32, u32)>,
) -> String {
    if requested != ADAPTIVE {
        return requested.to_owned();
    }
    let fallback = || {
        if model.fixed_ratios().any(|r| r == "16:9") || model.fixed_ratios().next().is_none() {
            "16:9".to_owned()
        } else {
            model.fixed_ratios().next().unwrap_or("16:9").to_owned()
        }
    };
    let Some((w, h)) = first_frame.filter(|&(w, h)| w > 0 && h > 0) else {
        return fallback();
    };
    let target = (f64::from(w) / f64::from(h)).ln();
    let mut best: Option<(&str, f64)> = None;
    for ratio in model.fixed_ratios() {
        let Some(value) = ratio_value(ratio) else {
            continue;
        };
        let distance = (value.ln() - target).abs();
        if best.is_none_or(|(_, d)| distance < d) {
            best = Some((ratio, distance));
        }
    }
    best.map_or_else(fallback, |(r, _)| r.to_owned())
}

/// `w / h` of a `"w:h"` ratio.
fn ratio_value(ratio: &str) -> Option<f64> {
    let (w, h) = ratio.split_once(':')?;
    let (w, h) = (w.parse::<u32>().ok()?, h.parse::<u32>().ok()?);
    (w > 0 && h > 0).then(|| f64::from(w) / f64::from(h))
}
