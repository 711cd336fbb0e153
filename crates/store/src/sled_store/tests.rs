//! What only the sled backend has: its trees and their shapes, and opening a directory. The
//! steps themselves are tested on every backend by the crate's suite (`crate::suite`).

use super::*;
use crate::TaskStatus::{Cancelled, Queued, Running};
use crate::suite::{noop, task};
use crate::test_util::{TempDir, open_store, tid};

#[tokio::test]
async fn corrupt_record_is_an_error_not_a_panic() {
    let (_dir, store) = open_store();
    store
        .trees
        .tasks
        .insert("video_bad", &b"{not json"[..])
        .unwrap();
    let err = store.task("video_bad").await.unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
        "{err}"
    );
    let err = store
        .transition("video_bad", &[Queued], Running, &noop, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
        "{err}"
    );
}

#[test]
fn opening_something_that_is_not_a_database_is_an_error() {
    let dir = TempDir::new();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let err = SledStore::open(&file).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
}

/// Every unfinished task has exactly one `due` entry, at its poll time (or at the end when it
/// has none), moved by claims and steps; a final one has none.
#[tokio::test]
async fn the_due_tree_holds_one_entry_per_unfinished_task() {
    let (_dir, store) = open_store();
    // One process's alone: its engine claims every task, new ones included.
    assert!(!store.shared());
    let (a, b, c) = (tid("video", 1), tid("video", 2), tid("gen", 3));
    for t in [
        task(&a, "k", Queued, Some(100)),
        task(&b, "k", Running, None),
        task(&c, "k", Queued, Some(300)),
    ] {
        store.create_task(&t, &[]).await.unwrap();
    }
    let due = || -> Vec<(u64, String)> {
        store
            .trees
            .due
            .iter()
            .keys()
            .map(|k| {
                let k = k.unwrap();
                let (ms, id) = task_index::split_due_key(&k).unwrap();
                (ms, String::from_utf8(id.to_vec()).unwrap())
            })
            .collect()
    };
    assert_eq!(
        due(),
        [(100, a.clone()), (300, c.clone()), (u64::MAX, b.clone())]
    );
    store.claim_due(150, 1_000, 10).await.unwrap();
    assert_eq!(
        due(),
        [(300, c.clone()), (1_150, a.clone()), (u64::MAX, b.clone())]
    );
    store
        .transition(&a, &[Queued], Cancelled, &noop, &[])
        .await
        .unwrap();
    assert_eq!(due(), [(300, c), (u64::MAX, b)]);
}

/// Reads by id are served decoded from the tasks read lately, and never stale: a task that
/// any step writes since (a move, a claim, a delete) is read again, and a read that a write
/// overtook is not kept.
#[tokio::test]
async fn recent_tasks_follow_their_records() {
    let (_dir, store) = open_store();
    let id = tid("video", 1);
    store
        .create_task(&task(&id, "key_a", Queued, Some(5)), &[])
        .await
        .unwrap();
    let first = store.task_shared(&id).await.unwrap().unwrap();
    let again = store.task_shared(&id).await.unwrap().unwrap();
    assert!(Arc::ptr_eq(&first, &again), "kept, not read again");
    let moved = store
        .transition(&id, &[Queued], Running, &|t| t.progress = 40, &[])
        .await
        .unwrap();
    let read = store.task(&id).await.unwrap().unwrap();
    assert_eq!((read.status, read.progress), (Running, 40));
    assert_eq!(read, moved);
    let claims = store.claim_due(10, 1_000, 10).await.unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(store.task(&id).await.unwrap().unwrap(), claims[0].task);
    assert_eq!(
        store.task(&id).await.unwrap().unwrap().next_poll_ms,
        Some(1_010)
    );
    // A read that began before a write and ended after it keeps nothing.
    let writes = store.recent.get("task_other").unwrap_err();
    store.recent.written(["elsewhere"]);
    store.recent.put("task_other", &first, writes);
    assert!(store.recent.get("task_other").is_err());
    assert!(store.delete_task(&id).await.unwrap().is_some());
    assert_eq!(store.task(&id).await.unwrap(), None);
}

