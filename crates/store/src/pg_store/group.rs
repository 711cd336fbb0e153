//! Group commit of task creations: concurrent [`crate::Store::create_task`] (and
//! `create_task_idempotent`) calls of one store share one transaction, and so one commit (one
//! WAL flush) and one lock of each API key's row, instead of one each.
//!
//! One committer per store takes every creation waiting (up to [`MAX_GROUP`]). A group that
//! only takes from quotas and completes no idempotency record is written blind, in one round
//! trip (`BEGIN`, one statement, `COMMIT`): the statement takes each key's quota less the sum
//! of the group's pre-deductions on it only if the quota covers it, and refuses (writing
//! nothing) when one does not, or when a task id or ledger entry is in the way. Otherwise, or
//! after a refusal, the group is written in two round trips: `BEGIN` sent with the reads (the
//! keys the pre-deductions draw on, in id order, and the idempotency records, both locked; the
//! ledger entries and tasks already there under the new tasks' ids), then one statement
//! writing the tasks, the ledger entries, the keys and the idempotency records together, sent
//! with `COMMIT`. Which creations are written is
//! decided between the reads and the write, creation by creation in the order they came, with
//! the single step's checks in its order (the idempotency record still held, the task id
//! unused, each entry new and within its key's quota): a creation that fails one is answered
//! with its error and writes nothing, the others are written. Each caller is answered after
//! the commit, so a creation returns exactly when its task, its entries and its record are
//! durable, as the single step would. The group's commit does not wait for its WAL flush (its
//! keys' rows are let go at once, for the groups of other relays sharing the database); a
//! transaction sent with it waits for a flush that covers it ([`Commits`]).
//!
//! A group the database fails (a lost connection, a deadlock, a conflict the reads could not
//! see) is rolled back whole and each of its creations then runs as a single step of its own
//! ([`single`]), which retries what PostgreSQL asks to be retried: a group never answers for
//! a creation it did not write, nor writes one half.

use std::collections::{HashMap, HashSet};

use tokio::sync::mpsc;
use tokio_postgres::types::{Json, ToSql};

use super::ledger::{self, LEDGER_ID_PREFIX};
use super::names::{task_kind, task_status};
use super::pool::PgStore;
use super::queues::{Committer, Creation};
use super::tasks;
use super::txn::{Commits, Fault, Sql, big, decode, retry};
use crate::idempotency::held_by;
use crate::{IdemRecord, Key, LedgerDraft, StoreError};

/// The most creations one transaction writes.
pub(super) const MAX_GROUP: usize = 256;

/// Starts the committer of `store` (a store without one of its own: its connections only).
pub(super) fn start(store: PgStore) -> Committer {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(store, rx));
    tx
}

/// Commits the creations as they come, every one waiting at once in one group, until every
/// sender is gone.
async fn run(store: PgStore, mut rx: mpsc::UnboundedReceiver<Creation>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while rx.recv_many(&mut group, MAX_GROUP).await > 0 {
        commit(&store, std::mem::take(&mut group)).await;
    }
}

async fn commit(store: &PgStore, group: Vec<Creation>) {
    match attempt(store, &group).await {
        Ok((answers, version)) => {
            for (creation, answer) in group.into_iter().zip(answers) {
                // The row as written: its first transition (the engine's, this relay having
                // stored it leased to itself) writes it without reading it.
                if let (Ok(()), Some(version)) = (&answer, &version) {
                    store.versions.put(version.clone(), creation.task);
                }
                // A caller that went away has its answer in the store all the same.
                let _ = creation.done.send(answer);
            }
        }
        Err(fault) => {
            if group.len() > 1 {
                tracing::debug!(
                    creations = group.len(),
                    "task creations written one by one: {}",
                    fault.into_store()
                );
            }
            let singles = group.into_iter().map(|creation| async move {
                let answer = single(store, &creation).await;
                let _ = creation.done.send(answer);
            });
            futures_util::future::join_all(singles).await;
        }
    }
}

