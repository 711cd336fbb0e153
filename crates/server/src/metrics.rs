//! What `GET /metrics` reports (CONTRACT §5.4; the answer is put together in `admin`).
//!
//! What is counted per request is a counter and a histogram bucket found by a static route
//! label, and per message three counters found by the model's name: no allocation, no lock
//! held across an await. Everything else (tasks by status from the store, channels' calls and
//! health, open connections, rate-limit refusals) is read when scraped.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::conns::Gate;

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

/// Request latencies, 100 µs to about 100 s.
fn latencies() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
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
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// By configured model name; one entry for the others.
    chat: HashMap<String, ChatCounts>,
    other_chat: ChatCounts,
    /// The server's connection gate, once serving.
    pub(crate) gate: OnceLock<Arc<Gate>>,
}

impl Metrics {
    /// Counters for the chat models in `models` (the configuration's).
    pub fn new<'a>(models: impl IntoIterator<Item = &'a String>) -> Metrics {
        Metrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latencies),
            chat: models
                .into_iter()
                .map(|m| (m.clone(), ChatCounts::default()))
                .collect(),
            other_chat: ChatCounts::default(),
            gate: OnceLock::new(),
        }
    }

    /// A request to `route` answered `status` after `took` (to its head).
    pub fn request(&self, route: &'static str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels { route, status })
            .inc();
        self.latency
            .get_or_create(&RouteLabels { route })
            .observe(took.as_secs_f64());
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
        registry.register(
            "http_requests",
            "Requests answered, by route and status",
            self.requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time to a request's answer head, by route",
            self.latency.clone(),
        );
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
