//! Keys by id and by hash, and `meta`.

use super::key;
use crate::test_util::open_store;
use crate::{KeyStatus, Store, StoreError};

#[test]
fn meta_init_keeps_the_first_value() {
    let (_dir, store) = open_store();
    assert_eq!(store.meta("admin").unwrap(), None);
    assert_eq!(store.meta_init("admin", b"one").unwrap(), b"one");
    assert_eq!(store.meta_init("admin", b"two").unwrap(), b"one");
    assert_eq!(store.meta("admin").unwrap(), Some(b"one".to_vec()));
    assert_eq!(store.meta_init("secret", b"s").unwrap(), b"s");
}

#[test]
fn keys_by_id_and_hash() {
    let (_dir, store) = open_store();
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
