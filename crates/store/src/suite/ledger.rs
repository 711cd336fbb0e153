//! The ledger: pre-deduction, settlement and refund against the key's quota, uniqueness per
//! task and kind, all-or-nothing steps, unlimited keys, charges without a task.

use super::{
    Fixture, all_tasks, charge, create, draft, ids_of, key, ledger_of, owner_page, prededuct, step,
    with_a_task,
};
use crate::test_util::tid;
use crate::{LedgerKind, StoreError};

use crate::LedgerKind::{Charge, Prededuct, Refund, Settle};
use crate::TaskStatus::{Failed, Queued, Running, Succeeded};

cases!(
    prededuct_then_refund_restores_quota,
    ledger_kind_is_unique_per_task_and_a_failed_step_writes_nothing,
    insufficient_quota_writes_nothing,
    unlimited_key_has_no_balance_but_counts_usage,
    charges_without_a_task_take_at_most_what_is_left,
    charges_interleave_with_task_entries_in_order,
    concurrent_creations_take_the_quota_in_turn_or_write_nothing,
);

/// Creations at once on one key (a store may commit them together): each takes its
/// pre-deduction from what the ones before it left, or is refused with nothing written; an
/// id in use, a missing key or a duplicate entry (on a key without a quota) refuses its
/// creation alone.
async fn concurrent_creations_take_the_quota_in_turn_or_write_nothing(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    store.create_key(&key("key_b", "hb", None)).await.unwrap();
    let taken = tid("video", 99);
    prededuct(&*store, &taken, "key_a", -10).await.unwrap();
    let ids: Vec<String> = (1..=30).map(|n| tid("video", n)).collect();
    let creations = ids.iter().map(|id| prededuct(&*store, id, "key_a", -10));
    let again = [draft("key_a", &taken, Prededuct, -10)];
    let twice = [
        draft("key_b", &tid("video", 40), Prededuct, -1),
        draft("key_b", &tid("video", 40), Prededuct, -1),
    ];
    let (dup_id, missing_id) = (tid("video", 40), tid("video", 41));
    let (answers, reused, no_key, duplicate) = tokio::join!(
        futures_util::future::join_all(creations),
        create(&*store, &taken, "key_a", &again),
        prededuct(&*store, &missing_id, "key_nope", -1),
        create(&*store, &dup_id, "key_b", &twice),
    );
    let made: Vec<&String> = ids
        .iter()
        .zip(&answers)
        .filter_map(|(id, answer)| match answer {
            Ok(()) => Some(id),
            Err(StoreError::InsufficientQuota { .. }) => None,
            Err(e) => panic!("creation of {id}: {e}"),
        })
        .collect();
    assert_eq!(made.len(), 9);
    assert!(reused.is_err());
    assert!(
        matches!(no_key, Err(StoreError::KeyNotFound(_))),
        "{no_key:?}"
    );
    assert!(
        matches!(duplicate, Err(StoreError::DuplicateLedger { .. })),
        "{duplicate:?}"
    );
    let k = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(0), 100));
    // One entry per task made, each balance what the one before it left.
    let ledger = store.ledger("key_a").await.unwrap();
    let balances: Vec<Option<i64>> = ledger.iter().map(|e| e.balance_after).collect();
    let expected: Vec<Option<i64>> = (0..10).rev().map(|n| Some(n * 10)).collect();
    assert_eq!(balances, expected);
    let mut entered: Vec<&str> = ledger[1..].iter().map(|e| e.task_id.as_str()).collect();
    entered.sort_unstable();
    let mut made: Vec<&str> = made.iter().map(|id| id.as_str()).collect();
    made.sort_unstable();
    assert_eq!(entered, made);
    let mut stored = ids_of(&all_tasks(&*store, 100).await, |t| t.id.as_str());
    stored.sort_unstable();
    let mut expected_tasks: Vec<String> = made.iter().map(|id| (*id).to_owned()).collect();
    expected_tasks.push(taken.clone());
    expected_tasks.sort_unstable();
    assert_eq!(stored, expected_tasks);
}

