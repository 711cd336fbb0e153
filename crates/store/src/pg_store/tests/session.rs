//! What the store's sessions start with: the settings every connection gets before the URL's
//! own options, and the plans they keep for the statements that find tasks by their ids.

use crate::PgStore;
use crate::suite::{PgSchema, postgres};

/// The plans `client` makes for the claim and the transitions' group write, as `EXPLAIN`
/// prints them, one line each.
async fn plans(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .batch_execute(&format!(
            "PREPARE claim(bigint, bigint, bigint) AS {}; \
             PREPARE move(text[], text[], text[], bigint[], text[], jsonb[], text[]) AS {}",
            super::super::tasks::CLAIM,
            super::super::moves::MOVE
        ))
        .await
        .unwrap();
    let mut lines = Vec::new();
    for explain in [
        "EXPLAIN EXECUTE claim(5, 6, 256)",
        "EXPLAIN EXECUTE move('{a,b}', '{queued,queued}', '{m,m}', '{1,2}', '{p,p}', \
            '{\"{}\",\"{}\"}', '{1,2}')",
    ] {
        let rows = client.query(explain, &[]).await.unwrap();
        lines.extend(rows.iter().map(|row| row.get::<_, String>(0)));
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_made_on_a_new_table_still_find_rows_by_their_ids() {
    let schema = PgSchema::new().await;
    let store = PgStore::connect(&schema.url, 1).await.unwrap();
    // The store's own session, on a table just made: PostgreSQL takes it for ten pages, and a
    // plan made now is kept for every execution after, however many tasks come.
    let client = store.pool.get().await.unwrap();
    let settings: Vec<String> = client
        .query(
            "SELECT current_setting('enable_seqscan') UNION ALL \
             SELECT current_setting('plan_cache_mode') UNION ALL \
             SELECT current_setting('search_path')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    // The URL's own options (the schema's search_path) are kept beside the session's.
    assert_eq!(
        settings,
        ["off", "force_generic_plan", schema.name.as_str()]
    );
    let plan = plans(&client).await;
    assert!(
        plan.iter().all(|line| !line.contains("Seq Scan on tasks")),
        "{}",
        plan.join("\n")
    );
    assert!(
        plan.iter().any(|line| line.contains("tasks_pkey")),
        "{}",
        plan.join("\n")
    );
    // Without them, what this test would find: the transitions' write hashed the table.
    let bare = postgres(&schema.url).await;
    bare.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let plan = plans(&bare).await;
    assert!(
        plan.iter().any(|line| line.contains("Seq Scan on tasks")),
        "{}",
        plan.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_urls_own_options_override_the_sessions() {
    let schema = PgSchema::new().await;
    let url = format!("{}%20-c%20enable_seqscan%3Don", schema.url);
    let store = PgStore::connect(&url, 1).await.unwrap();
    let client = store.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT current_setting('enable_seqscan'), current_setting('search_path')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("on".to_owned(), schema.name.clone())
    );
}
