//! Transitions: the compare-and-swap on the status, and the due index kept in step with it.

use super::{ids, noop, step, task};
use crate::test_util::{open_store, tid};
use crate::{Store, StoreError};

use crate::TaskStatus::{Cancelled, Failed, Queued, Running, Succeeded};

#[test]
fn transitions_compare_and_swap_on_status() {
    let (_dir, store) = open_store();
    let id = tid("video", 1);
    store
        .create_task(&task(&id, "key_a", Queued, Some(5)), &[])
        .unwrap();

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
            },
            &[],
        )
        .unwrap();
    assert_eq!((t.status, t.progress), (Running, 40));
    assert_eq!((t.id.as_str(), t.owner.as_str()), (id.as_str(), "key_a"));
    assert_eq!(store.task(&id).unwrap(), Some(t));

    // Wrong current status.
    let err = store
        .transition(&id, &[Queued], Running, &noop, &[])
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::WrongStatus { actual: Running, expected, .. }
            if expected == &[Queued]),
        "{err}"
    );

    // Progress update without status change; progress never goes down.
    let t = store
        .transition(&id, &[Running], Running, &|t| t.progress = 10, &[])
        .unwrap();
    assert_eq!(t.progress, 40);

    // To a final status: next_poll_ms cleared.
    let t = store
        .transition(&id, &[Running], Succeeded, &|t| t.progress = 100, &[])
        .unwrap();
    assert_eq!(
        (t.status, t.progress, t.next_poll_ms),
        (Succeeded, 100, None)
    );

    // A final task never changes, even when `from` lists its status.
    for to in [Succeeded, Failed, Running] {
        let err = store
            .transition(&id, &[Succeeded], to, &noop, &[])
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
    assert_eq!(store.task(&id).unwrap().map(|t| t.status), Some(Succeeded));

    let err = step(&store, "video_nope", Queued, Running, &[]).unwrap_err();
    assert!(
        matches!(&err, StoreError::TaskNotFound(id) if id == "video_nope"),
        "{err}"
    );
}

#[test]
fn due_index_follows_next_poll_and_final_status() {
    let (_dir, store) = open_store();
    let a = tid("video", 1);
    let b = tid("video", 2);
    let c = tid("gen", 3);
    let d = tid("video", 4);
    let done = tid("video", 5);
    store
        .create_task(&task(&a, "k", Queued, Some(100)), &[])
        .unwrap();
    store
        .create_task(&task(&b, "k", Running, Some(50)), &[])
        .unwrap();
    store
        .create_task(&task(&c, "k", Queued, Some(300)), &[])
        .unwrap();
    // Unfinished without a poll time: never due, but still unfinished.
    store
        .create_task(&task(&d, "k", Queued, None), &[])
        .unwrap();
    store
        .create_task(&task(&done, "k", Failed, Some(10)), &[])
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
            &[Running],
            Running,
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
        .transition(&a, &[Queued], Cancelled, &noop, &[])
        .unwrap();
    store
        .transition(&d, &[Queued], Running, &|t| t.next_poll_ms = Some(1), &[])
        .unwrap();
    assert_eq!(
        ids(&store.due_tasks(1_000, 10).unwrap()),
        [d.clone(), c.clone(), b.clone()]
    );
    assert_eq!(ids(&store.unfinished_tasks(10).unwrap()), [d, c, b]);
    assert_eq!(store.trees.due.len(), 3);
}
