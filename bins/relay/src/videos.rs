//! `relay videos ...`: create a video task and follow it to its MP4, list tasks, show one.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Response, StatusCode};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::client::{self, Api, Body};

#[derive(clap::Subcommand)]
pub enum VideosCommand {
    /// Submit a video task, follow it to the end and download the MP4.
    Create(CreateArgs),
    /// Your video tasks, newest first: id, status, progress, model, created.
    List {
        /// How many tasks (1 to 100).
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One task's record, as JSON.
    Get {
        /// The task id (`video_...`).
        id: String,
    },
}

#[derive(clap::Args)]
pub struct CreateArgs {
    /// What the video shows.
    #[arg(long)]
    prompt: String,
    /// The video model.
    #[arg(long, default_value = "model_h3")]
    model: String,
    /// Length in seconds (5 to 15) [default: the relay's, 5].
    #[arg(long, value_name = "N")]
    seconds: Option<u32>,
    /// Frame size, e.g. 1280x720 [default: framed like the image, else 16:9].
    #[arg(long, value_name = "WxH")]
    size: Option<String>,
    /// First frame: an image file (uploaded), or an http(s) URL or data: URI the relay fetches.
    #[arg(long, value_name = "PATH_OR_URL")]
    image: Option<String>,
    /// Where the MP4 goes [default: <id>.mp4].
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print the new task's record as JSON and exit, without waiting for it.
    #[arg(long)]
    no_wait: bool,
    /// Steer the built-in simulator for this task (its `x-relay-sim` header: `fail`,
    /// `delay_ms=N`, ...); real channels ignore it.
    #[arg(long, value_name = "DIRECTIVES")]
    sim: Option<String>,
}

/// Seconds between two polls of a task (the relay allows 2 polls per second per task).
const POLL_EVERY: Duration = Duration::from_secs(1);
/// Failed polls in a row (connection errors, 429, 502..504) survived before giving up.
const POLL_RETRIES: u32 = 5;

pub async fn run(api: &Api, command: VideosCommand) -> anyhow::Result<()> {
    match command {
        VideosCommand::Create(args) => create(api, args).await,
        VideosCommand::List { limit } => list(api, limit).await,
        VideosCommand::Get { id } => {
            let task = api
                .json(Method::GET, &format!("/v1/videos/{}", escape(&id)), None)
                .await?;
            println!("{}", serde_json::to_string_pretty(&task)?);
            Ok(())
        }
    }
}

async fn create(api: &Api, args: CreateArgs) -> anyhow::Result<()> {
    let task = submit(api, &args).await?;
    let id = task["id"]
        .as_str()
        .context("the relay's answer has no task id")?
        .to_owned();
    if args.no_wait {
        println!("{}", serde_json::to_string_pretty(&task)?);
        return Ok(());
    }
    let task = follow(api, &id, task).await?;
    match task["status"].as_str() {
        Some("completed") => {
            let output = args
                .output
                .unwrap_or_else(|| PathBuf::from(format!("{id}.mp4")));
            let bytes = download(api, &id, &output).await?;
            println!("{id} completed: {} ({bytes} bytes)", output.display());
            Ok(())
        }
        status => {
            let error = &task["error"];
            bail!(
                "{id} {}: {}: {}",
                status.unwrap_or("?"),
                error["code"].as_str().unwrap_or("no code"),
                error["message"].as_str().unwrap_or("no message")
            )
        }
    }
}

/// `POST /v1/videos`: JSON, or multipart when the first frame is a local file.
async fn submit(api: &Api, args: &CreateArgs) -> anyhow::Result<Value> {
    let sim = args.sim.as_deref().map(|s| ("x-relay-sim", s));
    let image_file = args.image.as_deref().filter(|i| {
        !(i.starts_with("http://") || i.starts_with("https://") || i.starts_with("data:"))
    });
    let res = match image_file {
        None => {
            let mut body = json!({"model": args.model, "prompt": args.prompt});
            if let Some(seconds) = args.seconds {
                body["seconds"] = json!(seconds);
            }
            if let Some(size) = &args.size {
                body["size"] = json!(size);
            }
            if let Some(url) = &args.image {
                body["input_reference"] = json!(url);
            }
            let mut headers = vec![("content-type", "application/json")];
            headers.extend(sim);
            api.send(
                Method::POST,
                "/v1/videos",
                &headers,
                client::full(body.to_string()),
            )
            .await?
        }
        Some(path) => {
            let mut fields = vec![
                ("model", args.model.clone()),
                ("prompt", args.prompt.clone()),
            ];
            if let Some(seconds) = args.seconds {
                fields.push(("seconds", seconds.to_string()));
            }
            if let Some(size) = &args.size {
                fields.push(("size", size.clone()));
            }
            let (content_type, length, body) = multipart(&fields, Path::new(path)).await?;
            let length = length.to_string();
            let mut headers = vec![
                ("content-type", content_type.as_str()),
                ("content-length", length.as_str()),
            ];
            headers.extend(sim);
            api.send(Method::POST, "/v1/videos", &headers, body).await?
        }
    };
    client::read_json(res).await
}

/// A `multipart/form-data` body of text `fields` and the image file as `input_reference`,
/// streamed from disk: its content type, length and body.
async fn multipart(fields: &[(&str, String)], image: &Path) -> anyhow::Result<(String, u64, Body)> {
    let file = tokio::fs::File::open(image)
        .await
        .with_context(|| format!("--image {}", image.display()))?;
    let file_len = file
        .metadata()
        .await
        .with_context(|| format!("--image {}", image.display()))?
        .len();
    let boundary = format!("relay-{:032x}", rand::random::<u128>());
    let mut head = String::new();
    for (name, value) in fields {
        head.push_str(&format!(
            "--{boundary}\r\ncontent-disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    let file_name: String = image
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image".to_owned())
        .chars()
        .map(|c| if c == '"' || c.is_control() { '_' } else { c })
        .collect();
    head.push_str(&format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"input_reference\"; \
         filename=\"{file_name}\"\r\ncontent-type: {}\r\n\r\n",
        image_type(image)
    ));
    let tail = format!("\r\n--{boundary}--\r\n");
    let length = head.len() as u64 + file_len + tail.len() as u64;
    let stream = futures_util::stream::once(async move { Ok(Bytes::from(head)) })
        .chain(tokio_util::io::ReaderStream::new(file))
        .chain(futures_util::stream::once(
            async move { Ok(Bytes::from(tail)) },
        ))
        .map(|chunk| chunk.map(Frame::data));
    let body = BodyExt::boxed(StreamBody::new(stream));
    Ok((
        format!("multipart/form-data; boundary={boundary}"),
        length,
        body,
    ))
}

/// The file part's Content-Type by extension (the relay sniffs the bytes anyway).
fn image_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "webp" => "image/webp",
        _ => "application/octet-stream",
    }
}

/// Polls the task until a final status, showing it: a progress bar on a terminal, else a line
/// per change. The final record.
async fn follow(api: &Api, id: &str, first: Value) -> anyhow::Result<Value> {
    let mut progress = Progress::new(id);
    let mut task = first;
    let mut failures = 0;
    loop {
        let status = task["status"].as_str().unwrap_or("?").to_owned();
        progress.show(&status, task["progress"].as_u64().unwrap_or(0));
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            progress.finish();
            return Ok(task);
        }
        tokio::time::sleep(POLL_EVERY).await;
        match poll(api, id).await {
            Poll::Record(next) => {
                failures = 0;
                task = next;
            }
            Poll::Again(wait, why) if failures < POLL_RETRIES => {
                failures += 1;
                progress.note(&format!("{why}; trying again in {}s", wait.as_secs()));
                tokio::time::sleep(wait).await;
            }
            Poll::Again(_, why) => {
                progress.finish();
                bail!("polling {id}: {why}");
            }
            Poll::Fatal(e) => {
                progress.finish();
                return Err(e.context(format!("polling {id}")));
            }
        }
    }
}

