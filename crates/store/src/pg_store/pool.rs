//! [`PgStore`] itself: the pool of connections, opening it (and migrating the schema), and
//! a connection for a step.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, QueueMode, RecyclingMethod};
use tokio_postgres::NoTls;

use super::migrate::migrate;
use super::queues::{Committer, Mover};
use super::txn::Commits;
use super::versions::Versions;
use crate::StoreError;

/// How long opening a connection may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection's session starts with, before the URL's own `options` (which can
/// override it). The relay finds rows by their keys, with statements it prepares once per
/// connection:
///
/// - sequential scans off: a statement's plan stays an index's however small the table was
///   when it was made. PostgreSQL takes a table never analyzed for ten pages, and a plan made
///   then (a connection keeps it until the table is analyzed, a minute or more after it
///   filled) scanned or hashed every task for each group of transitions written: its cost
///   grew with the table. A statement that reads a whole table anyway turns them on for its
///   own transaction.
/// - generic plans: a statement is planned once, not at each execution. Left to choose, the
///   server planned the transitions' statement again for every group (its estimate for a
///   few rows under the generic plan's ten), which cost about as much as running it.
const SESSION_OPTIONS: &str = "-c enable_seqscan=off -c plan_cache_mode=force_generic_plan";

/// The store on a PostgreSQL server: a pool of connections to one database (and schema, the
/// first of the connections' `search_path`), shared by any number of relay instances.
///
/// Connections are plain TCP or a Unix socket (no TLS yet): keep the database on the same
/// host or a private network.
#[derive(Clone)]
pub struct PgStore {
    pub(super) pool: Pool,
    /// Where task creations go to share a commit ([`super::group`]); `None` in the
    /// committer's own store, which writes them.
    pub(super) committer: Option<Committer>,
    /// Where transitions' compare-and-swap writes go to share a commit ([`super::moves`]);
    /// `None` in the writer's own store.
    pub(super) mover: Option<Mover>,
    /// The task rows this store created, claimed or moved last, with their versions: a transition
    /// starts from one without reading it ([`super::versions`]).
    pub(super) versions: Arc<Versions>,
    /// How the transactions that lock a key's row begin and commit.
    pub(super) commits: Commits,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// The pool of at most `pool_size` connections (at least 1) to the database at `url`, its
    /// schema brought up to date, without the committers [`PgStore::connect`] starts.
    pub(super) async fn open(url: &str, pool_size: usize) -> Result<PgStore, StoreError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Backend(format!("PostgreSQL URL: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("relay");
        }
        let options = match config.get_options() {
            Some(theirs) => format!("{SESSION_OPTIONS} {theirs}"),
            None => SESSION_OPTIONS.to_owned(),
        };
        config.options(&options);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .queue_mode(QueueMode::Lifo)
            .build()
            .map_err(|e| StoreError::Backend(format!("PostgreSQL pool: {e}")))?;
        let store = PgStore {
            pool,
            committer: None,
            mover: None,
            versions: Arc::default(),
            commits: Commits::PLAIN,
        };
        let mut client = store.client("connect").await?;
        migrate(&mut client).await?;
        let commits = Commits::probe(&client).await;
        drop(client);
        Ok(PgStore { commits, ..store })
    }

    /// A connection of the pool; `what` names the step in an error.
    pub(super) async fn client(&self, what: &str) -> Result<Client, StoreError> {
        self.pool
            .get()
            .await
            .map_err(|e| StoreError::Backend(format!("{what}: PostgreSQL connection: {e}")))
    }
}
