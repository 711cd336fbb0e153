//! What every PostgreSQL step shares: its statements (each prepared once per connection), a
//! step's failure (the step's own [`StoreError`], or the database's), running a transaction
//! again when PostgreSQL asks for it (a serialization failure or a deadlock), records as JSON
//! (one that does not decode is [`StoreError::Corrupt`]), numbers between `u64` and `bigint`,
//! and the rule for ids.

use std::future::Future;

use deadpool_postgres::{GenericClient, Transaction};
use serde::de::DeserializeOwned;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::StoreError;

/// Times a transaction is run when PostgreSQL keeps answering that it must be run again.
const ATTEMPTS: usize = 5;

/// How a transaction that locks rows other steps wait on (a key's quota) commits.
///
/// A commit holds its row locks until its WAL record is flushed: a key's row, which every
/// creation of the key's tasks, every settlement or refund and every charge locks, would be
/// held through one flush after another, and the steps of several relays sharing the database
/// would take turns at it. Such a transaction runs with `synchronous_commit` off, so that its
/// commit lets the locks go at once, and is followed, before anyone is answered, by a
/// transaction of its own that writes one WAL record (an empty logical message) and commits as
/// the session's `synchronous_commit` says: its flush (or its replication, where the server
/// waits for a standby) covers every record before it, the early commit's among them. A caller
/// is answered only after both, so nothing it was told is written can be lost; what a crash
/// between the two loses, nobody was answered for. Where the server refuses the message
/// ([`Commits::probe`]), such transactions commit the plain way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Commits {
    early: bool,
}

/// Sent in a transaction: its commit does not wait for its flush.
macro_rules! let_go {
    () => {
        "SET LOCAL synchronous_commit TO off"
    };
}
/// A transaction of its own whose durable commit covers every commit before it.
macro_rules! flush {
    () => {
        "SELECT pg_logical_emit_message(true, 'relay', 'flush')"
    };
}
const LET_GO: &str = let_go!();
const FLUSH: &str = flush!();

impl Commits {
    pub(super) const EARLY: Commits = Commits { early: true };
    pub(super) const PLAIN: Commits = Commits { early: false };

    /// The early commits where the server lets this session write the message that flushes
    /// them, else the plain ones.
    pub(super) async fn probe(client: &deadpool_postgres::Client) -> Commits {
        match client.simple_query(FLUSH).await {
            Ok(_) => Commits::EARLY,
            Err(e) => {
                tracing::warn!(
                    "PostgreSQL: steps hold their key's row until their commit is flushed \
                     (pg_logical_emit_message refused: {})",
                    backend("probe", &e)
                );
                Commits::PLAIN
            }
        }
    }

    /// A transaction's `BEGIN`, as one message with what makes its commit early.
    pub(super) fn begin(self) -> &'static str {
        if self.early {
            concat!("BEGIN; ", let_go!())
        } else {
            "BEGIN"
        }
    }

    /// Its `COMMIT`, as one message with the flush's transaction after it.
    pub(super) fn commit(self) -> &'static str {
        if self.early {
            concat!("COMMIT; ", flush!())
        } else {
            "COMMIT"
        }
    }

    /// In a transaction begun otherwise: makes its commit early. Sent when first polled, so
    /// that it goes out with the statement polled after it, in one round trip.
    pub(super) async fn let_go(self, tx: &Transaction<'_>, what: &str) -> Result<(), Fault> {
        if self.early {
            tx.batch_execute(LET_GO).await.sql(what)?;
        }
        Ok(())
    }

    /// After such a transaction's commit, on its connection: returns once its commit is as
    /// durable as a plain one would have been.
    pub(super) async fn flushed(
        self,
        client: &deadpool_postgres::Client,
        what: &str,
    ) -> Result<(), Fault> {
        if self.early {
            client.batch_execute(FLUSH).await.sql(what)?;
        }
        Ok(())
    }
}

/// Why an attempt at a step failed.
#[derive(Debug)]
pub(super) enum Fault {
    /// The step's own answer (not found, wrong status, quota...): final.
    Step(StoreError),
    /// The database's: `what` names the statement.
    Db {
        what: String,
        error: tokio_postgres::Error,
    },
}

impl From<StoreError> for Fault {
    fn from(e: StoreError) -> Fault {
        Fault::Step(e)
    }
}

impl Fault {
    /// PostgreSQL rolled the transaction back so that it may be run again.
    fn retryable(&self) -> bool {
        match self {
            Fault::Db { error, .. } => error.code().is_some_and(|c| {
                *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
            }),
            Fault::Step(_) => false,
        }
    }

    pub(super) fn into_store(self) -> StoreError {
        match self {
            Fault::Step(e) => e,
            Fault::Db { what, error } => backend(&what, &error),
        }
    }

    /// The constraint a unique violation broke, if that is what this is.
    pub(super) fn unique_violation(&self) -> Option<&str> {
        match self {
            Fault::Db { error, .. } => error
                .as_db_error()
                .filter(|db| *db.code() == SqlState::UNIQUE_VIOLATION)
                .and_then(|db| db.constraint()),
            Fault::Step(_) => None,
        }
    }
}

/// The database's error as the store's; `what` names what was being done.
pub(super) fn backend(what: &str, error: &tokio_postgres::Error) -> StoreError {
    match error.as_db_error() {
        Some(db) => StoreError::Backend(format!("{what}: {db}")),
        None => match std::error::Error::source(error) {
            Some(source) => StoreError::Backend(format!("{what}: {error}: {source}")),
            None => StoreError::Backend(format!("{what}: {error}")),
        },
    }
}

