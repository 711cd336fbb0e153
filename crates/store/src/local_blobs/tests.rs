use futures_util::TryStreamExt;

use super::*;
use crate::test_util::TempDir;

async fn read(blobs: &LocalBlobs, id: &str) -> io::Result<Vec<u8>> {
    let blob = blobs.open(id).await?;
    let len = blob.len();
    let chunks: Vec<Bytes> = blob.read_all().await?.try_collect().await?;
    let out = chunks.concat();
    assert_eq!(out.len() as u64, len);
    Ok(out)
}

#[tokio::test]
async fn put_commit_open_delete() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();

    assert_eq!(
        blobs
            .put_bytes("video_01/thumbnail.png", Bytes::from_static(b"png"))
            .await
            .unwrap(),
        3
    );
    assert_eq!(
        read(&blobs, "video_01/thumbnail.png").await.unwrap(),
        b"png"
    );

    // Streamed: write to the temp path, then commit.
    let temp = blobs.temp_path();
    assert_ne!(temp, blobs.temp_path());
    std::fs::write(&temp, b"mp4 bytes").unwrap();
    assert_eq!(blobs.commit(&temp, "video_01/video.mp4").await.unwrap(), 9);
    assert!(!temp.exists());
    assert_eq!(
        read(&blobs, "video_01/video.mp4").await.unwrap(),
        b"mp4 bytes"
    );

    // Overwrite is atomic replacement.
    blobs
        .put_bytes("video_01/video.mp4", Bytes::from_static(b"v2"))
        .await
        .unwrap();
    assert_eq!(read(&blobs, "video_01/video.mp4").await.unwrap(), b"v2");

    blobs.delete("video_01/video.mp4").await.unwrap();
    let err = blobs.open("video_01/video.mp4").await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    blobs.delete("video_01/video.mp4").await.unwrap();
    blobs.delete("never/was").await.unwrap();
    assert_eq!(
        read(&blobs, "video_01/thumbnail.png").await.unwrap(),
        b"png"
    );

    // A directory is not a blob.
    assert_eq!(
        blobs.open("video_01").await.unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[tokio::test]
async fn delete_prefix_removes_one_task_only() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    blobs
        .put_bytes("video_1/video.mp4", Bytes::from_static(b"a"))
        .await
        .unwrap();
    blobs
        .put_bytes("video_1/frames/last.png", Bytes::from_static(b"b"))
        .await
        .unwrap();
    blobs
        .put_bytes("video_10/video.mp4", Bytes::from_static(b"c"))
        .await
        .unwrap();
    blobs
        .put_bytes("video_1.mp4", Bytes::from_static(b"d"))
        .await
        .unwrap();

    blobs.delete_prefix("video_1").await.unwrap();
    for gone in ["video_1/video.mp4", "video_1/frames/last.png"] {
        assert_eq!(
            blobs.open(gone).await.unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
    assert_eq!(read(&blobs, "video_10/video.mp4").await.unwrap(), b"c");
    assert_eq!(read(&blobs, "video_1.mp4").await.unwrap(), b"d");

    blobs.delete_prefix("video_1").await.unwrap();
    blobs.delete_prefix("nothing_here").await.unwrap();
    // A file named like the prefix is not under it.
    blobs.delete_prefix("video_1.mp4").await.unwrap();
    assert_eq!(read(&blobs, "video_1.mp4").await.unwrap(), b"d");
}

#[tokio::test]
async fn traversal_ids_are_refused() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    // Something outside the blob area an escape would hit.
    std::fs::write(dir.path().join("secret"), b"s").unwrap();
    let bad = [
        "",
        "/etc/passwd",
        "../secret",
        "video_1/../../secret",
        "a..b",
        "..",
        ".",
        "./x",
        "a//b",
        "a/",
        "a\\b",
        "..\\secret",
        "a\0b",
        "C:secret",
        "a b",
        "vidéo",
        "a/./b",
    ];
    for id in bad {
        let check = |r: io::Result<()>, op: &str| {
            let err = r.expect_err(id);
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidInput,
                "{op} {id:?}: {err}"
            );
        };
        check(
            blobs
                .put_bytes(id, Bytes::from_static(b"x"))
                .await
                .map(drop),
            "put",
        );
        check(blobs.open(id).await.map(drop), "open");
        check(blobs.open_file(id).await.map(drop), "open_file");
        check(blobs.delete(id).await, "delete");
        check(blobs.delete_prefix(id).await, "delete_prefix");
        let temp = blobs.temp_path();
        std::fs::write(&temp, b"x").unwrap();
        check(blobs.commit(&temp, id).await.map(drop), "commit");
        std::fs::remove_file(&temp).unwrap();
    }
    assert_eq!(std::fs::read(dir.path().join("secret")).unwrap(), b"s");
    // put_bytes refused before writing anything: no temp files left behind.
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );

    for ok in ["a", "video_01J/video.mp4", "x-y.z/A_b/c.1"] {
        blobs
            .put_bytes(ok, Bytes::from_static(b"ok"))
            .await
            .unwrap();
        assert_eq!(read(&blobs, ok).await.unwrap(), b"ok");
    }
}

#[tokio::test]
async fn open_clears_stale_temp_files() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    blobs
        .put_bytes("kept/video.mp4", Bytes::from_static(b"v"))
        .await
        .unwrap();
    let stale = blobs.temp_path();
    std::fs::write(&stale, b"half written").unwrap();
    drop(blobs);

    let blobs = LocalBlobs::open(dir.path()).unwrap();
    assert!(!stale.exists());
    assert_eq!(read(&blobs, "kept/video.mp4").await.unwrap(), b"v");
}
