//! What the engine knows of each task format: how a stored task becomes the job a channel
//! runs, and which stored references go with it. Each format keeps its request in the task's
//! `params` in its own shape ([`video::V1Params`], [`generation::GenParams`]); the handlers
//! that create tasks write these shapes, the engine reads them.

pub mod generation;
mod stored;
pub mod video;

use channels::{Demand, StoredReference, VideoJob};
use store::{Task, TaskKind};

pub use stored::{UNREADABLE, read_params};

/// The job the channel runs for `task`, the model named as the channel knows it.
pub fn job(task: &Task, upstream_model: String) -> Result<VideoJob, &'static str> {
    match task.kind {
        TaskKind::Video => video::job(task, upstream_model),
        TaskKind::Generation => generation::job(task, upstream_model),
    }
}

/// What `task` asks of the channel that runs it.
pub fn demand(task: &Task) -> Result<Demand, &'static str> {
    Ok(match task.kind {
        TaskKind::Video => video::demand(&read_params(task)?),
        TaskKind::Generation => generation::demand(&read_params(task)?),
    })
}

/// The relay's copies of `task`'s references beyond its frames, without URLs yet.
pub fn references(task: &Task) -> Result<Vec<StoredReference>, &'static str> {
    match task.kind {
        TaskKind::Video => video::references(task),
        TaskKind::Generation => generation::references(task),
    }
}
