use std::sync::{Arc, Barrier};

use super::*;
use crate::test_util::TempDir;
use crate::{KeyStatus, LedgerKind, Outputs, TaskKind};

fn open() -> (TempDir, SledStore) {
    let dir = TempDir::new();
    let store = SledStore::open(dir.path()).expect("open store");
    (dir, store)
}

/// `prefix_<ULID>` whose ULID encodes time `n`, so ids sort by `n`.
fn tid(prefix: &str, n: u64) -> String {
    format!(
        "{prefix}_{}",
        ulid::Ulid::from_parts(1_700_000_000_000 + n, 0)
    )
}

fn key(id: &str, hash: &str, quota: Option<i64>) -> Key {
    Key {
        id: id.to_owned(),
        name: format!("{id} name"),
        group: "default".to_owned(),
        hash: hash.to_owned(),
        prefix: "sk-".to_owned(),
        quota,
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: 1,
    }
}

fn task(id: &str, owner: &str, status: TaskStatus, next_poll_ms: Option<u64>) -> Task {
    Task {
        id: id.to_owned(),
        kind: if id.starts_with("gen_") {
            TaskKind::Generation
        } else {
            TaskKind::Video
        },
        owner: owner.to_owned(),
        model: "model_h3".to_owned(),
        status,
        progress: 0,
        created_at: 1,
        updated_at: 1,
        completed_at: None,
        expires_at: None,
        deadline_ms: 10_000_000,
        next_poll_ms,
        params: crate::Params::new(&serde_json::json!({"prompt": "a cat"})).unwrap(),
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        attempts: 0,
        sim: None,
        outputs: Outputs::default(),
        error: None,
        warnings: Vec::new(),
        price: 30,
    }
}

fn draft(key_id: &str, task_id: &str, kind: LedgerKind, amount: i64) -> LedgerDraft {
    LedgerDraft {
        key_id: key_id.to_owned(),
        task_id: task_id.to_owned(),
        kind,
        amount,
    }
}

fn ids(tasks: &[Task]) -> Vec<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

fn noop(_: &mut Task) {}

// ---- tasks and listings ----

#[test]
fn create_get_and_list_with_cursors() {
    let (_dir, store) = open();
    // Owner a: videos at times 1..=5, generations at 2, 4, 6; owner b: one video at 7.
    let videos: Vec<String> = (1..=5).map(|n| tid("video", n * 10)).collect();
    let gens: Vec<String> = [20, 40, 60].iter().map(|&n| tid("gen", n + 1)).collect();
    for id in videos.iter().chain(&gens) {
        store
            .create_task(&task(id, "key_a", TaskStatus::Queued, Some(1)), &[])
            .unwrap();
    }
    let other = tid("video", 70);
    store
        .create_task(&task(&other, "key_b", TaskStatus::Queued, Some(1)), &[])
        .unwrap();

    assert_eq!(
        store.task(&videos[2]).unwrap(),
        Some(task(&videos[2], "key_a", TaskStatus::Queued, Some(1)))
    );
    assert_eq!(store.task("video_missing").unwrap(), None);

    let check = |kind: Option<TaskKind>, after: Option<&str>, limit, order, want: &[&str], more| {
        let page = store
            .list_tasks(&TaskQuery {
                owner: "key_a".to_owned(),
                kind,
                after: after.map(str::to_owned),
                limit,
                order,
            })
            .unwrap();
        assert_eq!(
            ids(&page.items),
            want,
            "kind {kind:?} after {after:?} {order:?}"
        );
        assert_eq!(
            page.has_more, more,
            "kind {kind:?} after {after:?} {order:?}"
        );
    };
    let v = |i: usize| videos[i].as_str();
    let g = |i: usize| gens[i].as_str();
    let video = Some(TaskKind::Video);

    check(video, None, 2, Order::Desc, &[v(4), v(3)], true);
    check(video, Some(v(3)), 2, Order::Desc, &[v(2), v(1)], true);
    check(video, Some(v(1)), 2, Order::Desc, &[v(0)], false);
    check(video, Some(v(0)), 2, Order::Desc, &[], false);
    check(video, None, 2, Order::Asc, &[v(0), v(1)], true);
    check(video, Some(v(1)), 2, Order::Asc, &[v(2), v(3)], true);
    check(video, Some(v(3)), 2, Order::Asc, &[v(4)], false);
    check(
        video,
        None,
        100,
        Order::Desc,
        &[v(4), v(3), v(2), v(1), v(0)],
        false,
    );
    check(
        Some(TaskKind::Generation),
        None,
        10,
        Order::Desc,
        &[g(2), g(1), g(0)],
        false,
    );
    // Both kinds, merged by creation time.
    check(None, None, 4, Order::Desc, &[g(2), v(4), g(1), v(3)], true);
    check(None, Some(v(3)), 3, Order::Desc, &[v(2), g(0), v(1)], true);
    check(
        None,
        Some(g(0)),
        10,
        Order::Asc,
        &[v(2), v(3), g(1), v(4), g(2)],
        false,
    );

    // Other owners see nothing of key_a's, and key_a nothing of theirs.
    let page = store
        .list_tasks(&TaskQuery {
            owner: "key_b".to_owned(),
            limit: 100,
            ..TaskQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&page.items), [other.as_str()]);
    let page = store
        .list_tasks(&TaskQuery {
            owner: "key_".to_owned(),
            limit: 100,
            ..TaskQuery::default()
        })
        .unwrap();
    assert!(page.items.is_empty());

    // Operators see everything, newest first.
    let all = store.all_tasks(3).unwrap();
    assert_eq!(ids(&all), [other, g(2).to_owned(), v(4).to_owned()]);
    assert_eq!(store.all_tasks(100).unwrap().len(), 9);
}

