//! The blob stores: one suite run against the local directory and against a real
//! S3-compatible server (moto), and the relay on an S3 bucket end to end (content whole and by
//! range, `/files` links, presigned redirects, deletion).

use std::io::{self, Read};
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::Method;
use serde_json::json;
use store::{BlobStore, LocalBlobs, S3Blobs};

use crate::harness::{Body, Relay};
use crate::moto::Moto;

const WAIT: Duration = Duration::from_secs(60);
/// The suite's multipart threshold on S3 (S3's smallest part).
const PART: usize = store::MIN_PART_BYTES;

/// `len` bytes that differ from one offset to the next (no period a wrong seek could hide in).
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

async fn read(blobs: &dyn BlobStore, id: &str) -> io::Result<Vec<u8>> {
    let blob = blobs.open(id).await?;
    let len = blob.len();
    let out = read_stream(blob.read_all().await?).await?;
    assert_eq!(out.len() as u64, len, "{id}: length of the stream");
    Ok(out)
}

async fn read_range(blobs: &dyn BlobStore, id: &str, start: u64, count: u64) -> Vec<u8> {
    let blob = blobs.open(id).await.expect("open");
    read_stream(blob.read(start, count).await.expect("read a range"))
        .await
        .expect("the range's bytes")
}

async fn read_stream(stream: store::BlobStream) -> io::Result<Vec<u8>> {
    let chunks: Vec<Bytes> = stream.try_collect().await?;
    Ok(chunks.concat())
}

async fn commit(blobs: &dyn BlobStore, id: &str, bytes: &[u8]) -> u64 {
    let temp = blobs.temp_path();
    tokio::fs::write(&temp, bytes).await.expect("write temp");
    let len = blobs.commit(&temp, id).await.expect("commit");
    assert!(!temp.exists(), "{id}: the temp file is gone after commit");
    len
}

fn not_found(r: io::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::NotFound, "{what}: {e}"),
        Ok(v) => panic!("{what}: expected not found, got {v:?}"),
    }
}

