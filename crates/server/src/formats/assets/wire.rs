//! Asset records between their three shapes: the store's, the wire's (the `assets` protocol
//! crate) and the blob store's ids.

use assets::{AssetObject, LibraryObject, ListOrder};
use fetch::MediaKind;
use store::{AssetRecord, AssetStatus, AssetType, Library, Order};

pub(crate) use crate::ground::http::new_id;

/// The blob of an asset's bytes.
pub fn blob_id(asset_id: &str) -> String {
    format!("assets/{asset_id}/original")
}

pub(crate) fn blob_prefix(asset_id: &str) -> String {
    format!("assets/{asset_id}")
}

// ---- wire conversions ----

pub fn wire_type(t: AssetType) -> assets::AssetType {
    match t {
        AssetType::Image => assets::AssetType::Image,
        AssetType::Video => assets::AssetType::Video,
        AssetType::Audio => assets::AssetType::Audio,
    }
}

pub(crate) fn store_type(t: assets::AssetType) -> AssetType {
    match t {
        assets::AssetType::Image => AssetType::Image,
        assets::AssetType::Video => AssetType::Video,
        assets::AssetType::Audio => AssetType::Audio,
    }
}

pub(crate) fn store_type_of(kind: MediaKind) -> AssetType {
    match kind {
        MediaKind::Image => AssetType::Image,
        MediaKind::Video => AssetType::Video,
        MediaKind::Audio => AssetType::Audio,
    }
}

pub(crate) fn kind_of(t: AssetType) -> MediaKind {
    match t {
        AssetType::Image => MediaKind::Image,
        AssetType::Video => MediaKind::Video,
        AssetType::Audio => MediaKind::Audio,
    }
}

pub fn wire_status(s: AssetStatus) -> assets::AssetStatus {
    match s {
        AssetStatus::Processing => assets::AssetStatus::Processing,
        AssetStatus::Active => assets::AssetStatus::Active,
        AssetStatus::Failed => assets::AssetStatus::Failed,
        AssetStatus::Expired => assets::AssetStatus::Expired,
    }
}

pub(crate) fn store_status(s: assets::AssetStatus) -> AssetStatus {
    match s {
        assets::AssetStatus::Processing => AssetStatus::Processing,
        assets::AssetStatus::Active => AssetStatus::Active,
        assets::AssetStatus::Failed => AssetStatus::Failed,
        assets::AssetStatus::Expired => AssetStatus::Expired,
    }
}

pub(crate) fn store_order(o: ListOrder) -> Order {
    match o {
        ListOrder::Asc => Order::Asc,
        ListOrder::Desc => Order::Desc,
    }
}

/// The asset record as clients see it.
pub fn record(a: &AssetRecord) -> AssetObject {
    AssetObject {
        id: a.id.clone(),
        object: "asset".to_owned(),
        library_id: a.library_id.clone(),
        family: a.family.clone(),
        asset_type: a.asset_type.map(wire_type),
        status: wire_status(a.status),
        format: a.format.clone(),
        bytes: a.bytes,
        created_at: a.created_at,
        expires_at: a.expires_at,
        error: a.error.as_ref().map(|e| assets::AssetError {
            code: e.code.clone(),
            message: e.message.clone(),
        }),
    }
}

/// The library record as clients see it.
pub fn library_record(l: &Library) -> LibraryObject {
    LibraryObject::new(
        l.id.clone(),
        l.name.clone(),
        l.family.clone(),
        l.created_at,
        l.asset_count,
    )
}

// ---- lookups ----
