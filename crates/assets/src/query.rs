//! Query strings of the list operations: `GET /v1/asset-libraries?limit=&after=&order=` and
//! `GET /v1/asset-libraries/{id}/assets?status=&type=&limit=&after=&order=`.
//!
//! Names and values are percent-decoded (`+` is a space); unknown parameters are ignored; a
//! repeated parameter is checked every time and the last one wins; an empty value is the same
//! as leaving the parameter out. A bad value is `400 invalid request` naming the parameter.

use error_codes::{ApiError, ErrorCode};

use crate::status::{AssetStatus, AssetType};

/// `limit` when not given.
pub const DEFAULT_LIST_LIMIT: usize = 20;
/// Largest `limit`.
pub const MAX_LIST_LIMIT: usize = 100;

/// Listing order by creation time; newest first by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ListOrder {
    Asc,
    #[default]
    Desc,
}

/// Parameters of the library list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryListQuery {
    /// 1..=100, default 20.
    pub limit: usize,
    /// Exclusive cursor: a library id.
    pub after: Option<String>,
    pub order: ListOrder,
}

impl Default for LibraryListQuery {
    fn default() -> Self {
        LibraryListQuery {
            limit: DEFAULT_LIST_LIMIT,
            after: None,
            order: ListOrder::default(),
        }
    }
}

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
    let mut q = LibraryListQuery::default();
    for pair in pairs(query) {
        let (name, value) = pair?;
        if value.is_empty() {
            continue;
        }
        match name.as_str() {
            "limit" => q.limit = limit(&value)?,
            "after" => q.after = Some(value),
            "order" => q.order = order(&value)?,
            _ => {}
        }
    }
    Ok(q)
}

/// Parses `status=active&type=image&limit=5&after=asset_x&order=asc`.
pub fn parse_asset_list_query(query: Option<&str>) -> Result<AssetListQuery, ApiError> {
    let mut q = AssetListQuery::default();
    for pair in pairs(query) {
        let (name, value) = pair?;
        if value.is_empty() {
            continue;
        }
        match name.as_str() {
            "status" => {
                q.status = Some(AssetStatus::from_wire(&value).ok_or_else(|| {
                    invalid(
                        "status",
                        "status must be one of processing, active, failed, expired",
                        &value,
                    )
                })?);
            }
            "type" => {
                q.asset_type = Some(AssetType::from_wire(&value).ok_or_else(|| {
                    invalid("type", "type must be one of image, video, audio", &value)
                })?);
            }
            "limit" => q.limit = limit(&value)?,
            "after" => q.after = Some(value),
            "order" => q.order = order(&value)?,
            _ => {}
        }
    }
    Ok(q)
}

fn limit(value: &str) -> Result<usize, ApiError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
        .ok_or_else(|| {
            invalid(
                "limit",
                format!("limit must be an integer from 1 to {MAX_LIST_LIMIT}"),
                value,
            )
        })
}

fn order(value: &str) -> Result<ListOrder, ApiError> {
    match value {
        "asc" => Ok(ListOrder::Asc),
        "desc" => Ok(ListOrder::Desc),
        _ => Err(invalid("order", "order must be asc or desc", value)),
    }
}

fn invalid(param: &str, rule: impl AsRef<str>, got: &str) -> ApiError {
    let got = serde_json::Value::String(got.chars().take(60).collect()).to_string();
    ApiError::field(
        ErrorCode::InvalidRequest,
        param,
        format!("{}, got {got}", rule.as_ref()),
    )
}

/// The decoded `(name, value)` pairs of a query string. A pair whose name does not decode is
/// skipped; a value that does not decode to UTF-8 is an error naming the parameter.
fn pairs(query: Option<&str>) -> impl Iterator<Item = Result<(String, String), ApiError>> + '_ {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name)?;
            Some(decode(value).map(|v| (name.clone(), v)).ok_or_else(|| {
                ApiError::field(
                    ErrorCode::InvalidRequest,
                    name.as_str(),
                    format!("{name} must be percent-encoded UTF-8"),
                )
            }))
        })
}

/// Percent-decodes one name or value; `+` is a space and a malformed escape stays as written.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = match (b, bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&hi), Some(&lo)) => hex(hi).zip(hex(lo)).map(|(h, l)| h << 4 | l),
            _ => None,
        };
        match (escaped, b) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, other) => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
