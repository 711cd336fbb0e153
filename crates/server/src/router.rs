//! Routing: the route of a request (`routes`), then the throttle of failed authentication,
//! auth and the rate limit, then the handler.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::Request;
use http::header::{HeaderName, HeaderValue};
use hyper::body::Incoming;
use serde_json::json;

use crate::app::App;
use crate::formats::generations::Generations;
use crate::formats::idempotency::Idem;
use crate::formats::messages::RequestId;
use crate::formats::tasks;
use crate::formats::videos::Videos;
use crate::formats::{assets, batches, characters, generations, video_models, videos};
use crate::ground::auth::{authenticate, authenticate_admin, presented_secret};
use crate::ground::auth_throttle::{Credential, Source};
use crate::ground::http::{Answer, error, ok};
use crate::ground::limits::{Class, Limited};
use crate::ops::{admin, channel_test, webhooks};

#[cfg(test)]
mod openapi_check;
mod routes;

use routes::{Miss, Route, is_messages_path, route};
pub use routes::{fuzzing, route_table};

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// A client's `x-request-id` when it is sane, else a new one.
fn request_id(req: &Request<Incoming>) -> RequestId {
    req.headers()
        .get(X_REQUEST_ID)
        .filter(|v| {
            let v = v.as_bytes();
            !v.is_empty()
                && v.len() <= 128
                && v.iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b))
        })
        .map(|v| RequestId(v.clone()))
        .unwrap_or_default()
}

/// The hyper service function, for a request from client address `peer`.
pub async fn handle(
    app: Arc<App>,
    peer: IpAddr,
    mut req: Request<Incoming>,
) -> Result<Answer, Infallible> {
    let started = Instant::now();
    crate::serve::spin::work(started);
    let id = request_id(&req);
    // The messages endpoints put the id into their error bodies; only their paths read it
    // (`messages::request_id`), so only they pay for the request's extensions map.
    if is_messages_path(req.uri().path()) {
        req.extensions_mut().insert(id.clone());
    }
    let mut slot = crate::ops::metrics::UNMATCHED;
    let from = Origin { peer, at: started };
    let mut res = dispatch(&app, req, from, &mut slot).await;
    let ended = Instant::now();
    app.metrics
        .request(slot, res.status().as_u16(), ended - started);
    let headers = res.headers_mut();
    headers.insert(X_REQUEST_ID, id.0.clone());
    headers.insert(REQUEST_ID, id.0);
    crate::serve::spin::work(ended);
    Ok(res)
}

/// Where and when a request came from.
#[derive(Debug, Clone, Copy)]
struct Origin {
    peer: IpAddr,
    at: Instant,
}

impl Origin {
    /// Refuses a request whose client address or credential prefix has no tries left (see
    /// `auth_throttle::AuthThrottle`), before its credential is checked; `credential` is read only
    /// while some source is out of tries.
    fn throttle<'h>(
        self,
        app: &App,
        credential: impl FnOnce() -> Option<&'h str>,
    ) -> Result<(), Limited> {
        if !app.auth_throttle.any_out(self.at) {
            return Ok(());
        }
        app.auth_throttle.check(
            &Source {
                addr: self.peer,
                credential: credential(),
            },
            self.at,
        )
    }

    /// Counts `err` against this request's sources when it refused a credential the request
    /// presented.
    fn failed(self, app: &App, credential: Option<&str>, kind: Credential, err: &ApiError) {
        if err.code == ErrorCode::Unauthorized && credential.is_some() {
            let source = Source {
                addr: self.peer,
                credential,
            };
            app.auth_throttle
                .failed(&source, kind, &err.detail, self.at);
        }
    }

    /// Checks the admin token: the refusal's answer, or `None` when it is the token.
    fn refuse_admin(self, app: &App, headers: &http::HeaderMap) -> Option<Answer> {
        let credential = || presented_secret(headers, false);
        if let Err(limited) = self.throttle(app, credential) {
            let mut res = error(&limited.failures_error());
            limited.set_headers(&mut res);
            return Some(res);
        }
        let Err(e) = authenticate_admin(headers, &app.admin_hash) else {
            return None;
        };
        self.failed(app, credential(), Credential::Admin, &e);
        Some(error(&e))
    }
}