/// A creation as a step of its own: its record completed, the task written, its entries
/// applied, in one transaction (run again when PostgreSQL asks).
pub(super) async fn single(store: &PgStore, creation: &Creation) -> Result<(), StoreError> {
    let what = format!("create task {}", creation.task.id);
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        store.commits.let_go(&tx, what).await?;
        if let Some((ticket, answer)) = &creation.idem {
            super::idempotency::complete(&tx, ticket, answer).await?;
        }
        tasks::insert(&tx, &creation.task, &creation.row).await?;
        ledger::apply(&tx, &creation.ledger, creation.at).await?;
        tx.commit().await.sql(what)?;
        store.commits.flushed(&client, what).await
    })
    .await
}

/// What the group's reads found, and what the creations accepted so far leave.
#[derive(Default)]
struct Found {
    keys: HashMap<String, Key>,
    records: HashMap<(String, String), IdemRecord>,
    /// Ledger entries, `(task_id, kind)`, there or to be written.
    entries: HashSet<(String, &'static str)>,
    /// Task ids in use or to be written.
    tasks: HashSet<String>,
}

/// A ledger entry to be written.
struct Entry<'a> {
    draft: &'a LedgerDraft,
    balance_after: Option<i64>,
    at: u64,
}

/// What the group writes.
#[derive(Default)]
struct Writes<'a> {
    tasks: Vec<&'a Creation>,
    entries: Vec<Entry<'a>>,
    keys: HashSet<String>,
    records: Vec<IdemRecord>,
}

/// The statement writing a group ([`write`]); its one row is the new tasks' version (the
/// transaction's id, their `xmin`), none when it writes no task.
const WRITE: &str = "WITH new_tasks AS ( \
        INSERT INTO tasks (id, created, owner, kind, status, model, due_ms, params, record) \
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::bigint[], $8::text[], $9::jsonb[]) \
        RETURNING xmin::text AS version \
     ), quota AS ( \
        UPDATE keys SET record = k.record \
        FROM unnest($10::text[], $11::jsonb[]) AS k(id, record) WHERE keys.id = k.id \
     ), answered AS ( \
        UPDATE idempotency SET created_ms = i.created_ms, record = i.record \
        FROM unnest($12::text[], $13::text[], $14::bigint[], $15::text[]) \
            AS i(key_id, idem_key, created_ms, record) \
        WHERE idempotency.key_id = i.key_id AND idempotency.idem_key = i.idem_key \
     ), entries AS ( \
        INSERT INTO ledger (seq, id, key_id, task_id, kind, amount, balance_after, at) \
        SELECT nextval('ledger_seq'), e.id, e.key_id, e.task_id, e.kind, e.amount, \
            e.balance_after, e.at \
        FROM (SELECT * FROM unnest($16::text[], $17::text[], $18::text[], $19::text[], \
            $20::bigint[], $21::bigint[], $22::bigint[]) WITH ORDINALITY \
            AS u(id, key_id, task_id, kind, amount, balance_after, at, ord) \
           ORDER BY ord) e \
     ) \
     SELECT version FROM new_tasks LIMIT 1";

/// The statement writing a group in one round trip, deciding nothing before ([`write_blind`]):
/// the tasks, the ledger entries (each with its balance after it, numbered in the group's
/// order) and each key's quota less the sum of its pre-deductions, taken only if it covers
/// it (a key without a quota covers any), under the keys' row locks taken in id order. A key
/// that does not cover its sum, or is not there, fails the statement (`relay_refuse`), and
/// the transaction is rolled back. Its one row is the new tasks' version.
const WRITE_BLIND: &str = "WITH drafts AS ( \
        SELECT * FROM unnest($10::text[], $11::text[], $12::text[], $13::text[], \
            $14::bigint[], $15::bigint[]) WITH ORDINALITY \
            AS d(id, key_id, task_id, kind, amount, at, ord) \
     ), totals AS ( \
        SELECT key_id, sum(amount)::bigint AS total FROM drafts GROUP BY key_id \
     ), locked AS ( \
        SELECT id FROM keys WHERE id IN (SELECT key_id FROM totals) ORDER BY id FOR UPDATE \
     ), quota AS ( \
        UPDATE keys SET record = keys.record || jsonb_build_object( \
            'quota', (keys.record->>'quota')::bigint + t.total, \
            'quota_used', (keys.record->>'quota_used')::bigint - t.total) \
        FROM totals t, locked l \
        WHERE keys.id = t.key_id AND keys.id = l.id \
            AND ((keys.record->>'quota') IS NULL \
                OR (keys.record->>'quota')::bigint + t.total >= 0) \
        RETURNING keys.id, (keys.record->>'quota')::bigint AS after, t.total \
     ), new_tasks AS ( \
        INSERT INTO tasks (id, created, owner, kind, status, model, due_ms, params, record) \
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::bigint[], $8::text[], $9::jsonb[]) \
        RETURNING xmin::text AS version \
     ), entries AS ( \
        INSERT INTO ledger (seq, id, key_id, task_id, kind, amount, balance_after, at) \
        SELECT nextval('ledger_seq'), e.id, e.key_id, e.task_id, e.kind, e.amount, \
            e.balance_after, e.at \
        FROM (SELECT d.id, d.key_id, d.task_id, d.kind, d.amount, \
                q.after - q.total + sum(d.amount) OVER (PARTITION BY d.key_id ORDER BY d.ord) \
                    AS balance_after, \
                d.at, d.ord \
              FROM drafts d JOIN quota q ON q.id = d.key_id ORDER BY d.ord) e \
     ) \
     SELECT CASE WHEN (SELECT count(*) FROM quota) < (SELECT count(*) FROM totals) \
        THEN relay_refuse('a key does not cover its pre-deductions, or is not there')::text \
        ELSE (SELECT version FROM new_tasks LIMIT 1) END";

