//! The relay over a PostgreSQL store, where what it does differs from the embedded one: a new
//! task is stored claimed by the relay that took its request and handed to its engine in
//! memory. PostgreSQL is required: `RELAY_TEST_POSTGRES_URL`, or 127.0.0.1:5432 (trust auth,
//! database `test`); each test works in a schema of its own, dropped after it.

use std::time::Duration;

use http::Method;
use tokio::io::AsyncWriteExt;
use tokio_postgres::NoTls;

use crate::fake_video::{FAKE_KEY, FakeVideo};
use crate::harness::{Body, Relay, poll_until};

/// The server the tests use.
fn server_url() -> String {
    std::env::var("RELAY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A connection to `url`; fails (never skips) when the server does not answer.
async fn connect(url: &str) -> tokio_postgres::Client {
    match tokio_postgres::connect(url, NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client
        }
        Err(e) => panic!(
            "PostgreSQL is required for the postgres tests: set RELAY_TEST_POSTGRES_URL or start it on 127.0.0.1:5432 (trust auth, database `test`): {e}"
        ),
    }
}

/// A schema of the test's own, dropped when it goes (on a thread of its own: drop runs outside
/// the test's runtime).
struct Schema {
    name: String,
    /// The server's URL with the schema as the connections' `search_path`.
    url: String,
}

impl Schema {
    async fn new() -> Schema {
        let server = server_url();
        let name = format!("test_{}", ulid::Ulid::new().to_string().to_lowercase());
        connect(&server)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create the test's schema");
        let sep = if server.contains('?') { '&' } else { '?' };
        let url = format!("{server}{sep}options=-c%20search_path%3D{name}");
        Schema { name, url }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (server, name) = (server_url(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok((client, connection)) = tokio_postgres::connect(&server, NoTls).await {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// The client connections the relay has open, by its metrics.
async fn open_connections(relay: &Relay) -> f64 {
    let res = relay.admin(Method::GET, "/metrics", Body::Empty).await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.text()
        .lines()
        .find_map(|line| line.strip_prefix("relay_open_connections "))
        .and_then(|v| v.trim().parse().ok())
        .expect("relay_open_connections in the metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_client_left_while_it_was_stored_is_submitted_at_once() {
    let schema = Schema::new().await;
    let fake = FakeVideo::start().await;
    // A lease far longer than the test: a task stored claimed and never handed over would
    // wait for it.
    let relay = Relay::start(&format!(
        "[store]\nurl = \"{}\"\n[tasks]\nclaim_lease_secs = 600\n\
         [[channels]]\nname = \"fake\"\nkind = \"openai-videos\"\nbase_url = \"{}\"\n\
         api_key = \"{FAKE_KEY}\"\nmodels = [\"model_h3\"]\n",
        schema.url,
        fake.openai_base()
    ))
    .await;
    let before = open_connections(&relay).await;

    // The key's row held by the test, so the creation waits in the database.
    let mut holder = connect(&schema.url).await;
    let lock = holder.transaction().await.expect("begin");
    lock.execute("SELECT 1 FROM keys FOR UPDATE", &[])
        .await
        .expect("lock the key");
    let holder_pid: i32 = lock
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);

    let body = r#"{"model":"model_h3","prompt":"a client that leaves","size":"64x64"}"#;
    let addr = relay.base.trim_start_matches("http://");
    let mut client = tokio::net::TcpStream::connect(addr).await.expect("connect");
    client
        .write_all(
            format!(
                "POST /v1/videos HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                relay.key,
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send the submission");
    let watcher = connect(&server_url()).await;
    let waiting = poll_until(Duration::from_secs(10), || async {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&holder_pid],
            )
            .await
            .ok()?;
        (row.get::<_, i64>(0) > 0).then_some(())
    })
    .await;
    assert!(waiting.is_some(), "the creation never waited for the key");

    // The client goes away while its task is being stored; the relay closes its side.
    drop(client);
    let closed = poll_until(Duration::from_secs(10), || async {
        (open_connections(&relay).await <= before).then_some(())
    })
    .await;
    assert!(closed.is_some(), "the relay kept the closed connection");
    lock.rollback().await.expect("let the key go");

    // Stored all the same, and submitted now, not when its claim runs out.
    let submitted = poll_until(Duration::from_secs(20), || async {
        (fake.accepted().values().sum::<u32>() > 0).then_some(())
    })
    .await;
    assert!(
        submitted.is_some(),
        "the task was not submitted: it waits for its lease"
    );
    let listed = relay.get("/v1/videos").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(
        listed.json()["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.text()
    );
    relay.stop().await;
}