async fn prededuct_then_refund_restores_quota(store: Fixture) {
    let id = with_a_task(&*store).await;
    let k = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(70), 30));

    let refund = draft("key_a", &id, Refund, 30);
    step(&*store, &id, Queued, Failed, &[refund]).await.unwrap();
    let k = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(100), 0));

    let ledger = store.ledger("key_a").await.unwrap();
    let seen: Vec<_> = ledger
        .iter()
        .map(|e| (e.kind, e.amount, e.balance_after, e.task_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (Prededuct, -30, Some(70), id.as_str()),
            (Refund, 30, Some(100), id.as_str()),
        ]
    );
    assert!(
        ledger
            .iter()
            .all(|e| e.id.starts_with("led_") && e.at > 0 && e.key_id == "key_a")
    );
    assert_ne!(ledger[0].id, ledger[1].id);
    assert!(store.ledger("key_nope").await.unwrap().is_empty());
}

async fn ledger_kind_is_unique_per_task_and_a_failed_step_writes_nothing(store: Fixture) {
    let id = with_a_task(&*store).await;
    // A second refund in the same step: the whole transition is refused.
    let twice = [
        draft("key_a", &id, Refund, 30),
        draft("key_a", &id, Refund, 30),
    ];
    let err = step(&*store, &id, Queued, Failed, &twice)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateLedger { kind: Refund, task_id } if *task_id == id),
        "{err}"
    );
    let status = store.task(&id).await.unwrap().map(|t| t.status);
    assert_eq!(status, Some(Queued));
    assert_eq!(store.ledger("key_a").await.unwrap().len(), 1);
    let quota = store.key("key_a").await.unwrap().and_then(|k| k.quota);
    assert_eq!(quota, Some(70));

    // A second prededuct for the same task, from a progress update.
    let again = draft("key_a", &id, Prededuct, -30);
    let err = step(&*store, &id, Queued, Running, &[again])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::DuplicateLedger {
                kind: Prededuct,
                ..
            }
        ),
        "{err}"
    );
    let quota = store.key("key_a").await.unwrap().and_then(|k| k.quota);
    assert_eq!(quota, Some(70));

    // An unknown key.
    let unknown = draft("key_nope", &id, Refund, 30);
    let err = step(&*store, &id, Queued, Failed, &[unknown])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyNotFound(k) if k == "key_nope"),
        "{err}"
    );
    let status = store.task(&id).await.unwrap().map(|t| t.status);
    assert_eq!(status, Some(Queued));
}

async fn insufficient_quota_writes_nothing(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(50)))
        .await
        .unwrap();
    let id = tid("video", 1);
    let err = prededuct(&*store, &id, "key_a", -60).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::InsufficientQuota { key_id, needed: 60, remaining: 50 } if key_id == "key_a"),
        "{err}"
    );
    assert_eq!(store.task(&id).await.unwrap(), None);
    assert!(store.ledger("key_a").await.unwrap().is_empty());
    assert!(store.unfinished_tasks(10).await.unwrap().is_empty());
    assert!(all_tasks(&*store, 10).await.is_empty());
    let k = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(50), 0));
    let page = owner_page(&*store, "key_a", 10).await;
    assert!(page.items.is_empty());

    // Exactly the remaining quota is fine.
    prededuct(&*store, &id, "key_a", -50).await.unwrap();
    let quota = store.key("key_a").await.unwrap().and_then(|k| k.quota);
    assert_eq!(quota, Some(0));

    // Unknown key on creation.
    let id2 = tid("video", 2);
    let unknown = [draft("key_nope", &id2, Prededuct, -1)];
    let err = create(&*store, &id2, "key_a", &unknown).await.unwrap_err();
    assert!(matches!(err, StoreError::KeyNotFound(_)), "{err}");
    assert_eq!(store.task(&id2).await.unwrap(), None);

    // A transition whose entry the quota cannot cover changes nothing either.
    let more = draft("key_a", &id, Settle, -1);
    let err = step(&*store, &id, Queued, Succeeded, &[more])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InsufficientQuota {
                needed: 1,
                remaining: 0,
                ..
            }
        ),
        "{err}"
    );
    let status = store.task(&id).await.unwrap().map(|t| t.status);
    assert_eq!(status, Some(Queued));
    assert_eq!(store.ledger("key_a").await.unwrap().len(), 1);
}