/// A `429` of `limited` (a rate limit).
fn limited_answer(limited: &Limited) -> Answer {
    let mut res = error(&limited.error());
    limited.set_headers(&mut res);
    res
}

/// A poll's answer, once its handler found the caller's own task or asset (a `200`): the poll
/// also takes from that task's bucket, made only now. Any other answer stands as it is.
async fn own_task_poll(app: &App, key: &store::Key, id: &str, res: Answer) -> Answer {
    if res.status() != http::StatusCode::OK {
        return res;
    }
    let class = Class::OwnTask(id);
    match app
        .limiter
        .check_shared(app.cluster.as_deref(), &app.config.limits, key, class)
        .await
    {
        Ok(()) => res,
        Err(limited) => limited_answer(&limited),
    }
}

/// Routes and answers a request; `slot` is set to the route's place in the metrics once
/// matched.
async fn dispatch(
    app: &Arc<App>,
    req: Request<Incoming>,
    from: Origin,
    slot: &mut usize,
) -> Answer {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let query = parts.uri.query();
    // The messages paths answer in the vendor's error shape, even for a path or method they
    // do not take.
    let answer = |err: &ApiError| {
        if is_messages_path(path) {
            crate::formats::messages::vendor_error(
                err,
                &crate::formats::messages::request_id(&parts),
            )
        } else {
            error(err)
        }
    };
    let route = match route(&parts.method, path) {
        Ok(route) => route,
        Err(Miss::NotFound) => {
            return answer(&ApiError::new(
                ErrorCode::NotFound,
                format!("no route {} {}", parts.method, truncate(path, 200)),
            ));
        }
        Err(Miss::Method(allow)) => {
            let err = ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{} is not allowed here; allowed: {allow}", parts.method),
            );
            let mut res = answer(&err);
            res.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static(allow));
            return res;
        }
    };
    *slot = route.slot();
    let headers = &parts.headers;
    match route {
        Route::Healthz => ok(&json!({"status": "ok"})),
        Route::Readyz => readyz(app).await,
        Route::OpenApi => openapi(),
        Route::Console => crate::ops::console::serve("index.html", headers),
        Route::ConsoleFile(file) => crate::ops::console::serve(file, headers),
        Route::File(blob) => file(app, blob, query, headers).await,
        Route::ArkCallback(channel) => {
            crate::vendor_callbacks::ark::receive(app, channel, query, body).await
        }
        Route::KlingCallback(channel) => {
            crate::vendor_callbacks::kling::receive(app, channel, query, body).await
        }
        Route::MinimaxCallback(channel) => {
            crate::vendor_callbacks::minimax::receive(app, channel, query, body).await
        }
        Route::ViduCallback(channel) => {
            crate::vendor_callbacks::vidu::receive(app, channel, query, headers, body).await
        }
        // Messages endpoints authenticate (x-api-key too) and answer in the vendor's shape.
        Route::Messages
        | Route::CountTokens
        | Route::ListModels
        | Route::GetModel(_)
        | Route::CreateBatch
        | Route::ListBatches
        | Route::GetBatch(_)
        | Route::DeleteBatch(_)
        | Route::CancelBatch(_)
        | Route::BatchResults(_) => {
            use crate::formats::messages;
            let credential = || presented_secret(headers, true);
            if let Err(limited) = from.throttle(app, credential) {
                let mut res = answer(&limited.failures_error());
                limited.set_headers(&mut res);
                return res;
            }
            let (mut res, key) = match messages::admit(app, &parts).await {
                Err(refused) => {
                    if refused.key.is_none()
                        && refused.answer.status() == http::StatusCode::UNAUTHORIZED
                    {
                        let err = ApiError::new(ErrorCode::Unauthorized, "the key was refused");
                        from.failed(app, credential(), Credential::ApiKey, &err);
                    }
                    (refused.answer, refused.key)
                }
                Ok(key) => {
                    let res = match route {
                        Route::Messages => messages::create(app, &key, &parts, body).await,
                        Route::CountTokens => messages::count_tokens(app, &key, &parts, body).await,
                        Route::ListModels => messages::list_models(app, &key, &parts),
                        Route::GetModel(id) => messages::get_model(app, &key, &parts, id),
                        Route::CreateBatch => match Idem::from_request(&parts, &key) {
                            Ok(mut idem) => {
                                let body = idem.body(body);
                                let res = batches::create(app, &key, &parts, body, &mut idem).await;
                                idem.finish(app, res).await
                            }
                            Err(e) => messages::vendor_error(&e, &messages::request_id(&parts)),
                        },
                        Route::ListBatches => batches::list(app, &key, &parts).await,
                        Route::GetBatch(id) => batches::get(app, &key, &parts, id).await,
                        Route::DeleteBatch(id) => batches::delete(app, &key, &parts, id).await,
                        Route::CancelBatch(id) => batches::cancel(app, &key, &parts, id).await,
                        Route::BatchResults(id) => batches::results(app, &key, &parts, id).await,
                        _ => error(&ErrorCode::NotFound.into()),
                    };
                    (res, Some(key))
                }
            };
            if let Some(key) = key {
                app.limiter
                    .vendor_headers_shared(
                        app.cluster.as_deref(),
                        &app.config.limits,
                        &key,
                        &mut res,
                    )
                    .await;
            }
            res
        }
        Route::Metrics => match from.refuse_admin(app, headers) {
            None => admin::metrics(app).await,
            Some(refused) => refused,
        },
        Route::CreateKey
        | Route::ListKeys
        | Route::GetKey(_)
        | Route::RevokeKey(_)
        | Route::PatchKey(_)
        | Route::KeyLedger(_)
        | Route::RotateWebhookSecret(_)
        | Route::AdminTasks
        | Route::AdminWebhooks
        | Route::AdminChannels
        | Route::TestChannel(_) => {
            if let Some(refused) = from.refuse_admin(app, headers) {
                return refused;
            }
            if matches!(route, Route::RevokeKey(_) | Route::PatchKey(_)) {
                // Whatever the outcome, no request is authenticated by the key as it was.
                let res = match route {
                    Route::RevokeKey(id) => admin::revoke_key(app, id).await,
                    Route::PatchKey(id) => admin::patch_key(app, id, body).await,
                    _ => error(&ErrorCode::NotFound.into()),
                };
                app.key_cache.clear();
                if let Some(cluster) = &app.cluster {
                    cluster.key_changed().await;
                }
                return res;
            }
            match route {
                Route::CreateKey => {
                    let res = admin::create_key(app, body).await;
                    if let Some(cluster) = &app.cluster {
                        cluster.key_changed().await;
                    }
                    res
                }
                Route::ListKeys => admin::list_keys(app).await,
                Route::GetKey(id) => admin::get_key(app, id).await,
                Route::RevokeKey(id) => admin::revoke_key(app, id).await,
                Route::KeyLedger(id) => admin::ledger(app, id).await,
                Route::PatchKey(id) => admin::patch_key(app, id, body).await,
                Route::RotateWebhookSecret(id) => admin::rotate_webhook_secret(app, id).await,
                Route::AdminTasks => admin::tasks(app, query).await,
                Route::AdminWebhooks => webhooks::list(app, query).await,
                Route::AdminChannels => admin::channels(app).await,
                // Boxed: a channel test's future (a whole channel built and called) is
                // larger than every other route's together, and inline it would size every
                // request's future.
                Route::TestChannel(name) => Box::pin(channel_test::admin(app, name)).await,
                _ => error(&ErrorCode::NotFound.into()),
            }
        }
        _ => {
            let credential = || presented_secret(headers, false);
            if let Err(limited) = from.throttle(app, credential) {
                let mut res = error(&limited.failures_error());
                limited.set_headers(&mut res);
                return res;
            }
            let key =
                match authenticate(&*app.store, &app.key_cache, headers, false, now_secs()).await {
                    Ok(key) => key,
                    Err(e) => {
                        from.failed(app, credential(), Credential::ApiKey, &e);
                        return error(&e);
                    }
                };
            // A poll takes from its key's poll budget whatever the id, before the lookup;
            // its task's bucket only once the lookup found the key's own (`own_task_poll`).
            let class = match route {
                Route::GetVideo(_) | Route::GetGeneration(_) | Route::GetAsset(_) => Class::Poll,
                _ => Class::Request,
            };
            if let Err(limited) = app
                .limiter
                .check_shared(app.cluster.as_deref(), &app.config.limits, &key, class)
                .await
            {
                return limited_answer(&limited);
            }
            match route {
                Route::CreateVideo => {
                    let mut idem = match Idem::from_request(&parts, &key) {
                        Ok(idem) => idem,
                        Err(e) => return error(&e),
                    };
                    let body = idem.body(body);
                    let task = videos::create(app, &key, headers, body, &mut idem).await;
                    idem.finish(app, tasks::created::<Videos>(app, task)).await
                }
                Route::ListVideos => tasks::list::<Videos>(app, &key, query).await,
                Route::GetVideo(id) => {
                    let res = tasks::get::<Videos>(app, &key, id).await;
                    own_task_poll(app, &key, id, res).await
                }
                Route::DeleteVideo(id) => videos::delete(app, &key, id).await,
                Route::VideoContent(id) => videos::content(app, &key, id, query, headers).await,
                Route::CancelVideo(id) => tasks::cancel::<Videos>(app, &key, id).await,
                Route::RemixVideo(id) => {
                    let mut idem = match Idem::from_request(&parts, &key) {
                        Ok(idem) => idem,
                        Err(e) => return error(&e),
                    };
                    let body = idem.body(body);
                    let task = videos::remix(app, &key, id, headers, body, &mut idem).await;
                    idem.finish(app, tasks::created::<Videos>(app, task)).await
                }
                Route::EditVideo | Route::ExtendVideo => {
                    let mut idem = match Idem::from_request(&parts, &key) {
                        Ok(idem) => idem,
                        Err(e) => return error(&e),
                    };
                    let body = idem.body(body);
                    let how = if route == Route::EditVideo {
                        videos::Derivation::Edit
                    } else {
                        videos::Derivation::Extend
                    };
                    let task =
                        videos::edit_or_extend(app, &key, headers, body, how, &mut idem).await;
                    idem.finish(app, tasks::created::<Videos>(app, task)).await
                }
                Route::CreateCharacter => characters::create(app, &key, headers, body).await,
                Route::ListCharacters => characters::list(app, &key, query).await,
                Route::GetCharacter(id) => characters::get(app, &key, id).await,
                Route::DeleteCharacter(id) => characters::delete(app, &key, id).await,
                Route::CreateGeneration => {
                    let mut idem = match Idem::from_request(&parts, &key) {
                        Ok(idem) => idem,
                        Err(e) => return error(&e),
                    };
                    let body = idem.body(body);
                    let task = generations::create(app, &key, headers, body, &mut idem).await;
                    idem.finish(app, tasks::created::<Generations>(app, task))
                        .await
                }
                Route::ListGenerations => tasks::list::<Generations>(app, &key, query).await,
                Route::GetGeneration(id) => {
                    let res = tasks::get::<Generations>(app, &key, id).await;
                    own_task_poll(app, &key, id, res).await
                }
                Route::CancelGeneration(id) => tasks::cancel::<Generations>(app, &key, id).await,
                Route::Moderation => generations::moderation(app, &key, body).await,
                Route::ListVideoModels => video_models::list(app, &key),
                Route::GetVideoModel(id) => video_models::get(app, &key, id),
                Route::CreateLibrary => assets::create_library(app, &key, headers, body).await,
                Route::ListLibraries => assets::list_libraries(app, &key, query).await,
                Route::GetLibrary(id) => assets::get_library(app, &key, id).await,
                Route::DeleteLibrary(id) => assets::delete_library(app, &key, id).await,
                Route::UploadAsset(id) => {
                    let mut idem = match Idem::from_request(&parts, &key) {
                        Ok(idem) => idem,
                        Err(e) => return error(&e),
                    };
                    let body = idem.body(body);
                    let res = assets::upload(app, &key, id, headers, body, &mut idem).await;
                    idem.finish(app, res).await
                }
                Route::ListAssets(id) => assets::list_assets(app, &key, id, query).await,
                Route::GetAsset(id) => {
                    let res = assets::get_asset(app, &key, id).await;
                    own_task_poll(app, &key, id, res).await
                }
                Route::DeleteAsset(id) => assets::delete_asset(app, &key, id).await,
                _ => error(&ErrorCode::NotFound.into()),
            }
        }
    }
}

