//! Idempotency records: a claim takes a free key once, tells a repeat what is there (the
//! answer, a request in flight, another request), takes over an expired or abandoned key;
//! a task's or an asset's creation completes the record with it or not at all; records outlive a restart and
//! are swept by age.

use std::sync::Arc;

use super::{Fixture, asset, draft, key, task, with_library};
use crate::test_util::tid;
use crate::{
    AssetStatus, Batch, BatchCounts, BatchItem, BatchStatus, IDEMPOTENCY_PENDING_MS,
    IDEMPOTENCY_TTL_MS, IdemAnswer, IdemClaim, IdemTicket, LedgerKind, Params, Store, StoreError,
    TaskStatus,
};

cases!(
    a_claim_takes_a_free_key_once,
    a_repeat_is_told_in_flight_mismatch_or_the_answer,
    expired_and_abandoned_claims_are_taken_over,
    a_task_and_its_record_are_written_together,
    an_asset_and_its_record_are_written_together,
    a_batch_and_its_record_are_written_together,
    a_released_key_is_free_again,
    concurrent_claims_of_one_key_give_it_to_one,
    records_outlive_a_restart_and_are_swept_by_age,
);

const NOW: u64 = 1_800_000_000_000;

fn ticket(key_id: &str, key: &str, token: &str) -> IdemTicket {
    IdemTicket {
        key_id: key_id.to_owned(),
        key: key.to_owned(),
        token: token.to_owned(),
    }
}

fn answer(body: &str) -> IdemAnswer {
    IdemAnswer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_owned(),
    }
}

async fn a_claim_takes_a_free_key_once(store: Fixture) {
    let a = ticket("key_a", "k1", "t1");
    assert_eq!(
        store.claim_idempotency(&a, "f1", NOW).await.unwrap(),
        IdemClaim::Claimed
    );
    // The same key of another API key is another record.
    let b = ticket("key_b", "k1", "t2");
    assert_eq!(
        store.claim_idempotency(&b, "f1", NOW).await.unwrap(),
        IdemClaim::Claimed
    );
    // A second claim of a pending key is refused, whoever makes it.
    let again = ticket("key_a", "k1", "t3");
    assert_eq!(
        store
            .claim_idempotency(&again, "f1", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::InFlight
    );
}

async fn a_repeat_is_told_in_flight_mismatch_or_the_answer(store: Fixture) {
    let first = ticket("key_a", "k1", "t1");
    let later = ticket("key_a", "k1", "t2");
    store.claim_idempotency(&first, "f1", NOW).await.unwrap();
    assert_eq!(
        store.claim_idempotency(&later, "f2", NOW).await.unwrap(),
        IdemClaim::Mismatch
    );
    store
        .finish_idempotency(&first, Some(&answer("{\"id\":1}")))
        .await
        .unwrap();
    assert_eq!(
        store
            .claim_idempotency(&later, "f1", NOW + 5)
            .await
            .unwrap(),
        IdemClaim::Replay(answer("{\"id\":1}"))
    );
    assert_eq!(
        store
            .claim_idempotency(&later, "f2", NOW + 5)
            .await
            .unwrap(),
        IdemClaim::Mismatch
    );
    // A finished record is not the claimant's any more.
    let err = store
        .finish_idempotency(&first, Some(&answer("{}")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyLost(_)), "{err:?}");
    // Long past the pending bound, an answered record still answers.
    let late = NOW + IDEMPOTENCY_PENDING_MS * 10;
    assert_eq!(
        store.claim_idempotency(&later, "f1", late).await.unwrap(),
        IdemClaim::Replay(answer("{\"id\":1}"))
    );
}

async fn expired_and_abandoned_claims_are_taken_over(store: Fixture) {
    let dead = ticket("key_a", "k1", "t1");
    store.claim_idempotency(&dead, "f1", NOW).await.unwrap();
    let next = ticket("key_a", "k1", "t2");
    let just_before = NOW + IDEMPOTENCY_PENDING_MS - 1;
    assert_eq!(
        store
            .claim_idempotency(&next, "f1", just_before)
            .await
            .unwrap(),
        IdemClaim::InFlight
    );
    let after = NOW + IDEMPOTENCY_PENDING_MS;
    assert_eq!(
        store.claim_idempotency(&next, "f2", after).await.unwrap(),
        IdemClaim::Claimed
    );
    // The abandoned claimant can no longer complete or release the key.
    let err = store.finish_idempotency(&dead, None).await.unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyLost(_)), "{err:?}");
    store
        .finish_idempotency(&next, Some(&answer("a")))
        .await
        .unwrap();
    // A day later the answer is gone: the key is free again.
    let third = ticket("key_a", "k1", "t3");
    let day = after + IDEMPOTENCY_TTL_MS;
    assert_eq!(
        store.claim_idempotency(&third, "f3", day).await.unwrap(),
        IdemClaim::Claimed
    );
}