/// What every blob store does; `big` is committed through S3's multipart path.
async fn suite(blobs: &dyn BlobStore, big: &[u8]) {
    // put_bytes, and a streamed commit of a temp file.
    let put = blobs
        .put_bytes("video_01/thumbnail.png", Bytes::from_static(b"png"))
        .await
        .expect("put");
    assert_eq!(put, 3);
    assert_eq!(read(blobs, "video_01/thumbnail.png").await.unwrap(), b"png");
    assert_eq!(commit(blobs, "video_01/video.mp4", b"mp4 bytes").await, 9);
    assert_eq!(
        read(blobs, "video_01/video.mp4").await.unwrap(),
        b"mp4 bytes"
    );
    // Overwriting replaces.
    commit(blobs, "video_01/video.mp4", b"v2").await;
    assert_eq!(read(blobs, "video_01/video.mp4").await.unwrap(), b"v2");

    // Ranges.
    let small = pattern(1000);
    commit(blobs, "ranges/blob.bin", &small).await;
    assert_eq!(
        read_range(blobs, "ranges/blob.bin", 10, 20).await,
        small[10..30]
    );
    assert_eq!(
        read_range(blobs, "ranges/blob.bin", 990, 10).await,
        small[990..]
    );
    assert_eq!(read_range(blobs, "ranges/blob.bin", 0, 0).await, b"");
    let past = blobs
        .open("ranges/blob.bin")
        .await
        .unwrap()
        .read(995, 10)
        .await;
    assert_eq!(
        past.err().map(|e| e.kind()),
        Some(io::ErrorKind::InvalidInput)
    );
    // An empty blob.
    blobs.put_bytes("ranges/empty", Bytes::new()).await.unwrap();
    assert_eq!(read(blobs, "ranges/empty").await.unwrap(), b"");

    // A multi-megabyte blob, whole, across a part boundary, and as a local file.
    assert_eq!(commit(blobs, "big/video.mp4", big).await, big.len() as u64);
    let whole = read(blobs, "big/video.mp4").await.unwrap();
    assert!(whole == big, "the big blob came back different");
    let at = (PART - 10) as u64;
    assert_eq!(
        read_range(blobs, "big/video.mp4", at, 20).await,
        big[PART - 10..PART + 10]
    );
    let (mut file, len) = blobs.open_file("big/video.mp4").await.unwrap();
    assert_eq!(len, big.len() as u64);
    let mut local = Vec::new();
    file.read_to_end(&mut local).unwrap();
    assert!(local == big, "the big blob's local file differs");

    // Missing blobs.
    not_found(blobs.open("never/was").await, "open a missing blob");
    not_found(
        blobs.open_file("never/was").await,
        "open_file a missing blob",
    );
    blobs
        .delete("never/was")
        .await
        .expect("deleting a missing blob");
    blobs
        .delete_prefix("never")
        .await
        .expect("deleting a missing prefix");

    // Deletion, of one blob and of one prefix only.
    blobs.delete("video_01/video.mp4").await.unwrap();
    not_found(blobs.open("video_01/video.mp4").await, "a deleted blob");
    assert_eq!(read(blobs, "video_01/thumbnail.png").await.unwrap(), b"png");
    for (id, bytes) in [
        ("video_1/video.mp4", "a"),
        ("video_1/frames/last.png", "b"),
        ("video_10/video.mp4", "c"),
        ("video_1.mp4", "d"),
    ] {
        blobs.put_bytes(id, Bytes::from(bytes)).await.unwrap();
    }
    blobs.delete_prefix("video_1").await.unwrap();
    not_found(blobs.open("video_1/video.mp4").await, "under the prefix");
    not_found(
        blobs.open("video_1/frames/last.png").await,
        "deeper under it",
    );
    assert_eq!(read(blobs, "video_10/video.mp4").await.unwrap(), b"c");
    assert_eq!(read(blobs, "video_1.mp4").await.unwrap(), b"d");

    // Ids that would leave the blob area are refused before any call.
    for bad in ["../escape", "/etc/passwd", "a//b", "a b"] {
        let err = blobs.open(bad).await.expect_err(bad);
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}: {err}");
        let err = blobs.put_bytes(bad, Bytes::new()).await.expect_err(bad);
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    suite(&blobs, &pattern(2 * PART + 12_345)).await;
    // A directory has no presigned URLs.
    let url = blobs
        .presigned_get("video_01/thumbnail.png", WAIT, "image/png", "inline")
        .await
        .unwrap();
    assert_eq!(url, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_blobs() {
    let moto = Moto::start().await;
    moto.create_bucket("suite").await;
    let tmp = tempfile::tempdir().unwrap();
    let blobs = S3Blobs::open(moto.settings("suite", "relay/a", PART), tmp.path()).unwrap();
    let big = pattern(2 * PART + 12_345);
    suite(&blobs, &big).await;

    // The objects are where the prefix says, and the big one went up in three parts.
    let head = moto.raw(Method::HEAD, "/suite/relay/a/big/video.mp4").await;
    assert_eq!(head.status, 200);
    let etag = head.header("etag").unwrap_or_default().to_owned();
    assert!(
        etag.trim_matches('"').ends_with("-3"),
        "a multipart ETag: {etag}"
    );
    let unprefixed = S3Blobs::open(moto.settings("suite", "", PART), tmp.path()).unwrap();
    assert_eq!(
        read(&unprefixed, "relay/a/video_1.mp4").await.unwrap(),
        b"d"
    );
    // Temp files are not left behind.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);

    // A presigned URL serves the object, with the type asked for, without credentials.
    let url = blobs
        .presigned_get(
            "video_01/thumbnail.png",
            WAIT,
            "image/png",
            "attachment; filename=\"video_01_thumbnail.png\"",
        )
        .await
        .unwrap()
        .expect("a presigned URL");
    assert!(url.starts_with(&moto.endpoint), "{url}");
    let got = moto.client.send(Method::GET, &url, Body::Empty, &[]).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.body, "png");
    assert_eq!(got.header("content-type"), Some("image/png"));
    // S3 answers with the disposition the URL signs (moto does not act on it).
    assert!(
        url.contains(
            "response-content-disposition=attachment%3B%20filename%3D%22video_01_thumbnail.png%22"
        ),
        "{url}"
    );

    // A bucket that does not exist: errors, not panics or empty reads.
    let missing = S3Blobs::open(moto.settings("no-such-bucket", "", PART), tmp.path()).unwrap();
    assert!(missing.open("a/b").await.is_err());
    let err = missing
        .put_bytes("a/b", Bytes::from_static(b"x"))
        .await
        .expect_err("a put into a missing bucket");
    assert!(err.to_string().contains("a/b"), "{err}");
}

/// A relay on bucket `bucket` (created now) of `moto`, keys under `relay/`, plus `extra`.
async fn s3_relay(moto: &Moto, bucket: &str, presign: bool, extra: &str) -> Relay {
    moto.create_bucket(bucket).await;
    let toml = format!("{}{extra}", moto.relay_toml(bucket, "relay", presign));
    Relay::start_with_env(tempfile::tempdir().unwrap(), None, &toml, moto.relay_env()).await
}

async fn finished_video(relay: &Relay) -> String {
    let res = relay
        .post_json(
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a heron over a lake", "size": "160x96", "duration": 5}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().unwrap().to_owned();
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    id
}

async fn get_with_range(relay: &Relay, url: &str, range: &str) -> crate::harness::Answer {
    relay
        .client
        .send(
            Method::GET,
            url,
            Body::Empty,
            &[("range", range.to_owned())],
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_streams_content_from_s3() {
    let moto = Moto::start().await;
    let relay = s3_relay(&moto, "relay-content", false, "").await;
    let id = finished_video(&relay).await;
    let content = format!("/v1/videos/{id}/content");

    // Whole: the MP4 in the bucket, streamed through the relay; nothing kept on local disk.
    let video = relay.get(&content).await;
    assert_eq!(video.status, 200, "{}", video.text());
    assert_eq!(video.header("content-type"), Some("video/mp4"));
    assert_eq!(video.header("accept-ranges"), Some("bytes"));
    let len = video.body.len();
    assert_eq!(
        video.header("content-length"),
        Some(len.to_string().as_str())
    );
    channels::mp4probe::probe(std::io::Cursor::new(video.body.to_vec())).expect("an MP4");
    let peek_dir = tempfile::tempdir().unwrap();
    let bucket = S3Blobs::open(moto.settings("relay-content", "", PART), peek_dir.path()).unwrap();
    let key = format!("relay/{id}/video.mp4");
    let object = read(&bucket, &key).await.expect("the object in the bucket");
    assert!(object == video.body, "the object is the served video");
    assert!(!relay.dir.path().join("files/blobs").exists());
    let tmp: Vec<_> = std::fs::read_dir(relay.dir.path().join("files/tmp"))
        .unwrap()
        .collect();
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");

    // Ranges: 206 with the slice, a suffix, and 416 past the end.
    let range = async |r: &str| {
        let headers = [("range", r)];
        relay
            .call_as(&relay.key, Method::GET, &content, Body::Empty, &headers)
            .await
    };
    let part = range("bytes=100-199").await;
    assert_eq!(part.status, 206);
    let want = format!("bytes 100-199/{len}");
    assert_eq!(part.header("content-range"), Some(want.as_str()));
    assert_eq!(part.header("content-length"), Some("100"));
    assert_eq!(part.body, video.body.slice(100..200));
    let tail = range("bytes=-16").await;
    assert_eq!(tail.status, 206);
    assert_eq!(tail.body, video.body.slice(len - 16..));
    let past = range("bytes=999999999-").await;
    assert_eq!(past.status, 416, "{}", past.text());
    let want = format!("bytes */{len}");
    assert_eq!(past.header("content-range"), Some(want.as_str()));
    let thumb = relay.get(&format!("{content}?variant=thumbnail")).await;
    assert_eq!(thumb.status, 200);
    assert_eq!(thumb.header("content-type"), Some("image/png"));

    // The relay's signed /files links stream from the bucket too (restarted in redirect mode
    // over the same data).
    let key_secret = relay.key.clone();
    let dir = relay.stop().await;
    let extra = "[server]\ncontent_mode = \"redirect\"\n";
    let toml = format!(
        "{}{extra}",
        moto.relay_toml("relay-content", "relay", false)
    );
    let relay = Relay::start_with_env(dir, Some(key_secret), &toml, moto.relay_env()).await;
    let redirect = relay.get(&content).await;
    assert_eq!(redirect.status, 302, "{}", redirect.text());
    let link = relay.url(crate::generations::local(
        redirect.header("location").unwrap(),
    ));
    let file = relay
        .client
        .send(Method::GET, &link, Body::Empty, &[])
        .await;
    assert_eq!(file.status, 200);
    assert!(file.body == video.body);
    let part = get_with_range(&relay, &link, "bytes=0-9").await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, video.body.slice(0..10));

    // Deleting the task removes its objects.
    let deleted = relay
        .call(Method::DELETE, &format!("/v1/videos/{id}"), Body::Empty)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    not_found(bucket.open(&key).await, "the deleted task's video");
    let file = relay
        .client
        .send(Method::GET, &link, Body::Empty, &[])
        .await;
    assert_eq!(file.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_presigns_s3_urls() {
    let moto = Moto::start().await;
    let relay = s3_relay(&moto, "relay-presign", true, "").await;

    // Content: a 302 straight to the bucket, which serves it whole and by range.
    let id = finished_video(&relay).await;
    let redirect = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(redirect.status, 302, "{}", redirect.text());
    let location = redirect.header("location").unwrap().to_owned();
    assert!(location.starts_with(&moto.endpoint), "{location}");
    assert_eq!(redirect.json()["url"], location.as_str());
    let video = relay
        .client
        .send(Method::GET, &location, Body::Empty, &[])
        .await;
    assert_eq!(video.status, 200, "{}", video.text());
    assert_eq!(video.header("content-type"), Some("video/mp4"));
    channels::mp4probe::probe(std::io::Cursor::new(video.body.to_vec())).expect("an MP4");
    let part = get_with_range(&relay, &location, "bytes=10-19").await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, video.body.slice(10..20));

    // The second format: an uploaded first frame (kept in and read back from the bucket),
    // and the record's signed /files link answering 302 to the bucket.
    let key = relay.key.clone();
    let asset = crate::generations::active_image(&relay, &key, &crate::harness::png(90, 160)).await;
    let res = relay
        .post_json(
            "/v1/video/generations",
            json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 2,
                   "resolution": "480p", "ratio": "adaptive",
                   "assets": [{"id": asset, "role": "first_frame"}]}),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let gen_id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation(&gen_id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let link = relay.url(crate::generations::local(
        done["video_url"].as_str().unwrap(),
    ));
    let redirect = relay
        .client
        .send(Method::GET, &link, Body::Empty, &[])
        .await;
    assert_eq!(redirect.status, 302, "{}", redirect.text());
    let location = redirect.header("location").unwrap().to_owned();
    assert!(location.starts_with(&moto.endpoint), "{location}");
    let video = relay
        .client
        .send(Method::GET, &location, Body::Empty, &[])
        .await;
    assert_eq!(video.status, 200, "{}", video.text());
    let info =
        channels::mp4probe::probe(std::io::Cursor::new(video.body.to_vec())).expect("an MP4");
    assert_eq!((info.width, info.height), (480, 854));
    // A bad signature is still the relay's 404, never a redirect.
    let forged = link.replace("sig=", "sig=0");
    let res = relay
        .client
        .send(Method::GET, &forged, Body::Empty, &[])
        .await;
    assert_eq!(res.status, 404);
}

#[test]
fn s3_config_is_checked_at_start() {
    let bad = [
        ("[blobs]\nbackend = \"s3\"\n", "blobs.bucket is required"),
        (
            "[blobs]\nbackend = \"s3\"\nbucket = \"Bad_Name\"\n",
            "blobs.bucket",
        ),
        (
            "[blobs]\nbackend = \"s3\"\nbucket = \"b-1\"\nendpoint = \"ftp://x\"\n",
            "blobs.endpoint",
        ),
        (
            "[blobs]\nbucket = \"b-1\"\n",
            "blobs.bucket applies to backend = \"s3\" only",
        ),
        ("[blobs]\npresign = true\n", "blobs.presign applies"),
        (
            "[blobs]\nbackend = \"s3\"\nbucket = \"b-1\"\npart_bytes = 1024\n",
            "blobs.part_bytes",
        ),
        ("[blobs]\nbackend = \"gcs\"\n", "unknown variant"),
        ("[blobs]\nbucket_name = \"b\"\n", "unknown field"),
    ];
    for (toml, want) in bad {
        let err = server::Config::from_toml(Some(toml), "t.toml").expect_err(toml);
        assert!(err.to_string().contains(want), "{toml}: {err}");
    }
    // Credentials come from the environment; a missing one is named.
    let config = server::Config::from_toml(
        Some("[blobs]\nbackend = \"s3\"\nbucket = \"b-1\"\n"),
        "t.toml",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let only_id = |name: &str| (name == "AWS_ACCESS_KEY_ID").then(|| "id".to_owned());
    let err = server::app::open_blobs(&config.blobs, dir.path(), &only_id)
        .err()
        .expect("no secret key");
    assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");
}
