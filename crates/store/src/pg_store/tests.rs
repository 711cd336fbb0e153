//! What only the PostgreSQL backend has: its migrations, its connection, its rows. The steps
//! themselves are tested on every backend by the crate's suite (`crate::suite`).

use std::collections::HashSet;

use super::migrate::latest;
use crate::suite::{
    PgSchema, asset, asset_noop, charge, draft, key, library, noop, postgres, task,
};
use crate::test_util::tid;
use crate::{
    AdminTaskQuery, AssetQuery, AssetStatus, AssetType, LedgerKind, Order, PgStore, Store,
    StoreError, TaskKind, TaskQuery,
};

use crate::TaskStatus::{Queued, Running, Succeeded};

mod session;

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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_the_rows_it_claims_not_the_table() {
    let schema = PgSchema::new().await;
    PgStore::connect(&schema.url, 1).await.unwrap();
    let client = postgres(&schema.url).await;
    // A few thousand tasks, none due, not yet analyzed (as in the first minute after a burst
    // of creations): a claim's generic plan (the one a prepared statement keeps) should reach
    // them through the due index and the primary key alone.
    client
        .batch_execute(
            "INSERT INTO tasks SELECT 'task_' || lpad(g::text, 8, '0'), 'c' || g, 'owner', \
                'video', 'running', 'm', 1000000 + g, repeat('p', 300), \
                jsonb_build_object('id', 'task_' || g, 'x', repeat('r', 400)) \
             FROM generate_series(1, 3000) g; \
             SET plan_cache_mode = force_generic_plan",
        )
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "PREPARE claim(bigint, bigint, bigint) AS {}",
            super::tasks::CLAIM
        ))
        .await
        .unwrap();
    let plan: Vec<String> = client
        .query("EXPLAIN EXECUTE claim(5, 6, 256)", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        plan.iter().all(|line| !line.contains("Seq Scan")),
        "{}",
        plan.join("\n")
    );
}

/// Statements prepared on the one connection of `store`'s pool.
async fn prepared(store: &PgStore) -> usize {
    store.pool.get().await.unwrap().statement_cache.size()
}

/// Every kind of step once, with values of its own (`n`): ids, cursors, filters, limits.
async fn every_step(store: &PgStore, n: u64) {
    let key_id = format!("key_{n}");
    store
        .create_key(&key(&key_id, &format!("hash_{n}"), Some(1000)))
        .await
        .unwrap();
    store.key_by_hash(&format!("hash_{n}")).await.unwrap();
    store.key(&key_id).await.unwrap();
    store
        .update_key(&key_id, &|k| k.hash = format!("{}_new", k.hash))
        .await
        .unwrap();
    let id = tid("video", n);
    let prededuct = [draft(&key_id, &id, LedgerKind::Prededuct, -30 - n as i64)];
    store
        .create_task(&task(&id, &key_id, Queued, Some(n)), &prededuct)
        .await
        .unwrap();
    store
        .transition(&id, &[Queued], Running, &noop, &[])
        .await
        .unwrap();
    let settle = [draft(&key_id, &id, LedgerKind::Settle, n as i64)];
    store
        .transition(&id, &[Running], Succeeded, &noop, &settle)
        .await
        .unwrap();
    store.task(&id).await.unwrap();
    for kind in [None, Some(TaskKind::Video)] {
        for after in [None, Some(id.clone())] {
            for order in [Order::Asc, Order::Desc] {
                let query = TaskQuery {
                    owner: key_id.clone(),
                    kind,
                    after: after.clone(),
                    limit: 1 + n as usize,
                    order,
                };
                store.list_tasks(&query).await.unwrap();
            }
        }
    }
    let query = AdminTaskQuery {
        status: Some(Succeeded),
        owner: Some(key_id.clone()),
        after: Some(id.clone()),
        limit: 5 + n as usize,
        ..AdminTaskQuery::default()
    };
    store.admin_tasks(&query).await.unwrap();
    store
        .charges(&[charge(&key_id, &format!("msg_{n}"), 3)])
        .await
        .unwrap();
    store.ledger(&key_id).await.unwrap();
    store.claim_due(n, 1000, 1 + n as usize).await.unwrap();
    store.unfinished_tasks(1 + n as usize).await.unwrap();
    store.delete_task(&id).await.unwrap();
    let lib = library(&format!("lib_{n}"), &key_id, "gen2");
    store.create_library(&lib).await.unwrap();
    let a = asset(&format!("asset_{n}"), &lib, AssetStatus::Processing, None);
    store.create_asset(&a).await.unwrap();
    store
        .transition_asset(
            &a.id,
            &[AssetStatus::Processing],
            AssetStatus::Active,
            &asset_noop,
        )
        .await
        .unwrap();
    let query = AssetQuery {
        library_id: lib.id.clone(),
        asset_type: Some(AssetType::Image),
        after: Some(a.id.clone()),
        limit: 1 + n as usize,
        ..AssetQuery::default()
    };
    store.list_assets(&query).await.unwrap();
    store
        .list_libraries(&key_id, Some(&lib.id), 1 + n as usize, Order::Asc)
        .await
        .unwrap();
    store.expired_assets(n, 1 + n as usize).await.unwrap();
    store.processing_assets(1 + n as usize).await.unwrap();
    store.delete_asset(&a.id).await.unwrap();
    store.delete_library(&lib.id).await.unwrap();
    store.meta_init(&format!("meta_{n}"), b"v").await.unwrap();
    store.meta(&format!("meta_{n}")).await.unwrap();
}

