//! Operators' listings: every owner's tasks, newest first, each filter, the cursor and
//! `has_more`, all answered by the store.

use super::{Fixture, ids, task};
use crate::test_util::tid;
use crate::{AdminTaskQuery, Task, TaskKind, TaskStatus};

use crate::TaskStatus::{Failed, Queued, Running, Succeeded};

cases!(admin_listing_filters_and_pages);

/// Task `n` (1..=6): kind by prefix, owner, model and status as in the table of the case.
fn spec(n: u64) -> Task {
    let (prefix, owner, model, status): (&str, &str, &str, TaskStatus) = match n {
        1 => ("video", "key_a", "m1", Queued),
        2 => ("gen", "key_b", "m2", Running),
        3 => ("video", "key_a", "m2", Succeeded),
        4 => ("gen", "key_a", "m1", Queued),
        5 => ("video", "key_b", "m1", Failed),
        _ => ("gen", "key_c", "m1", Queued),
    };
    let mut t = task(&tid(prefix, n), owner, status, Some(n));
    t.model = model.to_owned();
    t
}

async fn admin_listing_filters_and_pages(store: Fixture) {
    let all: Vec<Task> = (1..=6).map(spec).collect();
    // Written out of order: the listing goes by the ids' creation time.
    for n in [3, 1, 6, 2, 5, 4] {
        store.create_task(&all[n - 1], &[]).await.unwrap();
    }
    let id = |n: usize| all[n - 1].id.clone();
    let check = |query: AdminTaskQuery, want: &[usize], more: bool| {
        let store = &store;
        let want: Vec<String> = want.iter().map(|&n| id(n)).collect();
        async move {
            let page = store.admin_tasks(&query).await.unwrap();
            assert_eq!(ids(&page.items), want, "{query:?}");
            assert_eq!(page.has_more, more, "{query:?}");
        }
    };
    let q = |limit: usize| AdminTaskQuery {
        limit,
        ..AdminTaskQuery::default()
    };
    let after = |limit: usize, n: usize| AdminTaskQuery {
        after: Some(id(n)),
        ..q(limit)
    };

    check(q(10), &[6, 5, 4, 3, 2, 1], false).await;
    check(q(6), &[6, 5, 4, 3, 2, 1], false).await;
    check(q(2), &[6, 5], true).await;
    check(after(2, 5), &[4, 3], true).await;
    check(after(2, 3), &[2, 1], false).await;
    check(after(2, 1), &[], false).await;
    // A limit below 1 is 1.
    check(q(0), &[6], true).await;
    // The records are whole.
    let page = store.admin_tasks(&q(1)).await.unwrap();
    assert_eq!(page.items, [all[5].clone()]);

    // Each filter alone.
    let status = |s| AdminTaskQuery {
        status: Some(s),
        ..q(10)
    };
    check(status(Queued), &[6, 4, 1], false).await;
    check(status(Running), &[2], false).await;
    check(status(Succeeded), &[3], false).await;
    check(status(crate::TaskStatus::Cancelled), &[], false).await;
    let kind = |k| AdminTaskQuery {
        kind: Some(k),
        ..q(10)
    };
    check(kind(TaskKind::Generation), &[6, 4, 2], false).await;
    check(kind(TaskKind::Video), &[5, 3, 1], false).await;
    let model = |m: &str| AdminTaskQuery {
        model: Some(m.to_owned()),
        ..q(10)
    };
    check(model("m2"), &[3, 2], false).await;
    check(model("m"), &[], false).await;
    let owner = |o: &str| AdminTaskQuery {
        owner: Some(o.to_owned()),
        ..q(10)
    };
    check(owner("key_a"), &[4, 3, 1], false).await;
    check(owner("key_z"), &[], false).await;

    // Filters together, paged: has_more says whether another match follows.
    let a_videos = AdminTaskQuery {
        owner: Some("key_a".into()),
        kind: Some(TaskKind::Video),
        ..q(10)
    };
    check(a_videos, &[3, 1], false).await;
    let queued_m1 = |limit, after: Option<usize>| AdminTaskQuery {
        status: Some(Queued),
        model: Some("m1".into()),
        after: after.map(id),
        ..q(limit)
    };
    check(queued_m1(1, None), &[6], true).await;
    check(queued_m1(1, Some(6)), &[4], true).await;
    check(queued_m1(1, Some(4)), &[1], false).await;
    check(queued_m1(2, Some(5)), &[4, 1], false).await;
    // The cursor may be a task that is gone: the page starts below its time.
    store.delete_task(&id(4)).await.unwrap();
    check(queued_m1(5, Some(4)), &[1], false).await;
    check(after(10, 4), &[3, 2, 1], false).await;
}
