//! Query strings of the list operations: `GET /v1/asset-libraries?limit=&after=&order=` and
//! `GET /v1/asset-libraries/{id}/assets?status=&type=&limit=&after=&order=`.
//!
//! Decoding, the paging parameters and the contract's bounds of `limit` are `list-query`'s;
//! here are what an empty value means (the same as leaving the parameter out) and the asset
//! filters. A bad value is `400 invalid request` naming the parameter.

use error_codes::ApiError;
use list_query::{Empty, Rules, invalid, no_extra};

/// Parameters of the library list: the cursor `after` is a library id.
pub use list_query::Page as LibraryListQuery;
pub use list_query::{DEFAULT_LIMIT as DEFAULT_LIST_LIMIT, ListOrder, MAX_LIMIT as MAX_LIST_LIMIT};

use crate::status::{AssetStatus, AssetType};

/// How libraries and assets are paged.
const LIST: Rules = Rules::contract(Empty::Absent);

/// Parameters of a library's asset list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetListQuery {
    pub status: Option<AssetStatus>,
    pub asset_type: Option<AssetType>,
    /// 1..=100, default 20.
    pub limit: usize,
    /// Exclusive cursor: an asset id.
    pub after: Option<String>,
    pub order: ListOrder,
}

impl Default for AssetListQuery {
    fn default() -> Self {
        AssetListQuery {
            status: None,
            asset_type: None,
            limit: DEFAULT_LIST_LIMIT,
            after: None,
            order: ListOrder::default(),
        }
    }
}

/// Parses `limit=5&after=lib_x&order=asc`.
pub fn parse_library_list_query(query: Option<&str>) -> Result<LibraryListQuery, ApiError> {
    list_query::parse(query, &LIST, no_extra)
}

/// Parses `status=active&type=image&limit=5&after=asset_x&order=asc`.
pub fn parse_asset_list_query(query: Option<&str>) -> Result<AssetListQuery, ApiError> {
    let (mut status, mut asset_type) = (None, None);
    let page = list_query::parse(query, &LIST, |name, value| {
        match name {
            "status" => {
                status = Some(AssetStatus::from_wire(&value).ok_or_else(|| {
                    invalid(
                        "status",
                        "status must be one of processing, active, failed, expired",
                        &value,
                    )
                })?);
            }
            "type" => {
                asset_type = Some(AssetType::from_wire(&value).ok_or_else(|| {
                    invalid("type", "type must be one of image, video, audio", &value)
                })?);
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(AssetListQuery {
        status,
        asset_type,
        limit: page.limit,
        after: page.after,
        order: page.order,
    })
}
