//! Characters bounded, as a key trying to fill the disk would find them: a number per key
//! (`[characters] max_per_key`) that concurrent creations cannot pass together, a price taken
//! through the ledger, a listing of the key's own, and deletion that frees a place and the
//! stored video. Another key's character does not exist for a key.

use std::path::Path;

use http::Method;
use serde_json::{Value, json};

use crate::harness::{Answer, Body, Multipart, Relay, mp4_head};

const PATH: &str = "/v1/videos/characters";

async fn create(relay: &Relay, key: &str, name: &str) -> Answer {
    let (ct, body) = Multipart::new()
        .text("name", name)
        .file("video", "v.mp4", "video/mp4", &mp4_head())
        .build();
    relay
        .call_as(key, Method::POST, PATH, Body::Raw(ct, body), &[])
        .await
}

/// Creates a character that must be accepted; its id.
async fn created(relay: &Relay, key: &str, name: &str) -> String {
    let res = create(relay, key, name).await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["id"].as_str().unwrap().to_owned()
}

async fn list(relay: &Relay, key: &str, query: &str) -> Value {
    let res = relay
        .call_as(
            key,
            Method::GET,
            &format!("{PATH}{query}"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()
}

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {page}"))
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every id of `key`'s characters, newest first.
async fn all(relay: &Relay, key: &str) -> Vec<String> {
    let page = list(relay, key, "?limit=100").await;
    assert_eq!(page["has_more"], false, "{page}");
    ids(&page)
}

async fn delete(relay: &Relay, key: &str, id: &str) -> Answer {
    relay
        .call_as(
            key,
            Method::DELETE,
            &format!("{PATH}/{id}"),
            Body::Empty,
            &[],
        )
        .await
}

/// The character videos stored on disk (files under `characters/`).
fn stored_videos(relay: &Relay) -> usize {
    fn count(dir: &Path) -> usize {
        match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .map(|e| e.expect("dir entry").path())
                .map(|p| if p.is_dir() { count(&p) } else { 1 })
                .sum(),
            Err(_) => 0,
        }
    }
    count(&relay.dir.path().join("files/blobs/characters"))
}

async fn quota(relay: &Relay, key_id: &str) -> Value {
    let res = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["quota_remaining"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_at_its_number_is_refused_and_nothing_is_written() {
    let relay = Relay::start("[characters]\nmax_per_key = 3\n").await;
    let (_, key) = relay.new_key("filler", None).await;
    let mut made = Vec::new();
    for n in 0..3 {
        made.push(created(&relay, &key, &format!("c{n}")).await);
    }
    let res = create(&relay, &key, "one too many").await;
    res.assert_error(403, "forbidden", None);
    let detail = res.json()["error"]["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("3 characters"), "{detail}");
    made.reverse();
    assert_eq!(all(&relay, &key).await, made, "nothing written");
    assert_eq!(stored_videos(&relay), 3, "the refused video is not kept");
    // Refused again and again, still nothing kept.
    for _ in 0..5 {
        create(&relay, &key, "again")
            .await
            .assert_error(403, "forbidden", None);
    }
    assert_eq!(stored_videos(&relay), 3);

    // The number is per key: another key creates its own.
    let (_, other) = relay.new_key("other", None).await;
    created(&relay, &other, "theirs").await;

    // A deletion frees a place and the stored video.
    let gone = made[1].clone();
    let res = delete(&relay, &key, &gone).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(
        res.json(),
        json!({"id": gone, "object": "video.character.deleted", "deleted": true})
    );
    assert_eq!(
        stored_videos(&relay),
        3,
        "the deleted one's video is removed"
    );
    relay
        .call_as(
            &key,
            Method::GET,
            &format!("{PATH}/{gone}"),
            Body::Empty,
            &[],
        )
        .await
        .assert_error(404, "not found", None);
    delete(&relay, &key, &gone)
        .await
        .assert_error(404, "not found", None);
    let again = created(&relay, &key, "in the freed place").await;
    create(&relay, &key, "past it")
        .await
        .assert_error(403, "forbidden", None);
    assert_eq!(
        all(&relay, &key).await,
        [again, made[0].clone(), made[2].clone()]
    );

    // Kept across a restart: the key is still at its number.
    let first_key = relay.key.clone();
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(first_key), "[characters]\nmax_per_key = 3\n").await;
    create(&relay, &key, "after a restart")
        .await
        .assert_error(403, "forbidden", None);
    assert_eq!(stored_videos(&relay), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creations_at_the_number_let_exactly_that_many_through() {
    let relay = Relay::start("[characters]\nmax_per_key = 3\n").await;
    let (_, key) = relay.new_key("racer", None).await;
    let answers = futures_util::future::join_all((0..8).map(|n| {
        let (relay, key) = (&relay, &key);
        async move { create(relay, key, &format!("racer {n}")).await }
    }))
    .await;
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    statuses.sort_unstable();
    let bodies: Vec<String> = answers.iter().map(Answer::text).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 403, 403, 403, 403, 403],
        "{bodies:?}"
    );
    for refused in answers.iter().filter(|a| a.status != 200) {
        refused.assert_error(403, "forbidden", None);
    }
    assert_eq!(all(&relay, &key).await.len(), 3);
    assert_eq!(stored_videos(&relay), 3, "no refused video is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_lists_its_own_characters_newest_first_in_pages() {
    let relay = Relay::start("").await;
    let (_, a) = relay.new_key("a", None).await;
    let (_, b) = relay.new_key("b", None).await;
    let mut mine = Vec::new();
    for n in 0..5 {
        mine.push(created(&relay, &a, &format!("a{n}")).await);
    }
    let theirs = [
        created(&relay, &b, "b0").await,
        created(&relay, &b, "b1").await,
    ];
    mine.reverse();

    let first = list(&relay, &a, "?limit=2").await;
    assert_eq!(first["object"], "list");
    assert_eq!(ids(&first), mine[..2]);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["first_id"], mine[0].as_str());
    assert_eq!(first["last_id"], mine[1].as_str());
    assert_eq!(first["data"][0]["object"], "video.character");
    assert_eq!(first["data"][0]["name"], "a4");
    let second = list(&relay, &a, &format!("?limit=2&after={}", mine[1])).await;
    assert_eq!(ids(&second), mine[2..4]);
    assert_eq!(second["has_more"], true);
    let last = list(&relay, &a, &format!("?limit=2&after={}", mine[3])).await;
    assert_eq!(ids(&last), mine[4..]);
    assert_eq!(last["has_more"], false);
    let oldest = list(&relay, &a, "?order=asc&limit=3").await;
    let mut asc = mine.clone();
    asc.reverse();
    assert_eq!(ids(&oldest), asc[..3]);
    // Only the caller's own, whatever the cursor.
    assert_eq!(
        all(&relay, &b).await,
        [theirs[1].clone(), theirs[0].clone()]
    );
    let past_theirs = list(&relay, &a, &format!("?after={}", theirs[1])).await;
    assert!(ids(&past_theirs).iter().all(|id| mine.contains(id)));
    let (_, empty) = relay.new_key("none", None).await;
    let none = list(&relay, &empty, "").await;
    assert_eq!(
        none,
        json!({"object": "list", "data": [], "has_more": false, "first_id": null, "last_id": null})
    );
    // A bad query names its parameter.
    for (query, param) in [
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
        ("?order=newest", "order"),
    ] {
        relay
            .call_as(&a, Method::GET, &format!("{PATH}{query}"), Body::Empty, &[])
            .await
            .assert_error(400, "invalid request", Some(param));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_keys_character_is_not_found_to_get_or_delete() {
    let relay = Relay::start("").await;
    let (_, owner) = relay.new_key("owner", None).await;
    let (_, thief) = relay.new_key("thief", None).await;
    let id = created(&relay, &owner, "mine").await;
    let path = format!("{PATH}/{id}");
    relay
        .call_as(&thief, Method::GET, &path, Body::Empty, &[])
        .await
        .assert_error(404, "not found", None);
    delete(&relay, &thief, &id)
        .await
        .assert_error(404, "not found", None);
    for unknown in ["char_nope".to_owned(), "x".repeat(65)] {
        delete(&relay, &owner, &unknown)
            .await
            .assert_error(404, "not found", None);
    }
    // Still there for its owner, with its video.
    let res = relay
        .call_as(&owner, Method::GET, &path, Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(stored_videos(&relay), 1);
    assert_eq!(all(&relay, &thief).await, Vec::<String>::new());
    // The other methods of the paths are 405 with their Allow.
    let res = relay
        .call_as(&owner, Method::PUT, PATH, Body::Empty, &[])
        .await;
    res.assert_error(405, "method not allowed", None);
    assert_eq!(res.header("allow"), Some("GET, POST"));
    let res = relay
        .call_as(&owner, Method::POST, &path, Body::Empty, &[])
        .await;
    res.assert_error(405, "method not allowed", None);
    assert_eq!(res.header("allow"), Some("GET, DELETE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_takes_exactly_the_price_and_an_empty_balance_writes_nothing() {
    let relay = Relay::start("[characters]\nprice = 7\n").await;
    let (key_id, key) = relay.new_key("payer", Some(20)).await;
    let first = created(&relay, &key, "one").await;
    assert_eq!(quota(&relay, &key_id).await, 13);
    let second = created(&relay, &key, "two").await;
    assert_eq!(quota(&relay, &key_id).await, 6);
    let ledger = relay.ledger(&key_id).await;
    let entries: Vec<(String, String, i64, i64)> = ledger
        .iter()
        .map(|e| {
            (
                e["task_id"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
                e["amount"].as_i64().unwrap(),
                e["balance_after"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (first.clone(), "charge".to_owned(), -7, 13),
            (second.clone(), "charge".to_owned(), -7, 6),
        ]
    );

    // 6 left, 7 needed: refused, nothing stored, nothing taken.
    let res = create(&relay, &key, "three").await;
    res.assert_error(402, "insufficient quota", None);
    assert_eq!(all(&relay, &key).await, [second.clone(), first.clone()]);
    assert_eq!(stored_videos(&relay), 2);
    assert_eq!(quota(&relay, &key_id).await, 6);
    assert_eq!(relay.ledger(&key_id).await.len(), 2);

    // A deletion does not refund the creation.
    assert_eq!(delete(&relay, &key, &first).await.status, 200);
    assert_eq!(quota(&relay, &key_id).await, 6);
    assert_eq!(relay.ledger(&key_id).await.len(), 2);

    // An unlimited key is charged too, its balance unknown.
    let (free_id, free) = relay.new_key("unlimited", None).await;
    let id = created(&relay, &free, "free").await;
    let ledger = relay.ledger(&free_id).await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0]["task_id"], id.as_str());
    assert_eq!(ledger[0]["amount"], -7);
    assert_eq!(ledger[0]["balance_after"], Value::Null);

    // The metrics count the three charges written, not the refused one.
    let metrics = relay.admin(Method::GET, "/metrics", Body::Empty).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    let text = metrics.text();
    let sample = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{kind=\"charge\"}} ")))
            .map(str::to_owned)
    };
    assert_eq!(
        (
            sample("relay_ledger_entries_total").as_deref(),
            sample("relay_ledger_credits_total").as_deref()
        ),
        (Some("3"), Some("21")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_characters_at_all_when_the_number_is_zero() {
    let relay = Relay::start("[characters]\nmax_per_key = 0\n").await;
    let (_, key) = relay.new_key("k", None).await;
    let res = create(&relay, &key, "none").await;
    res.assert_error(403, "forbidden", None);
    let detail = res.json()["error"]["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("max_per_key = 0"), "{detail}");
    assert_eq!(all(&relay, &key).await, Vec::<String>::new());
    assert_eq!(stored_videos(&relay), 0);
}