async fn a_task_and_its_record_are_written_together(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    let id = tid("video", 1);
    let t = ticket("key_a", "k1", "t1");
    store.claim_idempotency(&t, "f1", NOW).await.unwrap();
    let pre = [draft("key_a", &id, LedgerKind::Prededuct, -30)];
    let task1 = task(&id, "key_a", TaskStatus::Queued, Some(5));
    store
        .create_task_idempotent(&task1, &pre, &t, &answer(&id))
        .await
        .unwrap();
    assert_eq!(
        store.task(&id).await.unwrap().map(|t| t.id),
        Some(id.clone())
    );
    let repeat = ticket("key_a", "k1", "t2");
    assert_eq!(
        store
            .claim_idempotency(&repeat, "f1", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::Replay(answer(&id))
    );

    // A ticket that does not hold its key creates nothing and takes nothing.
    let id2 = tid("video", 2);
    let pre2 = [draft("key_a", &id2, LedgerKind::Prededuct, -30)];
    let task2 = task(&id2, "key_a", TaskStatus::Queued, Some(5));
    let err = store
        .create_task_idempotent(&task2, &pre2, &repeat, &answer(&id2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyLost(_)), "{err:?}");
    assert_eq!(store.task(&id2).await.unwrap(), None);
    assert_eq!(store.ledger("key_a").await.unwrap().len(), 1);

    // A task the quota cannot cover leaves the claim pending, for the caller to end.
    let t3 = ticket("key_a", "k3", "t3");
    store.claim_idempotency(&t3, "f3", NOW).await.unwrap();
    let id3 = tid("video", 3);
    let pre3 = [draft("key_a", &id3, LedgerKind::Prededuct, -500)];
    let task3 = task(&id3, "key_a", TaskStatus::Queued, Some(5));
    let err = store
        .create_task_idempotent(&task3, &pre3, &t3, &answer(&id3))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InsufficientQuota { .. }),
        "{err:?}"
    );
    assert_eq!(store.task(&id3).await.unwrap(), None);
    assert_eq!(
        store
            .claim_idempotency(&ticket("key_a", "k3", "t4"), "f3", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::InFlight
    );
}

