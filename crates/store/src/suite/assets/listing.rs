//! Asset listings: filters and pages, and ten thousand assets in one library.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::suite::{Fixture, asset, library, with_library};
use crate::test_util::tid;
use crate::{AssetQuery, AssetStatus, AssetType, Order, Store};

use crate::AssetStatus::{Active, Expired, Failed, Processing};

cases!(
    asset_lists_filter_and_page,
    ten_thousand_assets_in_one_library
);

async fn asset_lists_filter_and_page(store: Fixture) {
    let lib = with_library(&*store).await;
    let other = library("lib_2", "key_a", "gen2");
    store.create_library(&other).await.unwrap();
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
        let a = asset(&all[i], &lib, *status, *t);
        store.create_asset(&a).await.unwrap();
    }
    let elsewhere = asset(&tid("asset", 99), &other, Active, Some(AssetType::Image));
    store.create_asset(&elsewhere).await.unwrap();
    type Case<'a> = (
        Option<AssetStatus>,
        Option<AssetType>,
        Option<usize>,
        usize,
        Order,
        &'a [usize],
        bool,
    );
    let cases: &[Case<'_>] = &[
        (None, None, None, 100, Order::Desc, &[4, 3, 2, 1, 0], false),
        (None, None, None, 2, Order::Asc, &[0, 1], true),
        (None, None, Some(1), 2, Order::Asc, &[2, 3], true),
        (None, None, Some(3), 2, Order::Asc, &[4], false),
        (
            Some(Active),
            None,
            None,
            100,
            Order::Desc,
            &[4, 3, 0],
            false,
        ),
        (Some(Active), None, None, 2, Order::Desc, &[4, 3], true),
        (Some(Active), None, Some(3), 2, Order::Desc, &[0], false),
        (
            None,
            Some(AssetType::Image),
            None,
            100,
            Order::Asc,
            &[0, 2, 4],
            false,
        ),
        (
            Some(Active),
            Some(AssetType::Image),
            None,
            1,
            Order::Asc,
            &[0],
            true,
        ),
        (Some(Expired), None, None, 100, Order::Asc, &[], false),
        (
            Some(Processing),
            Some(AssetType::Video),
            None,
            100,
            Order::Asc,
            &[1],
            false,
        ),
    ];
    for &(status, asset_type, after, limit, order, want, more) in cases {
        let query = AssetQuery {
            library_id: "lib_1".into(),
            status,
            asset_type,
            after: after.map(|i| all[i].clone()),
            limit,
            order,
        };
        let page = store.list_assets(&query).await.unwrap();
        let got: Vec<usize> = page
            .items
            .iter()
            .map(|a| all.iter().position(|x| *x == a.id).unwrap())
            .collect();
        assert_eq!((got.as_slice(), page.has_more), (want, more), "{query:?}");
    }
}

async fn ten_thousand_assets_in_one_library(store: Fixture) {
    let lib = library("lib_big", "key_a", "gen2");
    store.create_library(&lib).await.unwrap();
    let deadline = Duration::from_secs(120);
    let start = Instant::now();
    const N: u64 = 10_000;
    // Written by several writers at once, as concurrent uploads would be.
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let store: Arc<dyn Store> = store.store.clone();
            let lib = lib.clone();
            tokio::spawn(async move {
                for n in (t..N).step_by(4) {
                    let status = if n % 100 == 0 { Processing } else { Active };
                    let mut a = asset(&tid("asset", n), &lib, status, Some(AssetType::Image));
                    if status == Active {
                        a.expires_at = Some(1_000 + n);
                    }
                    store.create_asset(&a).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    assert!(
        start.elapsed() < deadline,
        "creation took {:?}",
        start.elapsed()
    );
    let count = store.library("lib_big").await.unwrap().unwrap().asset_count;
    assert_eq!(count, N);

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
            .await
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
        .await
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
    let due = store.expired_assets(1_000 + 500, 50).await.unwrap();
    assert_eq!(due.len(), 50);
    assert!(due.windows(2).all(|w| w[0].expires_at <= w[1].expires_at));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "expiry took {:?}",
        t.elapsed()
    );
    assert_eq!(store.processing_assets(1000).await.unwrap().len(), 100);

    // Deleting the library removes them all in one step.
    let t = Instant::now();
    let (_, removed) = store.delete_library("lib_big").await.unwrap().unwrap();
    assert_eq!(removed.len() as u64, N);
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "delete took {:?}",
        t.elapsed()
    );
    assert!(store.expired_assets(u64::MAX, 10).await.unwrap().is_empty());
    assert!(store.processing_assets(10).await.unwrap().is_empty());
    assert_eq!(store.asset(&tid("asset", 5)).await.unwrap(), None);
}