/// A connection keeps one prepared statement per statement text: texts never carry values, so
/// the same steps with other values prepare nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_are_prepared_once_whatever_their_values() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 1).await.unwrap();
    every_step(&store, 1).await;
    let after_first = prepared(&store).await;
    assert!(after_first > 0);
    for n in 2..5 {
        every_step(&store, n).await;
        assert_eq!(prepared(&store).await, after_first, "round {n}");
    }
}

/// An asset whose library row is gone (no step leaves one so) is deleted all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asset_without_its_library_is_deleted() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 2).await.unwrap();
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).await.unwrap();
    let a = asset("asset_1", &lib, AssetStatus::Processing, None);
    store.create_asset(&a).await.unwrap();
    let client = postgres(&schema.url).await;
    client
        .execute("DELETE FROM libraries WHERE id = $1", &[&lib.id])
        .await
        .unwrap();
    assert_eq!(store.delete_asset(&a.id).await.unwrap(), Some(a));
    assert_eq!(store.asset("asset_1").await.unwrap(), None);
    assert_eq!(store.library("lib_1").await.unwrap(), None);
}

/// Webhooks written before their owner and URL were columns get them from their records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_of_an_earlier_schema_get_their_receivers() {
    let schema = PgSchema::new().await;
    let client = postgres(&schema.url).await;
    client
        .batch_execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for (n, sql) in super::migrate::MIGRATIONS[..5].iter().enumerate() {
        client.batch_execute(sql).await.unwrap();
        let version = i32::try_from(n + 1).unwrap();
        client
            .execute(
                "INSERT INTO schema_migrations (version) VALUES ($1)",
                &[&version],
            )
            .await
            .unwrap();
    }
    let mut ended = task(&tid("video", 1), "key_1", Succeeded, None);
    ended.callback_url = Some("https://hooks.example/a".to_owned());
    let webhook = crate::Webhook::for_final(&ended, 5).unwrap();
    client
        .execute(
            "INSERT INTO webhooks (id, task_id, status, due_ms, record) VALUES ($1, $2, 'pending', 5, $3)",
            &[
                &webhook.id,
                &webhook.task_id,
                &serde_json::to_string(&webhook).unwrap(),
            ],
        )
        .await
        .unwrap();
    let store = PgStore::connect(&schema.url, 1).await.unwrap();
    let mut seen = Vec::new();
    let mut pick = |due: &crate::DueWebhook<'_>| {
        seen.push((due.id.to_owned(), due.owner.to_owned(), due.url.to_owned()));
        crate::WebhookPick::Take
    };
    let taken = store.pick_webhooks(10, 1_000, 10, &mut pick).await.unwrap();
    assert_eq!(
        seen,
        [(
            webhook.id.clone(),
            "key_1".to_owned(),
            "https://hooks.example/a".to_owned()
        )]
    );
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].next_attempt_ms, Some(1_010));
}

/// A creation of `t` taking `price` from key `key_id`, as the committer gets it.
fn creation(t: &crate::Task, key_id: &str, price: i64) -> super::queues::Creation {
    let (task, row) = super::tasks::new_task(t).unwrap();
    let ledger = vec![draft(key_id, &t.id, LedgerKind::Prededuct, -price)];
    super::queues::Creation {
        task,
        row,
        ledger,
        idem: None,
        at: 7,
        done: tokio::sync::oneshot::channel().0,
    }
}

