//! The handlers of the client formats, one module each: the first video format
//! ([`videos`], its [`characters`]), the second ([`generations`], its [`assets`]), the video
//! models both describe ([`video_models`]), chat ([`messages`], its [`batches`] run by
//! [`batch_run`] and billed by [`chat_billing`]); and what the task formats share: [`tasks`]
//! (create, get, list, cancel, delete) and [`idempotency`] of submissions.

pub mod assets;
pub mod batch_run;
pub mod batches;
pub mod characters;
pub mod chat_billing;
pub mod generations;
pub mod idempotency;
pub mod messages;
pub mod tasks;
pub mod video_models;
pub mod videos;
