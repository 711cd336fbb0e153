//! The task engine: drives every unfinished video task to a final status through the store
//! and the video channels.
//!
//! It knows the task formats only through [`formats`] (how a stored task becomes a channel's
//! job), never through HTTP. Request handlers hand it tasks ([`Engine::enqueue`]) and cancels
//! ([`Engine::cancel`]); [`run`] drives the rest: submit (with failover between channels),
//! poll, download the results, commit them with the settlement, or fail with the refund.
#![forbid(unsafe_code)]

#[cfg(test)]
mod billing_props;
mod calls;
pub mod clock;
mod commit;
mod download;
pub mod formats;
mod handed;
mod intake;
mod jobs;
pub mod metrics;
mod poll;
pub mod routing;
mod run;
mod schedule;
mod settings;
pub mod settlement;
mod state;
mod stats;
pub mod steps;
mod submit;

pub use clock::{now_ms, now_secs};
pub use metrics::EngineMetrics;
pub use routing::{ChannelRoute, Health, Routing};
pub use run::run;
pub use settings::TasksConfig;
pub use settlement::{ModelPrice, Prices};
pub use state::{Engine, Parts, PublicUrls};
pub use stats::ChannelStats;