/// A group written blind (no read first) takes each key's quota once, the sum of its
/// pre-deductions, with each entry's balance in the group's order; a group a key does not
/// cover, or whose key is not there, writes nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blind_group_write_takes_the_quota_exactly_or_writes_nothing() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 2).await.unwrap();
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    store.create_key(&key("key_b", "hb", None)).await.unwrap();
    let ids: Vec<String> = (0..6).map(|n| tid("video", n)).collect();
    let group = [
        creation(&task(&ids[0], "key_a", Queued, Some(1)), "key_a", 30),
        creation(&task(&ids[1], "key_b", Queued, Some(1)), "key_b", 5),
        creation(&task(&ids[2], "key_a", Queued, Some(1)), "key_a", 30),
        creation(&task(&ids[3], "key_a", Queued, Some(1)), "key_a", 30),
    ];
    let client = store.client("test").await.unwrap();
    let version = super::group::write_blind(&client, store.commits, &group)
        .await
        .unwrap();
    // The version it answers is the rows' (one transaction wrote them all).
    for id in &ids[..4] {
        let row = client
            .query_one("SELECT xmin::text FROM tasks WHERE id = $1", &[id])
            .await
            .unwrap();
        assert_eq!(version.as_deref(), Some(row.get::<_, &str>(0)));
    }
    let a = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((a.quota, a.quota_used), (Some(10), 90));
    let b = store.key("key_b").await.unwrap().unwrap();
    assert_eq!((b.quota, b.quota_used), (None, 5));
    let balances = crate::suite::ledger_of(&store, "key_a", |e| e.balance_after).await;
    assert_eq!(balances, [Some(70), Some(40), Some(10)]);
    let tasks = crate::suite::ledger_of(&store, "key_a", |e| e.task_id.clone()).await;
    assert_eq!(tasks, [ids[0].clone(), ids[2].clone(), ids[3].clone()]);
    assert_eq!(
        crate::suite::ledger_of(&store, "key_b", |e| e.balance_after).await,
        [None]
    );
    for id in &ids[..4] {
        assert!(store.task(id).await.unwrap().is_some());
    }
    // Over key_a's quota (10 left, 20 asked), and a key that is not there: nothing written.
    // Each refusal on the same connection, again and again: its answer can be back before the
    // `COMMIT` after it is first polled, and the next write must still find the connection out
    // of the failed transaction.
    let refusals = (0..20).flat_map(|_| {
        [
            [
                creation(&task(&ids[4], "key_b", Queued, Some(1)), "key_b", 5),
                creation(&task(&ids[5], "key_a", Queued, Some(1)), "key_a", 20),
            ],
            [
                creation(&task(&ids[4], "key_b", Queued, Some(1)), "key_b", 5),
                creation(&task(&ids[5], "key_x", Queued, Some(1)), "key_x", 1),
            ],
        ]
    });
    for refused in refusals {
        let err = super::group::write_blind(&client, store.commits, &refused)
            .await
            .unwrap_err()
            .into_store();
        assert!(err.to_string().contains("does not cover"), "{err}");
        for id in &ids[4..] {
            assert!(store.task(id).await.unwrap().is_none());
        }
        let b = store.key("key_b").await.unwrap().unwrap();
        assert_eq!(b.quota_used, 5);
        assert_eq!(
            crate::suite::ledger_of(&store, "key_b", |e| e.amount)
                .await
                .len(),
            1
        );
    }
    let a = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((a.quota, a.quota_used), (Some(10), 90));
    // The connection is usable again: its transaction was rolled back.
    super::group::write_blind(
        &client,
        store.commits,
        &[creation(
            &task(&ids[5], "key_a", Queued, Some(1)),
            "key_a",
            10,
        )],
    )
    .await
    .unwrap();
    let a = store.key("key_a").await.unwrap().unwrap();
    assert_eq!((a.quota, a.quota_used), (Some(0), 100));
}

/// A group of creations commits without waiting for its flush (its keys' rows let go at
/// once) where the server lets the session write the logical message whose durable commit
/// follows it, and waits for each commit where it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_commit_early_where_the_server_lets_them_flush_after() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 2).await.unwrap();
    assert_eq!(store.commits, super::txn::Commits::EARLY);
    let client = store.client("test").await.unwrap();
    // A server that refuses the message (here a function of the schema's, found before the
    // catalog's, raising as a refused permission does): the commits are the plain ones.
    let name = &schema.name;
    client
        .batch_execute(&format!(
            "CREATE FUNCTION {name}.pg_logical_emit_message(boolean, text, text) \
             RETURNS pg_lsn LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'permission denied'; END $$; \
             SET search_path = {name}, pg_catalog"
        ))
        .await
        .unwrap();
    assert_eq!(
        super::txn::Commits::probe(&client).await,
        super::txn::Commits::PLAIN
    );
    client
        .batch_execute(&format!(
            "SET search_path = {name}; DROP FUNCTION {name}.pg_logical_emit_message"
        ))
        .await
        .unwrap();
    // Early commits write what they commit, and the flush after them is its own transaction.
    store
        .create_key(&key("key_a", "ha", Some(10)))
        .await
        .unwrap();
    let id = tid("video", 0);
    super::group::write_blind(
        &client,
        store.commits,
        &[creation(&task(&id, "key_a", Queued, Some(1)), "key_a", 4)],
    )
    .await
    .unwrap();
    let status = client
        .query_one("SELECT current_setting('synchronous_commit')", &[])
        .await
        .unwrap();
    assert_eq!(status.get::<_, String>(0), "on");
    assert!(store.task(&id).await.unwrap().is_some());
    assert_eq!(store.key("key_a").await.unwrap().unwrap().quota, Some(6));
}

