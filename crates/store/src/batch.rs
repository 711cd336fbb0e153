//! Message batches: a batch's record and its requests, each request with its result once it
//! has one. A result is recorded with its charge in one transaction
//! ([`crate::Store::record_batch_results`]), so a request is charged exactly once, whatever
//! stops the process in between: a request with a result is never run or charged again.

use serde::{Deserialize, Serialize};

use crate::model::{Charge, Params};

/// Where a batch is: its requests being run, being canceled, or all of them with a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    InProgress,
    Canceling,
    Ended,
}

impl BatchStatus {
    /// The status's name, as its JSON has it.
    pub const fn as_str(self) -> &'static str {
        match self {
            BatchStatus::InProgress => "in_progress",
            BatchStatus::Canceling => "canceling",
            BatchStatus::Ended => "ended",
        }
    }
}

/// How a request of a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchResultKind {
    Succeeded,
    Errored,
    Canceled,
    Expired,
}

/// The requests of a batch by where they are; they always add up to the batch's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCounts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

impl BatchCounts {
    /// Moves one request from `processing` to `kind`.
    pub fn record(&mut self, kind: BatchResultKind) {
        self.processing = self.processing.saturating_sub(1);
        match kind {
            BatchResultKind::Succeeded => self.succeeded += 1,
            BatchResultKind::Errored => self.errored += 1,
            BatchResultKind::Canceled => self.canceled += 1,
            BatchResultKind::Expired => self.expired += 1,
        }
    }
}

/// One message batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// `msgbatch_<ulid>`; sorts by creation time.
    pub id: String,
    /// Id of the key that created it; other keys never see it.
    pub owner: String,
    pub status: BatchStatus,
    pub counts: BatchCounts,
    /// Unix milliseconds.
    pub created_ms: u64,
    /// Past it, requests not yet run end `expired`.
    pub expires_ms: u64,
    pub ended_ms: Option<u64>,
    pub cancel_ms: Option<u64>,
    /// The client's `anthropic-version` at creation, sent with each request.
    pub version: String,
    /// `x-relay-sim` directives given at creation (simulator only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<String>,
}

/// One request of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchItem {
    /// Its place in the batch, from 0.
    pub index: u32,
    pub custom_id: String,
    /// The request's `params`, as the client sent them.
    pub params: Params,
    /// `None` until the request ended.
    pub result: Option<BatchOutcome>,
}

/// How a request ended: its kind and the result object as the results file has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchOutcome {
    pub kind: BatchResultKind,
    pub result: Params,
}

/// A result to record, with the charge of the request (a succeeded one's usage).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    pub index: u32,
    pub outcome: BatchOutcome,
    pub charge: Option<Charge>,
}
