//! Asset listings: filters and pages, and ten thousand assets in one library.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{asset, library, with_library};
use crate::test_util::{open_store, tid};
use crate::{AssetQuery, AssetType, Order, Store};

use crate::AssetStatus::{Active, Expired, Failed, Processing};

#[test]
fn asset_lists_filter_and_page() {
    let (_dir, store, lib) = with_library();
    let other = library("lib_2", "key_a", "gen2");
    store.create_library(&other).unwrap();
    // 0: image active, 1: video processing, 2: image failed, 3: audio active, 4: image active.
    let spec = [
        (Active, Some(AssetType::Image)),
        (Processing, Some(AssetType::Video)),
        (Failed, Some(AssetType::Image)),
        (Active, Some(AssetType::Audio)),
        (Active, Some(AssetType::Image)),
    ];
    let all: Vec<String> = (0..spec.len() as u64).map(|n| tid("asset", n)).collect();
    for (i, (status, t)) in spec.iter().enumerate() {
        store
            .create_asset(&asset(&all[i], &lib, *status, *t))
            .unwrap();
    }
    store
        .create_asset(&asset(
            &tid("asset", 99),
            &other,
            Active,
            Some(AssetType::Image),
        ))
        .unwrap();
    let list = |status, asset_type, after: Option<usize>, limit, order| {
        let page = store
            .list_assets(&AssetQuery {
                library_id: "lib_1".into(),
                status,
                asset_type,
                after: after.map(|i| all[i].clone()),
                limit,
                order,
            })
            .unwrap();
        let got: Vec<usize> = page
            .items
            .iter()
            .map(|a| all.iter().position(|x| *x == a.id).unwrap())
            .collect();
        (got, page.has_more)
    };
    assert_eq!(
        list(None, None, None, 100, Order::Desc),
        (vec![4, 3, 2, 1, 0], false)
    );
    assert_eq!(list(None, None, None, 2, Order::Asc), (vec![0, 1], true));
    assert_eq!(list(None, None, Some(1), 2, Order::Asc), (vec![2, 3], true));
    assert_eq!(list(None, None, Some(3), 2, Order::Asc), (vec![4], false));
    assert_eq!(
        list(Some(Active), None, None, 100, Order::Desc),
        (vec![4, 3, 0], false)
    );
    assert_eq!(
        list(Some(Active), None, None, 2, Order::Desc),
        (vec![4, 3], true)
    );
    assert_eq!(
        list(Some(Active), None, Some(3), 2, Order::Desc),
        (vec![0], false)
    );
    assert_eq!(
        list(None, Some(AssetType::Image), None, 100, Order::Asc),
        (vec![0, 2, 4], false)
    );
    assert_eq!(
        list(Some(Active), Some(AssetType::Image), None, 1, Order::Asc),
        (vec![0], true)
    );
    assert_eq!(
        list(Some(Expired), None, None, 100, Order::Asc),
        (vec![], false)
    );
    assert_eq!(
        list(
            Some(Processing),
            Some(AssetType::Video),
            None,
            100,
            Order::Asc
        ),
        (vec![1], false)
    );
}

#[test]
fn ten_thousand_assets_in_one_library() {
    let (_dir, store) = open_store();
    let lib = library("lib_big", "key_a", "gen2");
    store.create_library(&lib).unwrap();
    let deadline = Duration::from_secs(120);
    let start = Instant::now();
    const N: u64 = 10_000;
    // Written from several threads at once, as concurrent uploads would be.
    let store = Arc::new(store);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (store, lib) = (store.clone(), lib.clone());
            std::thread::spawn(move || {
                for n in (t..N).step_by(4) {
                    let status = if n % 100 == 0 { Processing } else { Active };
                    let mut a = asset(&tid("asset", n), &lib, status, Some(AssetType::Image));
                    if status == Active {
                        a.expires_at = Some(1_000 + n);
                    }
                    store.create_asset(&a).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        start.elapsed() < deadline,
        "creation took {:?}",
        start.elapsed()
    );
    assert_eq!(store.library("lib_big").unwrap().unwrap().asset_count, N);

    // Paging through all of them, 100 at a time, each page quick.
    let mut after = None;
    let mut seen = 0;
    loop {
        let t = Instant::now();
        let page = store
            .list_assets(&AssetQuery {
                library_id: "lib_big".into(),
                after: after.clone(),
                limit: 100,
                order: Order::Desc,
                ..AssetQuery::default()
            })
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "page took {:?}",
            t.elapsed()
        );
        seen += page.items.len();
        after = page.items.last().map(|a| a.id.clone());
        if !page.has_more {
            break;
        }
    }
    assert_eq!(seen as u64, N);
    // A filter that matches 1 in 100 still answers within bounds.
    let t = Instant::now();
    let page = store
        .list_assets(&AssetQuery {
            library_id: "lib_big".into(),
            status: Some(Processing),
            limit: 100,
            order: Order::Asc,
            ..AssetQuery::default()
        })
        .unwrap();
    assert_eq!(page.items.len(), 100);
    assert!(!page.has_more);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "filter took {:?}",
        t.elapsed()
    );
    // The expiry index answers a bounded query without a scan.
    let t = Instant::now();
    let due = store.expired_assets(1_000 + 500, 50).unwrap();
    assert_eq!(due.len(), 50);
    assert!(due.windows(2).all(|w| w[0].expires_at <= w[1].expires_at));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "expiry took {:?}",
        t.elapsed()
    );
    assert_eq!(store.processing_assets(1000).unwrap().len(), 100);

    // Deleting the library removes them all in one step.
    let t = Instant::now();
    let (_, removed) = store.delete_library("lib_big").unwrap().unwrap();
    assert_eq!(removed.len() as u64, N);
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "delete took {:?}",
        t.elapsed()
    );
    assert!(store.expired_assets(u64::MAX, 10).unwrap().is_empty());
    assert!(store.processing_assets(10).unwrap().is_empty());
    assert_eq!(store.asset(&tid("asset", 5)).unwrap(), None);
}
