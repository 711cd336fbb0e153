//! The binary's user commands (`relay videos ...`, `relay chat ...`) against the built relay
//! binary, run as a user runs them: a relay started on port 0 with a fresh data directory, its
//! first key read from its start-up lines.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::harness::{MediaServer, Running, png, start_binary};

/// A relay binary with quick simulated tasks and local image URLs allowed; its first key.
async fn relay(dir: &Path) -> (Running, String) {
    let config = dir.join("relay.toml");
    std::fs::write(
        &config,
        "[simulator]\ntask_secs = 2.5\nfps = 4\n[security]\nallow_private_urls = true\n",
    )
    .unwrap();
    let running = start_binary(&dir.join("data"), &config).await;
    let key = running
        .lines
        .iter()
        .find_map(|l| l.strip_prefix("first API key (shown once, keep it now): "))
        .unwrap_or_else(|| panic!("no key printed: {:?}", running.lines))
        .to_owned();
    (running, key)
}

/// `relay <args>` as a user against `base` with `key`: waits for it to exit (within a minute).
async fn run(base: &str, key: &str, args: &[&str]) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(args)
        .env("RELAY_URL", base)
        .env("RELAY_API_KEY", key)
        .env_remove("RELAY_CONFIG")
        .env_remove("RELAY_LISTEN")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .unwrap_or_else(|_| panic!("relay {args:?} did not end within a minute"))
        .expect("run the relay binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_create_follows_the_task_and_downloads_the_mp4() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, key) = relay(dir.path()).await;
    let video = dir.path().join("v.mp4");
    let out = run(
        &relay.base,
        &key,
        &[
            "videos",
            "create",
            "--prompt",
            "a paper boat at dawn",
            "--seconds",
            "5",
            "--size",
            "64x64",
            "--output",
            video.to_str().unwrap(),
        ],
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");

    let mp4 = std::fs::read(&video).expect("the video was written");
    assert_eq!(&mp4[4..8], b"ftyp", "not an MP4: {:?}", &mp4[..16]);
    assert!(
        !dir.path().join("v.mp4.part").exists(),
        "the partial file is renamed"
    );
    // Without a terminal, progress comes as plain lines: one per change, ending at 100%.
    let id = stdout
        .split_whitespace()
        .next()
        .filter(|w| w.starts_with("video_"))
        .unwrap_or_else(|| panic!("no task id first: {stdout}"))
        .to_owned();
    assert_eq!(
        stdout.trim(),
        format!("{id} completed: {} ({} bytes)", video.display(), mp4.len())
    );
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{id} ")))
        .collect();
    assert_eq!(
        progress.first(),
        Some(&&*format!("{id} queued 0%")),
        "{stderr}"
    );
    assert_eq!(
        progress.last(),
        Some(&&*format!("{id} completed 100%")),
        "{stderr}"
    );
    assert!(
        progress.iter().any(|l| l.contains(" in_progress ")),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no terminal codes in logs: {stderr:?}"
    );

    // The list shows it, completed; get gives its record.
    let out = run(&relay.base, &key, &["videos", "list", "--limit", "5"]).await;
    let list = text(&out.stdout);
    assert!(out.status.success(), "{list}{}", text(&out.stderr));
    let mut lines = list.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header[..5],
        ["ID", "STATUS", "PROGRESS", "MODEL", "CREATED"]
    );
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} not listed: {list}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], [id.as_str(), "completed", "100%", "model_h3"]);

    let out = run(&relay.base, &key, &["videos", "get", &id]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["status"], "completed");
    assert_eq!(record["size"], "64x64");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_create_sends_an_image_file_or_url_as_the_first_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, key) = relay(dir.path()).await;
    // A square file: adaptive framing makes the task 1:1, so the image reached the relay.
    let square = dir.path().join("first.png");
    std::fs::write(&square, png(64, 64)).unwrap();
    let out = run(
        &relay.base,
        &key,
        &[
            "videos",
            "create",
            "--prompt",
            "from a file",
            "--image",
            square.to_str().unwrap(),
            "--no-wait",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--no-wait: JSON");
    assert_eq!(task["status"], "queued");
    assert_eq!(task["aspect_ratio"], "1:1", "{task}");

    // A URL goes as a URL, which the relay fetches: a tall image gives 9:16.
    let media =
        MediaServer::start(HashMap::from([("/tall.png", ("image/png", png(36, 64)))])).await;
    let out = run(
        &relay.base,
        &key,
        &[
            "videos",
            "create",
            "--prompt",
            "from a URL",
            "--image",
            &media.url("/tall.png"),
            "--no-wait",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(task["aspect_ratio"], "9:16", "{task}");

    // A missing file is named before anything is sent.
    let out = run(
        &relay.base,
        &key,
        &[
            "videos",
            "create",
            "--prompt",
            "x",
            "--image",
            "no-such.png",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--image no-such.png"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn videos_create_fails_with_the_relays_error() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, key) = relay(dir.path()).await;

    // Refused at submission: the error body's status, code, message and detail.
    let out = run(
        &relay.base,
        &key,
        &["videos", "create", "--prompt", "x", "--model", "sora-2"],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            r#"error: 400 invalid_model: invalid model (model must be model_h3, got "sora-2")"#
        ),
        "{stderr}"
    );

    // Accepted, then failed: the task's error, a non-zero exit and no file.
    let video = dir.path().join("f.mp4");
    let out = run(
        &relay.base,
        &key,
        &[
            "videos",
            "create",
            "--prompt",
            "x",
            "--size",
            "64x64",
            "--sim",
            "fail",
            "-o",
            video.to_str().unwrap(),
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(" failed: upstream_error: "), "{stderr}");
    assert!(!video.exists());

    // A wrong key: 401 in the same form.
    let out = run(&relay.base, "sk-relay-wrong", &["videos", "list"]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error: 401 unauthorized: unauthorized"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_prints_the_streamed_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, key) = relay(dir.path()).await;
    let out = run(&relay.base, &key, &["chat", "hello, streaming relay"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // sim-chat answers "You said <the words>", word by word.
    assert_eq!(text(&out.stdout), "You said hello streaming relay\n");

    let out = run(
        &relay.base,
        &key,
        &["chat", "one two three four", "--max-tokens", "3"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "You said one\n");
    assert!(
        text(&out.stderr).contains("--max-tokens 3"),
        "{}",
        text(&out.stderr)
    );

    let out = run(
        &relay.base,
        &key,
        &["chat", "hi", "--model", "no-such-model"],
    )
    .await;
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error: 400 invalid_request_error: invalid model"),
        "{stderr}"
    );
}
