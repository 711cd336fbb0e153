//! The library and asset records, lists, delete answers, and the codes of failed assets
//! (CONTRACT §2.2).

use serde::{Deserialize, Serialize};

use crate::status::{AssetStatus, AssetType};

/// `{"id": "lib_...", "object": "asset_library", "name", "family", "created_at",
/// "asset_count"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryObject {
    pub id: String,
    /// Always `asset_library`.
    pub object: String,
    pub name: String,
    /// The channel family of the key's group that created it; its assets belong to it.
    pub family: String,
    /// Unix seconds.
    pub created_at: u64,
    pub asset_count: u64,
}

impl LibraryObject {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        family: impl Into<String>,
        created_at: u64,
        asset_count: u64,
    ) -> LibraryObject {
        LibraryObject {
            id: id.into(),
            object: "asset_library".to_owned(),
            name: name.into(),
            family: family.into(),
            created_at,
            asset_count,
        }
    }
}

/// `{"code", "message"}` of a failed asset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetError {
    pub code: String,
    pub message: String,
}

/// Why an asset failed: the `error.code` of a `failed` asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureCode {
    /// Not an image, video or audio file the relay accepts, or a damaged (truncated) one.
    UnsupportedFormat,
    /// A supported file, but not of the `type` the upload declared.
    TypeMismatch,
    /// The URL could not be fetched (refused, unreachable, timed out, not 2xx).
    UnreachableUrl,
    /// Larger than the relay accepts.
    TooLarge,
    /// Zero bytes.
    Empty,
    /// The relay could not store the file.
    StorageError,
}

impl FailureCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureCode::UnsupportedFormat => "unsupported_format",
            FailureCode::TypeMismatch => "type_mismatch",
            FailureCode::UnreachableUrl => "unreachable_url",
            FailureCode::TooLarge => "too_large",
            FailureCode::Empty => "empty",
            FailureCode::StorageError => "storage_error",
        }
    }

    /// The asset error with this code and `message`.
    pub fn error(self, message: impl Into<String>) -> AssetError {
        AssetError {
            code: self.as_str().to_owned(),
            message: message.into(),
        }
    }
}

/// `{"id": "asset_...", "object": "asset", "library_id", "family", "type", "status", "format",
/// "bytes", "created_at", "expires_at", "error"}`.
///
/// `type` is `null` until processing found it when the upload did not declare it; `format` and
/// `bytes` are set once `active`; `expires_at` once `active` (when it will become `expired`);
/// `error` only when `failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetObject {
    pub id: String,
    /// Always `asset`.
    pub object: String,
    pub library_id: String,
    pub family: String,
    #[serde(rename = "type")]
    pub asset_type: Option<AssetType>,
    pub status: AssetStatus,
    /// `jpeg`, `png`, `webp`, `mp4`, `mov`, `mp3`, `wav` or `m4a`.
    pub format: Option<String>,
    pub bytes: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
    pub expires_at: Option<u64>,
    pub error: Option<AssetError>,
}

/// `{"object": "list", "data", "has_more", "first_id", "last_id"}`, as every list of the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct List<T> {
    pub object: String,
    pub data: Vec<T>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
}

impl<T> List<T> {
    /// A page; `id` names an item.
    pub fn new(data: Vec<T>, has_more: bool, id: impl Fn(&T) -> &str) -> List<T> {
        List {
            object: "list".to_owned(),
            first_id: data.first().map(|x| id(x).to_owned()),
            last_id: data.last().map(|x| id(x).to_owned()),
            data,
            has_more,
        }
    }
}

/// `{"id", "object": "asset.deleted" | "asset_library.deleted", "deleted": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub id: String,
    pub object: String,
    pub deleted: bool,
}

impl Deleted {
    pub fn asset(id: impl Into<String>) -> Deleted {
        Deleted {
            id: id.into(),
            object: "asset.deleted".to_owned(),
            deleted: true,
        }
    }

    pub fn library(id: impl Into<String>) -> Deleted {
        Deleted {
            id: id.into(),
            object: "asset_library.deleted".to_owned(),
            deleted: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn library_shape() {
        let lib = LibraryObject::new("lib_1", "shots", "gen2", 1_763_776_000, 3);
        assert_eq!(
            serde_json::to_value(&lib).unwrap(),
            json!({"id": "lib_1", "object": "asset_library", "name": "shots", "family": "gen2",
                   "created_at": 1_763_776_000u64, "asset_count": 3})
        );
    }

    #[test]
    fn asset_shape() {
        let asset = AssetObject {
            id: "asset_1".into(),
            object: "asset".into(),
            library_id: "lib_1".into(),
            family: "gen2".into(),
            asset_type: None,
            status: AssetStatus::Failed,
            format: None,
            bytes: None,
            created_at: 5,
            expires_at: None,
            error: Some(FailureCode::Empty.error("the file is empty")),
        };
        let v = serde_json::to_value(&asset).unwrap();
        assert_eq!(
            v,
            json!({"id": "asset_1", "object": "asset", "library_id": "lib_1", "family": "gen2",
                   "type": null, "status": "failed", "format": null, "bytes": null,
                   "created_at": 5, "expires_at": null,
                   "error": {"code": "empty", "message": "the file is empty"}})
        );
        let back: AssetObject = serde_json::from_value(v).unwrap();
        assert_eq!(back, asset);
    }

    #[test]
    fn lists_and_deletes() {
        let list = List::new(vec!["a".to_owned(), "b".to_owned()], false, |s| s.as_str());
        let v = serde_json::to_value(&list).unwrap();
        assert_eq!(
            v,
            json!({"object": "list", "data": ["a", "b"], "has_more": false,
                   "first_id": "a", "last_id": "b"})
        );
        assert_eq!(
            serde_json::to_value(Deleted::asset("asset_1")).unwrap(),
            json!({"id": "asset_1", "object": "asset.deleted", "deleted": true})
        );
        assert_eq!(
            serde_json::to_value(Deleted::library("lib_1")).unwrap(),
            json!({"id": "lib_1", "object": "asset_library.deleted", "deleted": true})
        );
    }

    #[test]
    fn failure_codes_are_snake_case() {
        for code in [
            FailureCode::UnsupportedFormat,
            FailureCode::TypeMismatch,
            FailureCode::UnreachableUrl,
            FailureCode::TooLarge,
            FailureCode::Empty,
            FailureCode::StorageError,
        ] {
            let s = code.as_str();
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
        }
    }
}
