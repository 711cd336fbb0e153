//! The store's test suite: every case runs on every backend.
//!
//! A case is an `async fn(Fixture)` written against [`Store`] alone; [`cases!`] expands each
//! into one `#[tokio::test]` per backend (`<area>::sled::<case>`, `<area>::postgres::<case>`),
//! so a step behaves the same, and fails with the same [`StoreError`], whichever backend runs
//! it. What only one backend has (sled's trees, PostgreSQL's migrations) is tested beside that
//! backend.
//!
//! The PostgreSQL tests need a server: `RELAY_TEST_POSTGRES_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/test`. Each test gets a schema of its own
//! (`test_<ulid>`, the first of its connections' `search_path`), dropped when it ends, so
//! tests run in parallel on one database. Without a server they fail, saying so: they are
//! never skipped.

use std::ops::Deref;
use std::sync::Arc;

use crate::test_util::TempDir;
use tokio_postgres::NoTls;

use crate::{
    AssetRecord, AssetSource, AssetStatus, AssetType, Claim, Key, KeyStatus, LedgerDraft,
    LedgerEntry, LedgerKind, Library, Outputs, Page, PgStore, SledStore, Store, StoreError, Task,
    TaskKind, TaskQuery, TaskStatus,
};

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sled,
    Postgres,
}

/// A store of one backend in a place of its own (a temp directory), and that place, which
/// lives as long as the fixture.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    place: Place,
}

enum Place {
    Sled(TempDir),
    Postgres(PgSchema),
}

/// Connections of a test's store: a few, so that concurrent cases wait on the pool too.
const POOL: usize = 4;

impl Fixture {
    pub async fn new(backend: Backend) -> Fixture {
        match backend {
            Backend::Sled => {
                let dir = TempDir::new();
                let store = SledStore::open(dir.path()).expect("open sled store");
                Fixture {
                    store: Arc::new(store),
                    place: Place::Sled(dir),
                }
            }
            Backend::Postgres => {
                let schema = PgSchema::new().await;
                let store = PgStore::connect(&schema.url, POOL)
                    .await
                    .expect("connect PostgreSQL store");
                Fixture {
                    store: Arc::new(store),
                    place: Place::Postgres(schema),
                }
            }
        }
    }

    /// Drops this store and opens the same place again, as a restart of the relay would.
    /// Every other handle of the store must be gone.
    pub async fn reopen(self) -> Fixture {
        let Fixture { store, place } = self;
        assert_eq!(
            Arc::strong_count(&store),
            1,
            "a handle of the store is still held"
        );
        drop(store);
        let store: Arc<dyn Store> = match &place {
            Place::Sled(dir) => Arc::new(reopen_sled(dir).await),
            Place::Postgres(schema) => Arc::new(
                PgStore::connect(&schema.url, POOL)
                    .await
                    .expect("reconnect PostgreSQL store"),
            ),
        };
        Fixture { store, place }
    }
}

/// What a PostgreSQL test says when there is no server to run on.
pub const POSTGRES_REQUIRED: &str = "PostgreSQL is required for the store's postgres tests: \
     set RELAY_TEST_POSTGRES_URL or start it on 127.0.0.1:5432";

/// The server the PostgreSQL tests run on.
pub fn postgres_url() -> String {
    std::env::var("RELAY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A plain connection to `url` (its driver runs on the current runtime), or the test fails
/// saying PostgreSQL is required.
pub async fn postgres(url: &str) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = url.parse().expect("RELAY_TEST_POSTGRES_URL");
    config.connect_timeout(std::time::Duration::from_secs(5));
    let (client, connection) = match config.connect(NoTls).await {
        Ok(c) => c,
        Err(e) => match std::error::Error::source(&e) {
            Some(cause) => panic!("{POSTGRES_REQUIRED} ({e}: {cause})"),
            None => panic!("{POSTGRES_REQUIRED} ({e})"),
        },
    };
    tokio::spawn(connection);
    client
}

/// A schema of its own on the test server, dropped with everything in it on drop.
pub struct PgSchema {
    pub name: String,
    /// The server's URL with the schema as the connections' `search_path`.
    pub url: String,
}

impl PgSchema {
    pub async fn new() -> PgSchema {
        let server = postgres_url();
        let name = format!("test_{}", ulid::Ulid::new().to_string().to_lowercase());
        postgres(&server)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create test schema");
        let sep = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{sep}options=-c%20search_path%3D{name}");
        PgSchema { name, url }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // Drop runs outside any await point: the schema goes on a thread of its own with a
        // runtime of its own, waited for so that it is gone when the test ends. (The test's
        // own runtime must be a multi-threaded one, so that its connections, which may still
        // have a rollback to send, are driven meanwhile.)
        let (server, name) = (postgres_url(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let client = postgres(&server).await;
                // A session of the test still in a transaction would hold the drop forever.
                let sql = format!("SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS {name} CASCADE");
                if let Err(e) = client.batch_execute(&sql).await {
                    eprintln!("drop test schema {name}: {e}");
                }
            });
        });
        let _ = dropped.join();
    }
}