/// Charges live in the usage log's file; bytes past its committed end (a batch whose
/// transaction never committed) are cut at opening, and the ledger reads back every committed
/// charge, in order, after a reopen and further charges. A chunk stored in sled before the
/// file existed is still read.
#[tokio::test]
async fn the_usage_log_keeps_committed_charges_across_reopens() {
    use crate::suite::{charge, key};
    let dir = TempDir::new();
    let amounts = |store: &SledStore| {
        ledger::entries(store, "key_l")
            .unwrap()
            .iter()
            .map(|e| (e.task_id.clone(), e.amount))
            .collect::<Vec<_>>()
    };
    let legacy = {
        let store = SledStore::open(dir.path()).unwrap();
        store.create_key(&key("key_l", "hl", None)).await.unwrap();
        // A chunk as earlier versions stored it: in the `usage` tree, indexed with no place
        // (under a sequence number past those of the charges below).
        let seq = (1u64 << 40).to_be_bytes();
        let old = vec![LedgerEntry {
            id: "led_old".into(),
            key_id: "key_l".into(),
            task_id: "msg_9".into(),
            kind: crate::LedgerKind::Charge,
            amount: -1,
            balance_after: None,
            at: 1,
        }];
        store
            .usage
            .insert(seq, serde_json::to_vec(&old).unwrap())
            .unwrap();
        store
            .usage_by_key
            .insert([&b"key_l\0"[..], &seq].concat(), &[])
            .unwrap();
        store
            .charges(&[charge("key_l", "msg_1", 2), charge("key_l", "msg_2", 3)])
            .await
            .unwrap();
        store.flush_after("test").await.unwrap();
        amounts(&store)
    };
    assert_eq!(
        legacy,
        [
            ("msg_1".into(), -2),
            ("msg_2".into(), -3),
            ("msg_9".into(), -1)
        ]
    );
    let file = dir.path().join("usage.log");
    let committed = std::fs::metadata(&file).unwrap().len();
    assert!(committed > 0);
    // A batch that wrote its chunk and never committed.
    let mut torn = std::fs::read(&file).unwrap();
    torn.extend_from_slice(b"[{\"torn\":");
    std::fs::write(&file, torn).unwrap();

    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(std::fs::metadata(&file).unwrap().len(), committed);
    assert_eq!(amounts(&store), legacy);
    store.charges(&[charge("key_l", "msg_3", 4)]).await.unwrap();
    let mut all = legacy.clone();
    all.insert(2, ("msg_3".into(), -4));
    assert_eq!(amounts(&store), all);
    assert_eq!(store.key("key_l").await.unwrap().unwrap().quota_used, 9);
}

