//! Asset libraries and assets through the `Store` trait.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::test_util::TempDir;
use crate::{
    AssetError, AssetQuery, AssetRecord, AssetSource, AssetStatus, AssetType, Library, Order,
    SledStore, Store, StoreError,
};

use AssetStatus::{Active, Expired, Failed, Processing};

fn open() -> (TempDir, SledStore) {
    let dir = TempDir::new();
    let store = SledStore::open(dir.path()).expect("open store");
    (dir, store)
}

/// `prefix_<ULID>` whose ULID encodes time `n`, so ids sort by `n`.
fn id(prefix: &str, n: u64) -> String {
    format!(
        "{prefix}_{}",
        ulid::Ulid::from_parts(1_700_000_000_000 + n, 0)
    )
}

fn library(id: &str, owner: &str, family: &str) -> Library {
    Library {
        id: id.to_owned(),
        owner: owner.to_owned(),
        name: format!("{id} name"),
        family: family.to_owned(),
        created_at: 1,
        asset_count: 0,
    }
}

fn asset(id: &str, lib: &Library, status: AssetStatus, t: Option<AssetType>) -> AssetRecord {
    AssetRecord {
        id: id.to_owned(),
        owner: lib.owner.clone(),
        library_id: lib.id.clone(),
        family: lib.family.clone(),
        declared_type: t,
        asset_type: t,
        status,
        source: AssetSource::Url("https://example.com/a.png".into()),
        blob: None,
        format: None,
        bytes: None,
        width: None,
        height: None,
        created_at: 1,
        updated_at: 1,
        expires_at: None,
        error: None,
    }
}

fn ids<T>(items: &[T], id: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|x| id(x).to_owned()).collect()
}

fn asset_ids(items: &[AssetRecord]) -> Vec<String> {
    ids(items, |a| &a.id)
}

fn noop(_: &mut AssetRecord) {}

/// Moves an asset to active with an expiry.
fn activate(store: &SledStore, id: &str, expires_at: u64) -> AssetRecord {
    store
        .transition_asset(id, &[Processing], Active, &|a| {
            a.expires_at = Some(expires_at);
            a.format = Some("png".into());
        })
        .unwrap()
}

#[test]
fn libraries_by_owner_with_cursors() {
    let (_dir, store) = open();
    let mine: Vec<String> = (1..=5).map(|n| id("lib", n)).collect();
    for l in &mine {
        store.create_library(&library(l, "key_a", "gen2")).unwrap();
    }
    store
        .create_library(&library(&id("lib", 9), "key_b", "gen2"))
        .unwrap();
    // A caller's count is ignored.
    let mut counted = library(&id("lib", 10), "key_c", "gen2");
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
    assert_eq!(ids(&page.items, |l| &l.id), [id("lib", 9)]);
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
    let (_dir, store) = open();
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).unwrap();
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
fn asset_lists_filter_and_page() {
    let (_dir, store) = open();
    let lib = library("lib_1", "key_a", "gen2");
    let other = library("lib_2", "key_a", "gen2");
    store.create_library(&lib).unwrap();
    store.create_library(&other).unwrap();
    // 0: image active, 1: video processing, 2: image failed, 3: audio active, 4: image active.
    let spec = [
        (Active, Some(AssetType::Image)),
        (Processing, Some(AssetType::Video)),
        (Failed, Some(AssetType::Image)),
        (Active, Some(AssetType::Audio)),
        (Active, Some(AssetType::Image)),
    ];
    let all: Vec<String> = (0..spec.len() as u64).map(|n| id("asset", n)).collect();
    for (i, (status, t)) in spec.iter().enumerate() {
        store
            .create_asset(&asset(&all[i], &lib, *status, *t))
            .unwrap();
    }
    store
        .create_asset(&asset(
            &id("asset", 99),
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
fn transitions_follow_the_status_machine() {
    let (_dir, store) = open();
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).unwrap();
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
    let (_dir, store) = open();
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).unwrap();
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
fn deleting_a_library_removes_its_assets_and_indexes() {
    let (_dir, store) = open();
    let lib = library("lib_1", "key_a", "gen2");
    let keep = library("lib_2", "key_a", "gen2");
    store.create_library(&lib).unwrap();
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
    let (_dir, store) = open();
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

#[test]
fn ten_thousand_assets_in_one_library() {
    let (_dir, store) = open();
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
                    let mut a = asset(&id("asset", n), &lib, status, Some(AssetType::Image));
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
    assert_eq!(store.asset(&id("asset", 5)).unwrap(), None);
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
