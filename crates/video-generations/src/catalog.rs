//! The models of the second format (CONTRACT §2.1): each model's channel family, its allowed
//! `resolution`, `duration` and `ratio` values, and the joint rules between them.
//!
//! The server fills a [`Catalog`] from its configuration; this crate only reads it.

/// The `ratio` value that asks the relay to choose the ratio from the first frame.
pub const ADAPTIVE: &str = "adaptive";

/// Every second-format model the relay offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// In the order error details list them.
    pub models: Vec<ModelSpec>,
}

impl Catalog {
    pub fn new(models: Vec<ModelSpec>) -> Catalog {
        Catalog { models }
    }

    /// The model named `name` (exact match).
    pub fn model(&self, name: &str) -> Option<&ModelSpec> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The models' names, in catalog order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.iter().map(|m| m.name.as_str())
    }
}

/// One model: its family and the values it accepts. The first listed value of each list is
/// the default when a request leaves the field out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSpec {
    pub name: String,
    /// The channel family that runs the model; a key's group must map to it.
    pub family: String,
    /// Resolution tiers, e.g. `["480p", "720p", "1080p"]`.
    pub resolutions: Vec<String>,
    /// Allowed durations in seconds.
    pub durations: Vec<u32>,
    /// Allowed ratios, e.g. `["16:9", "9:16", "adaptive"]`; [`ADAPTIVE`] among them allows
    /// adaptive framing.
    pub ratios: Vec<String>,
    /// Rules between fields, checked after each field on its own.
    pub joint_rules: Vec<JointRule>,
}

impl ModelSpec {
    /// Whether `ratio: "adaptive"` is allowed.
    pub fn allows_adaptive(&self) -> bool {
        self.ratios.iter().any(|r| r == ADAPTIVE)
    }

    /// The fixed ratios (all but [`ADAPTIVE`]), in listed order.
    pub fn fixed_ratios(&self) -> impl Iterator<Item = &str> {
        self.ratios
            .iter()
            .map(String::as_str)
            .filter(|r| *r != ADAPTIVE)
    }

    /// The longest duration the joint rules allow at `resolution`, if any rule limits it.
    pub fn max_duration_at(&self, resolution: &str) -> Option<u32> {
        self.joint_rules
            .iter()
            .filter_map(|rule| match rule {
                JointRule::MaxDuration {
                    resolution: r,
                    max_secs,
                } if r == resolution => Some(*max_secs),
                JointRule::MaxDuration { .. } => None,
            })
            .min()
    }
}

/// A rule between two fields. A request that breaks one is blamed on the later field of the
/// pair in the check order (resolution, duration, ratio).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JointRule {
    /// At `resolution`, `duration` is at most `max_secs` (blames `duration`).
    MaxDuration { resolution: String, max_secs: u32 },
}
