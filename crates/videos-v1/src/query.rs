//! Query strings of `GET /v1/videos` and `GET /v1/videos/{id}/content` (CONTRACT §1.3).
//!
//! Decoding, the paging parameters and the contract's bounds of `limit` are `list-query`'s;
//! here is what an empty value means: `after=` is no cursor (and clears an earlier one), while
//! an empty `limit`, `order` or `variant` is refused.

use error_codes::ApiError;
use list_query::{Empty, Rules, invalid, no_extra, pairs};

/// Parameters of `GET /v1/videos`: the cursor `after` is a video id.
pub use list_query::Page as ListParams;
pub use list_query::{DEFAULT_LIMIT as DEFAULT_LIST_LIMIT, ListOrder, MAX_LIMIT as MAX_LIST_LIMIT};

/// How `GET /v1/videos` is paged.
const LIST: Rules = Rules::contract(Empty::Value);

/// What `GET /v1/videos/{id}/content` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Variant {
    /// `video/mp4`.
    #[default]
    Video,
    /// An image of the first frame.
    Thumbnail,
    /// A grid image of frames spread over the video.
    Spritesheet,
}

/// Parses `limit=5&after=video_x&order=asc`; a bad value is `400 invalid request` naming the
/// parameter.
pub fn parse_list_query(query: Option<&str>) -> Result<ListParams, ApiError> {
    list_query::parse(query, &LIST, no_extra)
}

/// Parses `variant=video|thumbnail|spritesheet` (default `video`); anything else is `400 invalid request`,
/// param `variant`.
pub fn parse_content_query(query: Option<&str>) -> Result<Variant, ApiError> {
    let mut variant = Variant::default();
    for pair in pairs(query) {
        let (name, value) = pair?;
        if name == "variant" {
            variant = match value.as_str() {
                "video" => Variant::Video,
                "thumbnail" => Variant::Thumbnail,
                "spritesheet" => Variant::Spritesheet,
                _ => {
                    return Err(invalid(
                        "variant",
                        "variant must be video, thumbnail or spritesheet",
                        &value,
                    ));
                }
            };
        }
    }
    Ok(variant)
}

#[cfg(test)]
mod tests {
    use error_codes::ErrorCode;

    use super::*;

    #[test]
    fn list_queries() {
        use ListOrder::{Asc, Desc};
        /// `Ok((limit, after, order))`, or `Err(param)`. Decoding and the paging parameters
        /// themselves are tested in `list-query`; these pin this format's bounds and its
        /// meaning of an empty value.
        type Expected = Result<(usize, Option<&'static str>, ListOrder), &'static str>;
        let cases: [(&str, Expected); 12] = [
            ("", Ok((20, None, Desc))),
            (
                "limit=5&after=video_x&order=asc",
                Ok((5, Some("video_x"), Asc)),
            ),
            ("limit=100&order=desc", Ok((100, None, Desc))),
            ("after=", Ok((20, None, Desc))),
            ("after=video_x&after=", Ok((20, None, Desc))),
            ("limit=0", Err("limit")),
            ("limit=101", Err("limit")),
            ("limit=", Err("limit")),
            ("limit", Err("limit")),
            ("order=", Err("order")),
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
        assert_eq!(
            parse_list_query(None).unwrap(),
            ListParams {
                limit: DEFAULT_LIST_LIMIT,
                after: None,
                order: Desc,
            }
        );
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
            (Some("variant=spritesheet"), Ok(Variant::Spritesheet)),
            (Some("variant=sprites"), Err(())),
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