enum Poll {
    Record(Value),
    /// A failure a later poll may not meet: how long to wait, and what happened.
    Again(Duration, String),
    Fatal(anyhow::Error),
}

async fn poll(api: &Api, id: &str) -> Poll {
    let res = match api
        .send(
            Method::GET,
            &format!("/v1/videos/{}", escape(id)),
            &[],
            client::empty(),
        )
        .await
    {
        Ok(res) => res,
        Err(e) => return Poll::Again(Duration::from_secs(2), format!("{e:#}")),
    };
    let status = res.status();
    if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
        let wait = res
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(2)
            .clamp(1, 60);
        return Poll::Again(
            Duration::from_secs(wait),
            client::fail(res).await.to_string(),
        );
    }
    match client::read_json(res).await {
        Ok(task) => Poll::Record(task),
        Err(e) => Poll::Fatal(e),
    }
}

/// A task's status as it moves: a bar when stderr is a terminal, else one line per change.
struct Progress {
    bar: ProgressBar,
    id: String,
    last: Option<(String, u64)>,
}

impl Progress {
    fn new(id: &str) -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(100);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix} {msg:<11} [{bar:30}] {pos:>3}% {elapsed:>4}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(id.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            id: id.to_owned(),
            last: None,
        }
    }

    fn show(&mut self, status: &str, percent: u64) {
        let now = (status.to_owned(), percent.min(100));
        if self.last.as_ref() == Some(&now) {
            return;
        }
        if self.bar.is_hidden() {
            eprintln!("{} {status} {}%", self.id, now.1);
        } else {
            self.bar.set_message(status.to_owned());
            self.bar.set_position(now.1);
        }
        self.last = Some(now);
    }

    fn note(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{} {line}", self.id);
        } else {
            self.bar.println(line);
        }
    }

    fn finish(&self) {
        self.bar.abandon();
    }
}

