//! What the engine counts for `GET /metrics`: task durations by format and final status, how
//! late due tasks are claimed, the credits its ledger entries move, and the submissions that
//! may have reached an upstream whose answer was lost (video tasks here, messages through
//! [`EngineMetrics::ambiguous_submission`] from the server). Registered into a [`Registry`] at
//! each scrape; recording is a few atomic operations.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use store::{LedgerDraft, LedgerKind, Task, TaskKind, TaskStatus};

/// A task's format and status, as labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub format: &'static str,
    pub status: &'static str,
}

impl TaskLabels {
    pub fn of(kind: TaskKind, status: TaskStatus) -> TaskLabels {
        TaskLabels {
            format: format_name(kind),
            status: status.as_str(),
        }
    }
}

/// A channel's name, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub channel: String,
}

/// A ledger entry's kind, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LedgerLabels {
    pub kind: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Task durations run from seconds to hours.
fn task_durations() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// The engine's metrics.
pub struct EngineMetrics {
    task_duration: Histograms<TaskLabels>,
    poller_lag: Histogram,
    ledger_credits: Family<LedgerLabels, Counter>,
    ledger_entries: Family<LedgerLabels, Counter>,
    ambiguous_submissions: Family<ChannelLabels, Counter>,
}

impl Default for EngineMetrics {
    fn default() -> EngineMetrics {
        EngineMetrics {
            task_duration: Family::new_with_constructor(task_durations),
            // 1 ms to about 65 s.
            poller_lag: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            ledger_credits: Family::default(),
            ledger_entries: Family::default(),
            ambiguous_submissions: Family::default(),
        }
    }
}

impl EngineMetrics {
    /// A task reached its final status: how long it took since it was created.
    pub fn finished(&self, task: &Task) {
        let end = task.completed_at.unwrap_or(task.updated_at);
        let secs = end.saturating_sub(task.created_at) as f64;
        self.task_duration
            .get_or_create(&TaskLabels::of(task.kind, task.status))
            .observe(secs);
    }

    /// A due task was claimed `late_ms` after its due time.
    pub fn claimed(&self, late_ms: u64) {
        self.poller_lag.observe(late_ms as f64 / 1000.0);
    }

    /// Ledger entries were written.
    pub fn ledger(&self, drafts: &[LedgerDraft]) {
        for draft in drafts {
            let labels = LedgerLabels {
                kind: draft.kind.as_str(),
            };
            self.ledger_credits
                .get_or_create(&labels)
                .inc_by(draft.amount.unsigned_abs());
            self.ledger_entries.get_or_create(&labels).inc();
        }
    }

    /// Ledger entries of `kind` moving `credits` in all were written (the chat side's charges).
    pub fn ledger_total(&self, kind: LedgerKind, entries: u64, credits: u64) {
        let labels = LedgerLabels {
            kind: kind.as_str(),
        };
        self.ledger_credits.get_or_create(&labels).inc_by(credits);
        self.ledger_entries.get_or_create(&labels).inc_by(entries);
    }

    /// A submission to `channel` may have reached it, but its answer was lost: it was not
    /// sent again, and its task (or message) failed. An operator reconciles these with the
    /// upstream's own records.
    pub fn ambiguous_submission(&self, channel: &str) {
        self.ambiguous_submissions
            .get_or_create(&ChannelLabels {
                channel: channel.to_owned(),
            })
            .inc();
    }

    /// Adds the engine's metrics to `registry` (whose prefix names them `relay_...`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "task_duration_seconds",
            "Time from a task's creation to its final status",
            self.task_duration.clone(),
        );
        registry.register(
            "poller_lag_seconds",
            "How late due tasks were claimed by this instance's engine",
            self.poller_lag.clone(),
        );
        registry.register(
            "ledger_credits",
            "Credits moved by the ledger entries this instance wrote, by entry kind",
            self.ledger_credits.clone(),
        );
        registry.register(
            "ledger_entries",
            "Ledger entries this instance wrote, by kind",
            self.ledger_entries.clone(),
        );
        registry.register(
            "upstream_ambiguous_submissions",
            "Submissions (video tasks and messages) that may have reached an upstream whose answer was lost: not sent again, failed and refunded",
            self.ambiguous_submissions.clone(),
        );
    }
}

/// A task kind's name as the metrics label it: the API's format.
pub fn format_name(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Video => "videos",
        TaskKind::Generation => "generations",
    }
}