#[test]
fn create_refuses_an_existing_id() {
    let (_dir, store) = open();
    let id = tid("video", 1);
    let t = task(&id, "key_a", TaskStatus::Queued, Some(5));
    store.create_task(&t, &[]).unwrap();
    let err = store.create_task(&t, &[]).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    let err = store
        .create_task(&task("", "key_a", TaskStatus::Queued, None), &[])
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
}

#[test]
fn delete_removes_task_and_indexes_but_not_ledger() {
    let (_dir, store) = open();
    store.create_key(&key("key_a", "h", Some(100))).unwrap();
    let id = tid("video", 1);
    store
        .create_task(
            &task(&id, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
        )
        .unwrap();
    let removed = store.delete_task(&id).unwrap();
    assert_eq!(removed.map(|t| t.id), Some(id.clone()));
    assert_eq!(store.task(&id).unwrap(), None);
    assert_eq!(store.delete_task(&id).unwrap(), None);
    assert!(store.unfinished_tasks(10).unwrap().is_empty());
    let page = store
        .list_tasks(&TaskQuery {
            owner: "key_a".to_owned(),
            limit: 10,
            ..TaskQuery::default()
        })
        .unwrap();
    assert!(page.items.is_empty());
    assert_eq!(store.ledger("key_a").unwrap().len(), 1);
}

#[test]
fn corrupt_record_is_an_error_not_a_panic() {
    let (_dir, store) = open();
    store
        .trees
        .tasks
        .insert("video_bad", &b"{not json"[..])
        .unwrap();
    let err = store.task("video_bad").unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
        "{err}"
    );
    let err = store
        .transition(
            "video_bad",
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &noop,
            &[],
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
        "{err}"
    );
}

// ---- transitions ----

