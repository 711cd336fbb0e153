//! Races and durability: one winner among racing final moves, everything kept across a
//! reopening, many steps at once.

use std::sync::Arc;

use super::{
    Fixture, all_tasks, draft, ids, key, ledger_of, noop, owner_page, prededuct, step, task,
};
use crate::test_util::tid;
use crate::{Store, StoreError, Task};

use crate::LedgerKind::{Prededuct, Refund, Settle};
use crate::TaskStatus::{Cancelled, Failed, Queued, Running, Succeeded};

cases!(
    racing_final_moves_have_exactly_one_winner,
    reopening_keeps_everything,
    concurrent_steps_all_return_and_keep_their_writes,
);

async fn racing_final_moves_have_exactly_one_winner(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(500)))
        .await
        .unwrap();
    let mut quota = 500;
    for round in 0..5 {
        let id = tid("video", round);
        let t = task(&id, "key_a", Running, Some(5));
        let entry = draft("key_a", &id, Prededuct, -30);
        store.create_task(&t, &[entry]).await.unwrap();
        quota -= 30;

        let racers = 8;
        let barrier = Arc::new(tokio::sync::Barrier::new(racers));
        let handles: Vec<_> = (0..racers)
            .map(|i| {
                let store: Arc<dyn Store> = store.store.clone();
                let (barrier, id) = (barrier.clone(), id.clone());
                tokio::spawn(async move {
                    let (to, entry) = if i % 2 == 0 {
                        (Succeeded, draft("key_a", &id, Settle, 5))
                    } else {
                        (Cancelled, draft("key_a", &id, Refund, 30))
                    };
                    barrier.wait().await;
                    store.transition(&id, &[Running], to, &noop, &[entry]).await
                })
            })
            .collect();
        let mut results = Vec::new();
        for h in handles {
            results.push(h.await.unwrap());
        }

        let winners: Vec<&Task> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, StoreError::WrongStatus { .. }), "{e}");
            }
        }
        let won = winners[0].status;
        let (expected_kind, back) = match won {
            Succeeded => (Settle, 5),
            _ => (Refund, 30),
        };
        quota += back;
        let ledger = store.ledger("key_a").await.unwrap();
        let kinds: Vec<_> = ledger
            .iter()
            .filter(|e| e.task_id == id)
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, [Prededuct, expected_kind]);
        let left = store.key("key_a").await.unwrap().and_then(|k| k.quota);
        assert_eq!(left, Some(quota));
        let status = store.task(&id).await.unwrap().map(|t| t.status);
        assert_eq!(status, Some(won));
    }
}

async fn reopening_keeps_everything(store: Fixture) {
    let id = tid("video", 1);
    let done = tid("gen", 2);
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    prededuct(&*store, &id, "key_a", -30).await.unwrap();
    let t = task(&done, "key_a", Queued, Some(6));
    let entry = draft("key_a", &done, Prededuct, -20);
    store.create_task(&t, &[entry]).await.unwrap();
    let refund = draft("key_a", &done, Refund, 20);
    step(&*store, &done, Queued, Failed, &[refund])
        .await
        .unwrap();
    store.meta_init("admin", b"tok").await.unwrap();
    let before = store.task(&id).await.unwrap();

    let store = store.reopen().await;
    assert_eq!(store.task(&id).await.unwrap(), before);
    let status = store.task(&done).await.unwrap().map(|t| t.status);
    assert_eq!(status, Some(Failed));
    assert_eq!(
        ids(&store.unfinished_tasks(10).await.unwrap()),
        [id.as_str()]
    );
    let quota = store.key_by_hash("ha").await.unwrap().and_then(|k| k.quota);
    assert_eq!(quota, Some(70));
    assert_eq!(store.ledger("key_a").await.unwrap().len(), 3);
    assert_eq!(store.meta("admin").await.unwrap(), Some(b"tok".to_vec()));
    let page = owner_page(&*store, "key_a", 10).await;
    assert_eq!(ids(&page.items), [done.clone(), id.clone()]);
    // Uniqueness survives too.
    let again = draft("key_a", &id, Prededuct, -30);
    let err = step(&*store, &id, Queued, Queued, &[again])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::DuplicateLedger { .. }), "{err}");
    // New ledger entries still sort after the old ones.
    let refund = draft("key_a", &id, Refund, 30);
    step(&*store, &id, Queued, Cancelled, &[refund])
        .await
        .unwrap();
    let kinds = ledger_of(&*store, "key_a", |e| e.kind).await;
    assert_eq!(kinds, [Prededuct, Prededuct, Refund, Refund]);
    // And claims find the due ones again.
    assert!(store.claim_due(10, 100, 10).await.unwrap().is_empty());
}

async fn concurrent_steps_all_return_and_keep_their_writes(store: Fixture) {
    store.create_key(&key("key_f", "hf", None)).await.unwrap();
    let writers: Vec<_> = (0..8)
        .map(|t| {
            let store: Arc<dyn Store> = store.store.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    let id = format!("task_{t}_{i}");
                    let t = task(&id, "key_f", Queued, Some(1));
                    let entry = draft("key_f", &id, Prededuct, -1);
                    store.create_task(&t, &[entry]).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let store = store.reopen().await;
    assert_eq!(all_tasks(&*store, 1000).await.len(), 200);
    assert_eq!(store.ledger("key_f").await.unwrap().len(), 200);
    let used = store.key("key_f").await.unwrap().map(|k| k.quota_used);
    assert_eq!(used, Some(200));
}
