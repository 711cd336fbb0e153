//! The text the enums are kept as in columns (the names their JSON has).

use crate::{AssetStatus, AssetType, LedgerKind, TaskKind, TaskStatus};

pub(super) const fn task_status(s: TaskStatus) -> &'static str {
    s.as_str()
}

pub(super) const fn task_kind(k: TaskKind) -> &'static str {
    k.as_str()
}

pub(super) const fn asset_status(s: AssetStatus) -> &'static str {
    match s {
        AssetStatus::Processing => "processing",
        AssetStatus::Active => "active",
        AssetStatus::Failed => "failed",
        AssetStatus::Expired => "expired",
    }
}

pub(super) const fn asset_type(t: AssetType) -> &'static str {
    match t {
        AssetType::Image => "image",
        AssetType::Video => "video",
        AssetType::Audio => "audio",
    }
}

pub(super) fn ledger_kind(name: &str) -> Option<LedgerKind> {
    [
        LedgerKind::Prededuct,
        LedgerKind::Settle,
        LedgerKind::Refund,
        LedgerKind::Charge,
    ]
    .into_iter()
    .find(|k| k.as_str() == name)
}