#[test]
fn transitions_compare_and_swap_on_status() {
    let (_dir, store) = open();
    let id = tid("video", 1);
    store
        .create_task(&task(&id, "key_a", TaskStatus::Queued, Some(5)), &[])
        .unwrap();

    let t = store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &|t| {
                t.progress = 40;
                t.upstream_id = Some("up-1".to_owned());
                // Identity fields cannot be changed by an update.
                t.id = "video_other".to_owned();
                t.owner = "key_b".to_owned();
            },
            &[],
        )
        .unwrap();
    assert_eq!((t.status, t.progress), (TaskStatus::Running, 40));
    assert_eq!((t.id.as_str(), t.owner.as_str()), (id.as_str(), "key_a"));
    assert_eq!(store.task(&id).unwrap(), Some(t));

    // Wrong current status.
    let err = store
        .transition(&id, &[TaskStatus::Queued], TaskStatus::Running, &noop, &[])
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::WrongStatus { actual: TaskStatus::Running, expected, .. }
            if expected == &[TaskStatus::Queued]),
        "{err}"
    );

    // Progress update without status change; progress never goes down.
    let t = store
        .transition(
            &id,
            &[TaskStatus::Running],
            TaskStatus::Running,
            &|t| t.progress = 10,
            &[],
        )
        .unwrap();
    assert_eq!(t.progress, 40);

    // To a final status: next_poll_ms cleared.
    let t = store
        .transition(
            &id,
            &[TaskStatus::Running],
            TaskStatus::Succeeded,
            &|t| t.progress = 100,
            &[],
        )
        .unwrap();
    assert_eq!(
        (t.status, t.progress, t.next_poll_ms),
        (TaskStatus::Succeeded, 100, None)
    );

    // A final task never changes, even when `from` lists its status.
    for to in [
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Running,
    ] {
        let err = store
            .transition(&id, &[TaskStatus::Succeeded], to, &noop, &[])
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::WrongStatus {
                    actual: TaskStatus::Succeeded,
                    ..
                }
            ),
            "{err}"
        );
    }
    assert_eq!(
        store.task(&id).unwrap().map(|t| t.status),
        Some(TaskStatus::Succeeded)
    );

    let err = store
        .transition(
            "video_nope",
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &noop,
            &[],
        )
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::TaskNotFound(id) if id == "video_nope"),
        "{err}"
    );
}

// ---- due index ----

#[test]
fn due_index_follows_next_poll_and_final_status() {
    let (_dir, store) = open();
    let a = tid("video", 1);
    let b = tid("video", 2);
    let c = tid("gen", 3);
    let d = tid("video", 4);
    let done = tid("video", 5);
    store
        .create_task(&task(&a, "k", TaskStatus::Queued, Some(100)), &[])
        .unwrap();
    store
        .create_task(&task(&b, "k", TaskStatus::Running, Some(50)), &[])
        .unwrap();
    store
        .create_task(&task(&c, "k", TaskStatus::Queued, Some(300)), &[])
        .unwrap();
    // Unfinished without a poll time: never due, but still unfinished.
    store
        .create_task(&task(&d, "k", TaskStatus::Queued, None), &[])
        .unwrap();
    store
        .create_task(&task(&done, "k", TaskStatus::Failed, Some(10)), &[])
        .unwrap();
    assert_eq!(
        store.task(&done).unwrap().and_then(|t| t.next_poll_ms),
        None
    );

    assert_eq!(
        ids(&store.due_tasks(200, 10).unwrap()),
        [b.clone(), a.clone()]
    );
    assert_eq!(ids(&store.due_tasks(200, 1).unwrap()), [b.as_str()]);
    assert_eq!(
        ids(&store.due_tasks(100, 10).unwrap()),
        [b.clone(), a.clone()]
    );
    assert_eq!(ids(&store.due_tasks(49, 10).unwrap()), Vec::<String>::new());
    assert_eq!(
        ids(&store.unfinished_tasks(10).unwrap()),
        [b.clone(), a.clone(), c.clone(), d.clone()]
    );

    // Reschedule b later than c.
    store
        .transition(
            &b,
            &[TaskStatus::Running],
            TaskStatus::Running,
            &|t| t.next_poll_ms = Some(400),
            &[],
        )
        .unwrap();
    assert_eq!(
        ids(&store.due_tasks(350, 10).unwrap()),
        [a.clone(), c.clone()]
    );

    // Final tasks leave the index.
    store
        .transition(&a, &[TaskStatus::Queued], TaskStatus::Cancelled, &noop, &[])
        .unwrap();
    store
        .transition(
            &d,
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &|t| t.next_poll_ms = Some(1),
            &[],
        )
        .unwrap();
    assert_eq!(
        ids(&store.due_tasks(1_000, 10).unwrap()),
        [d.clone(), c.clone(), b.clone()]
    );
    assert_eq!(ids(&store.unfinished_tasks(10).unwrap()), [d, c, b]);
    assert_eq!(store.trees.due.len(), 3);
}

