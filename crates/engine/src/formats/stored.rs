//! Reading a format's params back from a stored task.

use serde::de::DeserializeOwned;
use store::Task;

/// Why a stored task cannot be turned into a job or a record: its params are unreadable.
pub const UNREADABLE: &str = "the task record cannot be read";

/// The format's params of `task`, or [`UNREADABLE`] (logged).
pub fn read_params<P: DeserializeOwned>(task: &Task) -> Result<P, &'static str> {
    task.params.read().map_err(|e| {
        tracing::error!("task {}: unreadable params: {e}", task.id);
        UNREADABLE
    })
}
