//! The task steps on PostgreSQL: the row a task is kept as, creation and the compare-and-swap
//! transition (each put together with its ledger entries by the caller, in one transaction),
//! deletion, and the reads: by id, one owner's pages, operators' filtered pages, claims of due
//! tasks and the unfinished ones, all from indexes.

use deadpool_postgres::Transaction;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::names::{task_kind, task_status};
use super::pool::PgStore;
use super::queues::TaskRow;
use super::txn::{self, Fault, Filter, Sql, big, check_id, corrupt, encode};
use super::webhooks;
use crate::steps::TaskUpdate;
use crate::{
    AdminTaskQuery, Claim, Order, Page, StoreError, Task, TaskCount, TaskKind, TaskQuery,
    TaskStatus,
};

const TASKS: &str = "tasks";
/// Largest page `list_tasks` returns.
const MAX_PAGE: usize = 100;
/// Largest page `admin_tasks` returns.
const MAX_ADMIN_PAGE: usize = 1000;
/// The columns a task is read back from.
const RECORD: &str = "params, record::text";

/// A task's row: its record less `params`, which keeps its own text.
pub(super) fn row_of(task: &Task) -> Result<TaskRow, StoreError> {
    let mut rest = encode("task", task)?;
    if let Some(fields) = rest.as_object_mut() {
        fields.remove("params");
    }
    Ok(TaskRow {
        rest,
        params: task.params.as_str().to_owned(),
    })
}

/// The task of a row read with [`RECORD`]: the record's text with `params` put back as it was
/// written (jsonb keeps neither the spacing nor the key order of a JSON text).
fn read_task(row: &Row) -> Result<Task, Fault> {
    let params: String = row.try_get(0).sql("read task")?;
    let rest: String = row.try_get(1).sql("read task")?;
    let body = rest
        .trim_start()
        .strip_prefix('{')
        .filter(|body| !body.trim_start().starts_with('}'))
        .ok_or_else(|| corrupt(TASKS, "task record is not a JSON object with fields"))?;
    let text = format!("{{\"params\":{params},{body}");
    Ok(super::txn::decode(TASKS, &text)?)
}

fn read_tasks(rows: &[Row]) -> Result<Vec<Task>, Fault> {
    rows.iter().map(read_task).collect()
}

/// The ULID of an id (`prefix_<ULID>`): the creation-time order of ids of every kind.
pub(super) fn created(id: &str) -> &str {
    id.rsplit_once('_').map_or(id, |(_, ulid)| ulid)
}

/// The `due_ms` column: none once final; the end of time for an unfinished task without a
/// poll time (found by `unfinished_tasks`, never due).
pub(super) fn due_ms(task: &Task) -> Option<i64> {
    if task.status.is_final() {
        return None;
    }
    Some(
        task.next_poll_ms
            .map_or(i64::MAX, |ms| big(ms).min(i64::MAX - 1)),
    )
}

/// A new task as it is written: its ids checked, without a poll time when it is final.
pub(super) fn new_task(task: &Task) -> Result<(Task, TaskRow), StoreError> {
    check_id("task id", &task.id)?;
    check_id("task owner", &task.owner)?;
    let mut task = task.clone();
    if task.status.is_final() {
        task.next_poll_ms = None;
    }
    let row = row_of(&task)?;
    Ok((task, row))
}

/// Writes a new task; an id in use fails the step.
pub(super) async fn insert(tx: &Transaction<'_>, task: &Task, row: &TaskRow) -> Result<(), Fault> {
    let what = format!("create task {}", task.id);
    let written = txn::execute(
        tx,
        &what,
        "INSERT INTO tasks (id, created, owner, kind, status, model, due_ms, params, record) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
        &[
            &task.id,
            &created(&task.id),
            &task.owner,
            &task_kind(task.kind),
            &task_status(task.status),
            &task.model,
            &due_ms(task),
            &row.params,
            &Json(&row.rest),
        ],
    )
    .await?;
    if written == 0 {
        return Err(StoreError::Backend(format!("task {} already exists", task.id)).into());
    }
    Ok(())
}

pub(super) async fn get(store: &PgStore, id: &str) -> Result<Option<Task>, StoreError> {
    let client = store.client("read task").await?;
    let sql = "SELECT params, record::text FROM tasks WHERE id = $1";
    let row = txn::query_opt(&client, "read task", sql, &[&id]).await;
    row.and_then(|r| r.as_ref().map(read_task).transpose())
        .map_err(Fault::into_store)
}