/// A database result inside a step: its error is a [`Fault::Db`] naming `what`.
pub(super) trait Sql<T> {
    fn sql(self, what: &str) -> Result<T, Fault>;
}

impl<T> Sql<T> for Result<T, tokio_postgres::Error> {
    fn sql(self, what: &str) -> Result<T, Fault> {
        self.map_err(|error| Fault::Db {
            what: what.to_owned(),
            error,
        })
    }
}

/// A statement's parameters.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// `sql` prepared on `client`'s connection: parsed by the server on the connection's first use
/// of it, then taken from the connection's cache (a statement given as text would cost a parse
/// and a round trip more each time). Every statement text is a constant, or built from a
/// handful of fixed pieces (a sort order, which filters are present), never from values, so
/// each connection caches a few dozen statements at most.
async fn prepared(client: &impl GenericClient, what: &str, sql: &str) -> Result<Statement, Fault> {
    client.prepare_cached(sql).await.sql(what)
}

/// The rows of `sql`, on a pooled connection (one statement, no transaction) or in a step's
/// transaction.
pub(super) async fn query(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, Fault> {
    let statement = prepared(client, what, sql).await?;
    client.query(&statement, params).await.sql(what)
}

/// The row of `sql`, if it returned one (more than one is an error).
pub(super) async fn query_opt(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, Fault> {
    let statement = prepared(client, what, sql).await?;
    client.query_opt(&statement, params).await.sql(what)
}

/// The one row of `sql` (none, or more than one, is an error).
pub(super) async fn query_one(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<Row, Fault> {
    let statement = prepared(client, what, sql).await?;
    client.query_one(&statement, params).await.sql(what)
}

/// The number of rows `sql` wrote.
pub(super) async fn execute(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, Fault> {
    let statement = prepared(client, what, sql).await?;
    client.execute(&statement, params).await.sql(what)
}

/// Runs `attempt` (one transaction, begun and committed by it) until it commits, fails for
/// good, or PostgreSQL has asked [`ATTEMPTS`] times for it to be run again.
pub(super) async fn retry<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Fault>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await {
            Ok(t) => return Ok(t),
            Err(fault) if fault.retryable() && tries < ATTEMPTS => {
                tracing::debug!(step = what, tries, "transaction to be run again");
            }
            Err(fault) => return Err(fault.into_store()),
        }
    }
}

pub(super) fn decode<T: DeserializeOwned>(
    table: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt {
        tree: table,
        source,
    })
}

pub(super) fn corrupt(table: &'static str, msg: &str) -> StoreError {
    StoreError::Corrupt {
        tree: table,
        source: <serde_json::Error as serde::de::Error>::custom(msg),
    }
}

/// `value` as JSON, for a `jsonb` column.
pub(super) fn encode<T: serde::Serialize>(
    what: &str,
    value: &T,
) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Backend(format!("encode {what}: {e}")))
}

/// A time or count as a `bigint`: one past what a `bigint` holds is the largest it holds.
pub(super) fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `bigint` read back as a time or count (a negative one, which no step writes, is 0).
pub(super) fn unbig(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Ids are never empty, and PostgreSQL's text cannot hold NUL: the same ids the embedded
/// backend refuses.
pub(super) fn check_id(what: &str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.contains('\0') {
        return Err(StoreError::Backend(format!(
            "{what} {id:?} is empty or contains NUL"
        )));
    }
    Ok(())
}

/// The time of a ledger entry, in seconds since the epoch.
pub(super) fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The conditions of a `WHERE` clause that are present, with their parameters: a listing's
/// filters and cursor are written into its text only when given, so each variant is planned
/// for what it filters on (`owner = $1 AND id < $2` reads the index from the cursor on, where
/// `($2 IS NULL OR id < $2)` would, in a plan cached for every value, scan from the start).
/// The variants are a few per listing: which filters are present, not their values.
#[derive(Default)]
pub(super) struct Filter<'a> {
    sql: String,
    params: Vec<&'a (dyn ToSql + Sync)>,
}

impl<'a> Filter<'a> {
    /// Adds `condition`, whose `?`s are its `values` in order.
    pub(super) fn and(&mut self, condition: &str, values: &[&'a (dyn ToSql + Sync)]) {
        self.sql.push_str(if self.sql.is_empty() {
            " WHERE "
        } else {
            " AND "
        });
        let mut values = values.iter().peekable();
        for c in condition.chars() {
            match values.next_if(|_| c == '?') {
                Some(value) => {
                    let placeholder = self.param(*value);
                    self.sql.push_str(&placeholder);
                }
                None => self.sql.push(c),
            }
        }
    }

    /// Adds `condition` when `value` is given.
    pub(super) fn and_some<T: ToSql + Sync>(&mut self, condition: &str, value: &'a Option<T>) {
        if let Some(value) = value {
            self.and(condition, &[value]);
        }
    }

    /// The next parameter's placeholder (for a `LIMIT` after the clause), and its value.
    pub(super) fn param(&mut self, value: &'a (dyn ToSql + Sync)) -> String {
        self.params.push(value);
        format!("${}", self.params.len())
    }

    /// The clause (empty, or starting with ` WHERE `) and its parameters.
    pub(super) fn finish(self) -> (String, Vec<&'a (dyn ToSql + Sync)>) {
        (self.sql, self.params)
    }
}