/// `GET /files/...?expires=&sig=`.
async fn file(
    app: &Arc<App>,
    blob: &str,
    query: Option<&str>,
    headers: &http::HeaderMap,
) -> Answer {
    use crate::ground::http::query_param;
    let expires = query_param(query, "expires").and_then(|e| e.parse::<u64>().ok());
    let sig = query_param(query, "sig");
    let now = now_secs();
    let valid = match (expires, sig) {
        (Some(expires), Some(sig)) => app.signer.verify(blob, expires, &sig, now),
        _ => false,
    };
    let gone = || {
        error(&ApiError::new(
            ErrorCode::NotFound,
            "no such file, or its link is not valid (any more)",
        ))
    };
    let Some(expires) = expires.filter(|_| valid) else {
        return gone();
    };
    match still_held(app, blob, now).await {
        Ok(true) => {}
        Ok(false) => return gone(),
        Err(e) => {
            tracing::error!("file {blob}: reading what it belongs to: {e}");
            return error(&ApiError::new(
                ErrorCode::Unavailable,
                "the file cannot be read now",
            ));
        }
    }
    let inline = match crate::ground::content::wants_inline(query) {
        Ok(inline) => inline,
        Err(e) => return error(&e),
    };
    // A presigned URL lives no longer than the link it stands for.
    let presign = app
        .presign_ttl()
        .map(|_| std::time::Duration::from_secs(expires.saturating_sub(now)));
    crate::ground::content::serve_blob(
        &app.blobs,
        blob,
        crate::ground::signed::content_type(blob),
        &crate::ground::content::Disposition::of(blob, inline),
        headers,
        presign,
    )
    .await
}

