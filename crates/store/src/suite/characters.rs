//! Characters: written once within their owner's number, with the charge of their price, read
//! back by id and by owner, deleted by their owner only; durable.

use std::sync::Arc;

use super::{Fixture, draft, key, ledger_of};
use crate::test_util::tid;
use crate::{Character, LedgerKind, Order, Store, StoreError};

cases!(
    characters_are_written_once_and_read_by_id,
    an_owner_at_its_number_is_refused_and_nothing_is_written,
    concurrent_creations_never_pass_the_number,
    a_deletion_frees_a_place_and_only_the_owner_deletes,
    the_price_is_charged_once_in_the_step_of_the_creation,
    a_quota_short_of_the_price_writes_nothing,
    listings_are_the_owners_own_and_paged,
);

/// Room enough that the number never refuses.
const ROOM: u64 = 1_000;

fn character(id: &str, owner: &str) -> Character {
    Character {
        id: id.to_owned(),
        owner: owner.to_owned(),
        name: format!("{id} name"),
        created_at: 7,
        video: format!("characters/{id}/video.mp4"),
        video_bytes: 1234,
    }
}

/// `char_<ULID of time n>`: ids that sort by `n`.
fn cid(n: u64) -> String {
    tid("char", n)
}

/// Every character of `owner`, newest first.
async fn all_of(store: &dyn Store, owner: &str) -> Vec<String> {
    let page = store
        .list_characters(owner, None, 100, Order::Desc)
        .await
        .unwrap();
    assert!(!page.has_more);
    page.items.into_iter().map(|c| c.id).collect()
}

fn is_limit(err: &StoreError, owner: &str, max: u64) -> bool {
    matches!(err, StoreError::CharacterLimit { owner: o, max: m } if o == owner && *m == max)
}

async fn characters_are_written_once_and_read_by_id(store: Fixture) {
    assert_eq!(store.character("char_1").await.unwrap(), None);
    let first = character("char_1", "key_1");
    store.create_character(&first, ROOM, &[]).await.unwrap();
    store
        .create_character(&character("char_2", "key_2"), ROOM, &[])
        .await
        .unwrap();
    assert_eq!(
        store.character("char_1").await.unwrap(),
        Some(first.clone())
    );
    // An id in use is refused and the first record stays.
    let err = store
        .create_character(&character("char_1", "key_9"), ROOM, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    assert_eq!(
        store.character("char_1").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(all_of(&*store, "key_9").await, Vec::<String>::new());
    // Durable: there after the store is opened again.
    let store = store.reopen().await;
    assert_eq!(store.character("char_1").await.unwrap(), Some(first));
    assert_eq!(
        store.character("char_2").await.unwrap().map(|c| c.owner),
        Some("key_2".to_owned())
    );
}

async fn an_owner_at_its_number_is_refused_and_nothing_is_written(store: Fixture) {
    for n in 1..=2 {
        store
            .create_character(&character(&cid(n), "key_1"), 2, &[])
            .await
            .unwrap();
    }
    let err = store
        .create_character(&character(&cid(3), "key_1"), 2, &[])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_1", 2), "{err}");
    assert_eq!(store.character(&cid(3)).await.unwrap(), None);
    assert_eq!(all_of(&*store, "key_1").await, [cid(2), cid(1)]);
    // The number is the owner's: another owner has its own.
    store
        .create_character(&character(&cid(4), "key_2"), 2, &[])
        .await
        .unwrap();
    // None allowed at all.
    let err = store
        .create_character(&character(&cid(5), "key_3"), 0, &[])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_3", 0), "{err}");
    assert_eq!(store.character(&cid(5)).await.unwrap(), None);
    // Kept across a reopening: still at its number.
    let store = store.reopen().await;
    let err = store
        .create_character(&character(&cid(6), "key_1"), 2, &[])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_1", 2), "{err}");
    // A larger number lets it have more.
    store
        .create_character(&character(&cid(6), "key_1"), 3, &[])
        .await
        .unwrap();
    assert_eq!(all_of(&*store, "key_1").await, [cid(6), cid(2), cid(1)]);
}

async fn concurrent_creations_never_pass_the_number(store: Fixture) {
    let store = Arc::clone(&store.store);
    let creations: Vec<_> = (1..=8)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .create_character(&character(&cid(n), "key_1"), 3, &[])
                    .await
            })
        })
        .collect();
    let mut created = 0;
    for creation in creations {
        match creation.await.unwrap() {
            Ok(()) => created += 1,
            Err(e) => assert!(is_limit(&e, "key_1", 3), "{e}"),
        }
    }
    assert_eq!(created, 3);
    assert_eq!(all_of(&*store, "key_1").await.len(), 3);
}

