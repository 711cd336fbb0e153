//! Claims of due work: the lease that keeps a claimed task from being handed out again until
//! it runs out, final and unscheduled tasks never handed out, concurrent claimers never
//! handed the same task.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Fixture, claimed_ids, ids, noop, task};
use crate::test_util::tid;
use crate::{Store, Task};

use crate::TaskStatus::{Cancelled, Failed, Queued, Running};

cases!(
    a_claim_leases_the_task_until_the_lease_runs_out,
    final_and_unscheduled_tasks_are_never_claimed,
    concurrent_claimers_never_get_the_same_task,
);

async fn a_claim_leases_the_task_until_the_lease_runs_out(store: Fixture) {
    let a = tid("video", 1);
    let b = tid("video", 2);
    let c = tid("gen", 3);
    for t in [
        task(&a, "k", Queued, Some(100)),
        task(&b, "k", Running, Some(50)),
        task(&c, "k", Queued, Some(300)),
    ] {
        store.create_task(&t, &[]).await.unwrap();
    }
    assert!(store.claim_due(49, 1_000, 10).await.unwrap().is_empty());

    // Due ones, earliest first, each leased until now + lease.
    let claimed = store.claim_due(200, 1_000, 10).await.unwrap();
    assert_eq!(claimed_ids(&claimed), [b.as_str(), a.as_str()]);
    assert!(claimed.iter().all(|c| c.task.next_poll_ms == Some(1_200)));
    // Each with the due time it was claimed at.
    let due: Vec<u64> = claimed.iter().map(|c| c.due_ms).collect();
    assert_eq!(due, [50, 100]);
    let stored = store.task(&b).await.unwrap().unwrap();
    assert_eq!(stored, claimed[0].task);

    // Not again before the lease runs out.
    assert!(store.claim_due(200, 1_000, 10).await.unwrap().is_empty());
    assert!(store.claim_due(299, 1_000, 10).await.unwrap().is_empty());
    assert_eq!(
        claimed_ids(&store.claim_due(300, 1_000, 10).await.unwrap()),
        [c.as_str()]
    );
    assert!(store.claim_due(1_199, 1_000, 10).await.unwrap().is_empty());

    // Again once it has: the holder died without a step. `limit` counts.
    assert_eq!(
        claimed_ids(&store.claim_due(1_200, 500, 1).await.unwrap()),
        [a.as_str()]
    );
    assert_eq!(
        claimed_ids(&store.claim_due(1_200, 500, 10).await.unwrap()),
        [b.as_str()]
    );

    // The holder's next step sets the task's own time, which a claim then follows.
    let soon = |t: &mut Task| t.next_poll_ms = Some(1_250);
    store
        .transition(&b, &[Running], Running, &soon, &[])
        .await
        .unwrap();
    assert_eq!(
        claimed_ids(&store.claim_due(1_260, 10, 10).await.unwrap()),
        [b.as_str()]
    );
    assert_eq!(
        claimed_ids(&store.claim_due(1_700, 10, 10).await.unwrap()),
        [b.as_str(), c.as_str(), a.as_str()]
    );
    // Equal due times go by id.
    assert_eq!(
        ids(&store.unfinished_tasks(10).await.unwrap()),
        [c.as_str(), a.as_str(), b.as_str()]
    );
}

async fn final_and_unscheduled_tasks_are_never_claimed(store: Fixture) {
    let done = tid("video", 1);
    let unscheduled = tid("video", 2);
    let ends = tid("gen", 3);
    for t in [
        task(&done, "k", Failed, Some(10)),
        task(&unscheduled, "k", Queued, None),
        task(&ends, "k", Running, Some(10)),
    ] {
        store.create_task(&t, &[]).await.unwrap();
    }
    let now = 1 << 50;
    assert_eq!(
        claimed_ids(&store.claim_due(now, 0, 10).await.unwrap()),
        [ends.as_str()]
    );
    // A lease of 0 leaves it due at `now`.
    assert_eq!(
        claimed_ids(&store.claim_due(now, 0, 10).await.unwrap()),
        [ends.as_str()]
    );
    store
        .transition(&ends, &[Running], Cancelled, &noop, &[])
        .await
        .unwrap();
    assert!(store.claim_due(now, 0, 10).await.unwrap().is_empty());
    assert!(
        store
            .claim_due(u64::MAX - 1, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&store.unfinished_tasks(10).await.unwrap()),
        [unscheduled.as_str()]
    );
    let ended = store.task(&ends).await.unwrap().unwrap();
    assert_eq!((ended.status, ended.next_poll_ms), (Cancelled, None));
}

async fn concurrent_claimers_never_get_the_same_task(store: Fixture) {
    const TASKS: u64 = 60;
    const CLAIMERS: usize = 6;
    for n in 0..TASKS {
        let t = task(&tid("video", n), "k", Queued, Some(n % 7));
        store.create_task(&t, &[]).await.unwrap();
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, barrier): (Arc<dyn Store>, _) = (store.store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_due(100, 60_000, 4).await.unwrap();
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|c| c.task.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.unwrap());
    }
    let distinct: HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a task was claimed twice");
    assert_eq!(all.len() as u64, TASKS);
    assert!(store.claim_due(100, 60_000, 100).await.unwrap().is_empty());
}