const WHAT: &str = "create tasks";

/// The group in one transaction: each creation's answer and the version of the rows written,
/// or the database's failure of all (the transaction rolled back; a connection that cannot
/// roll back leaves the pool).
///
/// A group that only takes from quotas and completes no idempotency record is first written
/// blind, in one round trip ([`write_blind`]): every creation is written when every key
/// covers what the group takes from it and nothing is in the way (an id in use, an entry
/// there, which the constraints refuse). When not, nothing was written, and the group is
/// decided creation by creation after reading what it checks ([`attempt_on`]).
async fn attempt(store: &PgStore, group: &[Creation]) -> Result<Answers, Fault> {
    let client = store.client(WHAT).await?;
    if blind(group) {
        match write_blind(&client, store.commits, group).await {
            Ok(version) => return Ok((group.iter().map(|_| Ok(())).collect(), version)),
            Err(fault) => tracing::debug!(
                creations = group.len(),
                "task creations decided one by one: {}",
                fault.into_store()
            ),
        }
    }
    let answers = attempt_on(&client, store.commits, group).await;
    if answers.is_err() && client.batch_execute("ROLLBACK").await.is_err() {
        drop(deadpool_postgres::Object::take(client));
    }
    answers
}

/// [`attempt`] on `client`, in two round trips: `BEGIN` sent with the reads, the write with
/// `COMMIT` (a `COMMIT` after a failed write rolls back: the write's error is the answer).
async fn attempt_on(
    client: &deadpool_postgres::Client,
    commits: Commits,
    group: &[Creation],
) -> Result<Answers, Fault> {
    // Prepared before anything is sent, so that each request of the pipelines below goes out
    // when it is first polled, in order.
    let write_statement = client.prepare_cached(WRITE).await.sql(WHAT)?;
    let mut key_ids: Vec<&str> = group
        .iter()
        .flat_map(|c| c.ledger.iter().map(|d| d.key_id.as_str()))
        .collect();
    key_ids.sort_unstable();
    key_ids.dedup();
    let task_ids: Vec<&str> = group.iter().map(|c| c.task.id.as_str()).collect();
    let drafted: Vec<&str> = group
        .iter()
        .flat_map(|c| c.ledger.iter().map(|d| d.task_id.as_str()))
        .collect();
    let (idem_owners, idem_keys): (Vec<&str>, Vec<&str>) = group
        .iter()
        .filter_map(|c| c.idem.as_ref())
        .map(|(t, _)| (t.key_id.as_str(), t.key.as_str()))
        .unzip();
    let reads = [
        client
            .prepare_cached(
                "SELECT id, record::text FROM keys WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            )
            .await
            .sql(WHAT)?,
        client
            .prepare_cached(
                "SELECT record FROM idempotency WHERE (key_id, idem_key) IN \
                 (SELECT * FROM unnest($1::text[], $2::text[])) FOR UPDATE",
            )
            .await
            .sql(WHAT)?,
        client
            .prepare_cached("SELECT task_id, kind FROM ledger WHERE task_id = ANY($1)")
            .await
            .sql(WHAT)?,
        client
            .prepare_cached("SELECT id FROM tasks WHERE id = ANY($1)")
            .await
            .sql(WHAT)?,
    ];
    // Sent together, run in this order: the keys locked first (in id order, as every step
    // that locks several does), then the records.
    let (_, key_rows, record_rows, entry_rows, task_rows) = tokio::try_join!(
        async { client.batch_execute(commits.begin()).await.sql(WHAT) },
        async {
            client
                .query(&reads[0], &[&key_ids])
                .await
                .sql("create tasks: lock keys")
        },
        async {
            if idem_owners.is_empty() {
                return Ok(Vec::new());
            }
            client
                .query(&reads[1], &[&idem_owners, &idem_keys])
                .await
                .sql("create tasks: lock idempotency records")
        },
        async {
            client
                .query(&reads[2], &[&drafted])
                .await
                .sql("create tasks: read ledger entries")
        },
        async {
            client
                .query(&reads[3], &[&task_ids])
                .await
                .sql("create tasks: read task ids")
        },
    )?;
    let mut found = Found::default();
    for row in &key_rows {
        let id: String = row.try_get(0).sql(WHAT)?;
        let text: String = row.try_get(1).sql(WHAT)?;
        found.keys.insert(id, decode("keys", &text)?);
    }
    for row in &record_rows {
        let text: String = row.try_get(0).sql(WHAT)?;
        let record: IdemRecord = decode("idempotency", &text)?;
        found
            .records
            .insert((record.key_id.clone(), record.key.clone()), record);
    }
    for row in &entry_rows {
        let task_id: String = row.try_get(0).sql(WHAT)?;
        let kind: String = row.try_get(1).sql(WHAT)?;
        if let Some(kind) = super::names::ledger_kind(&kind) {
            found.entries.insert((task_id, kind.as_str()));
        }
    }
    for row in &task_rows {
        found.tasks.insert(row.try_get(0).sql(WHAT)?);
    }
    let mut writes = Writes::default();
    let answers: Vec<Result<(), StoreError>> = group
        .iter()
        .map(|creation| accept(creation, &mut found, &mut writes))
        .collect();
    // Joined, not tried: the `COMMIT` is sent even when the write's error is back before it
    // is first polled (see [`write_blind`]).
    let (version, committed) =
        tokio::join!(write(client, &write_statement, &found, &writes), async {
            client
                .batch_execute(commits.commit())
                .await
                .sql("create tasks: commit")
        },);
    let version = version?;
    committed?;
    Ok((answers, version))
}

/// Whether `group` may be written without reading first: no idempotency record to complete
/// (its holder is checked by a read), and every entry a pre-deduction (so a key covering the
/// group's sum covers each creation's, in any order).
fn blind(group: &[Creation]) -> bool {
    group
        .iter()
        .all(|c| c.idem.is_none() && c.ledger.iter().all(|d| d.amount <= 0))
}

/// `group` written in one round trip, `BEGIN` and `COMMIT` sent with [`WRITE_BLIND`]: the
/// keys' rows are locked from the write to the commit only: the version of the rows written.
/// An error when the statement refused (or failed): the `COMMIT` after it rolled everything
/// back, and was answered before this returns, so the connection is out of the transaction.
///
/// The three are joined, not tried: a statement's error can be back within its first poll
/// (the thread preempted between sending it and looking for its answer, while the
/// connection's task sends it and reads the answer on another), and `try_join!` would return
/// it there, before the `COMMIT` is first polled, that is before it is sent: the connection
/// would stay in the failed transaction.
pub(super) async fn write_blind(
    client: &deadpool_postgres::Client,
    commits: Commits,
    group: &[Creation],
) -> Result<Option<String>, Fault> {
    let statement = client.prepare_cached(WRITE_BLIND).await.sql(WHAT)?;
    let tasks: Vec<&Creation> = group.iter().collect();
    let t = TaskColumns::of(&tasks);
    let drafts: Vec<(&LedgerDraft, u64)> = group
        .iter()
        .flat_map(|c| c.ledger.iter().map(move |d| (d, c.at)))
        .collect();
    let entry_ids: Vec<String> = drafts
        .iter()
        .map(|_| format!("{LEDGER_ID_PREFIX}{}", ulid::Ulid::new()))
        .collect();
    let entry_keys: Vec<&str> = drafts.iter().map(|(d, _)| d.key_id.as_str()).collect();
    let entry_tasks: Vec<&str> = drafts.iter().map(|(d, _)| d.task_id.as_str()).collect();
    let entry_kinds: Vec<&str> = drafts.iter().map(|(d, _)| d.kind.as_str()).collect();
    let amounts: Vec<i64> = drafts.iter().map(|(d, _)| d.amount).collect();
    let ats: Vec<i64> = drafts.iter().map(|(_, at)| big(*at)).collect();
    let (begun, row, committed) = tokio::join!(
        async { client.batch_execute(commits.begin()).await.sql(WHAT) },
        async {
            client
                .query_opt(
                    &statement,
                    &t.then(&[
                        &entry_ids,
                        &entry_keys,
                        &entry_tasks,
                        &entry_kinds,
                        &amounts,
                        &ats,
                    ]),
                )
                .await
                .sql("create tasks: write")
        },
        async {
            client
                .batch_execute(commits.commit())
                .await
                .sql("create tasks: commit")
        },
    );
    begun?;
    let row = row?;
    committed?;
    version(row.as_ref())
}

/// The version in a write's row.
fn version(row: Option<&tokio_postgres::Row>) -> Result<Option<String>, Fault> {
    Ok(row
        .map(|r| r.try_get::<_, Option<String>>(0))
        .transpose()
        .sql(WHAT)?
        .flatten())
}

/// Each creation's answer, and the version of the rows the group wrote.
type Answers = (Vec<Result<(), StoreError>>, Option<String>);

/// The columns of the tasks a group writes, one array each.
struct TaskColumns<'a> {
    ids: Vec<&'a str>,
    created: Vec<&'a str>,
    owners: Vec<&'a str>,
    kinds: Vec<&'static str>,
    statuses: Vec<&'static str>,
    models: Vec<&'a str>,
    due: Vec<Option<i64>>,
    params: Vec<&'a str>,
    records: Vec<Json<&'a serde_json::Value>>,
}