/// A key's chunks share `usage_by_key` entries, [`usage_log::RUN_CHUNKS`] to an entry, not one
/// each; a reopened store goes on with the last run; an entry of one chunk as earlier
/// versions wrote it (its place alone) is read, and the next chunk starts a new run after it.
/// The ledger reads back every charge in order throughout.
#[tokio::test]
async fn a_keys_chunks_share_index_entries() {
    use super::usage_log::{self, RUN_CHUNKS};
    use crate::suite::{charge, key};
    let dir = TempDir::new();
    let ids = |store: &SledStore| {
        ledger::entries(store, "key_r")
            .unwrap()
            .iter()
            .map(|e| e.task_id.clone())
            .collect::<Vec<_>>()
    };
    let index = |store: &SledStore| {
        store
            .usage_by_key
            .scan_prefix(b"key_r\0")
            .map(|item| item.unwrap().1.to_vec())
            .collect::<Vec<_>>()
    };
    let mut want = Vec::new();
    let batches = RUN_CHUNKS + 3;
    {
        let store = SledStore::open(dir.path()).unwrap();
        store.create_key(&key("key_r", "hr", None)).await.unwrap();
        store.create_key(&key("key_s", "hs", None)).await.unwrap();
        for n in 0..batches {
            let (a, b) = (format!("msg_{n}a"), format!("msg_{n}b"));
            // Another key's charge in every other batch: its chunks are not this key's.
            let mut batch = vec![charge("key_r", &a, 1), charge("key_r", &b, 1)];
            if n % 2 == 0 {
                batch.push(charge("key_s", &format!("msg_{n}s"), 1));
            }
            store.charges(&batch).await.unwrap();
            want.extend([a, b]);
        }
        let entries = index(&store);
        let counts: Vec<usize> = entries.iter().map(|v| usage_log::chunks_in(v)).collect();
        assert_eq!(counts, [RUN_CHUNKS, 3]);
        assert_eq!(ids(&store), want);
        store.flush_after("test").await.unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    store.charges(&[charge("key_r", "msg_x", 1)]).await.unwrap();
    want.push("msg_x".into());
    let counts: Vec<usize> = index(&store)
        .iter()
        .map(|v| usage_log::chunks_in(v))
        .collect();
    assert_eq!(
        counts,
        [RUN_CHUNKS, 4],
        "the open run goes on after a reopen"
    );
    assert_eq!(ids(&store), want);
    assert_eq!(
        store.key("key_r").await.unwrap().unwrap().quota_used,
        2 * batches as i64 + 1
    );

    // The last run's chunks as entries of one place each, as earlier versions wrote them.
    let (last_key, last) = store
        .usage_by_key
        .scan_prefix(b"key_r\0")
        .next_back()
        .unwrap()
        .unwrap();
    store.usage_by_key.remove(&last_key).unwrap();
    for (seq, place) in usage_log::chunks(&last, 0) {
        let (at, len) = place.unwrap();
        store
            .usage_by_key
            .insert(
                [&b"key_r\0"[..], &seq.to_be_bytes()].concat(),
                &usage_log::place(at, len),
            )
            .unwrap();
    }
    store.flush_after("test").await.unwrap();
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(ids(&store), want);
    store.charges(&[charge("key_r", "msg_y", 1)]).await.unwrap();
    want.push("msg_y".into());
    let counts: Vec<usize> = index(&store)
        .iter()
        .map(|v| usage_log::chunks_in(v))
        .collect();
    assert_eq!(counts, [RUN_CHUNKS, 1, 1, 1, 1, 1]);
    assert!(usage_log::is_run(&index(&store)[5]));
    assert_eq!(ids(&store), want);
}

/// The task counts survive a clean stop without a recount, and are counted again after a stop
/// that was not clean, never taken stale.
#[tokio::test]
async fn task_counts_are_left_by_a_clean_stop_and_counted_after_any_other() {
    let dir = TempDir::new();
    let queued = |store: &SledStore| {
        store
            .counts
            .all()
            .iter()
            .find(|c| c.kind == crate::TaskKind::Video && c.status == Queued)
            .map_or(0, |c| c.count)
    };
    {
        let store = SledStore::open(dir.path()).unwrap();
        for n in 1..=3 {
            let t = task(&tid("video", n), "k", Queued, Some(100));
            store.create_task(&t, &[]).await.unwrap();
        }
        store.close().await.unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(queued(&store), 3);
    // Left by a clean stop, the counts are read as they were written, not counted: a record
    // the counting would see is not counted.
    store.close().await.unwrap();
    store
        .trees
        .tasks
        .insert(
            tid("video", 9),
            serde_json::to_vec(&task(&tid("video", 9), "k", Queued, None)).unwrap(),
        )
        .unwrap();
    store.flush_after("test").await.unwrap();
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(queued(&store), 3);
    // A stop that was not clean (no close) leaves nothing, what the last opening took is gone:
    // the next opening counts (the stale counts left before would say 3).
    for n in [1, 2] {
        store
            .transition(&tid("video", n), &[Queued], Running, &noop, &[])
            .await
            .unwrap();
    }
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(queued(&store), 2, "3 and 9 queued, 1 and 2 running");
}

/// Many durable steps at once all return, every task on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_all_land() {
    let dir = TempDir::new();
    {
        let store = SledStore::open(dir.path()).unwrap();
        let tasks: Vec<_> = (1..=64)
            .map(|n| task(&tid("video", n), "k", Queued, Some(100)))
            .collect();
        let created =
            futures_util::future::join_all(tasks.iter().map(|t| store.create_task(t, &[])));
        let created = tokio::time::timeout(std::time::Duration::from_secs(30), created)
            .await
            .expect("every creation returns");
        assert!(created.iter().all(Result::is_ok), "{created:?}");
        // Not closed: what is on disk is what the flushes wrote.
    }
    let store = crate::suite::reopen_sled(&dir).await;
    for n in 1..=64 {
        assert!(
            store.task(&tid("video", n)).await.unwrap().is_some(),
            "task {n}"
        );
    }
}

/// Runs `callers` (futures that each ask the group commit for one flush) while their flushes
/// are held at the gate: once all `n` have asked, the gate opens and they are awaited.
async fn held_at_the_gate<F: std::future::Future>(
    store: &SledStore,
    n: u64,
    callers: F,
) -> F::Output {
    held_at_the_gate_checking(store, n, callers, async || {}).await
}

/// [`held_at_the_gate`], running `while_held` once every caller has asked and before the
/// gate opens.
async fn held_at_the_gate_checking<F: std::future::Future>(
    store: &SledStore,
    n: u64,
    callers: F,
    while_held: impl AsyncFnOnce(),
) -> F::Output {
    let group = &store.flusher;
    let issued = group.issued();
    // The first caller's flush waits at the gate until every caller has asked; the gate opens
    // again however this ends, so that a failed check fails the test instead of hanging it.
    struct Opens<'a>(&'a super::flush::Gate);
    impl Drop for Opens<'_> {
        fn drop(&mut self) {
            self.0.set(false);
        }
    }
    group.gate.set(true);
    let _opens = Opens(&group.gate);
    let mut callers = std::pin::pin!(callers);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while group.issued() < issued + n {
        assert!(futures_util::poll!(callers.as_mut()).is_pending());
        assert!(
            std::time::Instant::now() < deadline,
            "the {n} callers never all asked"
        );
        tokio::task::yield_now().await;
    }
    while_held().await;
    group.gate.set(false);
    tokio::time::timeout(std::time::Duration::from_secs(30), callers)
        .await
        .expect("every caller returns")
}

