//! What a request references: the roles of assets, their types and statuses, and one entry of
//! `assets`.

use error_codes::ErrorCode;
use serde::{Deserialize, Serialize};

/// What a referenced asset is used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    FirstFrame,
    LastFrame,
    ReferenceImage,
    ReferenceVideo,
    ReferenceAudio,
}

impl Role {
    /// Every role, in the order counts are checked.
    pub const ALL: [Role; 5] = [
        Role::FirstFrame,
        Role::LastFrame,
        Role::ReferenceImage,
        Role::ReferenceVideo,
        Role::ReferenceAudio,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Role::FirstFrame => "first_frame",
            Role::LastFrame => "last_frame",
            Role::ReferenceImage => "reference_image",
            Role::ReferenceVideo => "reference_video",
            Role::ReferenceAudio => "reference_audio",
        }
    }

    pub fn from_wire(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// How many assets of this role one request may reference.
    pub const fn max_count(self) -> usize {
        match self {
            Role::ReferenceImage => 4,
            _ => 1,
        }
    }

    /// The type of asset the role takes.
    pub const fn media(self) -> MediaType {
        match self {
            Role::FirstFrame | Role::LastFrame | Role::ReferenceImage => MediaType::Image,
            Role::ReferenceVideo => MediaType::Video,
            Role::ReferenceAudio => MediaType::Audio,
        }
    }
}

/// An asset's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaType {
    Image,
    Video,
    Audio,
}

impl MediaType {
    pub const fn as_str(self) -> &'static str {
        match self {
            MediaType::Image => "image",
            MediaType::Video => "video",
            MediaType::Audio => "audio",
        }
    }

    /// The error of a reference of this type that is unusable.
    pub const fn invalid_code(self) -> ErrorCode {
        match self {
            MediaType::Image => ErrorCode::InvalidImage,
            MediaType::Video => ErrorCode::InvalidVideo,
            MediaType::Audio => ErrorCode::InvalidAudio,
        }
    }
}

/// An asset's status, as far as a generation request cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetState {
    Processing,
    Active,
    Failed,
    Expired,
}

impl AssetState {
    pub const fn as_str(self) -> &'static str {
        match self {
            AssetState::Processing => "processing",
            AssetState::Active => "active",
            AssetState::Failed => "failed",
            AssetState::Expired => "expired",
        }
    }
}

/// One entry of `assets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetRef {
    pub id: String,
    pub role: Role,
}
