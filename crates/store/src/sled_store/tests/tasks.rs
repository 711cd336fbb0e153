//! Tasks: creation, reads by id, one owner's pages with cursors over both kinds, deletion,
//! corrupt records.

use super::{ids, owner_page, step, task, with_a_task};
use crate::test_util::{open_store, tid};
use crate::{Order, Store, StoreError, TaskKind, TaskQuery, TaskStatus};

#[test]
fn create_get_and_list_with_cursors() {
    let (_dir, store) = open_store();
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
    let page = owner_page(&store, "key_b", 100);
    assert_eq!(ids(&page.items), [other.as_str()]);
    let page = owner_page(&store, "key_", 100);
    assert!(page.items.is_empty());

    // Operators see everything, newest first.
    let all = store.all_tasks(3).unwrap();
    assert_eq!(ids(&all), [other, g(2).to_owned(), v(4).to_owned()]);
    assert_eq!(store.all_tasks(100).unwrap().len(), 9);
}

#[test]
fn create_refuses_an_existing_id() {
    let (_dir, store) = open_store();
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
    let (_dir, store, id) = with_a_task();
    let removed = store.delete_task(&id).unwrap();
    assert_eq!(removed.map(|t| t.id), Some(id.clone()));
    assert_eq!(store.task(&id).unwrap(), None);
    assert_eq!(store.delete_task(&id).unwrap(), None);
    assert!(store.unfinished_tasks(10).unwrap().is_empty());
    let page = owner_page(&store, "key_a", 10);
    assert!(page.items.is_empty());
    assert_eq!(store.ledger("key_a").unwrap().len(), 1);
}

#[test]
fn corrupt_record_is_an_error_not_a_panic() {
    let (_dir, store) = open_store();
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
    let err = step(
        &store,
        "video_bad",
        TaskStatus::Queued,
        TaskStatus::Running,
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
        "{err}"
    );
}
