//! Downloading an upstream's URL results into the blob store's temp files: streamed, bounded,
//! checked whole and of the expected type.

use std::sync::Arc;
use std::time::Duration;

use channels::{ResultFiles, ResultSource, VideoChannel};
use store::Task;

use crate::calls::call_permit;
use crate::state::Engine;

/// The longest each download of a result waits for a call of its channel's
/// `max_calls_per_sec`; past it what was downloaded is given up and the task is polled again
/// at its turn.
const DOWNLOAD_CALL_WAIT: Duration = Duration::from_secs(5);

/// What a downloaded result must be.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Video,
    Image,
}

/// Turns the URL results into local files: the video must download whole; a thumbnail or
/// last frame that cannot be had is left out (with a warning). A download the channel's call
/// rate cannot spare soon puts off the whole result: what was downloaded is removed.
pub(crate) async fn download_results(
    engine: &Arc<Engine>,
    task: &Task,
    channel: &Arc<VideoChannel>,
    files: ResultFiles,
) -> Result<ResultFiles, DownloadFailure> {
    // The temp files downloaded so far, removed if the result is put off.
    let mut temps: Vec<std::path::PathBuf> = Vec::new();
    let mut note = |was_url: bool, local: &ResultSource| {
        if let (true, ResultSource::LocalFile(path)) = (was_url, local) {
            temps.push(path.clone());
        }
    };
    let was_url = matches!(files.video, ResultSource::Url(_));
    let video = localize(engine, channel, files.video, Expect::Video).await?;
    note(was_url, &video);
    let mut images = Vec::with_capacity(3);
    for source in [files.thumbnail, files.last_frame, files.spritesheet] {
        let Some(source) = source else {
            images.push(None);
            continue;
        };
        let was_url = matches!(source, ResultSource::Url(_));
        match localize(engine, channel, source, Expect::Image).await {
            Ok(local) => {
                note(was_url, &local);
                images.push(Some(local));
            }
            Err(failure) if failure.paced => {
                for path in &temps {
                    let _ = tokio::fs::remove_file(path).await;
                }
                return Err(failure);
            }
            Err(failure) => {
                tracing::warn!(
                    "engine: task {}: channel {}: an image result left out: {}",
                    task.id,
                    channel.name(),
                    failure.reason
                );
                images.push(None);
            }
        }
    }
    let mut images = images.into_iter();
    Ok(ResultFiles {
        usage: files.usage,
        video,
        thumbnail: images.next().flatten(),
        last_frame: images.next().flatten(),
        spritesheet: images.next().flatten(),
    })
}

/// Downloads a URL result to a temp file of the blob store: streamed (memory stays flat),
/// at most `max_result_bytes`, whole (the declared length, if any, is checked) and of the
/// expected type (sniffed from its first bytes), as a call within the channel's caps. A local
/// file is returned as it is.
async fn localize(
    engine: &Arc<Engine>,
    channel: &Arc<VideoChannel>,
    source: ResultSource,
    expect: Expect,
) -> Result<ResultSource, DownloadFailure> {
    use tokio::io::AsyncWriteExt;
    let url = match source {
        ResultSource::LocalFile(_) => return Ok(source),
        ResultSource::Url(url) => url,
    };
    let max = engine.settings.max_result_bytes;
    let final_failure = |reason: String| DownloadFailure {
        retry: false,
        paced: false,
        reason,
    };
    let permit = call_permit(engine, channel).await;
    match engine
        .routing
        .reserve_call(channel.name(), DOWNLOAD_CALL_WAIT)
    {
        Some(wait) if wait.is_zero() => {}
        Some(wait) => tokio::time::sleep(wait).await,
        None => {
            return Err(DownloadFailure {
                retry: true,
                paced: true,
                reason: "over the channel's call rate".into(),
            });
        }
    }
    let res = channel.download(&url).await.map_err(|e| DownloadFailure {
        retry: !matches!(
            e,
            channels::UpstreamError::Build(_) | channels::UpstreamError::Blocked { .. }
        ),
        paced: false,
        reason: e.to_string(),
    })?;
    let status = res.status;
    if !status.is_success() {
        return Err(DownloadFailure {
            retry: status.is_server_error()
                || status == http::StatusCode::TOO_MANY_REQUESTS
                || status == http::StatusCode::REQUEST_TIMEOUT,
            paced: false,
            reason: format!("the result URL answered {status}"),
        });
    }
    let declared = res
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max) {
        return Err(final_failure(format!(
            "the result is larger than {max} bytes"
        )));
    }
    let path = engine.blobs.temp_path();
    let mut body = res.body;
    let written = async {
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| format!("creating a temp file: {e}"))?;
        let mut total: u64 = 0;
        let mut head: Vec<u8> = Vec::new();
        while let Some(chunk) = body.chunk().await.map_err(|e| e.to_string())? {
            total += chunk.len() as u64;
            if total > max {
                return Err(format!("the result is larger than {max} bytes"));
            }
            if head.len() < 64 {
                let take = (64 - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| format!("writing a temp file: {e}"))?;
        }
        file.sync_all()
            .await
            .map_err(|e| format!("writing a temp file: {e}"))?;
        if let Some(len) = declared
            && len != total
        {
            return Err(format!("truncated: {total} of {len} bytes"));
        }
        let format = fetch::sniff(&head);
        let fits = match expect {
            Expect::Video => matches!(format, Some(fetch::Format::Mp4 | fetch::Format::Mov)),
            Expect::Image => matches!(
                format,
                Some(fetch::Format::Png | fetch::Format::Jpeg | fetch::Format::Webp)
            ),
        };
        if !fits {
            return Err(format!(
                "not a {expect:?} ({total} bytes, sniffed {format:?})"
            ));
        }
        Ok(())
    }
    .await;
    drop(permit);
    match written {
        Ok(()) => Ok(ResultSource::LocalFile(path)),
        Err(e) => {
            let _ = tokio::fs::remove_file(&path).await;
            Err(final_failure(e))
        }
    }
}

/// Why a result could not be downloaded, and whether asking again may work (connect errors,
/// timeouts before the answer, 408, 429, 5xx). A truncated body, a wrong type or size, or
/// another status fails the task. `paced`: the download was not made, the channel's call
/// rate having no call to spare soon; the task is polled again at its turn.
#[derive(Debug)]
pub(crate) struct DownloadFailure {
    pub(crate) retry: bool,
    pub(crate) paced: bool,
    pub(crate) reason: String,
}