// ---- ledger ----

#[test]
fn prededuct_then_refund_restores_quota() {
    let (_dir, store) = open();
    store.create_key(&key("key_a", "ha", Some(100))).unwrap();
    let id = tid("video", 1);
    store
        .create_task(
            &task(&id, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
        )
        .unwrap();
    let k = store.key("key_a").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (Some(70), 30));

    store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Failed,
            &noop,
            &[draft("key_a", &id, LedgerKind::Refund, 30)],
        )
        .unwrap();
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
            (LedgerKind::Prededuct, -30, Some(70), id.as_str()),
            (LedgerKind::Refund, 30, Some(100), id.as_str()),
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
    let (_dir, store) = open();
    store.create_key(&key("key_a", "ha", Some(100))).unwrap();
    let id = tid("video", 1);
    store
        .create_task(
            &task(&id, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
        )
        .unwrap();
    // A second refund in the same step: the whole transition is refused.
    let err = store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Failed,
            &noop,
            &[
                draft("key_a", &id, LedgerKind::Refund, 30),
                draft("key_a", &id, LedgerKind::Refund, 30),
            ],
        )
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::DuplicateLedger { kind: LedgerKind::Refund, task_id } if *task_id == id),
        "{err}"
    );
    assert_eq!(
        store.task(&id).unwrap().map(|t| t.status),
        Some(TaskStatus::Queued)
    );
    assert_eq!(store.ledger("key_a").unwrap().len(), 1);
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(70));

    // A second prededuct for the same task, from a progress update.
    let err = store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Running,
            &noop,
            &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::DuplicateLedger {
                kind: LedgerKind::Prededuct,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(70));

    // An unknown key.
    let err = store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Failed,
            &noop,
            &[draft("key_nope", &id, LedgerKind::Refund, 30)],
        )
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyNotFound(k) if k == "key_nope"),
        "{err}"
    );
    assert_eq!(
        store.task(&id).unwrap().map(|t| t.status),
        Some(TaskStatus::Queued)
    );
}

#[test]
fn insufficient_quota_writes_nothing() {
    let (_dir, store) = open();
    store.create_key(&key("key_a", "ha", Some(50))).unwrap();
    let id = tid("video", 1);
    let err = store
        .create_task(
            &task(&id, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_a", &id, LedgerKind::Prededuct, -60)],
        )
        .unwrap_err();
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
    let page = store
        .list_tasks(&TaskQuery {
            owner: "key_a".to_owned(),
            limit: 10,
            ..TaskQuery::default()
        })
        .unwrap();
    assert!(page.items.is_empty());

    // Exactly the remaining quota is fine.
    store
        .create_task(
            &task(&id, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_a", &id, LedgerKind::Prededuct, -50)],
        )
        .unwrap();
    assert_eq!(store.key("key_a").unwrap().and_then(|k| k.quota), Some(0));

    // Unknown key on creation.
    let id2 = tid("video", 2);
    let err = store
        .create_task(
            &task(&id2, "key_a", TaskStatus::Queued, Some(5)),
            &[draft("key_nope", &id2, LedgerKind::Prededuct, -1)],
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::KeyNotFound(_)), "{err}");
    assert_eq!(store.task(&id2).unwrap(), None);
}

#[test]
fn unlimited_key_has_no_balance_but_counts_usage() {
    let (_dir, store) = open();
    store.create_key(&key("key_u", "hu", None)).unwrap();
    let id = tid("gen", 1);
    store
        .create_task(
            &task(&id, "key_u", TaskStatus::Queued, Some(5)),
            &[draft("key_u", &id, LedgerKind::Prededuct, -1_000_000)],
        )
        .unwrap();
    store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Succeeded,
            &noop,
            &[draft("key_u", &id, LedgerKind::Settle, 400_000)],
        )
        .unwrap();
    let k = store.key("key_u").unwrap().unwrap();
    assert_eq!((k.quota, k.quota_used), (None, 600_000));
    let balances: Vec<_> = store
        .ledger("key_u")
        .unwrap()
        .iter()
        .map(|e| e.balance_after)
        .collect();
    assert_eq!(balances, [None, None]);
}

