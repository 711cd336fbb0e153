//! Query strings of `GET /v1/videos` and `GET /v1/videos/{id}/content` (CONTRACT §1.3).
//!
//! Names and values are percent-decoded (`+` is a space, as in HTML forms); unknown parameters
//! are ignored; a repeated parameter is checked every time and the last one wins; an empty
//! `after=` is the same as leaving it out.

use error_codes::{ApiError, ErrorCode};

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

/// Parameters of `GET /v1/videos`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListParams {
    /// 1..=100, default 20.
    pub limit: usize,
    /// Exclusive cursor: a video id.
    pub after: Option<String>,
    pub order: ListOrder,
}

impl Default for ListParams {
    fn default() -> Self {
        ListParams {
            limit: DEFAULT_LIST_LIMIT,
            after: None,
            order: ListOrder::default(),
        }
    }
}

/// What `GET /v1/videos/{id}/content` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Variant {
    /// `video/mp4`.
    #[default]
    Video,
    /// An image of the first frame.
    Thumbnail,
}

/// Parses `limit=5&after=video_x&order=asc`; a bad value is `400 invalid request` naming the
/// parameter.
pub fn parse_list_query(query: Option<&str>) -> Result<ListParams, ApiError> {
    let mut params = ListParams::default();
    for pair in pairs(query) {
        let (name, value) = pair?;
        match name.as_str() {
            "limit" => {
                params.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
                    .ok_or_else(|| {
                        invalid(
                            "limit",
                            format!("limit must be an integer from 1 to {MAX_LIST_LIMIT}"),
                            &value,
                        )
                    })?;
            }
            "after" => params.after = (!value.is_empty()).then_some(value),
            "order" => {
                params.order = match value.as_str() {
                    "asc" => ListOrder::Asc,
                    "desc" => ListOrder::Desc,
                    _ => return Err(invalid("order", "order must be asc or desc", &value)),
                };
            }
            _ => {}
        }
    }
    Ok(params)
}

/// Parses `variant=video|thumbnail` (default `video`); anything else is `400 invalid request`,
/// param `variant`.
pub fn parse_content_query(query: Option<&str>) -> Result<Variant, ApiError> {
    let mut variant = Variant::default();
    for pair in pairs(query) {
        let (name, value) = pair?;
        if name == "variant" {
            variant = match value.as_str() {
                "video" => Variant::Video,
                "thumbnail" => Variant::Thumbnail,
                _ => {
                    return Err(invalid(
                        "variant",
                        "variant must be video or thumbnail",
                        &value,
                    ));
                }
            };
        }
    }
    Ok(variant)
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
/// skipped (it cannot be a parameter we know); a value that does not decode to UTF-8 is an
/// error naming the parameter.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries() {
        use ListOrder::{Asc, Desc};
        /// `Ok((limit, after, order))`, or `Err(param)`.
        type Expected = Result<(usize, Option<&'static str>, ListOrder), &'static str>;
        let cases: [(&str, Expected); 21] = [
            ("", Ok((20, None, Desc))),
            (
                "limit=5&after=video_x&order=asc",
                Ok((5, Some("video_x"), Asc)),
            ),
            ("limit=1", Ok((1, None, Desc))),
            ("limit=100&order=desc", Ok((100, None, Desc))),
            ("after=video%5Fx", Ok((20, Some("video_x"), Desc))),
            ("after=a+b%20c", Ok((20, Some("a b c"), Desc))),
            ("after=100%", Ok((20, Some("100%"), Desc))),
            ("after=", Ok((20, None, Desc))),
            ("unknown=1&&limit=3", Ok((3, None, Desc))),
            ("%6Cimit=7", Ok((7, None, Desc))),
            ("limit=3&limit=4", Ok((4, None, Desc))),
            ("%FF=1", Ok((20, None, Desc))),
            ("limit=0", Err("limit")),
            ("limit=101", Err("limit")),
            ("limit=-1", Err("limit")),
            ("limit=abc", Err("limit")),
            ("limit=", Err("limit")),
            ("limit", Err("limit")),
            ("order=ASC", Err("order")),
            ("order=newest", Err("order")),
            ("after=%FF", Err("after")),
        ];
        for (query, expected) in cases {
            match (parse_list_query(Some(query)), expected) {
                (Ok(p), Ok(want)) => {
                    assert_eq!((p.limit, p.after.as_deref(), p.order), want, "{query:?}");
                }
                (Err(e), Err(param)) => {
                    assert_eq!(e.code, ErrorCode::InvalidRequest, "{query:?}");
                    assert_eq!(e.param.as_deref(), Some(param), "{query:?}");
                }
                (got, _) => panic!("{query:?}: {got:?}"),
            }
        }
        assert_eq!(parse_list_query(None).unwrap(), ListParams::default());
    }

    #[test]
    fn list_error_detail_names_the_rule() {
        let err = parse_list_query(Some("limit=500")).unwrap_err();
        assert_eq!(
            err.detail,
            "limit must be an integer from 1 to 100, got \"500\""
        );
    }

    #[test]
    fn content_queries() {
        let cases = [
            (None, Ok(Variant::Video)),
            (Some(""), Ok(Variant::Video)),
            (Some("variant=video"), Ok(Variant::Video)),
            (Some("variant=thumbnail"), Ok(Variant::Thumbnail)),
            (Some("foo=bar&variant=thumbnail"), Ok(Variant::Thumbnail)),
            (Some("variant=spritesheet"), Err(())),
            (Some("variant="), Err(())),
            (Some("variant=Video"), Err(())),
        ];
        for (query, expected) in cases {
            let got = parse_content_query(query).map_err(|e| {
                assert_eq!(e.code, ErrorCode::InvalidRequest);
                assert_eq!(e.param.as_deref(), Some("variant"));
            });
            assert_eq!(got, expected, "{query:?}");
        }
    }
}
