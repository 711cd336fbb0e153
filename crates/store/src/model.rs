//! The records the store keeps. Plain data: serde-encoded into the backend.

use serde::{Deserialize, Serialize};

/// Status of a task of either format. Formats name them their own way on the wire
/// (`in_progress`/`completed` in the first, `running`/`succeeded` in the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The status's name, as its JSON has it.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// `succeeded`, `failed` and `cancelled` are final: a final task never changes status again.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

/// Which API created a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// First format, `/v1/videos`.
    Video,
    /// Second format, `/v1/video/generations`.
    Generation,
}

impl TaskKind {
    pub const ALL: [TaskKind; 2] = [TaskKind::Video, TaskKind::Generation];

    /// The kind's name, as its JSON has it.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskKind::Video => "video",
            TaskKind::Generation => "generation",
        }
    }
}

/// A task handed out by [`crate::Store::claim_due`], with the due time it was claimed at.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The task as claimed: its `next_poll_ms` is the end of the lease.
    pub task: Task,
    /// When the task was due (unix milliseconds), before the lease moved it.
    pub due_ms: u64,
}

/// How many tasks of one kind are in one status, from [`crate::Store::task_counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskCount {
    pub kind: TaskKind,
    pub status: TaskStatus,
    pub count: u64,
}

/// `{"code", "message"}` of a failed task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// Blob ids of what a finished task produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outputs {
    pub video: Option<String>,
    pub thumbnail: Option<String>,
    pub last_frame: Option<String>,
    /// A grid of frames (`GET /v1/videos/{id}/content?variant=spritesheet`), when the channel
    /// made one.
    #[serde(default)]
    pub spritesheet: Option<String>,
    /// Size of the video blob in bytes.
    pub video_bytes: Option<u64>,
}

/// A task's request parameters, kept as the JSON text they were written as: each format
/// reads its own shape from them when it needs them, without a generic JSON tree in between
/// (a status poll reads every task it answers).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(Box<serde_json::value::RawValue>);

impl Params {
    /// `value` written as JSON.
    pub fn new<T: Serialize>(value: &T) -> Result<Params, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Params)
    }

    /// The parameters read as `T`.
    pub fn read<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The JSON, to be written as it is.
    pub fn raw(&self) -> &serde_json::value::RawValue {
        &self.0
    }
}

impl PartialEq for Params {
    fn eq(&self, other: &Params) -> bool {
        self.0.get() == other.0.get()
    }
}

/// One video task, of either format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Public id (`video_<ulid>` / `gen_<ulid>`); sorts by creation time.
    pub id: String,
    pub kind: TaskKind,
    /// Id of the key that created it; other keys' owners never see it.
    pub owner: String,
    pub model: String,
    pub status: TaskStatus,
    /// 0..=100, never goes down.
    pub progress: u8,
    /// Unix seconds.
    pub created_at: u64,
    pub updated_at: u64,
    pub completed_at: Option<u64>,
    /// When the content stops being downloadable (unix seconds).
    pub expires_at: Option<u64>,
    /// Unix milliseconds past which an unfinished task times out.
    pub deadline_ms: u64,
    /// Unix milliseconds when the engine should look at the task next; `None` once final.
    pub next_poll_ms: Option<u64>,
    /// The normalised request, as the task's format keeps it.
    pub params: Params,
    /// Channel that runs the task, once chosen.
    pub channel: Option<String>,
    /// The upstream's own id; never shown to clients.
    pub upstream_id: Option<String>,
    /// Unix milliseconds when the upstream accepted the task.
    pub submitted_ms: Option<u64>,
    /// Unix milliseconds of the engine's last poll of the upstream about the task (answered
    /// or not); what bounds how soon a vendor's callback can have it polled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polled_ms: Option<u64>,
    /// Submission or poll attempts that failed in a row (for retries and backoff).
    pub attempts: u32,
    /// `x-relay-sim` directives given at submission (simulator only).
    pub sim: Option<String>,
    pub outputs: Outputs,
    pub error: Option<TaskError>,
    pub warnings: Vec<String>,
    /// Credits pre-deducted when the task was accepted.
    pub price: i64,
    /// Where the task's final status is announced (a signed webhook): the request's
    /// `callback_url`, or its key's `webhook_url` when it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyStatus {
    Active,
    Revoked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    pub rps: u32,
    pub burst: u32,
}

/// An API key. Only the hash of the secret is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    /// `key_<ulid>`.
    pub id: String,
    pub name: String,
    pub group: String,
    /// Lowercase hex SHA-256 of the secret.
    pub hash: String,
    /// First characters of the secret, for operators to recognise it.
    pub prefix: String,
    /// Remaining credits; `None` is unlimited.
    pub quota: Option<i64>,
    /// Credits used so far (goes down on a refund).
    pub quota_used: i64,
    pub rate_limit: Option<RateLimit>,
    /// Models the key may use; `None` is all.
    pub models: Option<Vec<String>>,
    /// Unix seconds.
    pub expires_at: Option<u64>,
    pub status: KeyStatus,
    pub created_at: u64,
    /// Default `callback_url` of the key's tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
    /// The secret webhooks of the key's tasks are signed with (`whsec_<base64>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerKind {
    Prededuct,
    Settle,
    Refund,
    Charge,
}