/// Callers that flush at the same moment share disk syncs: 64 callers that all came while a
/// flush was under way take one more flush between them, not one each.
#[tokio::test]
async fn concurrent_flushes_share_disk_syncs() {
    let (_dir, store) = open_store();
    let started = store.flusher.started();
    let all = futures_util::future::join_all((0..64).map(|_| store.flush_after("shared")));
    let done = held_at_the_gate(&store, 64, all).await;
    assert!(done.iter().all(Result::is_ok), "{done:?}");
    let took = store.flusher.started() - started;
    assert_eq!(
        took, 2,
        "the first caller's flush, then one for the other 63"
    );
}

/// A caller that starts a flush and stops waiting for it leaves no flush half begun: the next
/// caller's flush still returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_whose_caller_stopped_waiting_still_ends() {
    let (_dir, store) = open_store();
    for _ in 0..20 {
        // Polled once (which starts the flush) and dropped.
        let _ = tokio::time::timeout(std::time::Duration::ZERO, store.flush_after("dropped")).await;
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            store.flush_after("next"),
        )
        .await
        .expect("the next flush returns")
        .unwrap();
    }
}

/// Creations handed to the group commit while a flush is under way share the next flush's
/// transaction, and one whose quota falls short fails alone: it leaves no task and no ledger
/// entry, the others are written with theirs, and the quota is exact.
#[tokio::test]
async fn creations_of_one_flush_share_a_transaction_and_fail_alone() {
    use crate::LedgerKind::Prededuct;
    use crate::suite::{draft, key};
    let (_dir, store) = open_store();
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    let started = store.flusher.started();
    let first = store.flush_after("first");
    let tasks: Vec<_> = (1..=8)
        .map(|n| task(&tid("video", n), "key_a", Queued, Some(100)))
        .collect();
    // 30 each: the first three fit in 100, the rest do not.
    let drafts: Vec<_> = tasks
        .iter()
        .map(|t| [draft("key_a", &t.id, Prededuct, -30)])
        .collect();
    let creations = futures_util::future::join_all(
        tasks
            .iter()
            .zip(&drafts)
            .map(|(t, d)| store.create_task(t, d)),
    );
    let all = futures_util::future::join(first, creations);
    let (first, created) = held_at_the_gate(&store, 9, all).await;
    first.unwrap();
    assert_eq!(
        store.flusher.started() - started,
        2,
        "the first caller's flush, then one for every creation"
    );
    for (n, outcome) in (1..=8).zip(&created) {
        let stored = store.task(&tid("video", n)).await.unwrap();
        if n <= 3 {
            assert!(outcome.is_ok(), "creation {n}: {outcome:?}");
            assert!(stored.is_some(), "task {n} written");
        } else {
            assert!(
                matches!(
                    outcome,
                    Err(StoreError::InsufficientQuota {
                        needed: 30,
                        remaining: 10,
                        ..
                    })
                ),
                "creation {n}: {outcome:?}"
            );
            assert!(stored.is_none(), "task {n} not written");
        }
    }
    let quota = store.key("key_a").await.unwrap().and_then(|k| k.quota);
    assert_eq!(quota, Some(10));
    let entries = store.ledger("key_a").await.unwrap();
    let charged: Vec<_> = entries.iter().map(|e| e.task_id.as_str()).collect();
    assert_eq!(
        charged,
        [tid("video", 1), tid("video", 2), tid("video", 3)],
        "one pre-deduction per task written, none for the others"
    );
    assert_eq!(
        store
            .task_counts()
            .await
            .unwrap()
            .iter()
            .map(|c| c.count)
            .sum::<u64>(),
        3
    );
}

