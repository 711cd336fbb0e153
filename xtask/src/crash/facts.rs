//! What the checks read after the last start, through the public and admin APIs: every
//! task's own path (waiting until the acknowledged ones end), `/admin/tasks`, the key's ledger
//! and its balance.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::bail;
use http::StatusCode;
use serde_json::Value;

use super::conn::Conn;
use super::site::{ADMIN_TOKEN, QUOTA};
use super::workload::Format;

/// How long every acknowledged task gets to end after the last start.
pub const FINAL_DEADLINE: Duration = Duration::from_secs(180);

/// What the last start shows of one task, through its own path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Final(String),
    /// Still not final when the wait ended.
    Unfinished(String),
    /// `404`.
    Lost,
    /// An id of neither format.
    Foreign,
}

/// Everything the checks read, gathered through the APIs after the last start.
#[derive(Debug, Default)]
pub struct Facts {
    pub quota: i64,
    pub acked: BTreeSet<String>,
    /// Every task the load, the admin list or the ledger names.
    pub tasks: BTreeMap<String, Found>,
    /// `/admin/tasks` of the key: id -> status.
    pub listed: HashMap<String, String>,
    /// The key's ledger, oldest first.
    pub entries: Vec<Value>,
    /// `quota_remaining` of the key.
    pub remaining: Option<i64>,
}

/// Reads a task through its own path.
async fn find(conn: &mut Conn, secret: &str, id: &str) -> anyhow::Result<Found> {
    let Some(format) = Format::of(id) else {
        return Ok(Found::Foreign);
    };
    let (status, v) = conn.get_json(&format.path(id), secret).await?;
    if status == StatusCode::NOT_FOUND {
        return Ok(Found::Lost);
    }
    if status != StatusCode::OK {
        bail!("GET {}: {status} {v}", format.path(id));
    }
    let s = v["status"].as_str().unwrap_or_default().to_owned();
    Ok(if format.is_final(&s) {
        Found::Final(s)
    } else {
        Found::Unfinished(s)
    })
}

/// Gathers the facts after the last start; what is wrong on the way (an unfinished task still
/// listed, a task listed twice, a ledger cut short) goes to `violations`.
pub async fn gather(
    base: &str,
    key_id: &str,
    secret: &str,
    acked: &[String],
    violations: &mut Vec<String>,
) -> anyhow::Result<Facts> {
    let mut conn = Conn::new(base);
    let mut facts = Facts {
        quota: QUOTA,
        acked: acked.iter().cloned().collect(),
        ..Facts::default()
    };

    // Wait until every acknowledged task is final (or lost), up to the deadline.
    let mut pending = facts.acked.clone();
    let deadline = Instant::now() + FINAL_DEADLINE;
    loop {
        for id in pending.clone() {
            let found = find(&mut conn, secret, &id).await?;
            if !matches!(found, Found::Unfinished(_)) {
                pending.remove(&id);
            }
            facts.tasks.insert(id, found);
        }
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The admin view: nothing of the key left unfinished; every task of the key, page by page.
    for unfinished in ["queued", "running", "in_progress"] {
        let (status, v) = conn
            .get_json(
                &format!("/admin/tasks?key_id={key_id}&status={unfinished}&limit=1000"),
                ADMIN_TOKEN,
            )
            .await?;
        if status != StatusCode::OK {
            bail!("GET /admin/tasks: {status} {v}");
        }
        let n = v["data"].as_array().map_or(0, Vec::len);
        if n > 0 {
            violations.push(format!(
                "/admin/tasks lists {n} {unfinished} tasks after every acknowledged one ended"
            ));
        }
    }
    let mut after = String::new();
    loop {
        let (status, page) = conn
            .get_json(
                &format!("/admin/tasks?key_id={key_id}&limit=1000&after={after}"),
                ADMIN_TOKEN,
            )
            .await?;
        if status != StatusCode::OK {
            bail!("GET /admin/tasks: {status} {page}");
        }
        let data = page["data"].as_array().cloned().unwrap_or_default();
        for t in &data {
            let (Some(id), Some(s)) = (t["id"].as_str(), t["status"].as_str()) else {
                violations.push(format!("/admin/tasks: an entry without id or status: {t}"));
                continue;
            };
            if facts.listed.insert(id.to_owned(), s.to_owned()).is_some() {
                violations.push(format!("/admin/tasks lists {id} twice"));
            }
            after = id.to_owned();
        }
        if page["has_more"] != true || data.is_empty() {
            break;
        }
    }

    let (status, ledger) = conn
        .get_json(&format!("/admin/keys/{key_id}/ledger"), ADMIN_TOKEN)
        .await?;
    if status != StatusCode::OK {
        bail!("GET /admin/keys/{key_id}/ledger: {status} {ledger}");
    }
    if ledger["has_more"] != false {
        violations.push("the ledger says has_more: the check saw only part of it".to_owned());
    }
    facts.entries = ledger["data"].as_array().cloned().unwrap_or_default();

    // Tasks stored but not acknowledged (their answers were cut off by a kill): read them too.
    let mut others: BTreeSet<String> = facts.listed.keys().cloned().collect();
    others.extend(
        facts
            .entries
            .iter()
            .filter_map(|e| e["task_id"].as_str())
            .filter(|t| !t.starts_with("msg_"))
            .map(str::to_owned),
    );
    for id in others {
        if let std::collections::btree_map::Entry::Vacant(slot) = facts.tasks.entry(id) {
            let found = find(&mut conn, secret, slot.key()).await?;
            slot.insert(found);
        }
    }

    let (status, key) = conn
        .get_json(&format!("/admin/keys/{key_id}"), ADMIN_TOKEN)
        .await?;
    if status != StatusCode::OK {
        bail!("GET /admin/keys/{key_id}: {status} {key}");
    }
    facts.remaining = key["quota_remaining"].as_i64();
    Ok(facts)
}
