//! Message batches: creation, listing, results recorded once with their charges, cancel,
//! delete, and what is still open.

use super::{Fixture, key};
use crate::{
    Batch, BatchCounts, BatchItem, BatchOutcome, BatchResult, BatchResultKind, BatchStatus, Charge,
    LedgerKind, Params, StoreError,
};

cases!(
    batches_are_listed_newest_first,
    results_are_recorded_once_with_their_charge,
    cancel_delete_and_open_batches
);

fn batch(id: &str, owner: &str, n: u64) -> Batch {
    Batch {
        id: id.to_owned(),
        owner: owner.to_owned(),
        status: BatchStatus::InProgress,
        counts: BatchCounts {
            processing: n,
            ..BatchCounts::default()
        },
        created_ms: 1,
        expires_ms: 2,
        ended_ms: None,
        cancel_ms: None,
        version: "2023-06-01".to_owned(),
        sim: None,
    }
}

fn items(n: u32) -> Vec<BatchItem> {
    (0..n)
        .map(|index| BatchItem {
            index,
            custom_id: format!("r{index}"),
            params: Params::new(&serde_json::json!({"model": "m", "n": index})).unwrap(),
            result: None,
        })
        .collect()
}

fn result(index: u32, kind: BatchResultKind, charge: Option<(&str, i64)>) -> BatchResult {
    BatchResult {
        index,
        outcome: BatchOutcome {
            kind,
            result: Params::new(&serde_json::json!({"type": "x", "index": index})).unwrap(),
        },
        charge: charge.map(|(id, amount)| Charge {
            key_id: "key_1".to_owned(),
            task_id: id.to_owned(),
            amount,
        }),
    }
}

