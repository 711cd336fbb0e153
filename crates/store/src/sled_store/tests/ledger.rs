//! The ledger: pre-deduction, settlement and refund against the key's quota, uniqueness per
//! task and kind, all-or-nothing steps, unlimited keys, charges without a task.

use super::{charge, create, draft, key, ledger_of, owner_page, prededuct, step, with_a_task};
use crate::test_util::{open_store, tid};
use crate::{LedgerKind, Store, StoreError};

use crate::LedgerKind::{Charge, Prededuct, Refund, Settle};
use crate::TaskStatus::{Failed, Queued, Running, Succeeded};

#[test]
fn prededuct_then_refund_restores_quota() {
    let (_dir, store, id) = with_a_task();
    let k = store.key("key_a").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(70), 30));

    let refund = draft("key_a", &id, Refund, 30);
    step(&store, &id, Queued, Failed, &[refund]).unwrap();
    let k = store.key("key_a").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(100), 0));

    let ledger = store.ledger("key_a").unwrap();
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
}

#[test]
fn ledger_kind_is_unique_per_task_and_a_failed_step_writes_nothing() {
    let (_dir, store, id) = with_a_task();
    // A second refund in the same step: the whole transition is refused.
    let err = step(
        &store,
        &id,
        Queued,
        Failed,
        &[
            draft("key_a", &id, Refund, 30),
            draft("key_a", &id, Refund, 30),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateLedger { kind: Refund, task_id } if *task_id == id),
        "{err}"
    );
    assert_eq!(store.task(&id).unwrap().map(|t| t.status), Some(Queued));
    assert_eq!(store.ledger("key_a").unwrap().len(), 1);
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(70));

    // A second prededuct for the same task, from a progress update.
    let again = draft("key_a", &id, Prededuct, -30);
    let err = step(&store, &id, Queued, Running, &[again]).unwrap_err();
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
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(70));

    // An unknown key.
    let unknown = draft("key_nope", &id, Refund, 30);
    let err = step(&store, &id, Queued, Failed, &[unknown]).unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyNotFound(k) if k == "key_nope"),
        "{err}"
    );
    assert_eq!(store.task(&id).unwrap().map(|t| t.status), Some(Queued));
}

#[test]
fn insufficient_quota_writes_nothing() {
    let (_dir, store) = open_store();
    store.create_key(&key("key_a", "ha", Some(50))).unwrap();
    let id = tid("video", 1);
    let err = prededuct(&store, &id, "key_a", -60).unwrap_err();
    assert!(
        matches!(&err, StoreError::InsufficientQuota { key_id, needed: 60, remaining: 50 } if key_id == "key_a"),
        "{err}"
    );
    assert_eq!(store.task(&id).unwrap(), None);
    assert!(store.ledger("key_a").unwrap().is_empty());
    assert!(store.unfinished_tasks(10).unwrap().is_empty());
    assert!(store.all_tasks(10).unwrap().is_empty());
    let k = store.key("key_a").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(50), 0));
    let page = owner_page(&store, "key_a", 10);
    assert!(page.items.is_empty());

    // Exactly the remaining quota is fine.
    prededuct(&store, &id, "key_a", -50).unwrap();
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(0));

    // Unknown key on creation.
    let id2 = tid("video", 2);
    let err = create(
        &store,
        &id2,
        "key_a",
        &[draft("key_nope", &id2, Prededuct, -1)],
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::KeyNotFound(_)), "{err}");
    assert_eq!(store.task(&id2).unwrap(), None);
}

#[test]
fn unlimited_key_has_no_balance_but_counts_usage() {
    let (_dir, store) = open_store();
    store.create_key(&key("key_u", "hu", None)).unwrap();
    let id = tid("gen", 1);
    prededuct(&store, &id, "key_u", -1_000_000).unwrap();
    let settle = draft("key_u", &id, Settle, 400_000);
    step(&store, &id, Queued, Succeeded, &[settle]).unwrap();
    let k = store.key("key_u").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (None, 600_000));
    let balances = ledger_of(&store, "key_u", |e| e.balance_after);
    assert_eq!(balances, [None, None]);
}

#[test]
fn charges_without_a_task_take_at_most_what_is_left() {
    let (_dir, store) = open_store();
    store.create_key(&key("key_c", "hc", Some(100))).unwrap();
    store.create_key(&key("key_u", "hu", None)).unwrap();
    assert_eq!(
        store.charges(&[charge("key_c", "msg_1", 30)]).unwrap(),
        vec![30]
    );
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
        .unwrap();
    assert_eq!(taken, vec![0, 50, 0, 12, 20, 0]);
    let k = store.key("key_c").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(0), 100));
    let amounts: Vec<(String, LedgerKind, i64, Option<i64>)> = store
        .ledger("key_c")
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
    assert_eq!(store.key("key_u").unwrap().unwrap().quota_used, 12);
}

#[test]
fn charges_in_the_usage_log_interleave_with_task_entries_in_order() {
    let (dir, store) = open_store();
    store.create_key(&key("key_c", "hc", Some(10_000))).unwrap();
    store.create_key(&key("key_d", "hd", None)).unwrap();
    let first = tid("video", 1);
    prededuct(&store, &first, "key_c", -100).unwrap();
    // Two keys in one batch of more than two chunks.
    let batch: Vec<crate::Charge> = (0..150)
        .map(|n| {
            let owner = if n % 2 == 0 { "key_c" } else { "key_d" };
            charge(owner, &format!("msg_{n:03}"), 1)
        })
        .collect();
    assert_eq!(store.charges(&batch).unwrap(), vec![1; 150]);
    let second = tid("video", 2);
    prededuct(&store, &second, "key_c", -100).unwrap();
    store.charges(&[charge("key_c", "msg_last", 5)]).unwrap();

    let ledger = store.ledger("key_c").unwrap();
    let ids: Vec<&str> = ledger.iter().map(|e| e.task_id.as_str()).collect();
    let mut expected = vec![first.clone()];
    expected.extend((0..150).step_by(2).map(|n| format!("msg_{n:03}")));
    expected.push(second.clone());
    expected.push("msg_last".into());
    assert_eq!(ids, expected);
    // The balance after each entry runs down one by one, whichever store they came from.
    let balances: Vec<i64> = ledger.iter().filter_map(|e| e.balance_after).collect();
    let mut balance = 10_000;
    let mut want = Vec::new();
    for e in &ledger {
        balance += e.amount;
        want.push(balance);
    }
    assert_eq!(balances, want);
    assert_eq!(balance, 10_000 - 100 - 75 - 100 - 5);
    assert_eq!(store.ledger("key_d").unwrap().len(), 75);
    // And it all survives reopening.
    drop(store);
    let store = crate::SledStore::open(dir.path()).unwrap();
    assert_eq!(store.ledger("key_c").unwrap().len(), ledger.len());
}
