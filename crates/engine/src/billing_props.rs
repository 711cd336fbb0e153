//! Property test of billing: thousands of random interleavings of submit, start, succeed (as
//! asked, or settled below the pre-deduction), fail, cancel, time out and restart, through the
//! same store steps and ledger drafts the server uses, checking after every step that no
//! credit is lost or doubled.

use std::collections::HashMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use store::{
    Key, KeyStatus, LedgerKind, Outputs, SledStore, Store, StoreError, Task, TaskKind, TaskStatus,
};

use crate::steps::{cancel, fail, prededuct, settle, settle_at};

const INITIAL: i64 = 50_000;

fn key() -> Key {
    Key {
        id: "key_prop".into(),
        name: "prop".into(),
        group: "gen2".into(),
        hash: "h".into(),
        prefix: "p".into(),
        quota: Some(INITIAL),
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: 0,
        webhook_url: None,
        webhook_secret: None,
    }
}

/// A new `queued` task numbered `n` (its id in the first format's shape) priced `price`.
pub(crate) fn task(n: u64, price: i64) -> Task {
    Task {
        id: format!("video_{:026}", n),
        kind: TaskKind::Video,
        owner: "key_prop".into(),
        model: "model_h3".into(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: 0,
        updated_at: 0,
        completed_at: None,
        expires_at: None,
        deadline_ms: u64::MAX,
        next_poll_ms: Some(0),
        params: store::Params::new(&serde_json::Value::Null).expect("params"),
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        polled_ms: None,
        attempts: 0,
        sim: None,
        outputs: Outputs::default(),
        error: None,
        warnings: Vec::new(),
        price,
        callback_url: None,
    }
}

fn open(dir: &Path) -> SledStore {
    SledStore::open(dir).expect("open store")
}

/// Opens the store again after a drop: a group flush still running on a blocking thread holds
/// the database (and its file lock) a moment longer, so this polls, within a deadline.
async fn reopen(dir: &Path) -> SledStore {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir) {
            Ok(store) => return store,
            Err(e) if std::time::Instant::now() >= deadline => panic!("reopen store: {e}"),
            Err(_) => tokio::task::yield_now().await,
        }
    }
}

/// The invariants, read back from the store.
async fn check(store: &dyn Store, prices: &HashMap<String, i64>) {
    let ledger = store.ledger("key_prop").await.expect("ledger");
    let mut seen = std::collections::HashSet::new();
    for e in &ledger {
        assert!(
            seen.insert((e.task_id.clone(), e.kind)),
            "two {:?} for {}",
            e.kind,
            e.task_id
        );
    }
    let mut charged = 0;
    for (id, price) in prices {
        let t = store
            .task(id)
            .await
            .expect("task")
            .expect("an accepted task is never lost");
        let entry = |kind| {
            ledger
                .iter()
                .find(|e| e.task_id == *id && e.kind == kind)
                .map(|e| e.amount)
        };
        assert_eq!(entry(LedgerKind::Prededuct), Some(-price), "{id}");
        match t.status {
            TaskStatus::Succeeded => {
                assert_eq!(entry(LedgerKind::Refund), None, "{id}");
                let settled = entry(LedgerKind::Settle).expect("settled");
                assert!((0..=*price).contains(&settled), "{id}: settle {settled}");
                charged += price - settled;
            }
            TaskStatus::Failed | TaskStatus::Cancelled => {
                assert_eq!(entry(LedgerKind::Refund), Some(*price), "{id}");
                assert_eq!(entry(LedgerKind::Settle), None, "{id}");
            }
            TaskStatus::Queued | TaskStatus::Running => {
                assert_eq!(entry(LedgerKind::Refund), None, "{id}");
                assert_eq!(entry(LedgerKind::Settle), None, "{id}");
                charged += price;
            }
        }
    }
    let k = store
        .key("key_prop")
        .await
        .expect("key")
        .expect("key exists");
    assert_eq!(k.quota, Some(INITIAL - charged));
    assert_eq!(k.quota_used, charged);
}

async fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    store.create_key(&key()).await.expect("key");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut prices: HashMap<String, i64> = HashMap::new();
    let mut ids: Vec<String> = Vec::new();
    for n in 0..steps as u64 {
        let pick = |rng: &mut StdRng, ids: &[String]| -> Option<String> {
            (!ids.is_empty()).then(|| ids[rng.random_range(0..ids.len())].clone())
        };
        match rng.random_range(0..100) {
            0..=29 => {
                let price = 10 * rng.random_range(5..=15);
                let t = task(n, price);
                match store.create_task(&t, &prededuct(&t)).await {
                    Ok(()) => {
                        prices.insert(t.id.clone(), price);
                        ids.push(t.id);
                    }
                    Err(StoreError::InsufficientQuota { .. }) => {
                        assert!(store.task(&t.id).await.expect("read").is_none());
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            30..=44 => {
                if let Some(id) = pick(&mut rng, &ids) {
                    let _ = store
                        .transition(
                            &id,
                            &[TaskStatus::Queued],
                            TaskStatus::Running,
                            &|_| {},
                            &[],
                        )
                        .await;
                }
            }
            45..=59 => {
                if let Some(id) = pick(&mut rng, &ids) {
                    let t = store.task(&id).await.expect("read").expect("exists");
                    // As asked, or a shorter video the vendor reported: part comes back.
                    let settle = if rng.random_bool(0.5) {
                        settle(&t)
                    } else {
                        settle_at(&t, rng.random_range(0..=t.price))
                    };
                    let _ = store
                        .transition(
                            &id,
                            &[TaskStatus::Running],
                            TaskStatus::Succeeded,
                            &|_| {},
                            &settle,
                        )
                        .await;
                }
            }
            60..=79 => {
                if let Some(id) = pick(&mut rng, &ids) {
                    let t = store.task(&id).await.expect("read").expect("exists");
                    let code = if rng.random_bool(0.5) {
                        "timeout"
                    } else {
                        "upstream_error"
                    };
                    fail(&store, &t, code, "failed").await.expect("fail step");
                }
            }
            80..=94 => {
                if let Some(id) = pick(&mut rng, &ids) {
                    let t = store.task(&id).await.expect("read").expect("exists");
                    let _ = cancel(&store, &t).await;
                }
            }
            _ => {
                drop(store);
                store = reopen(dir.path()).await;
            }
        }
        check(&store, &prices).await;
    }
}

#[tokio::test]
async fn random_interleavings_keep_the_ledger_balanced() {
    for seed in 0..4 {
        run(seed, 600).await;
    }
}