async fn batches_are_listed_newest_first(store: Fixture) {
    for id in ["msgbatch_1", "msgbatch_2", "msgbatch_3"] {
        store
            .create_batch(&batch(id, "key_1", 1), &items(1))
            .await
            .unwrap();
    }
    store
        .create_batch(&batch("msgbatch_4", "key_2", 1), &items(1))
        .await
        .unwrap();
    let err = store
        .create_batch(&batch("msgbatch_1", "key_1", 1), &items(1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    let ids = |page: crate::Page<Batch>| {
        (
            page.items.into_iter().map(|b| b.id).collect::<Vec<_>>(),
            page.has_more,
        )
    };
    let first = store.list_batches("key_1", None, None, 2).await.unwrap();
    assert_eq!(
        ids(first),
        (vec!["msgbatch_3".into(), "msgbatch_2".into()], true)
    );
    let next = store
        .list_batches("key_1", Some("msgbatch_2"), None, 2)
        .await
        .unwrap();
    assert_eq!(ids(next), (vec!["msgbatch_1".into()], false));
    let back = store
        .list_batches("key_1", None, Some("msgbatch_1"), 1)
        .await
        .unwrap();
    assert_eq!(ids(back), (vec!["msgbatch_2".into()], true));
    let other = store.list_batches("key_2", None, None, 10).await.unwrap();
    assert_eq!(ids(other), (vec!["msgbatch_4".into()], false));
}

async fn results_are_recorded_once_with_their_charge(store: Fixture) {
    store
        .create_key(&key("key_1", "aaa", Some(100)))
        .await
        .unwrap();
    store
        .create_batch(&batch("msgbatch_1", "key_1", 3), &items(3))
        .await
        .unwrap();
    let stored = store.batch_items("msgbatch_1", 0, 10).await.unwrap();
    assert_eq!(stored, items(3));
    assert_eq!(
        store.batch_items("msgbatch_1", 2, 10).await.unwrap().len(),
        1
    );

    let written = store
        .record_batch_results(
            "msgbatch_1",
            &[result(0, BatchResultKind::Succeeded, Some(("msg_a", 30)))],
            5,
        )
        .await
        .unwrap();
    assert_eq!(written.counts.processing, 2);
    assert_eq!(written.counts.succeeded, 1);
    assert_eq!(written.status, BatchStatus::InProgress);
    // Offered again (a restart ran it again): neither written nor charged twice.
    let again = store
        .record_batch_results(
            "msgbatch_1",
            &[result(0, BatchResultKind::Succeeded, Some(("msg_b", 30)))],
            6,
        )
        .await
        .unwrap();
    assert_eq!(again.counts, written.counts);
    // A charge past what the key has left takes what is left.
    let ended = store
        .record_batch_results(
            "msgbatch_1",
            &[
                result(1, BatchResultKind::Succeeded, Some(("msg_c", 90))),
                result(2, BatchResultKind::Errored, None),
            ],
            7,
        )
        .await
        .unwrap();
    assert_eq!(ended.status, BatchStatus::Ended);
    assert_eq!(ended.ended_ms, Some(7));
    assert_eq!(
        ended.counts,
        BatchCounts {
            processing: 0,
            succeeded: 2,
            errored: 1,
            canceled: 0,
            expired: 0
        }
    );
    let ledger = store.ledger("key_1").await.unwrap();
    let charges: Vec<(String, i64)> = ledger
        .iter()
        .filter(|e| e.kind == LedgerKind::Charge)
        .map(|e| (e.task_id.clone(), e.amount))
        .collect();
    assert_eq!(charges, vec![("msg_a".into(), -30), ("msg_c".into(), -70)]);
    let key = store.key("key_1").await.unwrap().unwrap();
    assert_eq!((key.quota, key.quota_used), (Some(0), 100));
    let stored = store.batch_items("msgbatch_1", 0, 10).await.unwrap();
    assert_eq!(
        stored[0].result,
        Some(result(0, BatchResultKind::Succeeded, None).outcome)
    );
    let err = store
        .record_batch_results("msgbatch_9", &[], 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::BatchNotFound(_)), "{err}");
}

async fn cancel_delete_and_open_batches(store: Fixture) {
    store
        .create_batch(&batch("msgbatch_1", "key_1", 2), &items(2))
        .await
        .unwrap();
    store
        .create_batch(&batch("msgbatch_2", "key_1", 1), &items(1))
        .await
        .unwrap();
    let open: Vec<String> = store
        .open_batches(10)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(open, ["msgbatch_1", "msgbatch_2"]);
    let canceling = store.cancel_batch("msgbatch_1", 9).await.unwrap().unwrap();
    assert_eq!(canceling.status, BatchStatus::Canceling);
    assert_eq!(canceling.cancel_ms, Some(9));
    assert_eq!(store.cancel_batch("msgbatch_9", 9).await.unwrap(), None);
    let ended = store
        .record_batch_results(
            "msgbatch_1",
            &[
                result(0, BatchResultKind::Canceled, None),
                result(1, BatchResultKind::Canceled, None),
            ],
            10,
        )
        .await
        .unwrap();
    assert_eq!(ended.status, BatchStatus::Ended);
    assert_eq!(ended.counts.canceled, 2);
    // An ended batch is not canceling again.
    let still = store.cancel_batch("msgbatch_1", 11).await.unwrap().unwrap();
    assert_eq!(still.status, BatchStatus::Ended);
    let open: Vec<String> = store
        .open_batches(10)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.id)
        .collect();
    assert_eq!(open, ["msgbatch_2"]);

    let removed = store.delete_batch("msgbatch_1").await.unwrap().unwrap();
    assert_eq!(removed.id, "msgbatch_1");
    assert_eq!(store.batch("msgbatch_1").await.unwrap(), None);
    assert!(
        store
            .batch_items("msgbatch_1", 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.delete_batch("msgbatch_1").await.unwrap(), None);
    let listed = store.list_batches("key_1", None, None, 10).await.unwrap();
    assert_eq!(listed.items.len(), 1);
}