/// Whether a signed link to `blob` still stands: what the file belongs to is there and its
/// content has not expired (a task's `expires_at`, an asset's expiry), and the key that owns
/// it is active and unexpired (a revoked key's links die with it).
async fn still_held(app: &Arc<App>, blob: &str, now: u64) -> Result<bool, store::StoreError> {
    use crate::ground::signed::{Holder, holder};
    let owner = match holder(blob) {
        None => return Ok(false),
        Some(Holder::Task(id)) => match app.store.task_shared(id).await? {
            Some(task) if task.expires_at.is_none_or(|at| at > now) => task.owner.clone(),
            _ => return Ok(false),
        },
        Some(Holder::Asset(id)) => match app.store.asset(id).await? {
            Some(asset)
                if asset.status != store::AssetStatus::Expired
                    && asset.expires_at.is_none_or(|at| at > now) =>
            {
                asset.owner
            }
            _ => return Ok(false),
        },
        Some(Holder::Character(id)) => match app.store.character(id).await? {
            Some(character) => character.owner,
            None => return Ok(false),
        },
    };
    Ok(app.store.key(&owner).await?.is_some_and(|key| {
        key.status == store::KeyStatus::Active && key.expires_at.is_none_or(|at| at > now)
    }))
}

/// The OpenAPI document of the API, as written in the repository's `docs/openapi.yaml`.
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

fn openapi() -> Answer {
    let mut res = http::Response::new(crate::ground::http::full(OPENAPI_YAML));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/yaml"),
    );
    res
}

async fn readyz(app: &Arc<App>) -> Answer {
    let store_ok = app.store.key_count().await.is_ok();
    if store_ok
        && app
            .engine
            .channels()
            .iter()
            .any(|c| app.engine.routing().is_healthy(c.name()))
        && !app.is_shutting_down()
    {
        ok(&json!({"status": "ready"}))
    } else {
        error(&ApiError::new(
            ErrorCode::Unavailable,
            "the store is not open or no channel is healthy",
        ))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
