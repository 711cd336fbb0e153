//! What a finished task is charged: the price of the video its vendor reports it made, never
//! more than its pre-deduction (the most the request can cost). The difference is returned by
//! the task's one `settle` entry, written with its move to `succeeded` (`steps::settle_at`).

use std::collections::BTreeMap;

use channels::{Demand, VendorUsage};

/// Credits per second of one model's videos: `[models.<name>]`'s `price_per_second` and
/// `price_per_second_by_resolution` (a tier's own price wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelPrice {
    pub per_second: Option<u64>,
    pub per_second_by_resolution: BTreeMap<String, u64>,
}

impl ModelPrice {
    /// Credits per second at `tier` (`None`: the model's own price).
    pub fn at(&self, tier: Option<&str>) -> Option<u64> {
        self.tier_price(tier).or(self.per_second)
    }

    /// The price of `tier` itself, its name compared without case.
    fn tier_price(&self, tier: Option<&str>) -> Option<u64> {
        let tier = tier?;
        self.per_second_by_resolution
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(tier))
            .map(|(_, p)| *p)
    }
}

/// Each video model's price, by the relay's model name.
pub type Prices = BTreeMap<String, ModelPrice>;

/// What a task that asked for `asked` and was pre-deducted `prededucted` is charged, given
/// what its vendor reports of the video (`usage`) and the model's `price`:
///
/// - nothing reported: the pre-deduction (the video is as asked);
/// - a length and tier: the per-second price at the reported tier (where the task was priced
///   by tier, the second format, and the model prices that tier; else at the asked one) times
///   the reported seconds rounded to whole seconds (the asked duration when only a tier was
///   reported), at most the pre-deduction;
/// - a report that cannot be read, or a length of no whole second: `Err` with the reason, and
///   the caller charges the pre-deduction (never zero).
pub fn charged(
    prededucted: i64,
    asked: &Demand,
    usage: &VendorUsage,
    price: Option<&ModelPrice>,
) -> Result<i64, String> {
    let (seconds, tier) = match usage {
        VendorUsage::NotReported => return Ok(prededucted),
        VendorUsage::Unreadable(reason) => return Err(reason.clone()),
        VendorUsage::Made {
            seconds,
            resolution,
        } => (seconds, resolution),
    };
    let seconds = match seconds {
        None => u64::from(asked.duration),
        Some(s) if s.is_finite() && *s >= 0.5 => s.round() as u64,
        Some(s) => return Err(format!("a video of {s} seconds")),
    };
    let Some(price) = price else {
        return Ok(prededucted);
    };
    let asked_tier = asked.resolution.as_deref();
    let per_second = match asked_tier {
        // Priced by tier: the tier made, when the model has a price for it.
        Some(_) => price
            .tier_price(tier.as_deref())
            .or_else(|| price.at(asked_tier)),
        None => price.at(None),
    };
    let Some(per_second) = per_second else {
        return Ok(prededucted);
    };
    let made = i64::try_from(per_second.saturating_mul(seconds)).unwrap_or(i64::MAX);
    Ok(made.clamp(0, prededucted.max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen_pro() -> ModelPrice {
        ModelPrice {
            per_second: None,
            per_second_by_resolution: [
                ("480p".to_owned(), 5),
                ("720p".to_owned(), 8),
                ("1080p".to_owned(), 12),
            ]
            .into(),
        }
    }

    fn h3() -> ModelPrice {
        ModelPrice {
            per_second: Some(10),
            per_second_by_resolution: BTreeMap::new(),
        }
    }

    fn asked(duration: u32, tier: Option<&str>) -> Demand {
        Demand {
            duration,
            resolution: tier.map(str::to_owned),
            ..Demand::default()
        }
    }

    fn made(seconds: Option<f64>, tier: Option<&str>) -> VendorUsage {
        VendorUsage::Made {
            seconds,
            resolution: tier.map(str::to_owned),
        }
    }

    #[test]
    fn the_price_of_what_was_made_at_most_the_prededuction() {
        let h3 = Some(h3());
        let ten = asked(10, None);
        // Nothing reported: as asked.
        assert_eq!(
            charged(100, &ten, &VendorUsage::NotReported, h3.as_ref()),
            Ok(100)
        );
        // Shorter: its own price; a length as encoded (5.041 s, 4.96 s) is whole seconds.
        assert_eq!(
            charged(100, &ten, &made(Some(5.0), None), h3.as_ref()),
            Ok(50)
        );
        assert_eq!(
            charged(100, &ten, &made(Some(5.041), None), h3.as_ref()),
            Ok(50)
        );
        assert_eq!(
            charged(100, &ten, &made(Some(4.96), None), h3.as_ref()),
            Ok(50)
        );
        // Longer (the next longer duration a channel may make): never above the pre-deduction.
        assert_eq!(
            charged(100, &ten, &made(Some(12.0), None), h3.as_ref()),
            Ok(100)
        );
        // A tier alone: the asked length; the first format is not priced by tier.
        assert_eq!(
            charged(100, &ten, &made(None, Some("1080p")), h3.as_ref()),
            Ok(100)
        );
        // Unreadable, or no whole second: the caller charges the pre-deduction.
        let unreadable = VendorUsage::Unreadable("duration \"x\"".into());
        assert!(charged(100, &ten, &unreadable, h3.as_ref()).is_err());
        assert!(charged(100, &ten, &made(Some(0.2), None), h3.as_ref()).is_err());
        assert!(charged(100, &ten, &made(Some(f64::NAN), None), h3.as_ref()).is_err());
        // A model without a price: as asked.
        assert_eq!(charged(100, &ten, &made(Some(5.0), None), None), Ok(100));
    }

    #[test]
    fn a_tier_priced_task_pays_the_tier_made() {
        let pro = Some(gen_pro());
        let at_1080 = asked(10, Some("1080p"));
        // 10 s at 1080p was 120; the vendor made 720p (8/s) and 6 s.
        assert_eq!(
            charged(120, &at_1080, &made(Some(6.0), Some("720P")), pro.as_ref()),
            Ok(48)
        );
        // A tier the model has no price for: the asked tier's price.
        assert_eq!(
            charged(120, &at_1080, &made(Some(5.0), Some("768p")), pro.as_ref()),
            Ok(60)
        );
        // A dearer tier than asked: capped.
        let at_480 = asked(10, Some("480p"));
        assert_eq!(
            charged(50, &at_480, &made(None, Some("1080p")), pro.as_ref()),
            Ok(50)
        );
    }
}
