//! Transitions: the compare-and-swap on the status, and the due time kept in step with it.

use super::{Fixture, ids, noop, step, task};
use crate::StoreError;
use crate::test_util::tid;

use crate::TaskStatus::{Cancelled, Failed, Queued, Running, Succeeded};

cases!(
    transitions_compare_and_swap_on_status,
    unfinished_tasks_follow_next_poll_and_final_status,
    concurrent_transitions_of_one_task_lose_no_update,
);

/// Steps on one task at once, none a final one and none with a ledger entry (a submission's
/// mark, a claim's renewal, a callback's earlier poll): each sees the task as the others left
/// it, so every update counts.
async fn concurrent_transitions_of_one_task_lose_no_update(store: Fixture) {
    let id = tid("video", 1);
    let created = task(&id, "key_a", Running, Some(5));
    store.create_task(&created, &[]).await.unwrap();
    let bump = |t: &mut crate::Task| t.attempts += 1;
    let steps = (0..20).map(|_| store.transition(&id, &[Running], Running, &bump, &[]));
    for moved in futures_util::future::join_all(steps).await {
        moved.unwrap();
    }
    let t = store.task(&id).await.unwrap().unwrap();
    assert_eq!((t.status, t.attempts), (Running, 20));
    // A status the task has left is refused, with nothing written.
    let err = store
        .transition(&id, &[Queued], Running, &bump, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::WrongStatus { .. }), "{err}");
    let missing = store
        .transition(&tid("video", 2), &[Running], Running, &bump, &[])
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::TaskNotFound(_)), "{missing}");
    assert_eq!(store.task(&id).await.unwrap().unwrap().attempts, 20);
}

async fn transitions_compare_and_swap_on_status(store: Fixture) {
    let id = tid("video", 1);
    let created = task(&id, "key_a", Queued, Some(5));
    store.create_task(&created, &[]).await.unwrap();

    let t = store
        .transition(
            &id,
            &[Queued],
            Running,
            &|t| {
                t.progress = 40;
                t.upstream_id = Some("up-1".to_owned());
                // Identity fields cannot be changed by an update.
                t.id = "video_other".to_owned();
                t.owner = "key_b".to_owned();
                t.kind = crate::TaskKind::Generation;
            },
            &[],
        )
        .await
        .unwrap();
    assert_eq!((t.status, t.progress), (Running, 40));
    assert_eq!((t.id.as_str(), t.owner.as_str()), (id.as_str(), "key_a"));
    assert_eq!(t.kind, crate::TaskKind::Video);
    assert_eq!(t.params, created.params);
    assert_eq!(store.task(&id).await.unwrap(), Some(t));
    assert_eq!(store.task("video_other").await.unwrap(), None);

    // Wrong current status.
    let err = store
        .transition(&id, &[Queued], Running, &noop, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::WrongStatus { actual: Running, expected, .. }
            if expected == &[Queued]),
        "{err}"
    );

    // Progress update without status change; progress never goes down.
    let t = store
        .transition(&id, &[Running], Running, &|t| t.progress = 10, &[])
        .await
        .unwrap();
    assert_eq!(t.progress, 40);

    // To a final status: next_poll_ms cleared.
    let t = store
        .transition(&id, &[Running], Succeeded, &|t| t.progress = 100, &[])
        .await
        .unwrap();
    assert_eq!(
        (t.status, t.progress, t.next_poll_ms),
        (Succeeded, 100, None)
    );

    // A final task never changes, even when `from` lists its status.
    for to in [Succeeded, Failed, Running] {
        let err = store
            .transition(&id, &[Succeeded], to, &noop, &[])
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::WrongStatus {
                    actual: Succeeded,
                    ..
                }
            ),
            "{err}"
        );
    }
    assert_eq!(
        store.task(&id).await.unwrap().map(|t| t.status),
        Some(Succeeded)
    );

    let err = step(&*store, "video_nope", Queued, Running, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::TaskNotFound(id) if id == "video_nope"),
        "{err}"
    );
}

async fn unfinished_tasks_follow_next_poll_and_final_status(store: Fixture) {
    let a = tid("video", 1);
    let b = tid("video", 2);
    let c = tid("gen", 3);
    let d = tid("video", 4);
    let done = tid("video", 5);
    for t in [
        task(&a, "k", Queued, Some(100)),
        task(&b, "k", Running, Some(50)),
        task(&c, "k", Queued, Some(300)),
        // Unfinished without a poll time: never due, but still unfinished.
        task(&d, "k", Queued, None),
        task(&done, "k", Failed, Some(10)),
    ] {
        store.create_task(&t, &[]).await.unwrap();
    }
    assert_eq!(
        store
            .task(&done)
            .await
            .unwrap()
            .and_then(|t| t.next_poll_ms),
        None
    );
    assert_eq!(
        ids(&store.unfinished_tasks(10).await.unwrap()),
        [b.clone(), a.clone(), c.clone(), d.clone()]
    );
    assert_eq!(
        ids(&store.unfinished_tasks(2).await.unwrap()),
        [b.as_str(), a.as_str()]
    );

    // Reschedule b later than c.
    let later = |t: &mut crate::Task| t.next_poll_ms = Some(400);
    store
        .transition(&b, &[Running], Running, &later, &[])
        .await
        .unwrap();
    assert_eq!(
        ids(&store.unfinished_tasks(10).await.unwrap()),
        [a.clone(), c.clone(), b.clone(), d.clone()]
    );

    // Final tasks leave the index; a task given a poll time joins it.
    store
        .transition(&a, &[Queued], Cancelled, &noop, &[])
        .await
        .unwrap();
    let soon = |t: &mut crate::Task| t.next_poll_ms = Some(1);
    store
        .transition(&d, &[Queued], Running, &soon, &[])
        .await
        .unwrap();
    assert_eq!(ids(&store.unfinished_tasks(10).await.unwrap()), [d, c, b]);
}
