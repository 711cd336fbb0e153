//! List and content query strings (`crates/videos-v1` query.rs, `crates/assets` query.rs) over
//! arbitrary text: never a panic; an error names a parameter; parsed parameters written back as
//! a query string (percent-encoded) parse to the same parameters; and `limit` stays in 1..=100.
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_fuzz::percent_encode;

fn order_videos(o: videos_v1::ListOrder) -> &'static str {
    match o {
        videos_v1::ListOrder::Asc => "asc",
        videos_v1::ListOrder::Desc => "desc",
    }
}

fn order_assets(o: assets::ListOrder) -> &'static str {
    match o {
        assets::ListOrder::Asc => "asc",
        assets::ListOrder::Desc => "desc",
    }
}

fn common(limit: usize, after: Option<&str>, order: &str) -> String {
    let mut q = format!("limit={limit}&order={order}");
    if let Some(after) = after {
        q.push_str(&format!("&after={}", percent_encode(after)));
    }
    q
}

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };

    match videos_v1::parse_list_query(Some(query)) {
        Ok(p) => {
            assert!((1..=videos_v1::MAX_LIST_LIMIT).contains(&p.limit));
            let again = common(p.limit, p.after.as_deref(), order_videos(p.order));
            assert_eq!(
                videos_v1::parse_list_query(Some(&again)).ok(),
                Some(p),
                "{again}"
            );
        }
        Err(e) => assert!(e.param.is_some(), "{e:?}"),
    }
    match videos_v1::parse_content_query(Some(query)) {
        Ok(v) => {
            let name = match v {
                videos_v1::Variant::Video => "video",
                videos_v1::Variant::Thumbnail => "thumbnail",
            };
            let again = format!("variant={name}");
            assert_eq!(videos_v1::parse_content_query(Some(&again)).ok(), Some(v));
        }
        // `variant`, or any parameter whose value is not percent-encoded UTF-8.
        Err(e) => assert!(e.param.is_some(), "{e:?}"),
    }
    match assets::parse_library_list_query(Some(query)) {
        Ok(q) => {
            assert!((1..=assets::MAX_LIST_LIMIT).contains(&q.limit));
            let again = common(q.limit, q.after.as_deref(), order_assets(q.order));
            assert_eq!(
                assets::parse_library_list_query(Some(&again)).ok(),
                Some(q),
                "{again}"
            );
        }
        Err(e) => assert!(e.param.is_some(), "{e:?}"),
    }
    match assets::parse_asset_list_query(Some(query)) {
        Ok(q) => {
            assert!((1..=assets::MAX_LIST_LIMIT).contains(&q.limit));
            let mut again = common(q.limit, q.after.as_deref(), order_assets(q.order));
            if let Some(status) = q.status {
                again.push_str(&format!("&status={}", status.as_str()));
            }
            if let Some(kind) = q.asset_type {
                again.push_str(&format!("&type={}", kind.as_str()));
            }
            assert_eq!(
                assets::parse_asset_list_query(Some(&again)).ok(),
                Some(q),
                "{again}"
            );
        }
        Err(e) => assert!(e.param.is_some(), "{e:?}"),
    }
});
