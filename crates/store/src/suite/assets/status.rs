//! The status machine of assets and the processing and expiry indexes that follow it, also
//! across a reopening.

use crate::suite::{Fixture, activate, asset, asset_ids, asset_noop, with_library};
use crate::{AssetError, StoreError};

use crate::AssetStatus::{Active, Expired, Failed, Processing};

cases!(
    transitions_follow_the_status_machine,
    processing_and_expiry_indexes_follow_the_status,
    assets_survive_reopening,
);

async fn transitions_follow_the_status_machine(store: Fixture) {
    let lib = with_library(&*store).await;
    let all = [Processing, Active, Failed, Expired];
    let mut n = 0;
    for from in all {
        for to in all {
            n += 1;
            let aid = format!("asset_{n}");
            store
                .create_asset(&asset(&aid, &lib, from, None))
                .await
                .unwrap();
            let got = store.transition_asset(&aid, &all, to, &asset_noop).await;
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
                    let now = store.asset(&aid).await.unwrap().unwrap().status;
                    assert_eq!(now, from);
                }
                Err(e) => panic!("{from:?} -> {to:?}: {e}"),
            }
        }
    }
    // `from` is a compare-and-swap.
    store
        .create_asset(&asset("asset_cas", &lib, Processing, None))
        .await
        .unwrap();
    assert!(matches!(
        store
            .transition_asset("asset_cas", &[Active], Expired, &asset_noop)
            .await,
        Err(StoreError::AssetWrongStatus { .. })
    ));
    assert!(matches!(
        store
            .transition_asset("asset_gone", &[Processing], Active, &asset_noop)
            .await,
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
        .await
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
    assert_eq!(
        store.asset("asset_cas").await.unwrap().as_ref(),
        Some(&written)
    );
    assert_eq!(written.error.unwrap().code, "empty");
    assert_eq!(store.asset("asset_other").await.unwrap(), None);
}

async fn processing_and_expiry_indexes_follow_the_status(store: Fixture) {
    let lib = with_library(&*store).await;
    for n in 1..=4 {
        store
            .create_asset(&asset(&format!("asset_{n}"), &lib, Processing, None))
            .await
            .unwrap();
    }
    assert_eq!(
        asset_ids(&store.processing_assets(10).await.unwrap()),
        ["asset_1", "asset_2", "asset_3", "asset_4"]
    );
    assert_eq!(store.processing_assets(2).await.unwrap().len(), 2);
    // 1 expires at 300, 2 at 100, 3 fails, 4 stays processing.
    activate(&*store, "asset_1", 300).await;
    activate(&*store, "asset_2", 100).await;
    store
        .transition_asset("asset_3", &[Processing], Failed, &|a| {
            a.expires_at = Some(50);
        })
        .await
        .unwrap();
    assert_eq!(
        asset_ids(&store.processing_assets(10).await.unwrap()),
        ["asset_4"]
    );
    assert!(store.expired_assets(99, 10).await.unwrap().is_empty());
    assert_eq!(
        asset_ids(&store.expired_assets(100, 10).await.unwrap()),
        ["asset_2"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(1000, 10).await.unwrap()),
        ["asset_2", "asset_1"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(1000, 1).await.unwrap()),
        ["asset_2"]
    );
    // Moving the expiry moves the index entry.
    store
        .transition_asset("asset_1", &[Active], Active, &|a| a.expires_at = Some(50))
        .await
        .unwrap();
    assert_eq!(
        asset_ids(&store.expired_assets(60, 10).await.unwrap()),
        ["asset_1"]
    );
    // Expired and deleted assets leave the index.
    store
        .transition_asset("asset_1", &[Active], Expired, &asset_noop)
        .await
        .unwrap();
    store.delete_asset("asset_2").await.unwrap();
    assert!(store.expired_assets(u64::MAX, 10).await.unwrap().is_empty());
    store.delete_asset("asset_4").await.unwrap();
    assert!(store.processing_assets(10).await.unwrap().is_empty());
}

async fn assets_survive_reopening(store: Fixture) {
    let lib = with_library(&*store).await;
    for id in ["asset_1", "asset_2"] {
        store
            .create_asset(&asset(id, &lib, Processing, None))
            .await
            .unwrap();
    }
    activate(&*store, "asset_2", 77).await;
    let store = store.reopen().await;
    let count = store.library("lib_1").await.unwrap().unwrap().asset_count;
    assert_eq!(count, 2);
    assert_eq!(
        asset_ids(&store.processing_assets(10).await.unwrap()),
        ["asset_1"]
    );
    assert_eq!(
        asset_ids(&store.expired_assets(77, 10).await.unwrap()),
        ["asset_2"]
    );
    let status = store.asset("asset_2").await.unwrap().unwrap().status;
    assert_eq!(status, Active);
}
