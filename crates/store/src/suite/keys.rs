//! Keys by id and by hash, and `meta`.

use super::{Fixture, key};
use crate::{KeyStatus, StoreError};

cases!(meta_init_keeps_the_first_value, keys_by_id_and_hash);

async fn meta_init_keeps_the_first_value(store: Fixture) {
    assert_eq!(store.meta("admin").await.unwrap(), None);
    assert_eq!(store.meta_init("admin", b"one").await.unwrap(), b"one");
    assert_eq!(store.meta_init("admin", b"two").await.unwrap(), b"one");
    assert_eq!(store.meta("admin").await.unwrap(), Some(b"one".to_vec()));
    let bytes = [0u8, 255, 1, 0];
    assert_eq!(store.meta_init("secret", &bytes).await.unwrap(), bytes);
    assert_eq!(store.meta("secret").await.unwrap(), Some(bytes.to_vec()));
}

async fn keys_by_id_and_hash(store: Fixture) {
    assert_eq!(store.key_count().await.unwrap(), 0);
    let mut first = key("key_1", "aaa", Some(10));
    first.models = Some(vec!["zeta".into(), "alpha".into()]);
    first.rate_limit = Some(crate::RateLimit { rps: 3, burst: 9 });
    store.create_key(&first).await.unwrap();
    assert_eq!(store.key("key_1").await.unwrap(), Some(first));
    store.create_key(&key("key_2", "bbb", None)).await.unwrap();
    let err = store
        .create_key(&key("key_3", "aaa", None))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::DuplicateKey), "{err}");
    let err = store
        .create_key(&key("key_2", "zzz", None))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    assert_eq!(store.key_count().await.unwrap(), 2);
    assert_eq!(store.key("key_3").await.unwrap(), None);
    assert_eq!(store.key_by_hash("zzz").await.unwrap(), None);

    assert_eq!(
        store.key_by_hash("bbb").await.unwrap().map(|k| k.id),
        Some("key_2".to_owned())
    );
    assert_eq!(store.key_by_hash("ccc").await.unwrap(), None);
    let all: Vec<_> = store
        .keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(all, ["key_1", "key_2"]);

    let k = store
        .update_key("key_1", &|k| {
            k.quota = k.quota.map(|q| q + 5);
            k.status = KeyStatus::Revoked;
            k.hash = "ddd".to_owned();
            k.id = "key_x".to_owned();
        })
        .await
        .unwrap();
    assert_eq!(
        (k.id.as_str(), k.quota, k.status),
        ("key_1", Some(15), KeyStatus::Revoked)
    );
    assert_eq!(store.key("key_1").await.unwrap(), Some(k));
    assert_eq!(store.key("key_x").await.unwrap(), None);
    assert_eq!(store.key_by_hash("aaa").await.unwrap(), None);
    assert_eq!(
        store.key_by_hash("ddd").await.unwrap().map(|k| k.id),
        Some("key_1".to_owned())
    );

    let err = store
        .update_key("key_2", &|k| k.hash = "ddd".to_owned())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::DuplicateKey), "{err}");
    assert_eq!(
        store.key_by_hash("bbb").await.unwrap().map(|k| k.id),
        Some("key_2".to_owned())
    );
    let err = store.update_key("key_9", &|_| {}).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::KeyNotFound(k) if k == "key_9"),
        "{err}"
    );
}
