//! The built-in simulator: a real channel that renders real H.264 videos in process.

use std::sync::Arc;
use std::time::Duration;

use store::BlobStore;

use crate::sim::render::{RenderSpec, render};
use crate::video::{PollOutcome, ResultFiles, ResultSource, SubmitOutcome, VideoJob};

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

    pub async fn submit(&self, job: &VideoJob) -> SubmitOutcome {
        if let Some(status) = job.sim.error {
            return SubmitOutcome::Retry(format!("simulated upstream status {status}"));
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
        };
        let video = self.blobs.temp_path();
        let thumbnail = self.blobs.temp_path();
        let last_frame = self.blobs.temp_path();
        let paths = (video.clone(), thumbnail.clone(), last_frame.clone());
        let rendered =
            tokio::task::spawn_blocking(move || render(&spec, &paths.0, &paths.1, &paths.2)).await;
        match rendered {
            Ok(Ok(_)) => PollOutcome::Succeeded(ResultFiles {
                video: ResultSource::LocalFile(video),
                thumbnail: Some(ResultSource::LocalFile(thumbnail)),
                last_frame: Some(ResultSource::LocalFile(last_frame)),
            }),
            Ok(Err(e)) => {
                for p in [&video, &thumbnail, &last_frame] {
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
    use super::*;

    #[test]
    fn first_words_caps_words_and_chars() {
        assert_eq!(first_words("a cat on a mat in the sun", 3, 40), "a cat on");
        assert_eq!(first_words("  hello   world ", 6, 40), "hello world");
        assert_eq!(first_words("abcdefghij klmnop", 6, 12), "abcdefghij");
    }
}
