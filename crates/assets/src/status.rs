//! Asset types and statuses, and the only moves between statuses (CONTRACT §2.2):
//! `processing` -> `active` | `failed`, `active` -> `expired`. `failed` and `expired` are
//! final.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What an asset holds; its wire name is the asset's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetType {
    Image,
    Video,
    Audio,
}

impl AssetType {
    pub const ALL: [AssetType; 3] = [AssetType::Image, AssetType::Video, AssetType::Audio];

    pub const fn as_str(self) -> &'static str {
        match self {
            AssetType::Image => "image",
            AssetType::Video => "video",
            AssetType::Audio => "audio",
        }
    }

    pub fn from_wire(s: &str) -> Option<AssetType> {
        AssetType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The formats accepted for this type, for details.
    pub const fn formats(self) -> &'static str {
        match self {
            AssetType::Image => "jpeg, png or webp",
            AssetType::Video => "mp4 or mov",
            AssetType::Audio => "mp3, wav or m4a",
        }
    }
}

impl fmt::Display for AssetType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An asset's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetStatus {
    /// Uploaded or fetched, not checked yet: not usable.
    Processing,
    /// Usable in generation requests.
    Active,
    /// Could not be fetched or is not a supported file; carries `error`. Final.
    Failed,
    /// Past its lifetime. Final.
    Expired,
}

impl AssetStatus {
    pub const ALL: [AssetStatus; 4] = [
        AssetStatus::Processing,
        AssetStatus::Active,
        AssetStatus::Failed,
        AssetStatus::Expired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            AssetStatus::Processing => "processing",
            AssetStatus::Active => "active",
            AssetStatus::Failed => "failed",
            AssetStatus::Expired => "expired",
        }
    }

    pub fn from_wire(s: &str) -> Option<AssetStatus> {
        AssetStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// `failed` and `expired` never change again.
    pub const fn is_final(self) -> bool {
        matches!(self, AssetStatus::Failed | AssetStatus::Expired)
    }
}

impl fmt::Display for AssetStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an asset may move from `from` to `to`: `processing` -> `active` | `failed`,
/// `active` -> `expired`; nothing else (staying put is not a move).
pub const fn can_move(from: AssetStatus, to: AssetStatus) -> bool {
    use AssetStatus::*;
    matches!(
        (from, to),
        (Processing, Active) | (Processing, Failed) | (Active, Expired)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_machine_is_exactly_three_moves() {
        use AssetStatus::*;
        let allowed = [
            (Processing, Active),
            (Processing, Failed),
            (Active, Expired),
        ];
        for from in AssetStatus::ALL {
            for to in AssetStatus::ALL {
                assert_eq!(
                    can_move(from, to),
                    allowed.contains(&(from, to)),
                    "{from} -> {to}"
                );
            }
        }
        for s in AssetStatus::ALL {
            // A final status has no way out.
            if s.is_final() {
                assert!(AssetStatus::ALL.iter().all(|&to| !can_move(s, to)), "{s}");
            }
        }
    }

    #[test]
    fn wire_names() {
        for s in AssetStatus::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(AssetStatus::from_wire(s.as_str()), Some(s));
        }
        for t in AssetType::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            assert_eq!(AssetType::from_wire(t.as_str()), Some(t));
        }
        assert_eq!(AssetType::from_wire("Image"), None);
        assert_eq!(AssetStatus::from_wire("ACTIVE"), None);
    }
}