/// `GET /v1/videos/{id}/content` streamed to `output` (through `<output>.part`, renamed
/// once whole); a redirect to a signed URL is followed. The bytes written.
async fn download(api: &Api, id: &str, output: &Path) -> anyhow::Result<u64> {
    let path = format!("/v1/videos/{}/content", escape(id));
    let mut res = api
        .send(
            Method::GET,
            &path,
            &[("accept", "application/binary")],
            client::empty(),
        )
        .await?;
    if matches!(
        res.status(),
        StatusCode::FOUND | StatusCode::SEE_OTHER | StatusCode::TEMPORARY_REDIRECT
    ) {
        let location = res
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .context("a redirect without a Location")?
            .to_owned();
        let url = if location.starts_with('/') {
            format!("{}{location}", api.base())
        } else {
            location
        };
        res = api.get_unauthenticated(&url).await?;
    }
    if !res.status().is_success() {
        return Err(client::fail(res).await.context(format!("downloading {id}")));
    }
    let part = PathBuf::from(format!("{}.part", output.display()));
    let written = write_body(res, &part).await;
    match written {
        Ok(bytes) => {
            tokio::fs::rename(&part, output)
                .await
                .with_context(|| format!("renaming {} to {}", part.display(), output.display()))?;
            Ok(bytes)
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            Err(e.context(format!("downloading {id} to {}", output.display())))
        }
    }
}

/// Streams an answer's body to a new file, a chunk at a time; checks it against Content-Length.
async fn write_body(res: Response<Incoming>, path: &Path) -> anyhow::Result<u64> {
    let expected = res
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(expected.unwrap_or(0));
        bar.set_style(
            ProgressStyle::with_template("  downloading [{bar:30}] {bytes}/{total_bytes}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut file = tokio::fs::File::create(path)
        .await
        .with_context(|| format!("creating {}", path.display()))?;
    let mut body = res.into_body();
    let mut written = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.context("reading the video")?;
        if let Ok(chunk) = frame.into_data() {
            file.write_all(&chunk)
                .await
                .with_context(|| format!("writing {}", path.display()))?;
            written += chunk.len() as u64;
            bar.set_position(written);
        }
    }
    file.flush().await?;
    file.sync_all()
        .await
        .with_context(|| format!("writing {}", path.display()))?;
    bar.finish_and_clear();
    if let Some(expected) = expected.filter(|e| *e != written) {
        bail!("the relay announced {expected} bytes and sent {written}");
    }
    Ok(written)
}

async fn list(api: &Api, limit: u32) -> anyhow::Result<()> {
    let page = api
        .json(Method::GET, &format!("/v1/videos?limit={limit}"), None)
        .await?;
    let rows = page["data"].as_array().cloned().unwrap_or_default();
    let width = rows
        .iter()
        .filter_map(|t| t["id"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(2)
        .max(2);
    println!(
        "{:<width$}  {:<11}  {:>8}  {:<10}  CREATED (UTC)",
        "ID", "STATUS", "PROGRESS", "MODEL"
    );
    for task in &rows {
        println!(
            "{:<width$}  {:<11}  {:>7}%  {:<10}  {}",
            task["id"].as_str().unwrap_or("?"),
            task["status"].as_str().unwrap_or("?"),
            task["progress"].as_u64().unwrap_or(0),
            task["model"].as_str().unwrap_or("?"),
            task["created_at"]
                .as_i64()
                .map_or_else(|| "?".to_owned(), utc),
        );
    }
    if page["has_more"] == true {
        eprintln!("(more: raise --limit, at most 100)");
    }
    Ok(())
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` (UTC): the relay's RFC 3339 form, easier to read.
fn utc(secs: i64) -> String {
    let mut stamp = server::ground::limits::rfc3339(secs);
    stamp.pop();
    stamp.replace('T', " ")
}

/// A task id as one path segment: anything but unreserved characters percent-encoded.
fn escape(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_763_776_000), "2025-11-22 01:46:40");
        assert_eq!(utc(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn ids_stay_one_segment() {
        assert_eq!(escape("video_01JDX"), "video_01JDX");
        assert_eq!(escape("a/b?c"), "a%2Fb%3Fc");
    }
}