/// A creation made under an `Idempotency-Key` is handed to the group commit like a plain one:
/// it is not written before its flush, then written in the flush's transaction with the
/// others, completing its claim there; one whose claim another request has taken over fails
/// alone, leaving no task and the other's claim as it was.
#[tokio::test]
async fn idempotent_creations_join_the_flush_and_fail_alone_when_their_claim_is_lost() {
    use crate::idempotency::IDEMPOTENCY_PENDING_MS;
    use crate::suite::key;
    use crate::{IdemAnswer, IdemClaim, IdemTicket};
    let (_dir, store) = open_store();
    store.create_key(&key("key_a", "ha", None)).await.unwrap();
    let ticket = |n: u64, token: &str| IdemTicket {
        key_id: "key_a".to_owned(),
        key: format!("idem-{n}"),
        token: token.to_owned(),
    };
    let answer = |n: u64| IdemAnswer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: format!("{{\"n\":{n}}}"),
    };
    let claim = |n: u64, token: &'static str, now_ms: u64| {
        let (ticket, store) = (ticket(n, token), &store);
        async move {
            store
                .claim_idempotency(&ticket, "fp", now_ms)
                .await
                .unwrap()
        }
    };
    for n in 1..=3 {
        assert_eq!(claim(n, "mine", 1_000).await, IdemClaim::Claimed);
    }
    // Claim 3 is taken over: its pending record outlived its hold.
    let later = 1_000 + IDEMPOTENCY_PENDING_MS + 1;
    assert_eq!(claim(3, "theirs", later).await, IdemClaim::Claimed);

    let tasks: Vec<_> = (1..=4)
        .map(|n| task(&tid("video", n), "key_a", Queued, Some(100)))
        .collect();
    let started = store.flusher.started();
    let first = store.flush_after("first");
    let creations = futures_util::future::join_all(tasks.iter().zip(1u64..).map(|(t, n)| {
        let (ticket, answer, store) = (ticket(n, "mine"), answer(n), &store);
        async move {
            if n == 4 {
                store.create_task(t, &[]).await
            } else {
                store.create_task_idempotent(t, &[], &ticket, &answer).await
            }
        }
    }));
    let all = futures_util::future::join(first, creations);
    let not_yet_written = async || {
        for n in 1..=3 {
            let stored = store.task(&tid("video", n)).await.unwrap();
            assert!(stored.is_none(), "task {n} written before its flush");
        }
    };
    let (first, created) = held_at_the_gate_checking(&store, 5, all, not_yet_written).await;
    first.unwrap();
    assert_eq!(
        store.flusher.started() - started,
        2,
        "one flush after the first"
    );
    for (n, outcome) in (1..=4).zip(&created) {
        let stored = store.task(&tid("video", n)).await.unwrap();
        if n == 3 {
            assert!(
                matches!(outcome, Err(StoreError::IdempotencyLost(k)) if k == "idem-3"),
                "creation 3: {outcome:?}"
            );
            assert!(stored.is_none(), "task 3 not written");
        } else {
            assert!(outcome.is_ok(), "creation {n}: {outcome:?}");
            assert!(stored.is_some(), "task {n} written");
        }
    }
    // Claims 1 and 2 were completed with their answers; claim 3 is still the other's.
    for n in 1..=2 {
        let again = claim(n, "retry", later + 1).await;
        assert_eq!(again, IdemClaim::Replay(answer(n)));
    }
    assert_eq!(claim(3, "retry", later + 1).await, IdemClaim::InFlight);
}

/// A move is computed from the task as read and written only while that record is still the
/// task's: two moves of one task handed to the same flush both take effect, the second read
/// again after the first was written, never computed from what the first replaced.
#[tokio::test]
async fn moves_of_one_task_in_one_flush_each_see_the_other() {
    let (_dir, store) = open_store();
    let id = tid("video", 1);
    store
        .create_task(&task(&id, "k", Queued, Some(100)), &[])
        .await
        .unwrap();
    let started = store.flusher.started();
    let first = store.flush_after("first");
    let one = store.transition(&id, &[Queued, Running], Running, &|t| t.attempts += 1, &[]);
    let ten = store.transition(&id, &[Queued, Running], Running, &|t| t.attempts += 10, &[]);
    let all = futures_util::future::join3(first, one, ten);
    let (first, one, ten) = held_at_the_gate(&store, 3, all).await;
    first.unwrap();
    let (one, ten) = (one.unwrap(), ten.unwrap());
    assert_eq!(
        (
            one.attempts.min(ten.attempts),
            one.attempts.max(ten.attempts)
        ),
        (1, 11),
        "each move saw the other's"
    );
    let stored = store.task(&id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (Running, 11));
    assert_eq!(
        store.flusher.started() - started,
        3,
        "the first caller's flush, one for both moves, one for the move read again"
    );
}

