//! What `GET /metrics` reports (CONTRACT §5.4; the answer is put together in `admin`).
//!
//! What is counted per request is a counter and a histogram bucket found by the route's index,
//! and per message three counters found by the model's name: no allocation, no lock
//! held across an await. Everything else (tasks by status from the store, channels' calls and
//! health, open connections, rate-limit refusals and buckets, failed authentications) is read
//! when scraped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::serve::conns::Gate;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    model: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    pub(crate) channel: String,
    pub(crate) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ChannelLabels {
    pub(crate) channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ScopeLabels {
    pub(crate) scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CredentialLabels {
    pub(crate) credential: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    pub(crate) kind: &'static str,
}

/// Request latencies, 100 µs to about 100 s.
fn latencies() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// Every route's label: its method and path template (`router::routes::Route::slot` is its
/// place here), then the label of requests no route takes.
pub const ROUTES: [&str; 61] = [
    "GET /healthz",
    "GET /readyz",
    "GET /openapi.yaml",
    "GET /metrics",
    "GET /files/{path}",
    "POST /callbacks/ark/{channel}",
    "POST /v1/videos",
    "GET /v1/videos",
    "GET /v1/videos/{task_id}",
    "DELETE /v1/videos/{task_id}",
    "GET /v1/videos/{task_id}/content",
    "POST /v1/videos/{task_id}/cancel",
    "POST /v1/videos/{task_id}/remix",
    "POST /v1/video/generations",
    "GET /v1/video/generations",
    "GET /v1/video/generations/{task_id}",
    "POST /v1/video/generations/{task_id}/cancel",
    "GET /v1/video/models",
    "GET /v1/video/models/{model_id}",
    "POST /api/generation/video/moderation-result",
    "POST /v1/asset-libraries",
    "GET /v1/asset-libraries",
    "GET /v1/asset-libraries/{library_id}",
    "DELETE /v1/asset-libraries/{library_id}",
    "POST /v1/asset-libraries/{library_id}/assets",
    "GET /v1/asset-libraries/{library_id}/assets",
    "GET /v1/assets/{asset_id}",
    "DELETE /v1/assets/{asset_id}",
    "POST /admin/keys",
    "GET /admin/keys",
    "GET /admin/keys/{key_id}",
    "DELETE /admin/keys/{key_id}",
    "PATCH /admin/keys/{key_id}",
    "GET /admin/keys/{key_id}/ledger",
    "POST /admin/keys/{key_id}/webhook-secret",
    "GET /console",
    "GET /console/{file}",
    "GET /admin/webhooks",
    "GET /admin/tasks",
    "GET /admin/channels",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
    "GET /v1/models/{model_id}",
    "POST /v1/messages/batches",
    "GET /v1/messages/batches",
    "GET /v1/messages/batches/{message_batch_id}",
    "DELETE /v1/messages/batches/{message_batch_id}",
    "POST /v1/messages/batches/{message_batch_id}/cancel",
    "GET /v1/messages/batches/{message_batch_id}/results",
    "POST /v1/videos/edits",
    "POST /v1/videos/extensions",
    "POST /v1/videos/characters",
    "GET /v1/videos/characters/{character_id}",
    "GET /v1/videos/characters",
    "DELETE /v1/videos/characters/{character_id}",
    "POST /admin/channels/{name}/test",
    "POST /callbacks/kling/{channel}",
    "POST /callbacks/minimax/{channel}",
    "POST /callbacks/vidu/{channel}",
    "unmatched",
];

/// The slot of a request that matched no route.
pub const UNMATCHED: usize = ROUTES.len() - 1;

/// The statuses counted in a route's own counters (sorted); others are counted in a map.
const STATUSES: [u16; 27] = [
    200, 201, 204, 206, 301, 302, 304, 400, 401, 402, 403, 404, 405, 408, 409, 413, 415, 416, 422,
    429, 431, 500, 501, 502, 503, 504, 507,
];

/// One route's counts: answers by status, and their latencies.
#[derive(Debug)]
struct RouteCounts {
    statuses: [Counter; STATUSES.len()],
    latency: Histogram,
}

/// Every route's counts, by slot: found by index, with no hashing or lock on the request path
/// (but for a status outside [`STATUSES`]). Encoded at a scrape as two families.
#[derive(Debug)]
struct RouteTable {
    routes: Box<[RouteCounts]>,
    /// Answers whose status is not in [`STATUSES`], by slot and status.
    others: Mutex<HashMap<(usize, u16), u64>>,
}

impl Collector for RouteTable {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut counts: Vec<(RequestLabels, u64)> = Vec::new();
        for (slot, route) in self.routes.iter().enumerate() {
            for (status, counter) in STATUSES.iter().zip(&route.statuses) {
                let n = counter.get();
                if n > 0 {
                    counts.push((
                        RequestLabels {
                            route: ROUTES[slot],
                            status: *status,
                        },
                        n,
                    ));
                }
            }
        }
        {
            let others = self.others.lock().unwrap_or_else(|e| e.into_inner());
            counts.extend(others.iter().map(|(&(slot, status), &n)| {
                let route = ROUTES.get(slot).copied().unwrap_or("unmatched");
                (RequestLabels { route, status }, n)
            }));
        }
        let mut family = encoder.encode_descriptor(
            "http_requests",
            "Requests answered, by route and status",
            None,
            MetricType::Counter,
        )?;
        for (labels, n) in &counts {
            ConstCounter::new(*n).encode(family.encode_family(labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "http_request_duration_seconds",
            "Time to a request's answer head, by route",
            None,
            MetricType::Histogram,
        )?;
        // Only the routes that answered something.
        for (slot, route) in self.routes.iter().enumerate() {
            let label = ROUTES[slot];
            if !counts.iter().any(|(l, _)| l.route == label) {
                continue;
            }
            let labels = RouteLabels { route: label };
            route.latency.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// One chat model's counts.
#[derive(Debug, Default)]
struct ChatCounts {
    input: Counter,
    output: Counter,
    credits: Counter,
}

/// The label of chat models the configuration does not name.
const OTHER_MODEL: &str = "other";

/// What the request path counts.
pub struct Metrics {
    routes: Arc<RouteTable>,
    /// By configured model name; one entry for the others.
    chat: foldhash::HashMap<String, ChatCounts>,
    other_chat: ChatCounts,
    /// The server's connection gate, once serving.
    pub(crate) gate: OnceLock<Arc<Gate>>,
}

impl Metrics {
    /// Counters for the chat models in `models` (the configuration's).
    pub fn new<'a>(models: impl IntoIterator<Item = &'a String>) -> Metrics {
        Metrics {
            routes: Arc::new(RouteTable {
                routes: ROUTES
                    .iter()
                    .map(|_| RouteCounts {
                        statuses: Default::default(),
                        latency: latencies(),
                    })
                    .collect(),
                others: Mutex::default(),
            }),
            chat: models
                .into_iter()
                .map(|m| (m.clone(), ChatCounts::default()))
                .collect(),
            other_chat: ChatCounts::default(),
            gate: OnceLock::new(),
        }
    }

    /// A request to the route in `slot` of [`ROUTES`] answered `status` after `took` (to its
    /// head).
    pub fn request(&self, slot: usize, status: u16, took: Duration) {
        let Some(counts) = self.routes.routes.get(slot) else {
            return;
        };
        match STATUSES.binary_search(&status) {
            Ok(i) => {
                counts.statuses[i].inc();
            }
            Err(_) => {
                let mut others = self.routes.others.lock().unwrap_or_else(|e| e.into_inner());
                *others.entry((slot, status)).or_default() += 1;
            }
        }
        counts.latency.observe(took.as_secs_f64());
    }

    /// A message to `model` was billed for these tokens and credits.
    pub fn chat(&self, model: &str, input: u64, output: u64, credits: u64) {
        let counts = self.chat.get(model).unwrap_or(&self.other_chat);
        counts.input.inc_by(input);
        counts.output.inc_by(output);
        counts.credits.inc_by(credits);
    }

    /// Adds the request path's metrics to `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.routes.clone()));
        let tokens = Family::<TokenLabels, Counter>::default();
        let credits = Family::<ModelLabels, Counter>::default();
        let models = self
            .chat
            .iter()
            .map(|(m, c)| (m.as_str(), c))
            .chain([(OTHER_MODEL, &self.other_chat)]);
        for (model, counts) in models {
            for (kind, counter) in [("input", &counts.input), ("output", &counts.output)] {
                tokens
                    .get_or_create(&TokenLabels {
                        model: model.to_owned(),
                        kind,
                    })
                    .inc_by(counter.get());
            }
            credits
                .get_or_create(&ModelLabels {
                    model: model.to_owned(),
                })
                .inc_by(counts.credits.get());
        }
        registry.register(
            "chat_tokens",
            "Tokens of billed messages, by model and kind (input, output)",
            tokens,
        );
        registry.register(
            "chat_credits",
            "Credits charged for messages, by model",
            credits,
        );
    }
}
