//! The second format: `/v1/video/generations` (CONTRACT §2.3) and the moderation call (§2.4).

use std::sync::Arc;

use channels::SimDirectives;
use engine::formats::generation::{GenParams, TaskAsset};
use engine::formats::read_params;
use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::{HeaderMap, StatusCode};
use hyper::body::Incoming;
use store::{Task, TaskKind, TaskStatus};
use video_generations::{
    GenerationError, GenerationList, GenerationObject, GenerationStatus, ModerationCategory,
    ModerationResult, ModerationStatus, Role, Usage,
};

use crate::app::App;
use crate::formats::idempotency::{Hashed, Idem};
use crate::formats::tasks::{self, TaskFormat, unreadable};
use crate::ground::http::{Answer, error, parse_json, read_body_lenient};

/// Frame size of a resolution tier (`720p`: short side 720) at a ratio (`16:9`).
pub fn dimensions(resolution: &str, ratio: &str) -> (u32, u32) {
    let short: u32 = resolution
        .trim_end_matches('p')
        .parse()
        .ok()
        .filter(|s| (64..=2160).contains(s))
        .unwrap_or(720);
    let (a, b) = ratio
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .filter(|(a, b)| *a > 0 && *b > 0)
        .unwrap_or((16, 9));
    let even = |x: u64| (x.div_ceil(2) * 2) as u32;
    if a >= b {
        (even(u64::from(short) * u64::from(a) / u64::from(b)), short)
    } else {
        (short, even(u64::from(short) * u64::from(b) / u64::from(a)))
    }
}

/// The second format as the shared task handlers see it.
pub struct Generations;

impl TaskFormat for Generations {
    const KIND: TaskKind = TaskKind::Generation;
    const STABLE: bool = false;
    type Record = GenerationObject;
    type List = GenerationList;

    /// The task record as clients see it, with fresh signed URLs once it succeeded.
    fn record(app: &App, task: &Task) -> Result<GenerationObject, ApiError> {
        let p: GenParams = read_params(task).map_err(unreadable)?;
        let succeeded = task.status == TaskStatus::Succeeded;
        let expires = now_secs() + app.config.server.signed_url_ttl_secs;
        let base = app.public_base_url();
        let url = |blob: &Option<String>| {
            blob.as_ref()
                .filter(|_| succeeded)
                .map(|b| app.signer.url(&base, b, expires))
        };
        Ok(GenerationObject {
            task_id: task.id.clone(),
            object: "video.generation".into(),
            model: task.model.clone(),
            status: status_of(task.status),
            progress: task.progress,
            duration: p.duration,
            resolution: p.resolution,
            ratio: p.ratio,
            seed: Some(p.seed),
            video_url: url(&task.outputs.video),
            last_frame_url: if p.return_last_frame {
                url(&task.outputs.last_frame)
            } else {
                None
            },
            usage: succeeded.then_some(Usage {
                duration_seconds: p.duration,
            }),
            created_at: task.created_at,
            updated_at: task.updated_at,
            error: task.error.as_ref().map(|e| GenerationError {
                code: e.code.clone(),
                message: e.message.clone(),
            }),
        })
    }

    fn list(data: Vec<GenerationObject>, has_more: bool) -> GenerationList {
        GenerationList::new(data, has_more)
    }
}

fn status_of(status: TaskStatus) -> GenerationStatus {
    match status {
        TaskStatus::Queued => GenerationStatus::Queued,
        TaskStatus::Running => GenerationStatus::Running,
        TaskStatus::Succeeded => GenerationStatus::Succeeded,
        TaskStatus::Failed => GenerationStatus::Failed,
        TaskStatus::Cancelled => GenerationStatus::Cancelled,
    }
}

