//! Libraries: one owner's pages with cursors, the assets they hold and count, deletion with
//! all their assets, also while assets are being added.

use std::sync::Arc;

use crate::suite::{Fixture, activate, asset, asset_ids, ids_of, library, with_library};
use crate::test_util::tid;
use crate::{AssetQuery, Order, Store, StoreError};

use crate::AssetStatus::Processing;

cases!(
    libraries_by_owner_with_cursors,
    assets_need_their_library_and_are_counted,
    deleting_a_library_removes_its_assets_and_indexes,
    a_library_deleted_while_assets_are_added_leaves_no_orphans,
);

async fn libraries_by_owner_with_cursors(store: Fixture) {
    let mine: Vec<String> = (1..=5).map(|n| tid("lib", n)).collect();
    for l in &mine {
        let lib = library(l, "key_a", "gen2");
        store.create_library(&lib).await.unwrap();
    }
    let theirs = library(&tid("lib", 9), "key_b", "gen2");
    store.create_library(&theirs).await.unwrap();
    // A caller's count is ignored.
    let mut counted = library(&tid("lib", 10), "key_c", "gen2");
    counted.asset_count = 7;
    store.create_library(&counted).await.unwrap();
    let count = store
        .library(&counted.id)
        .await
        .unwrap()
        .unwrap()
        .asset_count;
    assert_eq!(count, 0);
    let again = library(&mine[0], "key_a", "x");
    assert!(store.create_library(&again).await.is_err());
    let empty = library("", "key_a", "x");
    assert!(store.create_library(&empty).await.is_err());
    assert_eq!(
        store.library(&mine[2]).await.unwrap(),
        Some(library(&mine[2], "key_a", "gen2"))
    );
    assert_eq!(store.library("lib_missing").await.unwrap(), None);

    /// Cursor (an index into `mine`), limit, order, the page expected, `has_more`.
    type Case<'a> = (Option<usize>, usize, Order, &'a [usize], bool);
    let cases: &[Case<'_>] = &[
        (None, 2, Order::Desc, &[4, 3], true),
        (Some(3), 2, Order::Desc, &[2, 1], true),
        (Some(1), 2, Order::Desc, &[0], false),
        (None, 3, Order::Asc, &[0, 1, 2], true),
        (Some(2), 3, Order::Asc, &[3, 4], false),
        (None, 100, Order::Asc, &[0, 1, 2, 3, 4], false),
    ];
    for &(after, limit, order, want, more) in cases {
        let after_id = after.map(|i| mine[i].as_str());
        let page = store
            .list_libraries("key_a", after_id, limit, order)
            .await
            .unwrap();
        let want: Vec<String> = want.iter().map(|&i| mine[i].clone()).collect();
        assert_eq!(ids_of(&page.items, |l| &l.id), want, "{after:?} {order:?}");
        assert_eq!(page.has_more, more, "{after:?} {order:?}");
    }
    // Another owner's id as a cursor still lists only this owner's libraries.
    let page = store
        .list_libraries("key_b", Some(&mine[4]), 10, Order::Asc)
        .await
        .unwrap();
    assert_eq!(ids_of(&page.items, |l| &l.id), [tid("lib", 9)]);
    let none = store
        .list_libraries("key_z", None, 10, Order::Desc)
        .await
        .unwrap();
    assert!(none.items.is_empty());
}

