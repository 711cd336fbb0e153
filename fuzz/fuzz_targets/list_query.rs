//! List and content query strings (`crates/list-query`, and its users `crates/videos-v1` and
//! `crates/assets`) over arbitrary text: never a panic; an error names a parameter; under either
//! meaning of an empty value, parsed parameters written back as a query string (percent-encoded)
//! parse to the same parameters and `limit` stays in 1..=100; each format's list parser answers
//! as the shared one under its own meaning of an empty value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use list_query::{Empty, ListOrder, Page, Rules, no_extra};
use relay_fuzz::percent_encode;

fn written_back(page: &Page) -> String {
    let order = match page.order {
        ListOrder::Asc => "asc",
        ListOrder::Desc => "desc",
    };
    let mut q = format!("limit={}&order={order}", page.limit);
    if let Some(after) = &page.after {
        q.push_str(&format!("&after={}", percent_encode(after)));
    }
    q
}

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };

    for empty in [Empty::Absent, Empty::Value] {
        let rules = Rules::contract(empty);
        let mut seen = Vec::new();
        let page = list_query::parse(Some(query), &rules, |name, value| {
            seen.push((name.to_owned(), value));
            Ok(())
        });
        match &page {
            Ok(p) => {
                assert!((1..=rules.max_limit).contains(&p.limit));
                let again = written_back(p);
                let parsed = list_query::parse(Some(&again), &rules, no_extra);
                assert_eq!(parsed.as_ref().ok(), Some(p), "{again}");
                for (name, value) in &seen {
                    assert!(!["limit", "after", "order"].contains(&name.as_str()));
                    assert!(empty == Empty::Value || !value.is_empty(), "{name}");
                }
            }
            Err(e) => assert!(e.param.is_some(), "{e:?}"),
        }
        let format = match empty {
            Empty::Absent => assets::parse_library_list_query(Some(query)),
            Empty::Value => videos_v1::parse_list_query(Some(query)),
        };
        assert_eq!(format, page, "{empty:?}");
    }
    match videos_v1::parse_content_query(Some(query)) {
        Ok(v) => {
            let name = match v {
                videos_v1::Variant::Video => "video",
                videos_v1::Variant::Thumbnail => "thumbnail",
                videos_v1::Variant::Spritesheet => "spritesheet",
            };
            let again = format!("variant={name}");
            assert_eq!(videos_v1::parse_content_query(Some(&again)).ok(), Some(v));
        }
        // `variant`, or any parameter whose value is not percent-encoded UTF-8.
        Err(e) => assert!(e.param.is_some(), "{e:?}"),
    }
    match assets::parse_asset_list_query(Some(query)) {
        Ok(q) => {
            assert!((1..=assets::MAX_LIST_LIMIT).contains(&q.limit));
            let mut again = written_back(&Page {
                limit: q.limit,
                after: q.after.clone(),
                order: q.order,
            });
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