// ---- keys and meta ----

#[test]
fn keys_by_id_and_hash() {
    let (_dir, store) = open();
    assert_eq!(store.key_count().unwrap(), 0);
    store.create_key(&key("key_1", "aaa", Some(10))).unwrap();
    store.create_key(&key("key_2", "bbb", None)).unwrap();
    let err = store.create_key(&key("key_3", "aaa", None)).unwrap_err();
    assert!(matches!(err, StoreError::DuplicateKey), "{err}");
    assert_eq!(store.key_count().unwrap(), 2);
    assert_eq!(store.key("key_3").unwrap(), None);

    assert_eq!(
        store.key_by_hash("bbb").unwrap().map(|k| k.id),
        Some("key_2".to_owned())
    );
    assert_eq!(store.key_by_hash("ccc").unwrap(), None);
    let all: Vec<_> = store.keys().unwrap().into_iter().map(|k| k.id).collect();
    assert_eq!(all, ["key_1", "key_2"]);

    let k = store
        .update_key("key_1", &|k| {
            k.quota = k.quota.map(|q| q + 5);
            k.status = KeyStatus::Revoked;
            k.hash = "ddd".to_owned();
            k.id = "key_x".to_owned();
        })
        .unwrap();
    assert_eq!(
        (k.id.as_str(), k.quota, k.status),
        ("key_1", Some(15), KeyStatus::Revoked)
    );
    assert_eq!(store.key("key_1").unwrap(), Some(k));
    assert_eq!(store.key_by_hash("aaa").unwrap(), None);
    assert_eq!(
        store.key_by_hash("ddd").unwrap().map(|k| k.id),
        Some("key_1".to_owned())
    );

    let err = store
        .update_key("key_2", &|k| k.hash = "ddd".to_owned())
        .unwrap_err();
    assert!(matches!(err, StoreError::DuplicateKey), "{err}");
    assert_eq!(
        store.key_by_hash("bbb").unwrap().map(|k| k.id),
        Some("key_2".to_owned())
    );
    let err = store.update_key("key_9", &|_| {}).unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyNotFound(k) if k == "key_9"),
        "{err}"
    );
}

#[test]
fn meta_init_keeps_the_first_value() {
    let (_dir, store) = open();
    assert_eq!(store.meta("admin").unwrap(), None);
    assert_eq!(store.meta_init("admin", b"one").unwrap(), b"one");
    assert_eq!(store.meta_init("admin", b"two").unwrap(), b"one");
    assert_eq!(store.meta("admin").unwrap(), Some(b"one".to_vec()));
    assert_eq!(store.meta_init("secret", b"s").unwrap(), b"s");
}

// ---- races and durability ----