/// A due webhook's entry carries its owner and URL; one written without them (by an earlier
/// version) has them read from its record, and gets them when it moves.
#[tokio::test]
async fn due_webhook_entries_carry_their_receiver() {
    let (_dir, store) = open_store();
    let id = tid("video", 1);
    let mut t = task(&id, "key_1", Queued, Some(10));
    t.callback_url = Some("https://hooks.example/a".to_owned());
    store.create_task(&t, &[]).await.unwrap();
    store
        .transition(&id, &[Queued], Cancelled, &noop, &[])
        .await
        .unwrap();
    let entries = || -> Vec<(Vec<u8>, Vec<u8>)> {
        store
            .trees
            .webhooks_due
            .iter()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect()
    };
    let [(key, value)] = entries().try_into().unwrap();
    assert_eq!(value, b"key_1\0https://hooks.example/a");
    // As an earlier version wrote it.
    store.trees.webhooks_due.insert(&key, &[][..]).unwrap();
    let mut seen = Vec::new();
    let mut pick = |due: &crate::DueWebhook<'_>| {
        seen.push((due.owner.to_owned(), due.url.to_owned()));
        crate::WebhookPick::Defer { at_ms: 7 }
    };
    store
        .pick_webhooks(u64::MAX - 1, 1_000, 10, &mut pick)
        .await
        .unwrap();
    assert_eq!(
        seen,
        [("key_1".to_owned(), "https://hooks.example/a".to_owned())]
    );
    let [(key, value)] = entries().try_into().unwrap();
    assert_eq!(&key[..8], 7u64.to_be_bytes());
    assert_eq!(value, b"key_1\0https://hooks.example/a");
}

/// Characters written before their owner index and numbers were kept are indexed and counted
/// once, when the database is opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn characters_of_an_earlier_version_are_indexed_on_opening() {
    let dir = TempDir::new();
    let store = SledStore::open(dir.path()).unwrap();
    let earlier = |id: &str, owner: &str| crate::Character {
        id: id.to_owned(),
        owner: owner.to_owned(),
        name: "Ann".to_owned(),
        created_at: 7,
        video: format!("characters/{id}/video.mp4"),
        video_bytes: 1,
    };
    // As the earlier version wrote them: the record alone.
    for (id, owner) in [
        (tid("char", 1), "key_1"),
        (tid("char", 2), "key_1"),
        (tid("char", 3), "key_2"),
    ] {
        let bytes = serde_json::to_vec(&earlier(&id, owner)).unwrap();
        store.characters.insert(id.as_bytes(), bytes).unwrap();
    }
    store.flush().await.unwrap();
    drop(store);
    let store = crate::suite::reopen_sled(&dir).await;
    let page = store
        .list_characters("key_1", None, 10, Order::Desc)
        .await
        .unwrap();
    let ids: Vec<String> = page.items.into_iter().map(|c| c.id).collect();
    assert_eq!(ids, [tid("char", 2), tid("char", 1)]);
    let err = store
        .create_character(&earlier(&tid("char", 4), "key_1"), 2, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::CharacterLimit { max: 2, .. }),
        "{err}"
    );
    store
        .create_character(&earlier(&tid("char", 4), "key_2"), 2, &[])
        .await
        .unwrap();
    let err = store
        .create_character(&earlier(&tid("char", 5), "key_2"), 2, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::CharacterLimit { .. }), "{err}");
    // Indexed once: a deletion down to none and a reopening count from the trees, not again.
    assert!(
        store
            .delete_character(&tid("char", 1), "key_1")
            .await
            .unwrap()
            .is_some()
    );
    drop(store);
    let store = crate::suite::reopen_sled(&dir).await;
    let page = store
        .list_characters("key_1", None, 10, Order::Desc)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    store
        .create_character(&earlier(&tid("char", 6), "key_1"), 2, &[])
        .await
        .unwrap();
}
