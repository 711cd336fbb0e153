//! The relay's HTTP service over the task engine (the `engine` crate), its folders listed top
//! down (no file imports in a circle: `cargo xtask floors`; ARCHITECTURE.md):
//!
//! - [`serve`]: the accept loop, the connection threads, their timers and the connection caps;
//! - [`router`]: a request's route, then auth, then its handler;
//! - [`formats`]: the handlers of each client format (`/v1/videos`, `/v1/video/generations`,
//!   assets, `/v1/messages` and its batches) and what they share (tasks, idempotency);
//! - [`ops`]: what operators use (admin API, metrics, console, webhooks);
//! - [`vendor_callbacks`]: what upstream vendors call back;
//! - [`app`]: the shared state, built from [`config`];
//! - [`ground`]: what every handler stands on (bodies and errors, auth, rate limits, signed
//!   links, multipart, serving blobs, cluster state).
//!
//! [`App::open`] builds the shared state from a [`Config`] and a data directory; [`serve()`]
//! runs the accept loop and the engine until a shutdown signal, then drains and flushes.
#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod formats;
pub mod ground;
pub mod ops;
pub mod router;
pub mod serve;
pub mod vendor_callbacks;

pub use app::{App, Bootstrap};
pub use config::Config;
pub use serve::serve;
