//! Wire types, validation and status rules of asset libraries and assets (CONTRACT §2.2).
//!
//! This is a protocol crate: it does no I/O. The server parses a library creation body with
//! [`parse_create_library`], an upload with [`parse_json_upload`] or [`parse_multipart_upload`]
//! (multipart file parts stay with the server; this crate sees their handles), list query
//! strings with [`parse_asset_list_query`] and [`parse_library_list_query`], and answers with
//! [`LibraryObject`], [`AssetObject`], [`List`] and [`Deleted`]. [`can_move`] is the asset
//! status machine.
//!
//! - [`status`]: asset types, statuses and the moves between them.
//! - [`record`]: the library and asset records, lists, delete answers, failure codes.
//! - [`request`]: library creation and upload bodies.
//! - [`query`]: list query strings.
#![forbid(unsafe_code)]

pub mod query;
pub mod record;
pub mod request;
pub mod status;

pub use query::{
    AssetListQuery, DEFAULT_LIST_LIMIT, LibraryListQuery, ListOrder, MAX_LIST_LIMIT,
    parse_asset_list_query, parse_library_list_query,
};
pub use record::{AssetError, AssetObject, Deleted, FailureCode, LibraryObject, List};
pub use request::{
    CreateLibrary, MAX_NAME_CHARS, MAX_URL_LEN, Part, UploadSource, ValidUpload,
    parse_create_library, parse_json_upload, parse_multipart_upload,
};
pub use status::{AssetStatus, AssetType, can_move};

#[cfg(test)]
mod tests;
