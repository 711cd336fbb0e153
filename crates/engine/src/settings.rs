//! The engine's settings: the configuration's `[tasks]` table.

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TasksConfig {
    pub timeout_secs: u64,
    pub poll_interval_max_ms: u64,
    pub submit_attempts: u32,
    pub content_ttl_secs: u64,
    /// Polls of one task on a remote channel never come faster than this.
    pub poll_interval_min_ms: u64,
    /// Polls answered with an unknown status before the task fails.
    pub unknown_status_polls: u32,
    /// Largest result file downloaded from an upstream.
    pub max_result_bytes: u64,
    /// Failed upstream calls in a row that mark a channel unhealthy.
    pub channel_failure_threshold: u32,
    /// How long an unhealthy channel is skipped before one probe goes through.
    pub channel_cooldown_ms: u64,
    /// How long a task the engine claimed is held from every other claimer (another relay
    /// on the same store): longer than one step of a task may take (an upstream call, a
    /// result download); a dead instance's tasks are taken over after it.
    pub claim_lease_secs: u64,
}