#[test]
fn racing_final_moves_have_exactly_one_winner() {
    for round in 0..5 {
        let (_dir, store) = open();
        let store = Arc::new(store);
        store.create_key(&key("key_a", "ha", Some(100))).unwrap();
        let id = tid("video", round);
        store
            .create_task(
                &task(&id, "key_a", TaskStatus::Running, Some(5)),
                &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
            )
            .unwrap();

        let threads = 8;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (store, barrier, id) = (Arc::clone(&store), Arc::clone(&barrier), id.clone());
                std::thread::spawn(move || {
                    let (to, entry) = if i % 2 == 0 {
                        (
                            TaskStatus::Succeeded,
                            draft("key_a", &id, LedgerKind::Settle, 5),
                        )
                    } else {
                        (
                            TaskStatus::Cancelled,
                            draft("key_a", &id, LedgerKind::Refund, 30),
                        )
                    };
                    barrier.wait();
                    store.transition(&id, &[TaskStatus::Running], to, &noop, &[entry])
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
            TaskStatus::Succeeded => (LedgerKind::Settle, 75),
            _ => (LedgerKind::Refund, 100),
        };
        assert_eq!(kinds, [LedgerKind::Prededuct, expected_kind]);
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
        store
            .create_task(
                &task(&id, "key_a", TaskStatus::Queued, Some(5)),
                &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
            )
            .unwrap();
        store
            .create_task(
                &task(&done, "key_a", TaskStatus::Queued, Some(6)),
                &[draft("key_a", &done, LedgerKind::Prededuct, -20)],
            )
            .unwrap();
        store
            .transition(
                &done,
                &[TaskStatus::Queued],
                TaskStatus::Failed,
                &noop,
                &[draft("key_a", &done, LedgerKind::Refund, 20)],
            )
            .unwrap();
        store.meta_init("admin", b"tok").unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        store.task(&id).unwrap().map(|t| t.status),
        Some(TaskStatus::Queued)
    );
    assert_eq!(
        store.task(&done).unwrap().map(|t| t.status),
        Some(TaskStatus::Failed)
    );
    assert_eq!(ids(&store.due_tasks(10, 10).unwrap()), [id.as_str()]);
    assert_eq!(
        store.key_by_hash("ha").unwrap().and_then(|k| k.quota),
        Some(70)
    );
    assert_eq!(store.ledger("key_a").unwrap().len(), 3);
    assert_eq!(store.meta("admin").unwrap(), Some(b"tok".to_vec()));
    let page = store
        .list_tasks(&TaskQuery {
            owner: "key_a".to_owned(),
            limit: 10,
            ..TaskQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&page.items), [done.clone(), id.clone()]);
    // Uniqueness survives too.
    let err = store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Queued,
            &noop,
            &[draft("key_a", &id, LedgerKind::Prededuct, -30)],
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::DuplicateLedger { .. }), "{err}");
    // New ledger entries still sort after the old ones.
    store
        .transition(
            &id,
            &[TaskStatus::Queued],
            TaskStatus::Cancelled,
            &noop,
            &[draft("key_a", &id, LedgerKind::Refund, 30)],
        )
        .unwrap();
    let kinds: Vec<_> = store
        .ledger("key_a")
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            LedgerKind::Prededuct,
            LedgerKind::Prededuct,
            LedgerKind::Refund,
            LedgerKind::Refund
        ]
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

fn charge(key_id: &str, task_id: &str, amount: i64) -> crate::Charge {
    crate::Charge {
        key_id: key_id.into(),
        task_id: task_id.into(),
        amount,
    }
}

#[test]
fn charges_without_a_task_take_at_most_what_is_left() {
    let (_dir, store) = open();
    store.create_key(&key("key_c", "hc", Some(100))).unwrap();
    store.create_key(&key("key_u", "hu", None)).unwrap();
    assert_eq!(
        store.charges(&[charge("key_c", "msg_1", 30)]).unwrap(),
        vec![30]
    );
    // One batch: a repeated id and an unknown key take nothing; two charges of one key see
    // each other; more than is left takes what is left; unlimited keys pay in full.
    let taken = store
        .charges(&[
            charge("key_c", "msg_1", 5),
            charge("key_nope", "msg_2", 1),
            charge("key_c", "msg_3", 50),
            charge("key_u", "msg_4", 12),
            charge("key_c", "msg_5", 500),
            charge("key_c", "msg_6", 1),
        ])
        .unwrap();
    assert_eq!(taken, vec![0, 0, 50, 12, 20, 0]);
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
            ("msg_1".into(), LedgerKind::Charge, -30, Some(70)),
            ("msg_3".into(), LedgerKind::Charge, -50, Some(20)),
            ("msg_5".into(), LedgerKind::Charge, -20, Some(0)),
            ("msg_6".into(), LedgerKind::Charge, 0, Some(0)),
        ]
    );
    assert_eq!(store.key("key_u").unwrap().unwrap().quota_used, 12);
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
                                &task(
                                    &format!("task_{t}_{i}"),
                                    "key_f",
                                    TaskStatus::Queued,
                                    Some(1),
                                ),
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