/// [`crate::Store::list_tasks`]: one kind by id, both kinds by creation time.
pub(super) async fn list(store: &PgStore, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let (cmp, dir) = match query.order {
        Order::Desc => ("<", "DESC"),
        Order::Asc => (">", "ASC"),
    };
    let n = big(limit as u64 + 1);
    let after = query.after.as_deref();
    let after_created = after.map(created);
    let kind = query.kind.map(task_kind);
    let mut filter = Filter::default();
    filter.and("owner = ?", &[&query.owner]);
    let order = match (&kind, &after) {
        (Some(kind), _) => {
            filter.and("kind = ?", &[kind]);
            filter.and_some(&format!("id {cmp} ?"), &query.after);
            format!("id {dir}")
        }
        (None, Some(after)) => {
            filter.and(
                &format!("(created, id) {cmp} (?, ?)"),
                &[&after_created, after],
            );
            format!("created {dir}, id {dir}")
        }
        (None, None) => format!("created {dir}, id {dir}"),
    };
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql = format!("SELECT {RECORD} FROM tasks{clause} ORDER BY {order} LIMIT {limit_param}");
    let client = store.client("list tasks").await?;
    let rows = txn::query(&client, "list tasks", &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    page(&rows, limit)
}

/// [`crate::Store::admin_tasks`]: every owner's tasks, newest first, filtered by the store.
pub(super) async fn admin(
    store: &PgStore,
    query: &AdminTaskQuery,
) -> Result<Page<Task>, StoreError> {
    let limit = query.limit.clamp(1, MAX_ADMIN_PAGE);
    let status = query.status.map(task_status);
    let kind = query.kind.map(task_kind);
    let after = query.after.as_deref().map(created);
    let n = big(limit as u64 + 1);
    let mut filter = Filter::default();
    filter.and_some("status = ?", &status);
    filter.and_some("kind = ?", &kind);
    filter.and_some("model = ?", &query.model);
    filter.and_some("owner = ?", &query.owner);
    filter.and_some("created < ?", &after);
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql = format!(
        "SELECT {RECORD} FROM tasks{clause} ORDER BY created DESC, id DESC LIMIT {limit_param}"
    );
    let client = store.client("list all tasks").await?;
    let rows = txn::query(&client, "list all tasks", &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    page(&rows, limit)
}

/// The first `limit` of `rows` (read one past it), and whether one more followed.
fn page(rows: &[Row], limit: usize) -> Result<Page<Task>, StoreError> {
    let has_more = rows.len() > limit;
    let items = read_tasks(&rows[..rows.len().min(limit)]).map_err(Fault::into_store)?;
    Ok(Page { items, has_more })
}

/// The compare-and-swap of [`crate::Store::transition`] on the task alone (the row locked
/// until the transaction ends); returns the task as written.
pub(super) async fn transition(
    tx: &Transaction<'_>,
    id: &str,
    from: &[TaskStatus],
    to: TaskStatus,
    update: TaskUpdate<'_>,
) -> Result<Task, Fault> {
    let what = format!("transition task {id}");
    let sql = "SELECT params, record::text FROM tasks WHERE id = $1 FOR UPDATE";
    let Some(row) = txn::query_opt(tx, &what, sql, &[&id]).await? else {
        return Err(StoreError::TaskNotFound(id.to_owned()).into());
    };
    let old = read_task(&row)?;
    let new = moved(&old, id, from, to, update)?;
    let row = row_of(&new)?;
    txn::execute(
        tx,
        &what,
        "UPDATE tasks SET status = $2, model = $3, due_ms = $4, params = $5, record = $6 \
         WHERE id = $1",
        &[
            &id,
            &task_status(to),
            &new.model,
            &due_ms(&new),
            &row.params,
            &Json(&row.rest),
        ],
    )
    .await?;
    if let Some(webhook) = crate::Webhook::for_final(&new, webhooks::now_ms()) {
        webhooks::insert(tx, &webhook).await?;
    }
    Ok(new)
}

/// `old` moved to `to` by `update`, if its status allows.
fn moved(
    old: &Task,
    id: &str,
    from: &[TaskStatus],
    to: TaskStatus,
    update: TaskUpdate<'_>,
) -> Result<Task, StoreError> {
    if old.status.is_final() || !from.contains(&old.status) {
        return Err(StoreError::WrongStatus {
            task_id: id.to_owned(),
            expected: from.to_vec(),
            actual: old.status,
        });
    }
    let mut new = old.clone();
    update(&mut new);
    // Identity fields key the indexes; an update cannot move a task.
    new.id.clone_from(&old.id);
    new.owner.clone_from(&old.owner);
    new.kind = old.kind;
    new.status = to;
    new.progress = new.progress.max(old.progress).min(100);
    if to.is_final() {
        new.next_poll_ms = None;
    }
    Ok(new)
}

/// Times [`transition_alone`] reads and writes its task before it leaves the task to the
/// locked transaction: other steps changed it between each read and write.
const CAS_ATTEMPTS: usize = 3;

/// [`crate::Store::transition`] of a task to an unfinished status with no ledger entry (a
/// submission's mark, its acceptance, a poll's reschedule, a claim's renewal): the row as this
/// store last claimed or wrote it ([`super::versions`]), else as read now, written only if it
/// is still that version (its `xmin`, the transaction that wrote it), committed on its own
/// with the other such writes waiting at once ([`super::moves`]): no explicit transaction,
/// where the locked read takes four round trips and a commit of its own, and no read at all
/// for a task this instance just created, claimed or moved. A write that finds the row changed reads
/// it again (the update closure runs again); `None` when it found it changed
/// [`CAS_ATTEMPTS`] times after reading it (a task many steps move at once), for the caller
/// to take the row lock instead.
pub(super) async fn transition_alone(
    store: &PgStore,
    id: &str,
    from: &[TaskStatus],
    to: TaskStatus,
    update: TaskUpdate<'_>,
) -> Result<Option<Task>, StoreError> {
    let what = format!("transition task {id}");
    // A kept row whose status does not allow the move may be out of date: read it then.
    if let Some(kept) = store.versions.take(id)
        && let Ok(new) = moved(&kept.task, id, from, to, update)
        && let Some(task) = write_version(store, &what, to, new, kept.version).await?
    {
        return Ok(Some(task));
    }
    for _ in 0..CAS_ATTEMPTS {
        let client = store.client(&what).await?;
        let sql = "SELECT params, record::text, xmin::text FROM tasks WHERE id = $1";
        let row = txn::query_opt(&client, &what, sql, &[&id])
            .await
            .map_err(Fault::into_store)?;
        // The connection goes back to the pool: the writer needs one.
        drop(client);
        let Some(row) = row else {
            return Err(StoreError::TaskNotFound(id.to_owned()));
        };
        let version: String = row.try_get(2).sql(&what).map_err(Fault::into_store)?;
        let old = read_task(&row).map_err(Fault::into_store)?;
        let new = moved(&old, id, from, to, update)?;
        if let Some(task) = write_version(store, &what, to, new, version).await? {
            return Ok(Some(task));
        }
    }
    Ok(None)
}

/// Writes `new` (moved to `to`) if its row is still at `version`: the task as written (and
/// kept with its new version), or `None` when the row had changed.
async fn write_version(
    store: &PgStore,
    what: &str,
    to: TaskStatus,
    new: Task,
    version: String,
) -> Result<Option<Task>, StoreError> {
    let row = row_of(&new)?;
    let written = match &store.mover {
        Some(mover) => {
            let (done, answer) = tokio::sync::oneshot::channel();
            let write = super::queues::Move {
                id: new.id.clone(),
                status: task_status(to),
                model: new.model.clone(),
                due_ms: due_ms(&new),
                params: row.params,
                record: row.rest,
                version,
                done,
            };
            if mover.send(write).is_err() {
                return Err(StoreError::Backend(format!("{what}: the writer stopped")));
            }
            answer.await.unwrap_or_else(|_| {
                Err(StoreError::Backend(format!(
                    "{what}: the writer stopped before its answer"
                )))
            })?
        }
        None => {
            let client = store.client(what).await?;
            let sql = "UPDATE tasks SET status = $2, model = $3, due_ms = $4, params = $5, \
                       record = $6 WHERE id = $1 AND xmin::text = $7 RETURNING xmin::text";
            let params: txn::Params = &[
                &new.id,
                &task_status(to),
                &new.model,
                &due_ms(&new),
                &row.params,
                &Json(&row.rest),
                &version,
            ];
            let written = txn::query_opt(&client, what, sql, params)
                .await
                .map_err(Fault::into_store)?;
            written
                .map(|row| row.try_get(0).sql(what))
                .transpose()
                .map_err(Fault::into_store)?
        }
    };
    Ok(written.map(|version| {
        store.versions.put(version, new.clone());
        new
    }))
}

/// The statement of [`claim`]: `$1` now, `$2` the lease's end, `$3` the most rows.
pub(super) const CLAIM: &str = "WITH due AS ( \
                SELECT id, due_ms FROM tasks WHERE due_ms <= $1 \
                ORDER BY due_ms, id LIMIT $3 FOR UPDATE SKIP LOCKED \
             ) \
             UPDATE tasks SET due_ms = $2, \
                record = jsonb_set(tasks.record, '{next_poll_ms}', to_jsonb($2::bigint)) \
             FROM due WHERE tasks.id = ANY(ARRAY(SELECT id FROM due)) AND tasks.id = due.id \
             RETURNING tasks.params, tasks.record::text, due.due_ms, tasks.xmin::text";

/// [`crate::Store::claim_due`]: one statement. The due rows up to `limit`, earliest first,
/// are locked, skipping rows another transaction holds, and leased: their due time (and the
/// record's `next_poll_ms`) moves to `now_ms + lease_ms`. The rows are updated by their ids
/// (`id = ANY(...)`, the primary key's index): joined only to the locked rows, the statement's
/// generic plan (prepared, a `LIMIT` it cannot see) hashed the whole table for every claim.
pub(super) async fn claim(
    store: &PgStore,
    now_ms: u64,
    lease_ms: u64,
    limit: usize,
) -> Result<Vec<Claim>, StoreError> {
    // The end of time stays out of reach: an unfinished task without a poll time is never due.
    let now = big(now_ms).min(i64::MAX - 1);
    let until = big(now_ms.saturating_add(lease_ms)).min(i64::MAX - 1);
    let n = big(limit as u64);
    let client = store.client("claim due tasks").await?;
    let rows = txn::query(&client, "claim due tasks", CLAIM, &[&now, &until, &n])
        .await
        .map_err(Fault::into_store)?;
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let was: i64 = row
            .try_get(2)
            .sql("claim due tasks")
            .map_err(Fault::into_store)?;
        let version: String = row
            .try_get(3)
            .sql("claim due tasks")
            .map_err(Fault::into_store)?;
        let task = read_task(row).map_err(Fault::into_store)?;
        // Its steps start from the row as claimed, without reading it again.
        store.versions.put(version, task.clone());
        claimed.push((was, task));
    }
    claimed.sort_by(|(a, x), (b, y)| (a, x.id.as_bytes()).cmp(&(b, y.id.as_bytes())));
    Ok(claimed
        .into_iter()
        .map(|(was, task)| Claim {
            task,
            due_ms: u64::try_from(was).unwrap_or(0),
        })
        .collect())
}

/// [`crate::Store::task_counts`]: one grouped count over the table.
pub(super) async fn counts(store: &PgStore) -> Result<Vec<TaskCount>, StoreError> {
    let what = "count tasks";
    let mut client = store.client(what).await?;
    // Every row is read: a sequential scan is the plan for it (the session turns them off).
    let tx = client
        .transaction()
        .await
        .sql(what)
        .map_err(Fault::into_store)?;
    tx.batch_execute("SET LOCAL enable_seqscan = on")
        .await
        .sql(what)
        .map_err(Fault::into_store)?;
    let rows = txn::query(
        &tx,
        what,
        "SELECT kind, status, count(*) FROM tasks GROUP BY kind, status",
        &[],
    )
    .await
    .map_err(Fault::into_store)?;
    tx.commit().await.sql(what).map_err(Fault::into_store)?;
    let mut counted = Vec::with_capacity(rows.len());
    for row in &rows {
        let (kind, status, n): (String, String, i64) = (
            row.try_get(0).sql(what).map_err(Fault::into_store)?,
            row.try_get(1).sql(what).map_err(Fault::into_store)?,
            row.try_get(2).sql(what).map_err(Fault::into_store)?,
        );
        counted.push((kind, status, n));
    }
    Ok(TaskKind::ALL
        .iter()
        .flat_map(|&kind| TaskStatus::ALL.iter().map(move |&status| (kind, status)))
        .map(|(kind, status)| TaskCount {
            kind,
            status,
            count: counted
                .iter()
                .find(|(k, s, _)| k == task_kind(kind) && s == task_status(status))
                .map_or(0, |(_, _, n)| u64::try_from(*n).unwrap_or(0)),
        })
        .collect())
}

/// [`crate::Store::unfinished_tasks`].
pub(super) async fn unfinished(store: &PgStore, limit: usize) -> Result<Vec<Task>, StoreError> {
    let sql = "SELECT params, record::text FROM tasks WHERE due_ms IS NOT NULL \
               ORDER BY due_ms, id LIMIT $1";
    let client = store.client("list unfinished tasks").await?;
    let rows = txn::query(&client, "list unfinished tasks", sql, &[&big(limit as u64)])
        .await
        .map_err(Fault::into_store)?;
    read_tasks(&rows).map_err(Fault::into_store)
}

/// [`crate::Store::delete_task`]: one statement.
pub(super) async fn delete(store: &PgStore, id: &str) -> Result<Option<Task>, StoreError> {
    let what = format!("delete task {id}");
    store.versions.forget(id);
    let sql = "DELETE FROM tasks WHERE id = $1 RETURNING params, record::text";
    let client = store.client(&what).await?;
    let row = txn::query_opt(&client, &what, sql, &[&id]).await;
    row.and_then(|r| r.as_ref().map(read_task).transpose())
        .map_err(Fault::into_store)
}