/// sled's background flusher lets go of the directory's lock a moment after the last handle
/// is dropped: opening is tried again until it is free, within a deadline.
pub(crate) async fn reopen_sled(dir: &TempDir) -> SledStore {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match SledStore::open(dir.path()) {
            Ok(store) => return store,
            Err(e) if e.to_string().contains("could not acquire lock") => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "reopen sled store: {e}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reopen sled store: {e}"),
        }
    }
}

impl Deref for Fixture {
    type Target = dyn Store;

    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.store
    }
}

/// Expands each case (an `async fn(Fixture)` of the module it is called in) into one test per
/// backend.
macro_rules! cases {
    ($($case:ident),+ $(,)?) => {
        mod sled {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture = $crate::suite::Fixture::new($crate::suite::Backend::Sled).await;
                    super::$case(fixture).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let fixture =
                        $crate::suite::Fixture::new($crate::suite::Backend::Postgres).await;
                    super::$case(fixture).await;
                }
            )+
        }
    };
}

pub fn key(id: &str, hash: &str, quota: Option<i64>) -> Key {
    Key {
        id: id.to_owned(),
        name: format!("{id} name"),
        group: "default".to_owned(),
        hash: hash.to_owned(),
        prefix: "sk-".to_owned(),
        quota,
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: 1,
        webhook_url: None,
        webhook_secret: None,
    }
}

pub fn task(id: &str, owner: &str, status: TaskStatus, next_poll_ms: Option<u64>) -> Task {
    Task {
        id: id.to_owned(),
        kind: if id.starts_with("gen_") {
            TaskKind::Generation
        } else {
            TaskKind::Video
        },
        owner: owner.to_owned(),
        model: "model_h3".to_owned(),
        status,
        progress: 0,
        created_at: 1,
        updated_at: 1,
        completed_at: None,
        expires_at: None,
        deadline_ms: 10_000_000,
        next_poll_ms,
        params: params(),
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        polled_ms: None,
        attempts: 0,
        sim: None,
        outputs: Outputs::default(),
        error: None,
        warnings: Vec::new(),
        price: 30,
        callback_url: None,
    }
}

/// Parameters as a client may write them: spacing and key order are kept as written.
pub fn params() -> crate::Params {
    let text = r#"{"prompt": "a cat",  "aspect_ratio":"16:9", "n": [1, 2.50]}"#;
    let raw = serde_json::value::RawValue::from_string(text.to_owned()).unwrap();
    let params = crate::Params::new(&raw).unwrap();
    assert_eq!(params.as_str(), text);
    params
}

pub fn draft(key_id: &str, task_id: &str, kind: LedgerKind, amount: i64) -> LedgerDraft {
    LedgerDraft {
        key_id: key_id.to_owned(),
        task_id: task_id.to_owned(),
        kind,
        amount,
    }
}

pub fn charge(key_id: &str, task_id: &str, amount: i64) -> crate::Charge {
    crate::Charge {
        key_id: key_id.into(),
        task_id: task_id.into(),
        amount,
    }
}

pub fn ids(tasks: &[Task]) -> Vec<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

/// The ids of claimed tasks, in the order claimed.
pub fn claimed_ids(claims: &[Claim]) -> Vec<String> {
    claims.iter().map(|c| c.task.id.clone()).collect()
}

pub fn noop(_: &mut Task) {}

/// One field of each entry of a key's ledger, oldest first.
pub async fn ledger_of<T>(
    store: &dyn Store,
    key_id: &str,
    field: impl Fn(&LedgerEntry) -> T,
) -> Vec<T> {
    store
        .ledger(key_id)
        .await
        .unwrap()
        .iter()
        .map(field)
        .collect()
}