impl LedgerKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Prededuct => "prededuct",
            LedgerKind::Settle => "settle",
            LedgerKind::Refund => "refund",
            LedgerKind::Charge => "charge",
        }
    }
}

/// A credit movement the caller asks for; the store fills in id, balance and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerDraft {
    pub key_id: String,
    pub task_id: String,
    pub kind: LedgerKind,
    /// Signed from the key's side: negative takes credits, positive returns them.
    pub amount: i64,
}

/// A charge of work that has no task (a chat message), for [`crate::Store::charges`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub key_id: String,
    /// The message id, the ledger entry's `task_id`.
    pub task_id: String,
    /// Credits to take, at least 0.
    pub amount: i64,
}

/// A credit movement as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub id: String,
    pub key_id: String,
    pub task_id: String,
    pub kind: LedgerKind,
    pub amount: i64,
    /// Remaining quota after the movement; `None` when the key is unlimited.
    pub balance_after: Option<i64>,
    /// Unix seconds.
    pub at: u64,
}

/// Listing order by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    #[default]
    Desc,
    Asc,
}

/// What `list_tasks` returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskQuery {
    pub owner: String,
    pub kind: Option<TaskKind>,
    /// Exclusive cursor: a task id.
    pub after: Option<String>,
    /// 1..=100.
    pub limit: usize,
    pub order: Order,
}

/// Tasks of every owner, for operators: newest first, each filter optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdminTaskQuery {
    pub status: Option<TaskStatus>,
    pub kind: Option<TaskKind>,
    pub model: Option<String>,
    pub owner: Option<String>,
    /// Exclusive cursor: a task id; the page holds tasks created before it.
    pub after: Option<String>,
    /// 1..=1000.
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
}

/// Status of an asset. The only moves are `processing` -> `active` | `failed` and
/// `active` -> `expired`; `failed` and `expired` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetStatus {
    Processing,
    Active,
    Failed,
    Expired,
}

impl AssetStatus {
    pub const fn is_final(self) -> bool {
        matches!(self, AssetStatus::Failed | AssetStatus::Expired)
    }

    /// Whether `self` -> `to` is one of the allowed moves (staying put is not a move).
    pub const fn can_move_to(self, to: AssetStatus) -> bool {
        matches!(
            (self, to),
            (AssetStatus::Processing, AssetStatus::Active)
                | (AssetStatus::Processing, AssetStatus::Failed)
                | (AssetStatus::Active, AssetStatus::Expired)
        )
    }
}

/// What an asset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetType {
    Image,
    Video,
    Audio,
}

/// A character (`POST /v1/videos/characters`): a named figure taken from an uploaded video,
/// kept for the key that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Character {
    /// `char_<ulid>`.
    pub id: String,
    /// Id of the key that created it; other keys never see it.
    pub owner: String,
    pub name: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Blob id of the video it was taken from.
    pub video: String,
    /// Size of that video in bytes.
    pub video_bytes: u64,
}

/// An asset library: a named set of assets of one owner, in one channel family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Library {
    /// `lib_<ulid>`; sorts by creation time.
    pub id: String,
    /// Id of the key that created it; other keys never see it.
    pub owner: String,
    pub name: String,
    pub family: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Assets in the library; kept by the store (what a caller passes is ignored).
    pub asset_count: u64,
}

/// Where an asset's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetSource {
    /// Uploaded; the bytes were committed as the asset's blob before the record was written.
    Upload,
    /// To be fetched from this URL (or `data:` URI).
    Url(String),
}

/// `{"code", "message"}` of a failed asset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetError {
    pub code: String,
    pub message: String,
}

/// One asset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetRecord {
    /// `asset_<ulid>`; sorts by creation time.
    pub id: String,
    pub owner: String,
    pub library_id: String,
    pub family: String,
    /// The type the upload declared, if any.
    pub declared_type: Option<AssetType>,
    /// The declared type, or the one found by processing.
    pub asset_type: Option<AssetType>,
    pub status: AssetStatus,
    pub source: AssetSource,
    /// Blob id of the bytes, once stored.
    pub blob: Option<String>,
    /// `jpeg`, `png`, `mp4`, ... once processed.
    pub format: Option<String>,
    pub bytes: Option<u64>,
    /// Pixel size of an image.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// Unix seconds.
    pub created_at: u64,
    pub updated_at: u64,
    /// When an active asset becomes `expired` (unix seconds).
    pub expires_at: Option<u64>,
    pub error: Option<AssetError>,
}

