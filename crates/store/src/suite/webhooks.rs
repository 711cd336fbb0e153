//! Webhooks: written by the transition that ends a task with a `callback_url` (and only by
//! it), kept through a restart, claimed with a lease, moved by attempts, listed by filters.

use std::collections::HashSet;
use std::sync::Arc;

use super::{Fixture, noop, task};
use crate::model::unix_ms;
use crate::test_util::tid;
use crate::{
    DueWebhook, Store, StoreError, Task, Webhook, WebhookAttempt, WebhookOutcome, WebhookPick,
    WebhookQuery, WebhookStatus,
};

use crate::TaskStatus::{Cancelled, Failed, Queued, Running, Succeeded};

cases!(
    a_task_that_ends_with_a_callback_url_writes_one_webhook,
    a_claim_leases_a_webhook_and_attempts_move_it,
    concurrent_claimers_never_get_the_same_webhook,
    a_pick_takes_skips_and_defers_by_receiver,
    webhooks_are_listed_by_task_and_status,
);

const HOOK: &str = "https://hooks.example/relay";

fn with_callback(id: &str) -> Task {
    let mut t = task(id, "k", Queued, Some(10));
    t.callback_url = Some(HOOK.to_owned());
    t
}

fn of_task(task_id: &str) -> WebhookQuery {
    WebhookQuery {
        task_id: Some(task_id.to_owned()),
        limit: 100,
        ..WebhookQuery::default()
    }
}

fn attempt(code: Option<u16>) -> WebhookAttempt {
    WebhookAttempt {
        at_ms: unix_ms(),
        status_code: code,
        error: code.is_none().then(|| "connection refused".to_owned()),
        duration_ms: 3,
    }
}

fn ids(webhooks: &[Webhook]) -> Vec<String> {
    webhooks.iter().map(|w| w.id.clone()).collect()
}

