//! Races and durability: one winner among racing final moves, everything kept across a
//! reopening, concurrent flushes, a path that is no database.

use std::sync::{Arc, Barrier};

use super::{draft, ids, key, ledger_of, noop, owner_page, prededuct, step, task};
use crate::test_util::{TempDir, open_store, tid};
use crate::{SledStore, Store, StoreError, Task};

use crate::LedgerKind::{Prededuct, Refund, Settle};
use crate::TaskStatus::{Cancelled, Failed, Queued, Running, Succeeded};

#[test]
fn racing_final_moves_have_exactly_one_winner() {
    for round in 0..5 {
        let (_dir, store) = open_store();
        let store = Arc::new(store);
        store.create_key(&key("key_a", "ha", Some(100))).unwrap();
        let id = tid("video", round);
        store
            .create_task(
                &task(&id, "key_a", Running, Some(5)),
                &[draft("key_a", &id, Prededuct, -30)],
            )
            .unwrap();

        let threads = 8;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (store, barrier, id) = (Arc::clone(&store), Arc::clone(&barrier), id.clone());
                std::thread::spawn(move || {
                    let (to, entry) = if i % 2 == 0 {
                        (Succeeded, draft("key_a", &id, Settle, 5))
                    } else {
                        (Cancelled, draft("key_a", &id, Refund, 30))
                    };
                    barrier.wait();
                    store.transition(&id, &[Running], to, &noop, &[entry])
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

        let winners: Vec<&Task> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::WrongStatus { .. }), "{e}");
            }
        }
        let won = winners[0].status;
        let ledger = store.ledger("key_a").unwrap();
        let kinds: Vec<_> = ledger.iter().map(|e| e.kind).collect();
        let (expected_kind, expected_quota) = match won {
            Succeeded => (Settle, 75),
            _ => (Refund, 100),
        };
        assert_eq!(kinds, [Prededuct, expected_kind]);
        assert_eq!(
            store.key("key_a").unwrap().and_then(|k| k.quota),
            Some(expected_quota)
        );
        assert_eq!(store.task(&id).unwrap().map(|t| t.status), Some(won));
    }
}

#[test]
fn reopening_keeps_everything() {
    let dir = TempDir::new();
    let id = tid("video", 1);
    let done = tid("gen", 2);
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.create_key(&key("key_a", "ha", Some(100))).unwrap();
        prededuct(&store, &id, "key_a", -30).unwrap();
        store
            .create_task(
                &task(&done, "key_a", Queued, Some(6)),
                &[draft("key_a", &done, Prededuct, -20)],
            )
            .unwrap();
        let refund = draft("key_a", &done, Refund, 20);
        step(&store, &done, Queued, Failed, &[refund]).unwrap();
        store.meta_init("admin", b"tok").unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.task(&id).unwrap().map(|t| t.status), Some(Queued));
    assert_eq!(store.task(&done).unwrap().map(|t| t.status), Some(Failed));
    assert_eq!(ids(&store.due_tasks(10, 10).unwrap()), [id.as_str()]);
    assert_eq!(
        store.key_by_hash("ha").unwrap().and_then(|k| k.quota),
        Some(70)
    );
    assert_eq!(store.ledger("key_a").unwrap().len(), 3);
    assert_eq!(store.meta("admin").unwrap(), Some(b"tok".to_vec()));
    let page = owner_page(&store, "key_a", 10);
    assert_eq!(ids(&page.items), [done.clone(), id.clone()]);
    // Uniqueness survives too.
    let again = draft("key_a", &id, Prededuct, -30);
    let err = step(&store, &id, Queued, Queued, &[again]).unwrap_err();
    assert!(matches!(err, StoreError::DuplicateLedger { .. }), "{err}");
    // New ledger entries still sort after the old ones.
    let refund = draft("key_a", &id, Refund, 30);
    step(&store, &id, Queued, Cancelled, &[refund]).unwrap();
    let kinds = ledger_of(&store, "key_a", |e| e.kind);
    assert_eq!(kinds, [Prededuct, Prededuct, Refund, Refund]);
}

#[test]
fn opening_something_that_is_not_a_database_is_an_error() {
    let dir = TempDir::new();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let err = SledStore::open(&file).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
}

#[test]
fn concurrent_flushes_all_return_and_keep_their_writes() {
    let dir = TempDir::new();
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.create_key(&key("key_f", "hf", None)).unwrap();
        std::thread::scope(|s| {
            for t in 0..8 {
                let store = &store;
                s.spawn(move || {
                    for i in 0..25 {
                        store
                            .create_task(
                                &task(&format!("task_{t}_{i}"), "key_f", Queued, Some(1)),
                                &[],
                            )
                            .unwrap();
                    }
                });
            }
        });
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.all_tasks(1000).unwrap().len(), 200);
}