async fn assets_need_their_library_and_are_counted(store: Fixture) {
    let lib = with_library(&*store).await;
    let a = asset("asset_1", &lib, Processing, None);
    store.create_asset(&a).await.unwrap();
    assert_eq!(store.asset("asset_1").await.unwrap(), Some(a.clone()));
    let count = store.library("lib_1").await.unwrap().unwrap().asset_count;
    assert_eq!(count, 1);
    assert!(store.create_asset(&a).await.is_err(), "an existing id");

    let nowhere = library("lib_none", "key_a", "gen2");
    let orphan = asset("asset_2", &nowhere, Processing, None);
    assert!(matches!(
        store.create_asset(&orphan).await,
        Err(StoreError::LibraryNotFound(_))
    ));
    // Another owner's or another family's asset cannot go into the library.
    let mut stranger = asset("asset_3", &lib, Processing, None);
    stranger.owner = "key_b".into();
    assert!(matches!(
        store.create_asset(&stranger).await,
        Err(StoreError::LibraryNotFound(_))
    ));
    let mut cross = asset("asset_4", &lib, Processing, None);
    cross.family = "motion".into();
    assert!(matches!(
        store.create_asset(&cross).await,
        Err(StoreError::LibraryNotFound(_))
    ));
    let count = store.library("lib_1").await.unwrap().unwrap().asset_count;
    assert_eq!(count, 1);
    assert_eq!(store.asset("asset_2").await.unwrap(), None);

    assert_eq!(store.delete_asset("asset_1").await.unwrap(), Some(a));
    assert_eq!(store.delete_asset("asset_1").await.unwrap(), None);
    assert_eq!(store.asset("asset_1").await.unwrap(), None);
    let count = store.library("lib_1").await.unwrap().unwrap().asset_count;
    assert_eq!(count, 0);
    assert!(store.processing_assets(10).await.unwrap().is_empty());
}

async fn deleting_a_library_removes_its_assets_and_indexes(store: Fixture) {
    let lib = with_library(&*store).await;
    let keep = library("lib_2", "key_a", "gen2");
    store.create_library(&keep).await.unwrap();
    for n in 1..=3 {
        let a = asset(&format!("asset_{n}"), &lib, Processing, None);
        store.create_asset(&a).await.unwrap();
    }
    activate(&*store, "asset_2", 10).await;
    let kept = asset("asset_kept", &keep, Processing, None);
    store.create_asset(&kept).await.unwrap();

    let (gone, assets) = store.delete_library("lib_1").await.unwrap().unwrap();
    assert_eq!(gone.id, "lib_1");
    assert_eq!(gone.asset_count, 3);
    let mut removed = asset_ids(&assets);
    removed.sort();
    assert_eq!(removed, ["asset_1", "asset_2", "asset_3"]);
    assert_eq!(store.library("lib_1").await.unwrap(), None);
    for n in 1..=3 {
        assert_eq!(store.asset(&format!("asset_{n}")).await.unwrap(), None);
    }
    assert_eq!(
        asset_ids(&store.processing_assets(10).await.unwrap()),
        ["asset_kept"]
    );
    assert!(store.expired_assets(u64::MAX, 10).await.unwrap().is_empty());
    let page = store
        .list_libraries("key_a", None, 10, Order::Asc)
        .await
        .unwrap();
    assert_eq!(ids_of(&page.items, |l| &l.id), ["lib_2"]);
    let page = store
        .list_assets(&AssetQuery {
            library_id: "lib_1".into(),
            limit: 10,
            ..AssetQuery::default()
        })
        .await
        .unwrap();
    assert!(page.items.is_empty());
    let count = store.library("lib_2").await.unwrap().unwrap().asset_count;
    assert_eq!(count, 1);
    assert_eq!(store.delete_library("lib_1").await.unwrap(), None);
    // A new asset cannot go into the deleted library.
    assert!(matches!(
        store
            .create_asset(&asset("asset_9", &lib, Processing, None))
            .await,
        Err(StoreError::LibraryNotFound(_))
    ));
}

async fn a_library_deleted_while_assets_are_added_leaves_no_orphans(store: Fixture) {
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).await.unwrap();
    for n in 0..50 {
        let a = asset(&format!("asset_a{n:03}"), &lib, Processing, None);
        store.create_asset(&a).await.unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let adder = {
        let store: Arc<dyn Store> = store.store.clone();
        let (barrier, lib) = (barrier.clone(), lib.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            let mut added = 0;
            for n in 0..200 {
                let a = asset(&format!("asset_b{n:03}"), &lib, Processing, None);
                match store.create_asset(&a).await {
                    Ok(()) => added += 1,
                    Err(StoreError::LibraryNotFound(_)) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            added
        })
    };
    barrier.wait().await;
    let (_, removed) = store.delete_library("lib_1").await.unwrap().unwrap();
    let added = adder.await.unwrap();
    // Everything added before the delete was removed with it; nothing is left behind.
    assert_eq!(removed.len(), 50 + added);
    assert!(store.processing_assets(1000).await.unwrap().is_empty());
}
