//! What the engine asks of a video channel, whatever speaks behind it: [`VideoChannel`]
//! dispatches to the simulator or to a vendor behind the [`Vendor`] seam, and knows what each
//! of its models can make. The types it speaks in are in `job`; capabilities and their fit to
//! a request in `caps`.

pub mod caps;
pub mod job;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::sim::simulator::Simulator;
use crate::vendors::common::Remote;
use crate::vendors::{self, Vendor, VendorSettings};
use crate::video::caps::{Demand, DemandField, Fit, ModelCaps, Offer};
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, StoredReference, SubmitOutcome, VideoJob,
};

/// A configured video channel: the built-in simulator, or a vendor.
pub enum VideoChannel {
    Simulator(Simulator),
    Vendor(VendorChannel),
}

/// A vendor's channel: its protocol, and what each vendor model it maps to can make.
pub struct VendorChannel {
    kind: &'static str,
    vendor: Box<dyn Vendor>,
    /// By vendor model; a model without an entry can make anything.
    caps: BTreeMap<String, ModelCaps>,
    /// Whether a duration the model does not make may be served by the next longer one.
    nearest_longer: bool,
}

impl VendorChannel {
    pub fn vendor(&self) -> &dyn Vendor {
        &*self.vendor
    }
}

impl VideoChannel {
    /// A channel of vendor `kind` (see [`vendors::REGISTRY`]); `overrides` add to or replace
    /// the kind's built-in model catalog, by vendor model.
    pub fn vendor(
        kind: &str,
        settings: VendorSettings,
        overrides: &BTreeMap<String, ModelCaps>,
        nearest_longer: bool,
    ) -> Result<VideoChannel, String> {
        let registration =
            vendors::registration(kind).ok_or_else(|| format!("no video channel kind {kind}"))?;
        let caps = vendors::catalog(registration, overrides);
        let vendor = (registration.build)(settings, &caps)?;
        Ok(VideoChannel::Vendor(VendorChannel {
            kind: registration.kind,
            vendor,
            caps,
            nearest_longer,
        }))
    }

    pub fn name(&self) -> &str {
        match self {
            VideoChannel::Simulator(sim) => sim.name(),
            VideoChannel::Vendor(v) => v.vendor.remote().name(),
        }
    }

    /// The channel kind as configured (`simulator`, `ark`, `veo`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            VideoChannel::Simulator(_) => "simulator",
            VideoChannel::Vendor(v) => v.kind,
        }
    }

    /// Whether a submission crosses a network, so that its answer can be lost after the
    /// upstream took it (the simulator's is a call in process).
    pub fn is_remote(&self) -> bool {
        !matches!(self, VideoChannel::Simulator(_))
    }

    pub fn serves(&self, model: &str) -> bool {
        match self {
            VideoChannel::Simulator(sim) => sim.serves(model),
            VideoChannel::Vendor(v) => v.vendor.remote().settings.models.iter().any(|m| m == model),
        }
    }

    /// The upstream's name for `model`.
    pub fn upstream_model(&self, model: &str) -> String {
        match self.remote() {
            None => model.to_owned(),
            Some(r) => r
                .settings
                .model_map
                .get(model)
                .cloned()
                .unwrap_or_else(|| model.to_owned()),
        }
    }

    /// What the vendor model `model` maps to can make (`None`: anything).
    pub fn caps(&self, model: &str) -> Option<&ModelCaps> {
        match self {
            VideoChannel::Simulator(_) => None,
            VideoChannel::Vendor(v) => v.caps.get(&self.upstream_model(model)),
        }
    }

    /// This channel's offer for `model`, for [`caps::fit_any`].
    pub fn offer(&self, model: &str) -> Offer<'_> {
        Offer {
            caps: self.caps(model),
            nearest_longer: matches!(self, VideoChannel::Vendor(v) if v.nearest_longer),
        }
    }

    /// How this channel serves `demand` for `model`: the duration and tier it is sent.
    pub fn fit(&self, model: &str, demand: &Demand) -> Result<Fit, DemandField> {
        match self.caps(model) {
            None => Ok(Fit {
                duration: demand.duration,
                resolution: demand.resolution.clone(),
            }),
            Some(caps) => caps::fit(caps, demand, self.offer(model).nearest_longer),
        }
    }

    /// Whether a callback the relay's token let in is also signed as the channel's vendor
    /// signs ([`Vendor::verify_callback`]); the simulator takes no callbacks.
    pub fn verify_callback(&self, callback: &vendors::InboundCallback<'_>) -> Result<(), String> {
        match self {
            VideoChannel::Simulator(_) => Err("the simulator takes no callbacks".into()),
            VideoChannel::Vendor(v) => v.vendor.verify_callback(callback),
        }
    }

    /// The channel's moderation verdict on a finished task: `true` rejects. `reject` is the
    /// task's own `x-relay-sim: reject` directive (honoured by the simulator only).
    pub fn moderation_rejects(&self, prompt: &str, reject: bool) -> bool {
        match self {
            VideoChannel::Simulator(sim) => {
                sim.moderation_rejects(prompt, reject && sim.scenarios())
            }
            // Real upstreams moderate while generating: a finished task passed.
            VideoChannel::Vendor(_) => false,
        }
    }

    /// Polls of one task never come faster than this.
    pub fn min_poll_interval(&self) -> Duration {
        match self {
            VideoChannel::Simulator(sim) => sim.min_poll_interval(),
            VideoChannel::Vendor(v) => v.vendor.remote().settings.min_poll_interval,
        }
    }

    /// Submits `job` with its stored `references` (channels that have no field for them
    /// leave them out, with a warning; the simulator looks at them and renders without them).
    pub async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        match self {
            VideoChannel::Simulator(sim) => sim.submit(job, references).await,
            VideoChannel::Vendor(v) => v.vendor.submit(job, references).await,
        }
    }

    /// `submitted_ms` is when the upstream accepted the task (unix ms).
    pub async fn poll(
        &self,
        job: &VideoJob,
        upstream_id: &str,
        submitted_ms: u64,
        now_ms: u64,
    ) -> PollOutcome {
        match self {
            VideoChannel::Simulator(sim) => sim.poll(job, upstream_id, submitted_ms, now_ms).await,
            VideoChannel::Vendor(v) => v.vendor.poll(job, upstream_id).await,
        }
    }

    /// Best effort: asks the upstream to stop a task.
    pub async fn cancel(&self, upstream_id: &str) {
        match self {
            VideoChannel::Simulator(sim) => sim.cancel(upstream_id).await,
            VideoChannel::Vendor(v) => v.vendor.cancel(upstream_id).await,
        }
    }

    /// Starts the download of a result URL given by this channel's `poll`, with the
    /// channel's key when the URL is on its own origin. The body is streamed.
    pub async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        match self {
            VideoChannel::Simulator(_) => Err(UpstreamError::Build(
                "the simulator has no result URLs".into(),
            )),
            VideoChannel::Vendor(v) => v.vendor.download(url).await,
        }
    }

    /// The channel test: reachable and key accepted, or the precise reason.
    pub async fn check(&self) -> ChannelCheck {
        match self {
            VideoChannel::Simulator(_) => ChannelCheck {
                verdict: CheckVerdict::Ok,
                detail: "built in (the simulator runs inside the relay)".into(),
            },
            VideoChannel::Vendor(v) => v.vendor.check().await,
        }
    }

    fn remote(&self) -> Option<&Remote> {
        match self {
            VideoChannel::Simulator(_) => None,
            VideoChannel::Vendor(v) => Some(v.vendor.remote()),
        }
    }
}
