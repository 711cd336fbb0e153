use std::io::Read;

use super::*;
use crate::test_util::TempDir;

fn read(blobs: &LocalBlobs, id: &str) -> io::Result<Vec<u8>> {
    let (mut file, len) = blobs.open(id)?;
    let mut out = Vec::new();
    file.read_to_end(&mut out)?;
    assert_eq!(out.len() as u64, len);
    Ok(out)
}

#[test]
fn put_commit_open_delete() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();

    assert_eq!(
        blobs.put_bytes("video_01/thumbnail.png", b"png").unwrap(),
        3
    );
    assert_eq!(read(&blobs, "video_01/thumbnail.png").unwrap(), b"png");

    // Streamed: write to the temp path, then commit.
    let temp = blobs.temp_path();
    assert_ne!(temp, blobs.temp_path());
    std::fs::write(&temp, b"mp4 bytes").unwrap();
    assert_eq!(blobs.commit(&temp, "video_01/video.mp4").unwrap(), 9);
    assert!(!temp.exists());
    assert_eq!(read(&blobs, "video_01/video.mp4").unwrap(), b"mp4 bytes");

    // Overwrite is atomic replacement.
    blobs.put_bytes("video_01/video.mp4", b"v2").unwrap();
    assert_eq!(read(&blobs, "video_01/video.mp4").unwrap(), b"v2");

    blobs.delete("video_01/video.mp4").unwrap();
    let err = blobs.open("video_01/video.mp4").unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    blobs.delete("video_01/video.mp4").unwrap();
    blobs.delete("never/was").unwrap();
    assert_eq!(read(&blobs, "video_01/thumbnail.png").unwrap(), b"png");

    // A directory is not a blob.
    assert_eq!(
        blobs.open("video_01").unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn delete_prefix_removes_one_task_only() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    blobs.put_bytes("video_1/video.mp4", b"a").unwrap();
    blobs.put_bytes("video_1/frames/last.png", b"b").unwrap();
    blobs.put_bytes("video_10/video.mp4", b"c").unwrap();
    blobs.put_bytes("video_1.mp4", b"d").unwrap();

    blobs.delete_prefix("video_1").unwrap();
    for gone in ["video_1/video.mp4", "video_1/frames/last.png"] {
        assert_eq!(
            blobs.open(gone).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
    assert_eq!(read(&blobs, "video_10/video.mp4").unwrap(), b"c");
    assert_eq!(read(&blobs, "video_1.mp4").unwrap(), b"d");

    blobs.delete_prefix("video_1").unwrap();
    blobs.delete_prefix("nothing_here").unwrap();
    // A file named like the prefix is not under it.
    blobs.delete_prefix("video_1.mp4").unwrap();
    assert_eq!(read(&blobs, "video_1.mp4").unwrap(), b"d");
}

#[test]
fn traversal_ids_are_refused() {
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
        check(blobs.put_bytes(id, b"x").map(drop), "put");
        check(blobs.open(id).map(drop), "open");
        check(blobs.delete(id), "delete");
        check(blobs.delete_prefix(id), "delete_prefix");
        let temp = blobs.temp_path();
        std::fs::write(&temp, b"x").unwrap();
        check(blobs.commit(&temp, id).map(drop), "commit");
        std::fs::remove_file(&temp).unwrap();
    }
    assert_eq!(std::fs::read(dir.path().join("secret")).unwrap(), b"s");
    // put_bytes refused before writing anything: no temp files left behind.
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );

    for ok in ["a", "video_01J/video.mp4", "x-y.z/A_b/c.1"] {
        blobs.put_bytes(ok, b"ok").unwrap();
        assert_eq!(read(&blobs, ok).unwrap(), b"ok");
    }
}

#[test]
fn open_clears_stale_temp_files() {
    let dir = TempDir::new();
    let blobs = LocalBlobs::open(dir.path()).unwrap();
    blobs.put_bytes("kept/video.mp4", b"v").unwrap();
    let stale = blobs.temp_path();
    std::fs::write(&stale, b"half written").unwrap();
    drop(blobs);

    let blobs = LocalBlobs::open(dir.path()).unwrap();
    assert!(!stale.exists());
    assert_eq!(read(&blobs, "kept/video.mp4").unwrap(), b"v");
}
