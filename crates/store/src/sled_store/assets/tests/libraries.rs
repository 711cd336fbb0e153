//! Libraries: one owner's pages with cursors, the assets they hold and count, deletion with
//! all their assets, also while assets are being added.

use std::sync::{Arc, Barrier};

use super::{activate, asset, asset_ids, ids, library, with_library};
use crate::test_util::{open_store, tid};
use crate::{AssetQuery, Order, Store, StoreError};

use crate::AssetStatus::Processing;

#[test]
fn libraries_by_owner_with_cursors() {
    let (_dir, store) = open_store();
    let mine: Vec<String> = (1..=5).map(|n| tid("lib", n)).collect();
    for l in &mine {
        store.create_library(&library(l, "key_a", "gen2")).unwrap();
    }
    store
        .create_library(&library(&tid("lib", 9), "key_b", "gen2"))
        .unwrap();
    // A caller's count is ignored.
    let mut counted = library(&tid("lib", 10), "key_c", "gen2");
    counted.asset_count = 7;
    store.create_library(&counted).unwrap();
    assert_eq!(store.library(&counted.id).unwrap().unwrap().asset_count, 0);
    assert!(
        store
            .create_library(&library(&mine[0], "key_a", "x"))
            .is_err()
    );
    assert!(store.create_library(&library("", "key_a", "x")).is_err());
    assert_eq!(
        store.library(&mine[2]).unwrap(),
        Some(library(&mine[2], "key_a", "gen2"))
    );
    assert_eq!(store.library("lib_missing").unwrap(), None);

    let check = |after: Option<usize>, limit, order, want: &[usize], more| {
        let page = store
            .list_libraries("key_a", after.map(|i| mine[i].as_str()), limit, order)
            .unwrap();
        let want: Vec<String> = want.iter().map(|&i| mine[i].clone()).collect();
        assert_eq!(ids(&page.items, |l| &l.id), want, "{after:?} {order:?}");
        assert_eq!(page.has_more, more, "{after:?} {order:?}");
    };
    check(None, 2, Order::Desc, &[4, 3], true);
    check(Some(3), 2, Order::Desc, &[2, 1], true);
    check(Some(1), 2, Order::Desc, &[0], false);
    check(None, 3, Order::Asc, &[0, 1, 2], true);
    check(Some(2), 3, Order::Asc, &[3, 4], false);
    check(None, 100, Order::Asc, &[0, 1, 2, 3, 4], false);
    // Another owner's id as a cursor still lists only this owner's libraries.
    let page = store
        .list_libraries("key_b", Some(&mine[4]), 10, Order::Asc)
        .unwrap();
    assert_eq!(ids(&page.items, |l| &l.id), [tid("lib", 9)]);
    assert!(
        store
            .list_libraries("key_z", None, 10, Order::Desc)
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn assets_need_their_library_and_are_counted() {
    let (_dir, store, lib) = with_library();
    let a = asset("asset_1", &lib, Processing, None);
    store.create_asset(&a).unwrap();
    assert_eq!(store.asset("asset_1").unwrap(), Some(a.clone()));
    assert_eq!(store.library("lib_1").unwrap().unwrap().asset_count, 1);
    assert!(store.create_asset(&a).is_err(), "an existing id");

    let orphan = asset(
        "asset_2",
        &library("lib_none", "key_a", "gen2"),
        Processing,
        None,
    );
    assert!(matches!(
        store.create_asset(&orphan),
        Err(StoreError::LibraryNotFound(_))
    ));
    // Another owner's or another family's asset cannot go into the library.
    let mut stranger = asset("asset_3", &lib, Processing, None);
    stranger.owner = "key_b".into();
    assert!(matches!(
        store.create_asset(&stranger),
        Err(StoreError::LibraryNotFound(_))
    ));
    let mut cross = asset("asset_4", &lib, Processing, None);
    cross.family = "motion".into();
    assert!(matches!(
        store.create_asset(&cross),
        Err(StoreError::LibraryNotFound(_))
    ));
    assert_eq!(store.library("lib_1").unwrap().unwrap().asset_count, 1);
    assert_eq!(store.asset("asset_2").unwrap(), None);

    assert_eq!(store.delete_asset("asset_1").unwrap(), Some(a));
    assert_eq!(store.delete_asset("asset_1").unwrap(), None);
    assert_eq!(store.asset("asset_1").unwrap(), None);
    assert_eq!(store.library("lib_1").unwrap().unwrap().asset_count, 0);
    assert!(store.processing_assets(10).unwrap().is_empty());
}

#[test]
fn deleting_a_library_removes_its_assets_and_indexes() {
    let (_dir, store, lib) = with_library();
    let keep = library("lib_2", "key_a", "gen2");
    store.create_library(&keep).unwrap();
    for n in 1..=3 {
        store
            .create_asset(&asset(&format!("asset_{n}"), &lib, Processing, None))
            .unwrap();
    }
    activate(&store, "asset_2", 10);
    store
        .create_asset(&asset("asset_kept", &keep, Processing, None))
        .unwrap();

    let (gone, assets) = store.delete_library("lib_1").unwrap().unwrap();
    assert_eq!(gone.id, "lib_1");
    assert_eq!(gone.asset_count, 3);
    let mut removed = asset_ids(&assets);
    removed.sort();
    assert_eq!(removed, ["asset_1", "asset_2", "asset_3"]);
    assert_eq!(store.library("lib_1").unwrap(), None);
    for n in 1..=3 {
        assert_eq!(store.asset(&format!("asset_{n}")).unwrap(), None);
    }
    assert_eq!(
        asset_ids(&store.processing_assets(10).unwrap()),
        ["asset_kept"]
    );
    assert!(store.expired_assets(u64::MAX, 10).unwrap().is_empty());
    assert_eq!(
        ids(
            &store
                .list_libraries("key_a", None, 10, Order::Asc)
                .unwrap()
                .items,
            |l| &l.id
        ),
        ["lib_2"]
    );
    let page = store
        .list_assets(&AssetQuery {
            library_id: "lib_1".into(),
            limit: 10,
            ..AssetQuery::default()
        })
        .unwrap();
    assert!(page.items.is_empty());
    assert_eq!(store.library("lib_2").unwrap().unwrap().asset_count, 1);
    assert_eq!(store.delete_library("lib_1").unwrap(), None);
    // A new asset cannot go into the deleted library.
    assert!(matches!(
        store.create_asset(&asset("asset_9", &lib, Processing, None)),
        Err(StoreError::LibraryNotFound(_))
    ));
}

#[test]
fn a_library_deleted_while_assets_are_added_leaves_no_orphans() {
    let (_dir, store) = open_store();
    let store = Arc::new(store);
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).unwrap();
    for n in 0..50 {
        store
            .create_asset(&asset(&format!("asset_a{n:03}"), &lib, Processing, None))
            .unwrap();
    }
    let barrier = Arc::new(Barrier::new(2));
    let adder = {
        let (store, barrier, lib) = (store.clone(), barrier.clone(), lib.clone());
        std::thread::spawn(move || {
            barrier.wait();
            let mut added = 0;
            for n in 0..200 {
                match store.create_asset(&asset(&format!("asset_b{n:03}"), &lib, Processing, None))
                {
                    Ok(()) => added += 1,
                    Err(StoreError::LibraryNotFound(_)) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            added
        })
    };
    barrier.wait();
    let (_, removed) = store.delete_library("lib_1").unwrap().unwrap();
    let added = adder.join().unwrap();
    // Everything added before the delete was removed with it; nothing is left behind.
    assert!(
        removed.len() >= 50 && removed.len() <= 50 + added,
        "{}",
        removed.len()
    );
    assert_eq!(removed.len(), 50 + added);
    assert!(store.processing_assets(1000).unwrap().is_empty());
}
