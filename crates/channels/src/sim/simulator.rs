//! The built-in simulator: a real channel that renders real H.264 videos in process.

use std::sync::Arc;
use std::time::Duration;

use store::BlobStore;

use crate::sim::picture::{self, Picture};
use crate::sim::render::{RenderSpec, render_with_sheet};
use crate::video::job::{
    PollOutcome, ResultFiles, ResultSource, StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// Settings of one simulator channel.
#[derive(Debug, Clone)]
pub struct SimulatorSettings {
    pub name: String,
    pub models: Vec<String>,
    /// How long a task runs unless a `delay_ms` directive says otherwise.
    pub task_ms: u64,
    pub fps: u32,
    /// Whether `x-relay-sim` directives are honoured.
    pub scenarios: bool,
    pub blocked_words: Vec<String>,
}

pub struct Simulator {
    settings: SimulatorSettings,
    blobs: Arc<dyn BlobStore>,
}

impl Simulator {
    pub fn new(settings: SimulatorSettings, blobs: Arc<dyn BlobStore>) -> Simulator {
        Simulator { settings, blobs }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn serves(&self, model: &str) -> bool {
        self.settings.models.iter().any(|m| m == model)
    }

    pub fn scenarios(&self) -> bool {
        self.settings.scenarios
    }

    pub fn min_poll_interval(&self) -> Duration {
        Duration::from_millis(200)
    }

    /// Whether moderation rejects a prompt: a configured word appears in it (case-insensitive)
    /// or the task asked for `reject`.
    pub fn moderation_rejects(&self, prompt: &str, job_reject: bool) -> bool {
        let prompt = prompt.to_lowercase();
        job_reject
            || self
                .settings
                .blocked_words
                .iter()
                .any(|w| !w.is_empty() && prompt.contains(&w.to_lowercase()))
    }

    /// Accepts `job` with its stored `references`. It renders from the prompt, the framing and
    /// the first frame only, but it looks at every reference as an upstream would: each
    /// stored one is opened, and what it got is logged (a stored reference whose bytes are
    /// gone is logged as such, and the task still runs).
    pub async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        if let Some(status) = job.sim.error {
            return SubmitOutcome::Retry(format!("simulated upstream status {status}"));
        }
        for (role, url) in [
            ("reference_video", &job.reference_video),
            ("reference_audio", &job.audio_url),
        ] {
            if url.is_some() {
                tracing::debug!(task = job.task_id, role, "simulator: a reference URL");
            }
        }
        for r in references {
            let opened = self.blobs.open(&r.blob).await.map(|blob| blob.len());
            let role = r.role.as_str();
            match opened {
                Ok(bytes) => {
                    tracing::debug!(
                        task = job.task_id,
                        role,
                        blob = r.blob,
                        bytes,
                        "simulator: a stored reference"
                    )
                }
                Err(e) => {
                    tracing::warn!(task = job.task_id, role, blob = r.blob, error = %e, "simulator: a stored reference cannot be read")
                }
            }
        }
        SubmitOutcome::Accepted {
            upstream_id: format!("sim-{}", job.task_id),
        }
    }

    fn run_ms(&self, job: &VideoJob) -> u64 {
        job.sim.delay_ms.unwrap_or(self.settings.task_ms)
    }

    pub async fn poll(
        &self,
        job: &VideoJob,
        _upstream_id: &str,
        submitted_ms: u64,
        now_ms: u64,
    ) -> PollOutcome {
        let run_ms = self.run_ms(job);
        let elapsed = now_ms.saturating_sub(submitted_ms);
        if job.sim.stuck || elapsed < run_ms {
            let progress = elapsed
                .saturating_mul(100)
                .checked_div(run_ms)
                .map_or(99, |p| p.min(99)) as u8;
            let remaining = run_ms.saturating_sub(elapsed);
            return PollOutcome::Running {
                progress: if job.sim.stuck {
                    progress.min(50)
                } else {
                    progress
                },
                next_poll: Some(Duration::from_millis(remaining.clamp(1, 1000))),
            };
        }
        if job.sim.fail {
            return PollOutcome::Failed {
                code: "upstream_error".into(),
                message: "the simulated upstream failed the task".into(),
            };
        }
        self.render(job).await
    }

    async fn render(&self, job: &VideoJob) -> PollOutcome {
        let spec = RenderSpec {
            width: job.width,
            height: job.height,
            duration_secs: job.duration_secs,
            fps: self.settings.fps,
            text: first_words(&job.prompt, 6, 40),
            first_frame: None,
        };
        let video = self.blobs.temp_path();
        let thumbnail = self.blobs.temp_path();
        let last_frame = self.blobs.temp_path();
        let sheet = self.blobs.temp_path();
        let paths = (
            video.clone(),
            thumbnail.clone(),
            last_frame.clone(),
            sheet.clone(),
        );
        // A remote blob store hands the picture over as a local (unlinked) temporary file.
        let first_frame = match &job.first_frame {
            Some(id) => match self.blobs.open_file(id).await {
                Ok((file, _)) => Some((id.clone(), file)),
                Err(e) => {
                    unusable_first_frame(&job.task_id, id, &format!("open: {e}"));
                    None
                }
            },
            None => None,
        };
        let task_id = job.task_id.clone();
        let rendered = tokio::task::spawn_blocking(move || {
            let spec = RenderSpec {
                first_frame: first_frame
                    .and_then(|(id, file)| first_frame_picture(file, &task_id, &id)),
                ..spec
            };
            render_with_sheet(&spec, &paths.0, &paths.1, &paths.2, Some(&paths.3))
        })
        .await;
        match rendered {
            Ok(Ok(_)) => PollOutcome::Succeeded(ResultFiles {
                video: ResultSource::LocalFile(video),
                thumbnail: Some(ResultSource::LocalFile(thumbnail)),
                last_frame: Some(ResultSource::LocalFile(last_frame)),
                spritesheet: Some(ResultSource::LocalFile(sheet)),
                usage: VendorUsage::NotReported,
            }),
            Ok(Err(e)) => {
                for p in [&video, &thumbnail, &last_frame, &sheet] {
                    let _ = std::fs::remove_file(p);
                }
                PollOutcome::Failed {
                    code: "upstream_error".into(),
                    message: format!("the simulator could not render the video: {e}"),
                }
            }
            Err(e) => PollOutcome::Transient(format!("render task: {e}")),
        }
    }

    pub async fn cancel(&self, _upstream_id: &str) {}
}

/// The task's first-frame picture, or `None` (with a warning) when its blob cannot be
/// decoded: the video is then rendered without it rather than the task failing. Blocking.
fn first_frame_picture(file: std::fs::File, task_id: &str, blob_id: &str) -> Option<Picture> {
    // The decoders are meant never to panic on bad bytes; should one still do so, the
    // picture is dropped instead of the render thread.
    let loaded = std::panic::catch_unwind(move || picture::read(file))
        .map_err(|_| "the decoder panicked".to_owned())
        .and_then(|read| read.map_err(|e| e.to_string()));
    match loaded {
        Ok(picture) => Some(picture),
        Err(error) => {
            unusable_first_frame(task_id, blob_id, &error);
            None
        }
    }
}

fn unusable_first_frame(task_id: &str, blob_id: &str, error: &str) {
    tracing::warn!(
        task = task_id,
        blob = blob_id,
        %error,
        "first-frame picture unusable; rendering without it"
    );
}

/// The first `max_words` words of `text`, at most `max_chars` characters.
fn first_words(text: &str, max_words: usize, max_chars: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace().take(max_words) {
        if out.chars().count() + word.chars().count() + 1 > max_chars {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A scratch directory removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new() -> Self {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("channels-sim-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn job(first_frame: Option<&str>) -> VideoJob {
        VideoJob {
            task_id: "gen_1".into(),
            model: "sim-video".into(),
            prompt: "a cat".into(),
            width: 96,
            height: 64,
            ratio: "3:2".into(),
            resolution: None,
            duration_secs: 1,
            first_frame: first_frame.map(str::to_owned),
            last_frame: None,
            first_frame_url: None,
            last_frame_url: None,
            audio_url: None,
            reference_video: None,
            reference_video_audio: false,
            return_last_frame: true,
            seed: None,
            sim: Default::default(),
        }
    }

    /// A 96x64 PNG, left half orange, right half teal.
    fn two_tone_png() -> Vec<u8> {
        let rgb: Vec<u8> = (0..64)
            .flat_map(|_| {
                (0..96).flat_map(|x| {
                    if x < 48 {
                        [240, 140, 20]
                    } else {
                        [20, 160, 160]
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, 96, 64);
        encoder.set_color(png::ColorType::Rgb);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&rgb).unwrap();
        writer.finish().unwrap();
        out
    }

    /// Renders `job` to the end and returns the thumbnail's pixel at (24, 32).
    async fn thumbnail_pixel(sim: &Simulator, job: &VideoJob) -> [u8; 3] {
        let PollOutcome::Succeeded(files) = sim.poll(job, "sim-gen_1", 0, 60_000).await else {
            panic!("the render did not succeed");
        };
        let Some(ResultSource::LocalFile(thumb)) = files.thumbnail else {
            panic!("no thumbnail");
        };
        let decoder = png::Decoder::new(std::io::BufReader::new(
            std::fs::File::open(&thumb).unwrap(),
        ));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        let i = (32 * 96 + 24) * 3;
        [buf[i], buf[i + 1], buf[i + 2]]
    }

    #[tokio::test]
    async fn renders_from_the_first_frame_blob_or_without_it() {
        let dir = Scratch::new();
        let blobs: Arc<dyn BlobStore> = Arc::new(store::LocalBlobs::open(&dir.0).unwrap());
        blobs
            .put_bytes("asset_1/image.png", two_tone_png().into())
            .await
            .unwrap();
        blobs
            .put_bytes(
                "asset_2/image.png",
                Bytes::from_static(b"\x89PNG\r\n\x1a\nnot really"),
            )
            .await
            .unwrap();
        let sim = Simulator::new(
            SimulatorSettings {
                name: "sim".into(),
                models: vec!["sim-video".into()],
                task_ms: 0,
                fps: 8,
                scenarios: true,
                blocked_words: vec![],
            },
            blobs,
        );

        let px = thumbnail_pixel(&sim, &job(Some("asset_1/image.png"))).await;
        assert!(
            px.iter()
                .zip([240u8, 140, 20])
                .all(|(a, b)| a.abs_diff(b) <= 6),
            "{px:?}"
        );
        // Missing or undecodable: the video is still made, from the plain test pattern.
        let plain = thumbnail_pixel(&sim, &job(None)).await;
        assert_ne!(plain, px);
        for id in ["asset_2/image.png", "asset_3/missing.png", "../escape.png"] {
            assert_eq!(thumbnail_pixel(&sim, &job(Some(id))).await, plain, "{id}");
        }
    }

    #[tokio::test]
    async fn takes_jobs_with_references_even_when_their_bytes_are_gone() {
        use crate::video::job::ReferenceRole;
        let dir = Scratch::new();
        let blobs: Arc<dyn BlobStore> = Arc::new(store::LocalBlobs::open(&dir.0).unwrap());
        blobs
            .put_bytes("video_1/audio.wav", Bytes::from_static(b"RIFF....WAVE"))
            .await
            .unwrap();
        let sim = Simulator::new(
            SimulatorSettings {
                name: "sim".into(),
                models: vec!["sim-video".into()],
                task_ms: 0,
                fps: 8,
                scenarios: true,
                blocked_words: vec![],
            },
            blobs,
        );
        let mut with_urls = job(None);
        with_urls.audio_url = Some("https://media.example/a.mp3".into());
        with_urls.reference_video = Some("https://media.example/v.mp4".into());
        let references = [
            StoredReference {
                role: ReferenceRole::Audio,
                blob: "video_1/audio.wav".into(),
                url: None,
            },
            StoredReference {
                role: ReferenceRole::Video,
                blob: "video_1/gone.mp4".into(),
                url: None,
            },
        ];
        assert_eq!(
            sim.submit(&with_urls, &references).await,
            SubmitOutcome::Accepted {
                upstream_id: "sim-gen_1".into()
            }
        );
    }

    #[test]
    fn first_words_caps_words_and_chars() {
        assert_eq!(first_words("a cat on a mat in the sun", 3, 40), "a cat on");
        assert_eq!(first_words("  hello   world ", 6, 40), "hello world");
        assert_eq!(first_words("abcdefghij klmnop", 6, 12), "abcdefghij");
    }
}
