//! The schema's versions: numbered SQL files applied in order, each in one transaction with
//! its row in `schema_migrations`, under an advisory lock (per schema) so that instances
//! starting at once apply each one once. A database at a version above the newest this build
//! knows is refused: its tables may mean something this build does not do.

use deadpool_postgres::Client;

use super::txn::{Fault, Sql};
use crate::StoreError;

/// Every migration, in order: version `n` is `MIGRATIONS[n - 1]`.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_webhooks.sql"),
    include_str!("migrations/0003_idempotency.sql"),
    include_str!("migrations/0004_batches.sql"),
    include_str!("migrations/0005_characters.sql"),
    include_str!("migrations/0006_webhook_receivers.sql"),
    include_str!("migrations/0007_characters_by_owner.sql"),
    include_str!("migrations/0008_fewer_reads.sql"),
];

/// The newest version this build knows.
pub(super) fn latest() -> i32 {
    i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX)
}

/// Brings the schema of the connection's `search_path` up to [`latest`].
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    loop {
        match step(client).await {
            Ok(true) => continue,
            Ok(false) => return Ok(()),
            Err(fault) => return Err(fault.into_store()),
        }
    }
}

/// One transaction: waits for the lock, reads the version, applies the next migration if one
/// is missing. Whether one was applied.
async fn step(client: &mut Client) -> Result<bool, Fault> {
    let tx = client.transaction().await.sql("migrate: begin")?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('relay store migrations'), \
         hashtext(coalesce(current_schema(), '')))",
        &[],
    )
    .await
    .sql("migrate: take the migration lock")?;
    // Quietly: the table is there on every step but the first (no NOTICE in the log).
    tx.batch_execute(
        "SET LOCAL client_min_messages = warning;
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .sql("migrate: create schema_migrations")?;
    let row = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await
        .sql("migrate: read the schema version")?;
    let found: i32 = row.try_get(0).sql("migrate: read the schema version")?;
    let known = latest();
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known }.into());
    }
    let Some(sql) = usize::try_from(found).ok().and_then(|n| MIGRATIONS.get(n)) else {
        tx.commit().await.sql("migrate: commit")?;
        return Ok(false);
    };
    let version = found + 1;
    let what = format!("migrate: apply version {version}");
    tx.batch_execute(sql).await.sql(&what)?;
    tx.execute(
        "INSERT INTO schema_migrations (version) VALUES ($1)",
        &[&version],
    )
    .await
    .sql(&what)?;
    tx.commit().await.sql(&what)?;
    tracing::info!(version, "store schema migrated");
    Ok(true)
}
