//! Characters: written once, read back by id, durable.

use super::Fixture;
use crate::{Character, StoreError};

cases!(characters_are_written_once_and_read_by_id);

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

async fn characters_are_written_once_and_read_by_id(store: Fixture) {
    assert_eq!(store.character("char_1").await.unwrap(), None);
    let first = character("char_1", "key_1");
    store.create_character(&first).await.unwrap();
    store
        .create_character(&character("char_2", "key_2"))
        .await
        .unwrap();
    assert_eq!(
        store.character("char_1").await.unwrap(),
        Some(first.clone())
    );
    // An id in use is refused and the first record stays.
    let err = store
        .create_character(&character("char_1", "key_9"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    assert_eq!(
        store.character("char_1").await.unwrap(),
        Some(first.clone())
    );
    // Durable: there after the store is opened again.
    let store = store.reopen().await;
    assert_eq!(store.character("char_1").await.unwrap(), Some(first));
    assert_eq!(
        store.character("char_2").await.unwrap().map(|c| c.owner),
        Some("key_2".to_owned())
    );
}
