//! The status machine of assets and the processing and expiry indexes that follow it, also
//! across a reopening.

use super::{activate, asset, asset_ids, library, noop, with_library};
use crate::test_util::TempDir;
use crate::{AssetError, SledStore, Store, StoreError};

use crate::AssetStatus::{Active, Expired, Failed, Processing};

#[test]
fn transitions_follow_the_status_machine() {
    let (_dir, store, lib) = with_library();
    let all = [Processing, Active, Failed, Expired];
    let mut n = 0;
    for from in all {
        for to in all {
            n += 1;
            let aid = format!("asset_{n}");
            store.create_asset(&asset(&aid, &lib, from, None)).unwrap();
            let got = store.transition_asset(&aid, &all, to, &noop);
            let allowed = !from.is_final() && (from == to || from.can_move_to(to));
            let expected_moves = [
                (Processing, Active),
                (Processing, Failed),
                (Active, Expired),
            ];
            assert_eq!(
                allowed,
                from == to && !from.is_final() || expected_moves.contains(&(from, to)),
                "{from:?} -> {to:?}"
            );
            match got {
                Ok(a) => {
                    assert!(allowed, "{from:?} -> {to:?} was allowed");
                    assert_eq!(a.status, to);
                }
                Err(StoreError::AssetWrongStatus { actual, .. }) => {
                    assert!(!allowed, "{from:?} -> {to:?} was refused");
                    assert_eq!(actual, from);
                    assert_eq!(store.asset(&aid).unwrap().unwrap().status, from);
                }
                Err(e) => panic!("{from:?} -> {to:?}: {e}"),
            }
        }
    }
    // `from` is a compare-and-swap.
    store
        .create_asset(&asset("asset_cas", &lib, Processing, None))
        .unwrap();
    assert!(matches!(
        store.transition_asset("asset_cas", &[Active], Expired, &noop),
        Err(StoreError::AssetWrongStatus { .. })
    ));
    assert!(matches!(
        store.transition_asset("asset_gone", &[Processing], Active, &noop),
        Err(StoreError::AssetNotFound(_))
    ));
    // Identity fields cannot be changed; the rest can.
    let written = store
        .transition_asset("asset_cas", &[Processing], Failed, &|a| {
            a.id = "asset_other".into();
            a.owner = "key_b".into();
            a.library_id = "lib_2".into();
            a.family = "motion".into();
            a.created_at = 99;
            a.error = Some(AssetError {
                code: "empty".into(),
                message: "the file is empty".into(),
            });
        })
        .unwrap();
    assert_eq!(
        (
            written.id.as_str(),
            written.owner.as_str(),
            written.library_id.as_str(),
            written.family.as_str(),
            written.created_at
        ),
        ("asset_cas", "key_a", "lib_1", "gen2", 1)
    );
    assert_eq!(written.error.unwrap().code, "empty");
    assert_eq!(store.asset("asset_other").unwrap(), None);
}

#[test]
fn processing_and_expiry_indexes_follow_the_status() {
    let (_dir, store, lib) = with_library();
    for n in 1..=4 {
        store
            .create_asset(&asset(&format!("asset_{n}"), &lib, Processing, None))
            .unwrap();
    }
    assert_eq!(
        asset_ids(&store.processing_assets(10).unwrap()),
        ["asset_1", "asset_2", "asset_3", "asset_4"]
    );
    assert_eq!(store.processing_assets(2).unwrap().len(), 2);
    // 1 expires at 300, 2 at 100, 3 fails, 4 stays processing.
    activate(&store, "asset_1", 300);
    activate(&store, "asset_2", 100);
    store
        .transition_asset("asset_3", &[Processing], Failed, &|a| {
            a.expires_at = Some(50);
        })
        .unwrap();
    assert_eq!(
        asset_ids(&store.processing_assets(10).unwrap()),
        ["asset_4"]
    );
    assert!(store.expired_assets(99, 10).unwrap().is_empty());
    assert_eq!(
        asset_ids(&store.expired_assets(100, 10).unwrap()),
        ["asset_2"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(1000, 10).unwrap()),
        ["asset_2", "asset_1"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(1000, 1).unwrap()),
        ["asset_2"]
    );
    // Moving the expiry moves the index entry.
    store
        .transition_asset("asset_1", &[Active], Active, &|a| a.expires_at = Some(50))
        .unwrap();
    assert_eq!(
        asset_ids(&store.expired_assets(60, 10).unwrap()),
        ["asset_1"]
    );
    // Expired and deleted assets leave the index.
    store
        .transition_asset("asset_1", &[Active], Expired, &noop)
        .unwrap();
    store.delete_asset("asset_2").unwrap();
    assert!(store.expired_assets(u64::MAX, 10).unwrap().is_empty());
    store.delete_asset("asset_4").unwrap();
    assert!(store.processing_assets(10).unwrap().is_empty());
}

#[test]
fn assets_survive_reopening() {
    let dir = TempDir::new();
    let lib = library("lib_1", "key_a", "gen2");
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.create_library(&lib).unwrap();
        store
            .create_asset(&asset("asset_1", &lib, Processing, None))
            .unwrap();
        store
            .create_asset(&asset("asset_2", &lib, Processing, None))
            .unwrap();
        activate(&store, "asset_2", 77);
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.library("lib_1").unwrap().unwrap().asset_count, 2);
    assert_eq!(
        asset_ids(&store.processing_assets(10).unwrap()),
        ["asset_1"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(77, 10).unwrap()),
        ["asset_2"]
    );
    assert_eq!(store.asset("asset_2").unwrap().unwrap().status, Active);
}