/// What `list_assets` returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AssetQuery {
    pub library_id: String,
    pub status: Option<AssetStatus>,
    pub asset_type: Option<AssetType>,
    /// Exclusive cursor: an asset id.
    pub after: Option<String>,
    /// 1..=100.
    pub limit: usize,
    pub order: Order,
}

/// Where a webhook delivery stands: `pending` until a receiver answered 2xx (`delivered`) or
/// its retries ran out (`failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookStatus {
    Pending,
    Delivered,
    Failed,
}

impl WebhookStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            WebhookStatus::Pending => "pending",
            WebhookStatus::Delivered => "delivered",
            WebhookStatus::Failed => "failed",
        }
    }
}

/// One try at delivering a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookAttempt {
    /// Unix milliseconds when the request was sent.
    pub at_ms: u64,
    /// The receiver's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why no answer came (connect error, timeout, refused address).
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// A webhook of a task that reached a final status: written by [`crate::Store::transition`] in
/// the transaction that ended the task, then delivered (and retried) by the relay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    /// `evt_<ulid>`: the event id, the same on every attempt; sorts by creation time.
    pub id: String,
    pub task_id: String,
    /// The task's key.
    pub owner: String,
    pub url: String,
    /// The task as it ended (what the event's `data` is rendered from).
    pub task: Task,
    /// Unix milliseconds when the task ended.
    pub created_ms: u64,
    pub status: WebhookStatus,
    /// Unix milliseconds of the next attempt (or the end of the current attempt's lease);
    /// `None` once delivered or failed.
    pub next_attempt_ms: Option<u64>,
    /// Oldest first.
    pub attempts: Vec<WebhookAttempt>,
}

/// What an attempt at a delivery leads to, for [`crate::Store::record_webhook_attempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// The receiver answered 2xx.
    Delivered,
    /// Try again at this time (unix milliseconds).
    Retry { at_ms: u64 },
    /// No more tries.
    Failed,
}

/// A due webhook as [`crate::Store::pick_webhooks`] shows it before taking it: whose it is
/// and where it goes, read from the due index without the whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueWebhook<'a> {
    pub id: &'a str,
    /// The task's key.
    pub owner: &'a str,
    pub url: &'a str,
}

/// What [`crate::Store::pick_webhooks`] does with a due webhook it looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookPick {
    /// Claim it: leased and handed out.
    Take,
    /// Leave it due and look at the next one.
    Skip,
    /// Make it due at this time (unix milliseconds) instead, recording no attempt, and look at
    /// the next one.
    Defer { at_ms: u64 },
    /// Look no further.
    Stop,
}

/// The caller's choice in [`crate::Store::pick_webhooks`], asked about each due webhook in turn.
pub type WebhookPicker<'a> = &'a mut (dyn FnMut(&DueWebhook<'_>) -> WebhookPick + Send);

/// Webhooks for operators: newest first, each filter optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookQuery {
    pub task_id: Option<String>,
    pub status: Option<WebhookStatus>,
    /// Exclusive cursor: a webhook id; the page holds older ones.
    pub after: Option<String>,
    /// 1..=1000.
    pub limit: usize,
}

impl Webhook {
    /// The webhook a task that has just moved to a final status announces itself with, when it
    /// has a `callback_url`: `pending`, due at `now_ms`. Both backends write it in the
    /// transaction of the move.
    pub(crate) fn for_final(task: &Task, now_ms: u64) -> Option<Webhook> {
        let url = task.callback_url.clone()?;
        if !task.status.is_final() {
            return None;
        }
        Some(Webhook {
            id: format!("evt_{}", ulid::Ulid::new()),
            task_id: task.id.clone(),
            owner: task.owner.clone(),
            url,
            task: task.clone(),
            created_ms: now_ms,
            status: WebhookStatus::Pending,
            next_attempt_ms: Some(now_ms),
            attempts: Vec::new(),
        })
    }

    /// `attempt` appended and `outcome` applied; a webhook already delivered or failed keeps
    /// its status.
    pub(crate) fn record(&mut self, attempt: &WebhookAttempt, outcome: WebhookOutcome) {
        self.attempts.push(attempt.clone());
        if self.status != WebhookStatus::Pending {
            return;
        }
        match outcome {
            WebhookOutcome::Delivered => {
                self.status = WebhookStatus::Delivered;
                self.next_attempt_ms = None;
            }
            WebhookOutcome::Failed => {
                self.status = WebhookStatus::Failed;
                self.next_attempt_ms = None;
            }
            WebhookOutcome::Retry { at_ms } => self.next_attempt_ms = Some(at_ms),
        }
    }

    /// Whether `query`'s filters (not its cursor) let it through.
    pub(crate) fn matches(&self, query: &WebhookQuery) -> bool {
        query.task_id.as_deref().is_none_or(|t| self.task_id == t)
            && query.status.is_none_or(|s| self.status == s)
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