/// `POST /v1/video/generations`: the new task (its answer: `tasks::created`).
pub async fn create(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    body: Hashed,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    match crate::ground::http::media_type(headers).as_deref() {
        Some("application/json") => {}
        other => {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!(
                    "POST /v1/video/generations takes application/json, got {}",
                    other.unwrap_or("no Content-Type")
                ),
            ));
        }
    }
    // The body size check comes last in this format (SPEC §7): read up to 4x the limit.
    let (bytes, over_limit) = read_body_lenient(body, app.config.server.json_limit()).await?;
    idem.claim(app).await?;
    let value = parse_json(&bytes)?;
    let family = app.config.groups.get(&key.group).map(String::as_str);
    let valid = video_generations::validate(&value, &app.catalog, family)?;
    if let Some(url) = &valid.callback_url {
        crate::ground::webhook_signing::check_url(&app.poster, "callback_url", url)?;
    }
    tasks::may_use(key, &valid.model)?;
    let ids: Vec<String> = valid.assets.iter().map(|a| a.id.clone()).collect();
    let facts = crate::formats::assets::asset_facts(app, key, &ids).await?;
    let generic: Vec<video_generations::AssetFact> = facts.iter().map(|f| f.fact.clone()).collect();
    video_generations::check_assets(&valid, &generic)?;
    let model = app
        .catalog
        .model(&valid.model)
        .ok_or_else(|| ApiError::field(ErrorCode::InvalidModel, "model", "unknown model"))?;
    let first_dims = valid
        .asset(Role::FirstFrame)
        .and_then(|r| facts.iter().find(|f| f.fact.id == r.id))
        .and_then(|f| f.dimensions);
    let ratio = video_generations::resolve_ratio(model, &valid.ratio, first_dims);
    let (width, height) = dimensions(&valid.resolution, &ratio);
    let price_per_second = app
        .config
        .model(&valid.model)
        .and_then(|m| m.price_per_second(Some(&valid.resolution)))
        .unwrap_or(0);
    let price = price_per_second as i64 * i64::from(valid.duration);
    let seed = valid
        .seed
        .unwrap_or_else(|| u64::from(rand::random::<u32>()));
    let assets = valid
        .assets
        .iter()
        .map(|a| TaskAsset {
            id: a.id.clone(),
            role: a.role,
            blob: facts
                .iter()
                .find(|f| f.fact.id == a.id)
                .and_then(|f| f.blob.clone()),
        })
        .collect();
    let mut gen_params = GenParams {
        prompt: valid.prompt.clone(),
        duration: valid.duration,
        resolution: valid.resolution.clone(),
        ratio,
        width,
        height,
        assets,
        return_last_frame: valid.return_last_frame,
        seed,
        sim: SimDirectives::default(),
    };
    // Whether a channel of the model can make it, a check of the same fields as the catalog's
    // (with the ratio chosen and the assets counted by role), so before the body size, which
    // comes last (SPEC §7).
    let demand = engine::formats::generation::demand(&gen_params);
    tasks::fits(app, TaskKind::Generation, &valid.model, &demand)?;
    if over_limit {
        return Err(crate::ground::http::too_large());
    }
    let sim = crate::ground::http::sim_directives(app.sim_scenarios(), headers)?;
    tasks::served(app, &valid.model)?;
    gen_params.sim = sim.clone();
    let draft = tasks::Draft {
        id: crate::ground::http::new_id("gen"),
        model: &valid.model,
        params: &gen_params,
        sim: &sim,
        warnings: Vec::new(),
        price,
        callback_url: valid.callback_url.clone(),
    };
    let task = tasks::new_task::<Generations, _>(app, key, draft)?;
    tasks::create::<Generations>(app, &task, idem).await?;
    Ok(task)
}

/// `POST /api/generation/video/moderation-result`: for a task of either format.
pub async fn moderation(app: &Arc<App>, key: &store::Key, body: Incoming) -> Answer {
    let result = async {
        let bytes = crate::ground::http::read_body(body, app.config.server.json_limit()).await?;
        let request = video_generations::parse_moderation_request(&parse_json(&bytes)?)?;
        let kind = if request.task_id.starts_with("gen_") {
            TaskKind::Generation
        } else {
            TaskKind::Video
        };
        let task = tasks::owned(app, key, &request.task_id, kind).await?;
        let params: serde_json::Value = task.params.read().unwrap_or_default();
        let prompt = params
            .get("prompt")
            .and_then(|p| p.as_str())
            .unwrap_or_default()
            .to_owned();
        let reject = params
            .get("sim")
            .and_then(|s| s.get("reject"))
            .and_then(|r| r.as_bool())
            .unwrap_or(false);
        let channel = task
            .channel
            .as_deref()
            .and_then(|c| app.engine.channel_named(c))
            .or_else(|| app.engine.channel_for(&task.model));
        let verdict = match (task.status.is_final(), channel) {
            (true, Some(channel)) => Some(channel.moderation_rejects(&prompt, reject)),
            _ => None,
        };
        let score = |flagged: bool| if flagged { 1.0 } else { 0.0 };
        Ok::<_, ApiError>(ModerationResult {
            task_id: task.id.clone(),
            status: match verdict {
                None => ModerationStatus::Pending,
                Some(true) => ModerationStatus::Rejected,
                Some(false) => ModerationStatus::Passed,
            },
            categories: verdict
                .map(|rejected| {
                    vec![ModerationCategory {
                        name: "prohibited_content".into(),
                        flagged: rejected,
                        score: score(rejected),
                    }]
                })
                .unwrap_or_default(),
            checked_at: verdict.map(|_| task.completed_at.unwrap_or(task.updated_at)),
        })
    }
    .await;
    match result {
        Ok(r) => crate::ground::http::json(StatusCode::OK, &r),
        Err(e) => error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_dimensions() {
        assert_eq!(dimensions("720p", "16:9"), (1280, 720));
        assert_eq!(dimensions("720p", "9:16"), (720, 1280));
        assert_eq!(dimensions("1080p", "1:1"), (1080, 1080));
        assert_eq!(dimensions("480p", "4:3"), (640, 480));
        assert_eq!(dimensions("480p", "21:9"), (1120, 480));
        assert_eq!(dimensions("720p", "3:4"), (720, 960));
    }
}