impl<'a> TaskColumns<'a> {
    fn of(tasks: &[&'a Creation]) -> TaskColumns<'a> {
        TaskColumns {
            ids: tasks.iter().map(|c| c.task.id.as_str()).collect(),
            created: tasks.iter().map(|c| tasks::created(&c.task.id)).collect(),
            owners: tasks.iter().map(|c| c.task.owner.as_str()).collect(),
            kinds: tasks.iter().map(|c| task_kind(c.task.kind)).collect(),
            statuses: tasks.iter().map(|c| task_status(c.task.status)).collect(),
            models: tasks.iter().map(|c| c.task.model.as_str()).collect(),
            due: tasks.iter().map(|c| tasks::due_ms(&c.task)).collect(),
            params: tasks.iter().map(|c| c.row.params.as_str()).collect(),
            records: tasks.iter().map(|c| Json(&c.row.rest)).collect(),
        }
    }

    /// A statement's parameters: these columns (`$1` to `$9`, in the `INSERT`'s order), then
    /// `rest`.
    fn then<'s>(&'s self, rest: &[&'s (dyn ToSql + Sync)]) -> Vec<&'s (dyn ToSql + Sync)> {
        let mut all: Vec<&'s (dyn ToSql + Sync)> = vec![
            &self.ids,
            &self.created,
            &self.owners,
            &self.kinds,
            &self.statuses,
            &self.models,
            &self.due,
            &self.params,
            &self.records,
        ];
        all.extend_from_slice(rest);
        all
    }
}

/// Whether `creation` is written, with the single step's checks in its order; when it is, what
/// it writes joins `writes` and what it changes is in `found` for the creations after it.
fn accept<'a>(
    creation: &'a Creation,
    found: &mut Found,
    writes: &mut Writes<'a>,
) -> Result<(), StoreError> {
    let record = match &creation.idem {
        Some((ticket, answer)) => {
            let held = found
                .records
                .get(&(ticket.key_id.clone(), ticket.key.clone()));
            if !held_by(held, ticket) {
                return Err(StoreError::IdempotencyLost(ticket.key.clone()));
            }
            held.map(|r| IdemRecord {
                answer: Some(answer.clone()),
                ..r.clone()
            })
        }
        None => None,
    };
    if found.tasks.contains(&creation.task.id) {
        return Err(StoreError::Backend(format!(
            "task {} already exists",
            creation.task.id
        )));
    }
    // The keys as this creation's entries leave them, kept only if every entry is taken.
    let mut keys: HashMap<&str, Key> = HashMap::new();
    let mut entries = Vec::with_capacity(creation.ledger.len());
    let mut seen: HashSet<(&str, &'static str)> = HashSet::new();
    for draft in &creation.ledger {
        let id = (draft.task_id.as_str(), draft.kind.as_str());
        if found.entries.contains(&(draft.task_id.clone(), id.1)) || !seen.insert(id) {
            return Err(StoreError::DuplicateLedger {
                task_id: draft.task_id.clone(),
                kind: draft.kind,
            });
        }
        let key = match keys.get_mut(draft.key_id.as_str()) {
            Some(key) => key,
            None => {
                let Some(key) = found.keys.get(&draft.key_id) else {
                    return Err(StoreError::KeyNotFound(draft.key_id.clone()));
                };
                keys.entry(draft.key_id.as_str()).or_insert(key.clone())
            }
        };
        let balance_after = ledger::take(key, draft)?;
        entries.push(Entry {
            draft,
            balance_after,
            at: creation.at,
        });
    }
    for (id, key) in keys {
        writes.keys.insert(id.to_owned());
        found.keys.insert(id.to_owned(), key);
    }
    for (task_id, kind) in seen {
        found.entries.insert((task_id.to_owned(), kind));
    }
    found.tasks.insert(creation.task.id.clone());
    if let Some(record) = record {
        found
            .records
            .insert((record.key_id.clone(), record.key.clone()), record.clone());
        writes.records.push(record);
    }
    writes.tasks.push(creation);
    writes.entries.extend(entries);
    Ok(())
}

/// The accepted creations in one statement: tasks, keys, idempotency records and ledger
/// entries (numbered in the order they were accepted); the version of the rows written.
async fn write(
    client: &deadpool_postgres::Client,
    statement: &tokio_postgres::Statement,
    found: &Found,
    writes: &Writes<'_>,
) -> Result<Option<String>, Fault> {
    if writes.tasks.is_empty() {
        return Ok(None);
    }
    let t = TaskColumns::of(&writes.tasks);
    let mut key_ids: Vec<&str> = writes.keys.iter().map(String::as_str).collect();
    key_ids.sort_unstable();
    let keys: Vec<Json<&Key>> = key_ids
        .iter()
        .filter_map(|id| found.keys.get(*id).map(Json))
        .collect();
    let idem_owners: Vec<&str> = writes.records.iter().map(|r| r.key_id.as_str()).collect();
    let idem_keys: Vec<&str> = writes.records.iter().map(|r| r.key.as_str()).collect();
    let idem_created: Vec<i64> = writes.records.iter().map(|r| big(r.created_ms)).collect();
    let idem_texts: Vec<String> = writes
        .records
        .iter()
        .map(|r| {
            serde_json::to_string(r)
                .map_err(|e| StoreError::Backend(format!("encode idempotency record: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let entries = &writes.entries;
    let entry_ids: Vec<String> = entries
        .iter()
        .map(|_| format!("{LEDGER_ID_PREFIX}{}", ulid::Ulid::new()))
        .collect();
    let entry_keys: Vec<&str> = entries.iter().map(|e| e.draft.key_id.as_str()).collect();
    let entry_tasks: Vec<&str> = entries.iter().map(|e| e.draft.task_id.as_str()).collect();
    let entry_kinds: Vec<&str> = entries.iter().map(|e| e.draft.kind.as_str()).collect();
    let amounts: Vec<i64> = entries.iter().map(|e| e.draft.amount).collect();
    let balances: Vec<Option<i64>> = entries.iter().map(|e| e.balance_after).collect();
    let ats: Vec<i64> = entries.iter().map(|e| big(e.at)).collect();
    let row = client
        .query_opt(
            statement,
            &t.then(&[
                &key_ids,
                &keys,
                &idem_owners,
                &idem_keys,
                &idem_created,
                &idem_texts,
                &entry_ids,
                &entry_keys,
                &entry_tasks,
                &entry_kinds,
                &amounts,
                &balances,
                &ats,
            ]),
        )
        .await
        .sql("create tasks: write")?;
    version(row.as_ref())
}