async fn unlimited_key_has_no_balance_but_counts_usage(store: Fixture) {
    store.create_key(&key("key_u", "hu", None)).await.unwrap();
    let id = tid("gen", 1);
    prededuct(&*store, &id, "key_u", -1_000_000).await.unwrap();
    let settle = draft("key_u", &id, Settle, 400_000);
    step(&*store, &id, Queued, Succeeded, &[settle])
        .await
        .unwrap();
    let k = store.key("key_u").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (None, 600_000));
    let balances = ledger_of(&*store, "key_u", |e| e.balance_after).await;
    assert_eq!(balances, [None, None]);
}

async fn charges_without_a_task_take_at_most_what_is_left(store: Fixture) {
    store
        .create_key(&key("key_c", "hc", Some(100)))
        .await
        .unwrap();
    store.create_key(&key("key_u", "hu", None)).await.unwrap();
    assert_eq!(
        store
            .charges(&[charge("key_c", "msg_1", 30)])
            .await
            .unwrap(),
        vec![30]
    );
    assert!(store.charges(&[]).await.unwrap().is_empty());
    // One batch: an unknown key and an id repeated within the batch take nothing; two charges
    // of one key see each other; more than is left takes what is left; unlimited keys pay in
    // full.
    let taken = store
        .charges(&[
            charge("key_nope", "msg_2", 1),
            charge("key_c", "msg_3", 50),
            charge("key_c", "msg_3", 7),
            charge("key_u", "msg_4", 12),
            charge("key_c", "msg_5", 500),
            charge("key_c", "msg_6", 1),
        ])
        .await
        .unwrap();
    assert_eq!(taken, vec![0, 50, 0, 12, 20, 0]);
    let k = store.key("key_c").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(0), 100));
    let amounts: Vec<(String, LedgerKind, i64, Option<i64>)> = store
        .ledger("key_c")
        .await
        .unwrap()
        .iter()
        .map(|e| (e.task_id.clone(), e.kind, e.amount, e.balance_after))
        .collect();
    assert_eq!(
        amounts,
        vec![
            ("msg_1".into(), Charge, -30, Some(70)),
            ("msg_3".into(), Charge, -50, Some(20)),
            ("msg_5".into(), Charge, -20, Some(0)),
            ("msg_6".into(), Charge, 0, Some(0)),
        ]
    );
    let k = store.key("key_u").await.unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (None, 12));
}

async fn charges_interleave_with_task_entries_in_order(store: Fixture) {
    store
        .create_key(&key("key_c", "hc", Some(10_000)))
        .await
        .unwrap();
    store.create_key(&key("key_d", "hd", None)).await.unwrap();
    let first = tid("video", 1);
    prededuct(&*store, &first, "key_c", -100).await.unwrap();
    // Two keys in one batch of more than two chunks (the embedded store's are 1,024 entries).
    let batch: Vec<crate::Charge> = (0..2_100)
        .map(|n| {
            let owner = if n % 2 == 0 { "key_c" } else { "key_d" };
            charge(owner, &format!("msg_{n:04}"), 1)
        })
        .collect();
    assert_eq!(store.charges(&batch).await.unwrap(), vec![1; 2_100]);
    let second = tid("video", 2);
    prededuct(&*store, &second, "key_c", -100).await.unwrap();
    store
        .charges(&[charge("key_c", "msg_last", 5)])
        .await
        .unwrap();

    let ledger = store.ledger("key_c").await.unwrap();
    let ids: Vec<&str> = ledger.iter().map(|e| e.task_id.as_str()).collect();
    let mut expected = vec![first.clone()];
    expected.extend((0..2_100).step_by(2).map(|n| format!("msg_{n:04}")));
    expected.push(second.clone());
    expected.push("msg_last".into());
    assert_eq!(ids, expected);
    // The balance after each entry runs down one by one, whichever table they came from.
    let balances: Vec<i64> = ledger.iter().filter_map(|e| e.balance_after).collect();
    let mut balance = 10_000;
    let mut want = Vec::new();
    for e in &ledger {
        balance += e.amount;
        want.push(balance);
    }
    assert_eq!(balances, want);
    assert_eq!(balance, 10_000 - 100 - 1_050 - 100 - 5);
    assert_eq!(store.ledger("key_d").await.unwrap().len(), 1_050);
    // And it all survives reopening.
    let store = store.reopen().await;
    assert_eq!(store.ledger("key_c").await.unwrap(), ledger);
}
