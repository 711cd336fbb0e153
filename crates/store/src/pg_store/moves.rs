//! Group commit of the compare-and-swap writes of transitions to an unfinished status without
//! ledger entries ([`super::tasks::transition_alone`]): the writes waiting at once go out as
//! one statement, committed on its own, so they share a commit (one WAL flush) and a round
//! trip. Each row is written only if it is still the version its step read (`xmin`); the
//! statement returns the ids it wrote with their new versions, and a step whose id is not
//! among them reads its task again. Two writes of one task never go in one statement (the second waits for the next):
//! each must be compared with the version the other leaves.

use std::collections::{HashMap, HashSet};

use tokio::sync::mpsc;
use tokio_postgres::types::Json;

use super::pool::PgStore;
use super::queues::{Move, Mover};
use super::txn::{self, Fault, Sql};

/// The most writes one statement carries.
const MAX_GROUP: usize = 256;

/// Starts the writer of `store` (a store without committers of its own).
pub(super) fn start(store: PgStore) -> Mover {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(store, rx));
    tx
}

async fn run(store: PgStore, mut rx: mpsc::UnboundedReceiver<Move>) {
    let mut waiting: Vec<Move> = Vec::with_capacity(MAX_GROUP);
    loop {
        if waiting.is_empty() && rx.recv_many(&mut waiting, MAX_GROUP).await == 0 {
            return;
        }
        // Whatever else is waiting too, up to a group.
        while waiting.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(next) => waiting.push(next),
                Err(_) => break,
            }
        }
        // One write per task in a group; a second one of a task waits for the next group.
        let mut ids = HashSet::with_capacity(waiting.len());
        let (group, later): (Vec<Move>, Vec<Move>) = std::mem::take(&mut waiting)
            .into_iter()
            .partition(|m| ids.insert(m.id.clone()));
        waiting = later;
        write(&store, group).await;
    }
}

async fn write(store: &PgStore, group: Vec<Move>) {
    let written = attempt(store, &group).await;
    for m in group {
        let answer = match &written {
            Ok(written) => Ok(written.get(&m.id).cloned()),
            Err(e) => Err(crate::StoreError::Backend(e.clone())),
        };
        // A step that went away has nothing to learn.
        let _ = m.done.send(answer);
    }
}

/// The statement writing a group: each row by its id (the primary key), if still at the
/// version its step read.
pub(super) const MOVE: &str = "UPDATE tasks SET status = u.status, model = u.model, \
        due_ms = u.due_ms, params = u.params, record = u.record \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], \
        $6::jsonb[], $7::text[]) AS u(id, status, model, due_ms, params, record, version) \
     WHERE tasks.id = u.id AND tasks.xmin::text = u.version \
     RETURNING tasks.id, tasks.xmin::text";

/// The group's writes in one statement: the ids it wrote, each with the row's new version.
async fn attempt(store: &PgStore, group: &[Move]) -> Result<HashMap<String, String>, String> {
    const WHAT: &str = "transition tasks";
    let client = store.client(WHAT).await.map_err(|e| e.to_string())?;
    let ids: Vec<&str> = group.iter().map(|m| m.id.as_str()).collect();
    let statuses: Vec<&str> = group.iter().map(|m| m.status).collect();
    let models: Vec<&str> = group.iter().map(|m| m.model.as_str()).collect();
    let due: Vec<Option<i64>> = group.iter().map(|m| m.due_ms).collect();
    let params: Vec<&str> = group.iter().map(|m| m.params.as_str()).collect();
    let records: Vec<Json<&serde_json::Value>> = group.iter().map(|m| Json(&m.record)).collect();
    let versions: Vec<&str> = group.iter().map(|m| m.version.as_str()).collect();
    let rows = txn::query(
        &client,
        WHAT,
        MOVE,
        &[&ids, &statuses, &models, &due, &params, &records, &versions],
    )
    .await
    .map_err(|f| f.into_store().to_string())?;
    rows.iter()
        .map(|row| Ok((row.try_get(0).sql(WHAT)?, row.try_get(1).sql(WHAT)?)))
        .collect::<Result<HashMap<String, String>, Fault>>()
        .map_err(|f| f.into_store().to_string())
}