async fn an_asset_and_its_record_are_written_together(store: Fixture) {
    let lib = with_library(&*store).await;
    let t = ticket("key_a", "up1", "t1");
    store.claim_idempotency(&t, "f1", NOW).await.unwrap();
    let first = asset("asset_1", &lib, AssetStatus::Processing, None);
    store
        .create_asset_idempotent(&first, &t, &answer("asset_1"))
        .await
        .unwrap();
    assert!(store.asset("asset_1").await.unwrap().is_some());
    let repeat = ticket("key_a", "up1", "t2");
    assert_eq!(
        store
            .claim_idempotency(&repeat, "f1", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::Replay(answer("asset_1"))
    );

    // A ticket that does not hold its key creates nothing, and the library counts nothing.
    let second = asset("asset_2", &lib, AssetStatus::Processing, None);
    let err = store
        .create_asset_idempotent(&second, &repeat, &answer("asset_2"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyLost(_)), "{err:?}");
    assert_eq!(store.asset("asset_2").await.unwrap(), None);
    let counted = store.library("lib_1").await.unwrap().unwrap();
    assert_eq!(counted.asset_count, 1);

    // An asset whose library is gone leaves the claim pending, for the caller to end.
    let t3 = ticket("key_a", "up3", "t3");
    store.claim_idempotency(&t3, "f3", NOW).await.unwrap();
    let mut orphan = asset("asset_3", &lib, AssetStatus::Processing, None);
    orphan.library_id = "lib_gone".to_owned();
    let err = store
        .create_asset_idempotent(&orphan, &t3, &answer("asset_3"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::LibraryNotFound(_)), "{err:?}");
    assert_eq!(
        store
            .claim_idempotency(&ticket("key_a", "up3", "t4"), "f3", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::InFlight
    );
}

fn batch_of(id: &str) -> (Batch, Vec<BatchItem>) {
    let batch = Batch {
        id: id.to_owned(),
        owner: "key_a".to_owned(),
        status: BatchStatus::InProgress,
        counts: BatchCounts {
            processing: 1,
            ..BatchCounts::default()
        },
        created_ms: 1,
        expires_ms: 2,
        ended_ms: None,
        cancel_ms: None,
        version: "2023-06-01".to_owned(),
        sim: None,
    };
    let item = BatchItem {
        index: 0,
        custom_id: "r0".to_owned(),
        params: Params::new(&serde_json::json!({"model": "m"})).unwrap(),
        result: None,
    };
    (batch, vec![item])
}

async fn a_batch_and_its_record_are_written_together(store: Fixture) {
    let t = ticket("key_a", "b1", "t1");
    store.claim_idempotency(&t, "f1", NOW).await.unwrap();
    let (first, items) = batch_of("msgbatch_1");
    store
        .create_batch_idempotent(&first, &items, &t, &answer("msgbatch_1"))
        .await
        .unwrap();
    assert!(store.batch("msgbatch_1").await.unwrap().is_some());
    let repeat = ticket("key_a", "b1", "t2");
    assert_eq!(
        store
            .claim_idempotency(&repeat, "f1", NOW + 1)
            .await
            .unwrap(),
        IdemClaim::Replay(answer("msgbatch_1"))
    );

    // A ticket that does not hold its key creates nothing.
    let (second, items) = batch_of("msgbatch_2");
    let err = store
        .create_batch_idempotent(&second, &items, &repeat, &answer("msgbatch_2"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::IdempotencyLost(_)), "{err:?}");
    assert_eq!(store.batch("msgbatch_2").await.unwrap(), None);
    assert!(
        store
            .batch_items("msgbatch_2", 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_released_key_is_free_again(store: Fixture) {
    let t = ticket("key_a", "k1", "t1");
    store.claim_idempotency(&t, "f1", NOW).await.unwrap();
    store.finish_idempotency(&t, None).await.unwrap();
    let next = ticket("key_a", "k1", "t2");
    assert_eq!(
        store.claim_idempotency(&next, "f2", NOW + 1).await.unwrap(),
        IdemClaim::Claimed
    );
}

async fn concurrent_claims_of_one_key_give_it_to_one(store: Fixture) {
    let store: Arc<dyn Store> = store.store.clone();
    let mut claims = Vec::new();
    for n in 0..16 {
        let store = store.clone();
        claims.push(tokio::spawn(async move {
            let t = ticket("key_a", "k1", &format!("t{n}"));
            store.claim_idempotency(&t, "f1", NOW).await.unwrap()
        }));
    }
    let mut claimed = 0;
    for claim in claims {
        match claim.await.unwrap() {
            IdemClaim::Claimed => claimed += 1,
            IdemClaim::InFlight => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(claimed, 1);
}

async fn records_outlive_a_restart_and_are_swept_by_age(store: Fixture) {
    let old = ticket("key_a", "old", "t1");
    let new = ticket("key_a", "new", "t2");
    store.claim_idempotency(&old, "f", NOW).await.unwrap();
    store
        .finish_idempotency(&old, Some(&answer("old")))
        .await
        .unwrap();
    store
        .claim_idempotency(&new, "f", NOW + 1000)
        .await
        .unwrap();
    store
        .finish_idempotency(&new, Some(&answer("new")))
        .await
        .unwrap();
    let store = store.reopen().await;
    let probe = |key: &str| ticket("key_a", key, "probe");
    assert_eq!(
        store
            .claim_idempotency(&probe("old"), "f", NOW + 2000)
            .await
            .unwrap(),
        IdemClaim::Replay(answer("old"))
    );
    assert_eq!(store.sweep_idempotency(NOW + 1000, 10).await.unwrap(), 1);
    assert_eq!(store.sweep_idempotency(NOW + 1000, 10).await.unwrap(), 0);
    assert_eq!(
        store
            .claim_idempotency(&probe("new"), "f", NOW + 2000)
            .await
            .unwrap(),
        IdemClaim::Replay(answer("new"))
    );
    assert_eq!(
        store
            .claim_idempotency(&probe("old"), "f", NOW + 2000)
            .await
            .unwrap(),
        IdemClaim::Claimed
    );
}
