//! The query strings of list operations (`limit`, `after`, `order`, plus whatever filters a
//! format adds) and the decoding every query string of the API shares.
//!
//! Names and values are percent-decoded (`+` is a space, as in HTML forms); unknown parameters
//! are ignored; a repeated parameter is checked every time and the last one wins. What an empty
//! value means is the format's choice ([`Empty`]). A bad value is `400 invalid request` naming
//! the parameter, its detail `<rule>, got "<value>"`.
//!
//! A format describes its lists with [`Rules`] (default and largest `limit`, empty values) and
//! hands its own parameters to [`parse`] as a closure, refusing a bad one with [`invalid`]; a
//! query that is not a list's (the content query of `/v1/videos`) reads [`pairs`] itself.
//!
//! This is a protocol crate: it does no I/O.
#![forbid(unsafe_code)]

use error_codes::{ApiError, ErrorCode};

#[cfg(test)]
mod tests;

/// `limit` when not given: CONTRACT §1.3's, which the asset lists share (§2.2).
pub const DEFAULT_LIMIT: usize = 20;
/// Largest `limit`, likewise.
pub const MAX_LIMIT: usize = 100;

/// Listing order by creation time; newest first by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ListOrder {
    Asc,
    #[default]
    Desc,
}

/// What `name=` (an empty value) means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Empty {
    /// The same as leaving the parameter out, for every parameter.
    Absent,
    /// A value like any other: `after=` clears the cursor, while an empty `limit` or `order` is
    /// refused, and the format's own parameters see it.
    Value,
}

/// How one format's lists are paged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// `limit` when not given.
    pub default_limit: usize,
    /// Largest `limit`; the smallest is 1.
    pub max_limit: usize,
    pub empty: Empty,
}

/// The paging parameters of one list request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// 1..=[`Rules::max_limit`].
    pub limit: usize,
    /// Exclusive cursor: an id of the listed kind.
    pub after: Option<String>,
    pub order: ListOrder,
}

impl Rules {
    /// The contract's bounds ([`DEFAULT_LIMIT`], [`MAX_LIMIT`]) with `empty` for empty values.
    pub const fn contract(empty: Empty) -> Rules {
        Rules {
            default_limit: DEFAULT_LIMIT,
            max_limit: MAX_LIMIT,
            empty,
        }
    }

    /// The page of a list request without parameters.
    pub fn first_page(&self) -> Page {
        Page {
            limit: self.default_limit,
            after: None,
            order: ListOrder::default(),
        }
    }
}

/// Parses `limit=5&after=x&order=asc`. Every other parameter, decoded, goes to `extra` in the
/// order given (an empty one only under [`Empty::Value`]); an error from `extra` is the answer.
pub fn parse(
    query: Option<&str>,
    rules: &Rules,
    mut extra: impl FnMut(&str, String) -> Result<(), ApiError>,
) -> Result<Page, ApiError> {
    let mut page = rules.first_page();
    for pair in pairs(query) {
        let (name, value) = pair?;
        if value.is_empty() && rules.empty == Empty::Absent {
            continue;
        }
        match name.as_str() {
            "limit" => page.limit = limit(&value, rules.max_limit)?,
            "after" => page.after = (!value.is_empty()).then_some(value),
            "order" => page.order = order(&value)?,
            _ => extra(&name, value)?,
        }
    }
    Ok(page)
}

/// For [`parse`] when a list has no parameters of its own: ignores them.
pub fn no_extra(_name: &str, _value: String) -> Result<(), ApiError> {
    Ok(())
}

fn limit(value: &str, max: usize) -> Result<usize, ApiError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| {
            invalid(
                "limit",
                format!("limit must be an integer from 1 to {max}"),
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

/// `400 invalid request` on `param`: `<rule>, got "<value>"`, the value cut to 60 characters
/// and quoted as a JSON string.
pub fn invalid(param: &str, rule: impl AsRef<str>, got: &str) -> ApiError {
    let got = serde_json::Value::String(got.chars().take(60).collect()).to_string();
    ApiError::field(
        ErrorCode::InvalidRequest,
        param,
        format!("{}, got {got}", rule.as_ref()),
    )
}

/// The decoded `(name, value)` pairs of a query string. A pair whose name does not decode is
/// skipped (it cannot be a parameter we know); a value that does not decode to UTF-8 is an
/// error naming the parameter.
pub fn pairs(query: Option<&str>) -> impl Iterator<Item = Result<(String, String), ApiError>> + '_ {
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
/// `None` when the bytes are not UTF-8.
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