/// Three relay instances creating tasks at once on one key: exactly as many creations as
/// the quota covers are written, each entry's balance is the one before it less its price,
/// and the quota ends at what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creations_of_several_instances_take_one_quota_exactly() {
    let schema = PgSchema::new().await;
    let stores: Vec<PgStore> =
        futures_util::future::join_all((0..3).map(|_| PgStore::connect(&schema.url, 4)))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    stores[0]
        .create_key(&key("key_a", "ha", Some(500)))
        .await
        .unwrap();
    const TASKS: u64 = 75;
    let creations = (0..TASKS).map(|n| {
        let store = stores[n as usize % 3].clone();
        tokio::spawn(async move {
            let t = task(&tid("video", n), "key_a", Queued, Some(1));
            let ledger = [draft("key_a", &t.id, LedgerKind::Prededuct, -10)];
            store.create_task(&t, &ledger).await
        })
    });
    let mut written = 0;
    for answer in futures_util::future::join_all(creations).await {
        match answer.unwrap() {
            Ok(()) => written += 1,
            Err(StoreError::InsufficientQuota { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(written, 50);
    let a = stores[1].key("key_a").await.unwrap().unwrap();
    assert_eq!((a.quota, a.quota_used), (Some(0), 500));
    let balances = crate::suite::ledger_of(&stores[2], "key_a", |e| e.balance_after).await;
    let expected: Vec<Option<i64>> = (0..50).rev().map(|n| Some(n * 10)).collect();
    assert_eq!(balances, expected);
}

/// A step starts from the row its instance last claimed or wrote, without reading it; when
/// another instance changed the row since, the write finds it changed and the step reads it
/// again: the other's change is kept, not written over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_from_a_row_another_instance_changed_keeps_that_change() {
    let schema = PgSchema::new().await;
    let first = PgStore::connect(&schema.url, 2).await.unwrap();
    let second = PgStore::connect(&schema.url, 2).await.unwrap();
    let id = tid("video", 1);
    first
        .create_task(&task(&id, "key_a", Queued, Some(1)), &[])
        .await
        .unwrap();
    let claimed = first.claim_due(10, 60_000, 1).await.unwrap();
    assert_eq!(claimed.len(), 1);
    // The first instance keeps the row as claimed; the second changes it.
    second
        .transition(&id, &[Queued], Queued, &|t| t.attempts += 5, &[])
        .await
        .unwrap();
    let moved = first
        .transition(&id, &[Queued], Running, &|t| t.attempts += 1, &[])
        .await
        .unwrap();
    assert_eq!(moved.attempts, 6);
    // Its own write is kept: the next step starts from it, and still sees every change.
    let again = first
        .transition(&id, &[Running], Running, &|t| t.attempts += 1, &[])
        .await
        .unwrap();
    assert_eq!(again.attempts, 7);
    second
        .transition(&id, &[Running], Running, &|t| t.progress = 40, &[])
        .await
        .unwrap();
    // A kept row whose status no longer allows the move is read again before refusing.
    let err = first
        .transition(&id, &[Queued], Running, &noop, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::WrongStatus { .. }), "{err}");
    let last = first
        .transition(&id, &[Running], Running, &|t| t.attempts += 1, &[])
        .await
        .unwrap();
    assert_eq!((last.attempts, last.progress), (8, 40));
    assert_eq!(second.task(&id).await.unwrap().unwrap().attempts, 8);
}

/// The instance that creates a task keeps its row as written, with its version: the task's
/// first step (the engine's, which stored it leased to itself) writes it without reading it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_task_is_kept_with_its_version() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 2).await.unwrap();
    // Relays may share it: each stores its new tasks claimed by itself.
    assert!(store.shared());
    store.create_key(&key("key_a", "ha", None)).await.unwrap();
    let id = tid("video", 1);
    let created = task(&id, "key_a", Queued, Some(1));
    store
        .create_task(&created, &[draft("key_a", &id, LedgerKind::Prededuct, -5)])
        .await
        .unwrap();
    let client = store.client("test").await.unwrap();
    let row = client
        .query_one("SELECT xmin::text FROM tasks WHERE id = $1", &[&id])
        .await
        .unwrap();
    let kept = store.versions.take(&id).expect("kept");
    assert_eq!(kept.version, row.get::<_, &str>(0));
    assert_eq!(kept.task, created);
}