async fn a_deletion_frees_a_place_and_only_the_owner_deletes(store: Fixture) {
    let (a, b) = (character(&cid(1), "key_1"), character(&cid(2), "key_1"));
    store.create_character(&a, 2, &[]).await.unwrap();
    store.create_character(&b, 2, &[]).await.unwrap();
    // Another owner's id, or an unknown one, deletes nothing.
    assert_eq!(store.delete_character(&a.id, "key_2").await.unwrap(), None);
    assert_eq!(
        store.delete_character(&cid(9), "key_1").await.unwrap(),
        None
    );
    assert_eq!(store.character(&a.id).await.unwrap(), Some(a.clone()));
    let err = store
        .create_character(&character(&cid(3), "key_1"), 2, &[])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_1", 2), "{err}");
    // The owner's deletion frees a place; a second deletion finds nothing.
    assert_eq!(
        store.delete_character(&a.id, "key_1").await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(store.delete_character(&a.id, "key_1").await.unwrap(), None);
    assert_eq!(store.character(&a.id).await.unwrap(), None);
    assert_eq!(all_of(&*store, "key_1").await, std::slice::from_ref(&b.id));
    store
        .create_character(&character(&cid(3), "key_1"), 2, &[])
        .await
        .unwrap();
    // Durable.
    let store = store.reopen().await;
    assert_eq!(store.character(&a.id).await.unwrap(), None);
    assert_eq!(all_of(&*store, "key_1").await, [cid(3), b.id]);
    let err = store
        .create_character(&character(&cid(4), "key_1"), 2, &[])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_1", 2), "{err}");
}

async fn the_price_is_charged_once_in_the_step_of_the_creation(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    let c = character(&cid(1), "key_a");
    let charge = [draft("key_a", &c.id, LedgerKind::Charge, -30)];
    store.create_character(&c, ROOM, &charge).await.unwrap();
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(70));
    let entries = store.ledger("key_a").await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        (
            entries[0].task_id.as_str(),
            entries[0].kind,
            entries[0].amount,
            entries[0].balance_after
        ),
        (c.id.as_str(), LedgerKind::Charge, -30, Some(70))
    );
    // The same id again is refused before anything is charged.
    let err = store.create_character(&c, ROOM, &charge).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    // An owner at its number is refused before anything is charged.
    let d = character(&cid(2), "key_a");
    let err = store
        .create_character(&d, 1, &[draft("key_a", &d.id, LedgerKind::Charge, -30)])
        .await
        .unwrap_err();
    assert!(is_limit(&err, "key_a", 1), "{err}");
    let store = store.reopen().await;
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(70));
    assert_eq!(ledger_of(&*store, "key_a", |e| e.amount).await, [-30]);
    // A deletion keeps the charge.
    store.delete_character(&c.id, "key_a").await.unwrap();
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(70));
    assert_eq!(ledger_of(&*store, "key_a", |e| e.amount).await, [-30]);
}

async fn a_quota_short_of_the_price_writes_nothing(store: Fixture) {
    store
        .create_key(&key("key_a", "ha", Some(20)))
        .await
        .unwrap();
    let c = character(&cid(1), "key_a");
    let err = store
        .create_character(&c, 1, &[draft("key_a", &c.id, LedgerKind::Charge, -30)])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InsufficientQuota {
                needed: 30,
                remaining: 20,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.character(&c.id).await.unwrap(), None);
    assert_eq!(all_of(&*store, "key_a").await, Vec::<String>::new());
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(20));
    assert!(store.ledger("key_a").await.unwrap().is_empty());
    // The refused one took no place: the one place left is there for a creation it can pay.
    store
        .create_character(&c, 1, &[draft("key_a", &c.id, LedgerKind::Charge, -20)])
        .await
        .unwrap();
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(0));
    // An unknown key cannot be charged.
    let d = character(&cid(2), "key_nope");
    let err = store
        .create_character(&d, 1, &[draft("key_nope", &d.id, LedgerKind::Charge, -1)])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::KeyNotFound(_)), "{err}");
    assert_eq!(store.character(&d.id).await.unwrap(), None);
}

async fn listings_are_the_owners_own_and_paged(store: Fixture) {
    for n in 1..=5 {
        store
            .create_character(&character(&cid(n), "key_1"), ROOM, &[])
            .await
            .unwrap();
    }
    for n in 6..=7 {
        store
            .create_character(&character(&cid(n), "key_2"), ROOM, &[])
            .await
            .unwrap();
    }
    let ids = |page: &crate::Page<Character>| -> Vec<String> {
        page.items.iter().map(|c| c.id.clone()).collect()
    };
    let first = store
        .list_characters("key_1", None, 2, Order::Desc)
        .await
        .unwrap();
    assert_eq!((ids(&first), first.has_more), (vec![cid(5), cid(4)], true));
    let second = store
        .list_characters("key_1", Some(&cid(4)), 2, Order::Desc)
        .await
        .unwrap();
    assert_eq!(
        (ids(&second), second.has_more),
        (vec![cid(3), cid(2)], true)
    );
    let last = store
        .list_characters("key_1", Some(&cid(2)), 2, Order::Desc)
        .await
        .unwrap();
    assert_eq!((ids(&last), last.has_more), (vec![cid(1)], false));
    let oldest = store
        .list_characters("key_1", Some(&cid(1)), 3, Order::Asc)
        .await
        .unwrap();
    assert_eq!(
        (ids(&oldest), oldest.has_more),
        (vec![cid(2), cid(3), cid(4)], true)
    );
    assert_eq!(all_of(&*store, "key_2").await, [cid(7), cid(6)]);
    assert_eq!(all_of(&*store, "key_3").await, Vec::<String>::new());
    // An owner whose id begins another's sees only its own.
    store
        .create_character(&character(&cid(8), "key_10"), ROOM, &[])
        .await
        .unwrap();
    assert_eq!(all_of(&*store, "key_1").await.len(), 5);
}
