//! First-format task records rendered once per version of their task.
//!
//! A client polling `GET /v1/videos/{id}` reads the same record again and again while its task
//! runs; rendering it (reading the stored params back, building the record, writing its JSON)
//! was about a third of a poll's work. The record is a function of the task alone, so the
//! rendered body is kept with the task it was rendered from and served again while the stored
//! task is equal to it; any change of the task (status, progress, an error) renders anew.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use store::Task;

/// Tasks whose records are kept: the polled ones of a busy relay, in little memory (a task
/// and its record are about 2 KiB). Past it the cache starts again empty.
const MAX: usize = 1024;

/// Rendered records by task id, each with the task it was rendered from.
#[derive(Default)]
pub struct RecordCache {
    /// Keyed by ids the relay made: a fast hash (keyed per process) is enough.
    records: Mutex<foldhash::HashMap<String, (Arc<Task>, Bytes)>>,
}

impl RecordCache {
    /// The body rendered from a task equal to `task`, if one is kept. The store hands out
    /// the task it keeps decoded while its record is unchanged, so most polls find the very
    /// task the body was rendered from and compare no further.
    pub fn get(&self, task: &Arc<Task>) -> Option<Bytes> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .get(&task.id)
            .filter(|(kept, _)| Arc::ptr_eq(kept, task) || **kept == **task)
            .map(|(_, body)| body.clone())
    }

    /// Keeps `body`, rendered from `task`.
    pub fn put(&self, task: &Arc<Task>, body: Bytes) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() >= MAX && !records.contains_key(&task.id) {
            records.clear();
        }
        records.insert(task.id.clone(), (Arc::clone(task), body));
    }
}