/// Creates a queued task of `owner`, due at 5 ms, with `ledger`.
pub async fn create(
    store: &dyn Store,
    id: &str,
    owner: &str,
    ledger: &[LedgerDraft],
) -> Result<(), StoreError> {
    let task = task(id, owner, TaskStatus::Queued, Some(5));
    store.create_task(&task, ledger).await
}

/// Creates a queued task of `owner`, due at 5 ms, whose pre-deduction takes `-amount` from the
/// owner's key.
pub async fn prededuct(
    store: &dyn Store,
    id: &str,
    owner: &str,
    amount: i64,
) -> Result<(), StoreError> {
    let entry = draft(owner, id, LedgerKind::Prededuct, amount);
    create(store, id, owner, &[entry]).await
}

/// Gives the store the key `key_a` (quota 100) and one queued task of it, whose
/// pre-deduction took 30; returns the task's id.
pub async fn with_a_task(store: &dyn Store) -> String {
    store
        .create_key(&key("key_a", "ha", Some(100)))
        .await
        .unwrap();
    let id = crate::test_util::tid("video", 1);
    prededuct(store, &id, "key_a", -30).await.unwrap();
    id
}

/// Moves a task from `from` to `to`, changing nothing else, with `ledger`.
pub async fn step(
    store: &dyn Store,
    id: &str,
    from: TaskStatus,
    to: TaskStatus,
    ledger: &[LedgerDraft],
) -> Result<Task, StoreError> {
    store.transition(id, &[from], to, &noop, ledger).await
}

/// The first page of at most `limit` of `owner`'s tasks, newest first.
pub async fn owner_page(store: &dyn Store, owner: &str, limit: usize) -> Page<Task> {
    let query = TaskQuery {
        owner: owner.to_owned(),
        limit,
        ..TaskQuery::default()
    };
    store.list_tasks(&query).await.unwrap()
}

/// Every task, newest first (at most `limit`), as operators list them.
pub async fn all_tasks(store: &dyn Store, limit: usize) -> Vec<Task> {
    let query = crate::AdminTaskQuery {
        limit,
        ..crate::AdminTaskQuery::default()
    };
    store.admin_tasks(&query).await.unwrap().items
}

pub fn library(id: &str, owner: &str, family: &str) -> Library {
    Library {
        id: id.to_owned(),
        owner: owner.to_owned(),
        name: format!("{id} name"),
        family: family.to_owned(),
        created_at: 1,
        asset_count: 0,
    }
}

pub fn asset(id: &str, lib: &Library, status: AssetStatus, t: Option<AssetType>) -> AssetRecord {
    AssetRecord {
        id: id.to_owned(),
        owner: lib.owner.clone(),
        library_id: lib.id.clone(),
        family: lib.family.clone(),
        declared_type: t,
        asset_type: t,
        status,
        source: AssetSource::Url("https://example.com/a.png".into()),
        blob: None,
        format: None,
        bytes: None,
        width: None,
        height: None,
        created_at: 1,
        updated_at: 1,
        expires_at: None,
        error: None,
    }
}

/// Gives the store one library, `lib_1` of `key_a` in the family `gen2`, and returns it.
pub async fn with_library(store: &dyn Store) -> Library {
    let lib = library("lib_1", "key_a", "gen2");
    store.create_library(&lib).await.unwrap();
    lib
}

pub fn ids_of<T>(items: &[T], id: impl Fn(&T) -> &str) -> Vec<String> {
    items.iter().map(|x| id(x).to_owned()).collect()
}

pub fn asset_ids(items: &[AssetRecord]) -> Vec<String> {
    ids_of(items, |a| &a.id)
}

pub fn asset_noop(_: &mut AssetRecord) {}

/// Moves an asset to active with an expiry.
pub async fn activate(store: &dyn Store, id: &str, expires_at: u64) -> AssetRecord {
    store
        .transition_asset(id, &[AssetStatus::Processing], AssetStatus::Active, &|a| {
            a.expires_at = Some(expires_at);
            a.format = Some("png".into());
        })
        .await
        .unwrap()
}

mod admin;
mod assets;
mod batches;
mod characters;
mod claims;
mod durability;
mod idempotency;
mod keys;
mod ledger;
mod tasks;
mod transitions;
mod webhooks;
