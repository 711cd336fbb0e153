//! What only the PostgreSQL backend has: its migrations, its connection, its rows. The steps
//! themselves are tested on every backend by the crate's suite (`crate::suite`).

use std::collections::HashSet;

use super::migrate::latest;
use crate::suite::{PgSchema, noop, postgres, task};
use crate::test_util::tid;
use crate::{PgStore, Store, StoreError};

use crate::TaskStatus::{Queued, Running};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_starting_together_migrate_once() {
    let schema = PgSchema::new().await;
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = schema.url.clone();
            tokio::spawn(async move { PgStore::connect(&url, 1).await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    let client = postgres(&schema.url).await;
    let rows = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap();
    let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(versions, (1..=latest()).collect::<Vec<_>>());
    // Starting again changes nothing.
    PgStore::connect(&schema.url, 1).await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, i64::from(latest()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_this_build_is_refused() {
    let schema = PgSchema::new().await;
    PgStore::connect(&schema.url, 1).await.unwrap();
    let client = postgres(&schema.url).await;
    let newer = latest() + 1;
    client
        .execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&newer],
        )
        .await
        .unwrap();
    let err = PgStore::connect(&schema.url, 1).await.unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found, known } if found == newer && known == latest()),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&newer.to_string()) && text.contains(&latest().to_string()),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_be_reached_or_named_is_an_error() {
    let err = PgStore::connect("postgres://postgres@127.0.0.1:1/test?connect_timeout=2", 1)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    let err = PgStore::connect("mysql://nowhere", 1).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_record_is_an_error_not_a_panic() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 2).await.unwrap();
    let client = postgres(&schema.url).await;
    for (n, record) in [r#"{"id": 1}"#, "{}", "[1]"].into_iter().enumerate() {
        let id = tid("video", n as u64);
        let t = task(&id, "key_a", Queued, Some(5));
        store.create_task(&t, &[]).await.unwrap();
        client
            .execute(
                "UPDATE tasks SET record = $2::text::jsonb WHERE id = $1",
                &[&id, &record],
            )
            .await
            .unwrap();
        let err = store.task(&id).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
            "{err}"
        );
        let err = store
            .transition(&id, &[Queued], Running, &noop, &[])
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { tree: "tasks", .. }),
            "{err}"
        );
    }
}

/// Two relay instances (two pools) claiming from one database at once never share a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_claim_the_same_task() {
    let schema = PgSchema::new().await;
    let first = PgStore::connect(&schema.url, 3).await.unwrap();
    let second = PgStore::connect(&schema.url, 3).await.unwrap();
    const TASKS: u64 = 90;
    for n in 0..TASKS {
        let t = task(&tid("gen", n), "k", Queued, Some(n % 5));
        first.create_task(&t, &[]).await.unwrap();
    }
    let claimers: Vec<_> = [first.clone(), first, second.clone(), second]
        .into_iter()
        .map(|store| {
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_due(10, 60_000, 3).await.unwrap();
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|t| t.id));
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
}