async fn a_task_that_ends_with_a_callback_url_writes_one_webhook(store: Fixture) {
    let a = tid("video", 1);
    let plain = tid("video", 2);
    store.create_task(&with_callback(&a), &[]).await.unwrap();
    store
        .create_task(&task(&plain, "k", Queued, Some(10)), &[])
        .await
        .unwrap();

    // Moves that do not end the task write nothing.
    store
        .transition(&a, &[Queued], Running, &noop, &[])
        .await
        .unwrap();
    store
        .transition(&a, &[Running], Running, &|t| t.progress = 50, &[])
        .await
        .unwrap();
    assert!(store.webhooks(&of_task(&a)).await.unwrap().items.is_empty());

    let before = unix_ms();
    let ended = store
        .transition(&a, &[Running], Succeeded, &|t| t.progress = 100, &[])
        .await
        .unwrap();
    // A refused move (the task is final) writes no second one.
    let again = store
        .transition(&a, &[Running, Succeeded], Failed, &noop, &[])
        .await;
    assert!(matches!(again, Err(StoreError::WrongStatus { .. })));
    // A task without a callback_url has none.
    store
        .transition(&plain, &[Queued], Cancelled, &noop, &[])
        .await
        .unwrap();
    assert!(
        store
            .webhooks(&of_task(&plain))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Written in the move's transaction: there after a restart.
    let store = store.reopen().await;
    let page = store.webhooks(&of_task(&a)).await.unwrap();
    assert_eq!(page.items.len(), 1, "{:?}", page.items);
    let w = &page.items[0];
    assert!(w.id.starts_with("evt_"), "{}", w.id);
    assert_eq!(
        (w.task_id.as_str(), w.owner.as_str(), w.url.as_str()),
        (a.as_str(), "k", HOOK)
    );
    assert_eq!(w.status, WebhookStatus::Pending);
    assert_eq!(w.task, ended, "the webhook carries the task as it ended");
    assert!(w.created_ms >= before && w.next_attempt_ms == Some(w.created_ms));
    assert!(w.attempts.is_empty());
}

async fn a_claim_leases_a_webhook_and_attempts_move_it(store: Fixture) {
    let a = tid("video", 1);
    store.create_task(&with_callback(&a), &[]).await.unwrap();
    store
        .transition(&a, &[Queued], Failed, &noop, &[])
        .await
        .unwrap();
    let created = store.webhooks(&of_task(&a)).await.unwrap().items[0].clone();
    let due = created.next_attempt_ms.unwrap();
    assert!(
        store
            .claim_webhooks(due - 1, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let claimed = store.claim_webhooks(due, 1_000, 10).await.unwrap();
    assert_eq!(ids(&claimed), std::slice::from_ref(&created.id));
    assert_eq!(claimed[0].next_attempt_ms, Some(due + 1_000));
    // Leased: nobody else gets it until the lease runs out (its holder died).
    assert!(
        store
            .claim_webhooks(due + 999, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .claim_webhooks(due + 1_000, 1_000, 10)
            .await
            .unwrap()
            .len(),
        1
    );

    // A failed attempt schedules the next one.
    let retry_at = due + 5_000;
    let w = store
        .record_webhook_attempt(
            &created.id,
            &attempt(Some(500)),
            WebhookOutcome::Retry { at_ms: retry_at },
        )
        .await
        .unwrap();
    assert_eq!(
        (w.status, w.next_attempt_ms),
        (WebhookStatus::Pending, Some(retry_at))
    );
    assert!(
        store
            .claim_webhooks(retry_at - 1, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .claim_webhooks(retry_at, 1_000, 10)
            .await
            .unwrap()
            .len(),
        1
    );

    let w = store
        .record_webhook_attempt(&created.id, &attempt(Some(204)), WebhookOutcome::Delivered)
        .await
        .unwrap();
    assert_eq!(
        (w.status, w.next_attempt_ms),
        (WebhookStatus::Delivered, None)
    );
    assert!(
        store
            .claim_webhooks(u64::MAX - 1, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A late attempt (of an expired lease) is kept, the status is not moved.
    let w = store
        .record_webhook_attempt(&created.id, &attempt(None), WebhookOutcome::Failed)
        .await
        .unwrap();
    assert_eq!(w.status, WebhookStatus::Delivered);
    let codes: Vec<Option<u16>> = w.attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, [Some(500), Some(204), None]);
    let stored = store.webhooks(&of_task(&a)).await.unwrap().items;
    assert_eq!(stored, [w]);

    let unknown = store
        .record_webhook_attempt("evt_none", &attempt(None), WebhookOutcome::Failed)
        .await;
    assert!(matches!(unknown, Err(StoreError::WebhookNotFound(_))));
}

async fn concurrent_claimers_never_get_the_same_webhook(store: Fixture) {
    const TASKS: u64 = 30;
    const CLAIMERS: usize = 5;
    for n in 0..TASKS {
        let id = tid("video", n);
        store.create_task(&with_callback(&id), &[]).await.unwrap();
        store
            .transition(&id, &[Queued], Succeeded, &noop, &[])
            .await
            .unwrap();
    }
    let now = unix_ms() + 1_000;
    let barrier = Arc::new(tokio::sync::Barrier::new(CLAIMERS));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|_| {
            let (store, barrier): (Arc<dyn Store>, _) = (store.store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_webhooks(now, 60_000, 3).await.unwrap();
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|w| w.id));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    let unique: HashSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "a webhook was claimed twice");
    assert_eq!(all.len() as u64, TASKS);
}

/// Ends a new task of `owner` with a callback to `url`; its webhook.
async fn ended(store: &Fixture, n: u64, owner: &str, url: &str) -> Webhook {
    let id = tid("video", n);
    let mut t = task(&id, owner, Queued, Some(10));
    t.callback_url = Some(url.to_owned());
    store.create_task(&t, &[]).await.unwrap();
    store
        .transition(&id, &[Queued], Succeeded, &noop, &[])
        .await
        .unwrap();
    store.webhooks(&of_task(&id)).await.unwrap().items[0].clone()
}

async fn a_pick_takes_skips_and_defers_by_receiver(store: Fixture) {
    let slow = "https://slow.example/hook";
    let a = ended(&store, 1, "key_a", slow).await;
    let b = ended(&store, 2, "key_a", slow).await;
    let c = ended(&store, 3, "key_b", "https://fast.example/hook").await;
    let d = ended(&store, 4, "key_a", slow).await;
    let now = [&a, &b, &c, &d]
        .iter()
        .filter_map(|w| w.next_attempt_ms)
        .max()
        .unwrap();
    // Earliest due first (ids break ties, as they do in the index); each shows its receiver.
    let mut order = [a.clone(), b.clone(), c.clone(), d.clone()];
    order.sort_by_key(|w| (w.next_attempt_ms, w.id.clone()));
    let later = now + 5_000;
    let mut seen: Vec<(String, String, String)> = Vec::new();
    // One delivery of the slow receiver at once: the first of it is taken, the second left
    // due, the third deferred; the other receiver's is taken.
    let mut slow_seen = 0;
    let mut pick = |due: &DueWebhook<'_>| {
        seen.push((due.id.to_owned(), due.owner.to_owned(), due.url.to_owned()));
        if due.url != slow {
            return WebhookPick::Take;
        }
        slow_seen += 1;
        match slow_seen {
            1 => WebhookPick::Take,
            2 => WebhookPick::Skip,
            _ => WebhookPick::Defer { at_ms: later },
        }
    };
    let taken = store
        .pick_webhooks(now, 1_000, 10, &mut pick)
        .await
        .unwrap();
    let expected_seen: Vec<(String, String, String)> = order
        .iter()
        .map(|w| (w.id.clone(), w.owner.clone(), w.url.clone()))
        .collect();
    assert_eq!(seen, expected_seen);
    let slow_order: Vec<&Webhook> = order.iter().filter(|w| w.url == slow).collect();
    let fast = order.iter().find(|w| w.url != slow).unwrap();
    let mut expected_taken = vec![slow_order[0].id.clone(), fast.id.clone()];
    expected_taken.sort_by_key(|id| order.iter().position(|w| &w.id == id));
    assert_eq!(ids(&taken), expected_taken);
    assert!(taken.iter().all(|w| w.next_attempt_ms == Some(now + 1_000)));

    // The skipped one is still due; the taken ones are leased; the deferred one waits.
    let again = store.claim_webhooks(now, 1_000, 10).await.unwrap();
    assert_eq!(ids(&again), [slow_order[1].id.clone()]);
    let deferred = &store
        .webhooks(&of_task(&slow_order[2].task_id))
        .await
        .unwrap()
        .items[0];
    assert_eq!(deferred.next_attempt_ms, Some(later));
    assert!(
        deferred.attempts.is_empty(),
        "a deferral records no attempt"
    );
    assert_eq!(deferred.status, WebhookStatus::Pending);
    assert!(
        store
            .claim_webhooks(later - 1, 1_000, 10)
            .await
            .unwrap()
            .iter()
            .all(|w| w.id != deferred.id)
    );
    let at_last = store.claim_webhooks(later, 100_000, 10).await.unwrap();
    assert!(ids(&at_last).contains(&deferred.id), "{:?}", ids(&at_last));

    // `scan` bounds what is looked at, `Stop` ends the look; neither claims anything then.
    let e = ended(&store, 5, "key_c", slow).await;
    let f = ended(&store, 6, "key_c", slow).await;
    let due = e.next_attempt_ms.max(f.next_attempt_ms).unwrap().max(later) + 200_000;
    let mut looked = 0;
    let mut count = |_: &DueWebhook<'_>| {
        looked += 1;
        WebhookPick::Skip
    };
    store
        .pick_webhooks(due, 1_000, 1, &mut count)
        .await
        .unwrap();
    assert_eq!(looked, 1);
    let mut stop = |_: &DueWebhook<'_>| WebhookPick::Stop;
    assert!(
        store
            .pick_webhooks(due, 1_000, 10, &mut stop)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.claim_webhooks(due, 1_000, 10).await.unwrap().len(), 6);
}

async fn webhooks_are_listed_by_task_and_status(store: Fixture) {
    let mut made = Vec::new();
    for n in 0..4 {
        let id = tid("gen", n);
        store.create_task(&with_callback(&id), &[]).await.unwrap();
        store
            .transition(&id, &[Queued], Cancelled, &noop, &[])
            .await
            .unwrap();
        made.push(
            store.webhooks(&of_task(&id)).await.unwrap().items[0]
                .id
                .clone(),
        );
    }
    // Ids sort by creation time (those made within one millisecond in any order).
    made.sort();
    store
        .record_webhook_attempt(&made[1], &attempt(Some(200)), WebhookOutcome::Delivered)
        .await
        .unwrap();
    let all = |status, after: Option<&String>, limit| WebhookQuery {
        task_id: None,
        status,
        after: after.cloned(),
        limit,
    };
    // Newest first, paged by the cursor.
    let page = store.webhooks(&all(None, None, 3)).await.unwrap();
    assert_eq!(
        ids(&page.items),
        [made[3].clone(), made[2].clone(), made[1].clone()]
    );
    assert!(page.has_more);
    let page = store.webhooks(&all(None, Some(&made[1]), 3)).await.unwrap();
    assert_eq!(ids(&page.items), [made[0].clone()]);
    assert!(!page.has_more);
    let delivered = store
        .webhooks(&all(Some(WebhookStatus::Delivered), None, 10))
        .await
        .unwrap();
    assert_eq!(ids(&delivered.items), [made[1].clone()]);
    let pending = store
        .webhooks(&all(Some(WebhookStatus::Pending), None, 10))
        .await
        .unwrap();
    assert_eq!(pending.items.len(), 3);
    let none = store.webhooks(&of_task("video_unknown")).await.unwrap();
    assert!(none.items.is_empty() && !none.has_more);
}
