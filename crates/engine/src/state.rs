//! The engine's shared state: the store, the blobs, the video channels and their routing,
//! built from parts the caller has already constructed.

use std::collections::HashMap;
use std::sync::Arc;

use channels::{Demand, Fit, Offer, Refusal, VideoChannel};
use store::{BlobStore, Store};
use tokio::sync::Notify;

use crate::handed::Handed;
use crate::metrics::EngineMetrics;
use crate::routing::{ChannelRoute, Routing};
use crate::settings::TasksConfig;
use crate::settlement::Prices;
use crate::stats::ChannelStats;

/// A URL upstreams can fetch a stored blob at (the relay's signed `/files/...` URL), given
/// when other machines can reach the relay.
pub type PublicUrls = Box<dyn Fn(&str) -> String + Send + Sync>;

/// What the engine is built from.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub blobs: Arc<dyn BlobStore>,
    /// The video channels, in configuration order.
    pub channels: Vec<Arc<VideoChannel>>,
    /// How each channel is routed to and capped.
    pub routes: Vec<ChannelRoute>,
    /// Upstream calls by channel name (shared with the chat side, which counts its own).
    pub stats: Arc<HashMap<String, ChannelStats>>,
    pub settings: TasksConfig,
    pub public_urls: Option<PublicUrls>,
    /// Each video model's price, for settling on what the vendor made.
    pub prices: Prices,
}

/// Drives every unfinished video task to a final status (see [`crate::run`]). Request
/// handlers hand it new tasks ([`Engine::enqueue`]) and cancels ([`Engine::cancel`]).
pub struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) blobs: Arc<dyn BlobStore>,
    pub(crate) channels: Vec<Arc<VideoChannel>>,
    pub(crate) routing: Routing,
    pub(crate) stats: Arc<HashMap<String, ChannelStats>>,
    pub(crate) settings: TasksConfig,
    pub(crate) public_urls: Option<PublicUrls>,
    pub(crate) prices: Prices,
    pub(crate) metrics: EngineMetrics,
    /// Wakes the engine to look at the store when a request changed a task's schedule (or
    /// stored a new task it could not hand over).
    pub(crate) wake: Notify,
    /// New tasks stored leased to this relay, for the loop to start without claiming them.
    pub(crate) handed: Handed,
}

impl Engine {
    pub fn new(parts: Parts) -> Engine {
        let routing = Routing::new(
            &parts.routes,
            parts.settings.channel_failure_threshold,
            parts.settings.channel_cooldown_ms,
        );
        Engine {
            store: parts.store,
            blobs: parts.blobs,
            channels: parts.channels,
            routing,
            stats: parts.stats,
            settings: parts.settings,
            public_urls: parts.public_urls,
            prices: parts.prices,
            metrics: EngineMetrics::default(),
            wake: Notify::new(),
            handed: Handed::default(),
        }
    }

    /// What the engine counts, for `GET /metrics`.
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn channels(&self) -> &[Arc<VideoChannel>] {
        &self.channels
    }

    /// The channel that runs `model`, if any.
    pub fn channel_for(&self, model: &str) -> Option<&Arc<VideoChannel>> {
        self.channels.iter().find(|c| c.serves(model))
    }

    /// What each channel serving `model` offers for it, in configuration order.
    pub fn offers(&self, model: &str) -> Vec<Offer<'_>> {
        self.channels
            .iter()
            .filter(|c| c.serves(model))
            .map(|c| c.offer(model))
            .collect()
    }

    /// How a channel of `model` serves `demand` (health aside): the fit of the first that
    /// can, or the field none of them can serve with what they can do instead. Every request
    /// is checked so before it is charged or stored; routing then chooses only among the
    /// channels that fit.
    pub fn fit(&self, model: &str, demand: &Demand) -> Result<Fit, Refusal> {
        channels::fit_any(&self.offers(model), demand)
    }

    pub fn channel_named(&self, name: &str) -> Option<&Arc<VideoChannel>> {
        self.channels.iter().find(|c| c.name() == name)
    }

    /// Channel choice, health and call caps.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    pub fn settings(&self) -> &TasksConfig {
        &self.settings
    }

    /// Looks for due tasks now rather than at the next tick.
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}
