//! Tasks: creation, reads by id, one owner's pages with cursors over both kinds, deletion.

use super::{Fixture, all_tasks, ids, noop, owner_page, task, with_a_task};
use crate::test_util::tid;
use crate::{Order, StoreError, TaskKind, TaskQuery, TaskStatus};

cases!(
    create_get_and_list_with_cursors,
    create_refuses_an_existing_id,
    delete_removes_task_and_indexes_but_not_ledger,
    counts_follow_creations_moves_and_deletions,
);

async fn create_get_and_list_with_cursors(store: Fixture) {
    // Owner a: videos at times 1..=5, generations at 2, 4, 6; owner b: one video at 7.
    let videos: Vec<String> = (1..=5).map(|n| tid("video", n * 10)).collect();
    let gens: Vec<String> = [20, 40, 60].iter().map(|&n| tid("gen", n + 1)).collect();
    for id in videos.iter().chain(&gens) {
        let t = task(id, "key_a", TaskStatus::Queued, Some(1));
        store.create_task(&t, &[]).await.unwrap();
    }
    let other = tid("video", 70);
    let t = task(&other, "key_b", TaskStatus::Queued, Some(1));
    store.create_task(&t, &[]).await.unwrap();

    assert_eq!(
        store.task(&videos[2]).await.unwrap(),
        Some(task(&videos[2], "key_a", TaskStatus::Queued, Some(1)))
    );
    assert_eq!(store.task("video_missing").await.unwrap(), None);

    let v = |i: usize| videos[i].as_str();
    let g = |i: usize| gens[i].as_str();
    let video = Some(TaskKind::Video);
    /// Kind, cursor, limit, order, the page expected, `has_more`.
    type Case<'a> = (
        Option<TaskKind>,
        Option<&'a str>,
        usize,
        Order,
        &'a [&'a str],
        bool,
    );
    let cases: &[Case<'_>] = &[
        (video, None, 2, Order::Desc, &[v(4), v(3)], true),
        (video, Some(v(3)), 2, Order::Desc, &[v(2), v(1)], true),
        (video, Some(v(1)), 2, Order::Desc, &[v(0)], false),
        (video, Some(v(0)), 2, Order::Desc, &[], false),
        (video, None, 2, Order::Asc, &[v(0), v(1)], true),
        (video, Some(v(1)), 2, Order::Asc, &[v(2), v(3)], true),
        (video, Some(v(3)), 2, Order::Asc, &[v(4)], false),
        (
            video,
            None,
            100,
            Order::Desc,
            &[v(4), v(3), v(2), v(1), v(0)],
            false,
        ),
        (
            Some(TaskKind::Generation),
            None,
            10,
            Order::Desc,
            &[g(2), g(1), g(0)],
            false,
        ),
        // Both kinds, merged by creation time.
        (None, None, 4, Order::Desc, &[g(2), v(4), g(1), v(3)], true),
        (None, Some(v(3)), 3, Order::Desc, &[v(2), g(0), v(1)], true),
        (
            None,
            Some(g(0)),
            10,
            Order::Asc,
            &[v(2), v(3), g(1), v(4), g(2)],
            false,
        ),
    ];
    for &(kind, after, limit, order, want, more) in cases {
        let query = TaskQuery {
            owner: "key_a".to_owned(),
            kind,
            after: after.map(str::to_owned),
            limit,
            order,
        };
        let page = store.list_tasks(&query).await.unwrap();
        let what = format!("kind {kind:?} after {after:?} {order:?}");
        assert_eq!(ids(&page.items), want, "{what}");
        assert_eq!(page.has_more, more, "{what}");
    }

    // Other owners see nothing of key_a's, and key_a nothing of theirs.
    let page = owner_page(&*store, "key_b", 100).await;
    assert_eq!(ids(&page.items), [other.as_str()]);
    let page = owner_page(&*store, "key_", 100).await;
    assert!(page.items.is_empty());

    // Operators see everything, newest first.
    let all = all_tasks(&*store, 3).await;
    assert_eq!(ids(&all), [other, g(2).to_owned(), v(4).to_owned()]);
    assert_eq!(all_tasks(&*store, 100).await.len(), 9);
}

async fn create_refuses_an_existing_id(store: Fixture) {
    let id = tid("video", 1);
    let t = task(&id, "key_a", TaskStatus::Queued, Some(5));
    store.create_task(&t, &[]).await.unwrap();
    let err = store.create_task(&t, &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    let empty = task("", "key_a", TaskStatus::Queued, None);
    let err = store.create_task(&empty, &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    let nul = task("video_a\0b", "key_a", TaskStatus::Queued, None);
    let err = store.create_task(&nul, &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    assert_eq!(all_tasks(&*store, 10).await.len(), 1);
}

async fn delete_removes_task_and_indexes_but_not_ledger(store: Fixture) {
    let id = with_a_task(&*store).await;
    let removed = store.delete_task(&id).await.unwrap();
    assert_eq!(removed.map(|t| t.id), Some(id.clone()));
    assert_eq!(store.task(&id).await.unwrap(), None);
    assert_eq!(store.delete_task(&id).await.unwrap(), None);
    assert!(store.unfinished_tasks(10).await.unwrap().is_empty());
    assert!(
        store
            .claim_due(u64::MAX / 2, 1, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let page = owner_page(&*store, "key_a", 10).await;
    assert!(page.items.is_empty());
    assert!(all_tasks(&*store, 10).await.is_empty());
    assert_eq!(store.ledger("key_a").await.unwrap().len(), 1);
}

async fn counts_follow_creations_moves_and_deletions(store: Fixture) {
    use TaskStatus::{Failed, Queued, Running};
    let count = |counts: &[crate::TaskCount], kind, status| {
        counts
            .iter()
            .find(|c| c.kind == kind && c.status == status)
            .map(|c| c.count)
    };
    let empty = store.task_counts().await.unwrap();
    assert_eq!(empty.len(), TaskKind::ALL.len() * TaskStatus::ALL.len());
    assert!(empty.iter().all(|c| c.count == 0));

    let videos: Vec<String> = (1..=3).map(|n| tid("video", n)).collect();
    for id in &videos {
        store
            .create_task(&task(id, "k", Queued, Some(1)), &[])
            .await
            .unwrap();
    }
    let gen_id = tid("gen", 4);
    store
        .create_task(&task(&gen_id, "k", Running, Some(1)), &[])
        .await
        .unwrap();
    store
        .transition(&videos[0], &[Queued], Running, &noop, &[])
        .await
        .unwrap();
    store
        .transition(&videos[1], &[Queued], Failed, &noop, &[])
        .await
        .unwrap();
    // A refused move changes nothing.
    store
        .transition(&videos[1], &[Queued], Running, &noop, &[])
        .await
        .unwrap_err();
    store
        .transition(&gen_id, &[Running], Running, &noop, &[])
        .await
        .unwrap();
    store.delete_task(&videos[2]).await.unwrap();

    let expect = |counts: &[crate::TaskCount]| {
        assert_eq!(count(counts, TaskKind::Video, Queued), Some(0));
        assert_eq!(count(counts, TaskKind::Video, Running), Some(1));
        assert_eq!(count(counts, TaskKind::Video, Failed), Some(1));
        assert_eq!(count(counts, TaskKind::Generation, Running), Some(1));
        assert_eq!(counts.iter().map(|c| c.count).sum::<u64>(), 3);
    };
    expect(&store.task_counts().await.unwrap());
    // Counted again from the records when the store opens again.
    let store = store.reopen().await;
    expect(&store.task_counts().await.unwrap());
}
