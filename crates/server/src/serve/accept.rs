//! The accept loop: [`serve`] takes connections, admits them through the connection caps
//! ([`super::conns`]), hands each to a connection thread ([`super::workers`]) that speaks
//! HTTP/1.1 or HTTP/2 to it, and on shutdown stops accepting, drains and flushes.

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use http::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::App;
use crate::formats::{assets, batch_run, chat_billing, idempotency};
use crate::ground::http::Answer;
use crate::ops::webhooks;
use crate::router;
use crate::serve::coarse_timer::{CoarseSleep, CoarseTimer};
use crate::serve::conns;
use crate::serve::workers::Workers;

/// How long in-flight requests may take to finish after a shutdown signal.
const GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes: then stops accepting, lets the
/// requests under way finish (at most 10 s), stops the engine and flushes the store.
pub async fn serve(
    app: Arc<App>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        let _ = app.bound.set(addr);
    }
    let _ = app.public_base.set(app.public_base_url());
    // First: nothing is running yet if the threads cannot be started.
    let mut workers = Workers::start(
        app.config.server.worker_count(),
        Duration::from_micros(app.config.spin_us()),
    )?;
    let (stop_engine, engine_stop) = watch::channel(false);
    let engine = tokio::spawn(engine::run(app.engine.clone(), engine_stop));
    let asset_work = tokio::spawn(assets::run(app.clone(), stop_engine.subscribe()));
    let idempotency_sweep = tokio::spawn(idempotency::sweep(app.clone(), stop_engine.subscribe()));
    let (stop_webhooks, webhooks_stop) = watch::channel(false);
    let webhook_work = tokio::spawn(webhooks::run(app.clone(), webhooks_stop));
    let batch_work = tokio::spawn(batch_run::run(app.clone(), stop_engine.subscribe()));
    let charge_writer = tokio::spawn(chat_billing::write_charges(app.clone()));
    let cluster_work = app.cluster.clone().map(|cluster| {
        let cache_of = app.clone();
        let follow = tokio::spawn(cluster.clone().follow(move || cache_of.key_cache.clear()));
        (tokio::spawn(cluster.run()), follow)
    });
    let limits_sweep = tokio::spawn(sweep_limits(app.clone(), stop_engine.subscribe()));
    let server = &app.config.server;
    let head_timeout = Duration::from_secs(server.header_read_timeout_secs);
    // A head past `max_head_bytes` is answered `431` by hyper itself and the connection
    // closed; HTTP/2 says so in its settings and answers a longer header list `431` on that
    // stream. (An HTTP/1 connection whose first bytes were too few to tell it from HTTP/2 is
    // served by hyper-util's, which bounds its read buffer to as much instead.)
    let head_bytes = usize::try_from(server.max_head_bytes).unwrap_or(usize::MAX);
    // HTTP/1.1 is served by hyper's own connection; a connection that opens with HTTP/2's
    // preface (or too few bytes yet to tell) by hyper-util's, which reads the preface itself.
    let mut http1 = http1::Builder::new();
    http1
        .timer(CoarseTimer)
        .header_read_timeout(head_timeout)
        .max_header_size(head_bytes);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(CoarseTimer)
        .header_read_timeout(head_timeout)
        .max_buf_size(head_bytes);
    builder
        .http2()
        .timer(CoarseTimer)
        .keep_alive_interval(head_timeout)
        .keep_alive_timeout(head_timeout)
        .max_header_list_size(u32::try_from(server.max_head_bytes).unwrap_or(u32::MAX));
    let gate = Arc::new(conns::Gate::new(server));
    let _ = app.metrics.gate.set(gate.clone());
    tracing::info!(
        "connections: at most {} open, {} per client address (0: no cap)",
        gate.max(),
        gate.per_client()
    );
    tracing::info!("serving connections on {} threads", workers.handles.len());
    let graceful = GracefulShutdown::new();
    // Told to connections that have not sent their first bytes yet (hyper's are told by
    // `graceful`): they are closed at once when the relay stops.
    let (stop_fresh, fresh_stop) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of descriptors and the like: log, breathe, go on.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let slot = match gate.admit(peer.ip()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        tracing::debug!("connection from {peer} refused: {why:?}");
                        // A fresh socket's send buffer is empty: this never blocks.
                        let _ = stream.try_write(gate.refusal());
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Registered again with the runtime of the thread that serves it.
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!("connection from {peer}: {e}");
                        continue;
                    }
                };
                let (app, http1, builder, watcher) =
                    (app.clone(), http1.clone(), builder.clone(), graceful.watcher());
                let mut stopping = fresh_stop.clone();
                workers.next().spawn(async move {
                    let _slot = slot;
                    let stream = match tokio::net::TcpStream::from_std(stream) {
                        Ok(stream) => stream,
                        Err(e) => {
                            tracing::debug!("connection from {peer}: {e}");
                            return;
                        }
                    };
                    // hyper's header timeout covers HTTP/1 heads; `head` also covers a client
                    // that sends nothing, or a partial HTTP/2 preface, on a new connection.
                    let mut head = CoarseSleep::until(Instant::now() + head_timeout);
                    // The first bytes, read without taking them: HTTP/2's preface or not.
                    let mut first = [0u8; H2_PREFACE.len()];
                    let peeked = tokio::select! {
                        peeked = stream.peek(&mut first) => peeked,
                        () = &mut head => {
                            tracing::debug!(
                                "connection from {peer}: no request within {head_timeout:?}"
                            );
                            return;
                        }
                        _ = stopping.wait_for(|stop| *stop) => return,
                    };
                    let n = match peeked {
                        Ok(0) => return,
                        Ok(n) => n,
                        Err(e) => {
                            tracing::debug!("connection from {peer}: {e}");
                            return;
                        }
                    };
                    // Set once the connection's first request has arrived.
                    let started = Arc::new(AtomicBool::new(false));
                    let seen = started.clone();
                    let client = peer.ip();
                    let service = service(app, client, seen);
                    let io = TokioIo::new(stream);
                    let first_request = FirstRequest {
                        head,
                        started: &started,
                        timeout: head_timeout,
                    };
                    if first[..n] != H2_PREFACE[..n] {
                        let conn = watcher.watch(http1.serve_connection(io, service));
                        first_request.drive(conn, peer).await;
                    } else {
                        let conn = builder.serve_connection(io, service).into_owned();
                        // Boxed: hyper-util's connection (able to serve either protocol) is
                        // several times HTTP/1's own, and inline it would size the task of
                        // every connection, HTTP/1 ones too.
                        Box::pin(first_request.drive(watcher.watch(conn), peer)).await;
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    app.shutting_down.store(true, Ordering::Relaxed);
    let _ = stop_fresh.send(true);
    // Deliveries under way are dropped: their leases run out and a later claim (this relay's
    // next start, or another instance) delivers them.
    let _ = stop_webhooks.send(true);
    let _ = webhook_work.await;
    tracing::info!("shutting down: finishing requests under way");
    if tokio::time::timeout(GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still under way after {GRACE:?}; closing them");
    }
    let _ = stop_engine.send(true);
    let _ = engine.await;
    let _ = asset_work.await;
    let _ = idempotency_sweep.await;
    let _ = limits_sweep.await;
    let _ = batch_work.await;
    if !app.charges.drained(GRACE).await {
        tracing::warn!("chat charges still unwritten after {GRACE:?}");
    }
    // The writer holds the app (and so the store) until it has stopped.
    charge_writer.abort();
    let _ = charge_writer.await;
    if let Some((chores, follow)) = cluster_work {
        chores.abort();
        follow.abort();
        let _ = chores.await;
        let _ = follow.await;
    }
    if let Some(cluster) = &app.cluster {
        cluster.leave().await;
    }
    workers.stop().await;
    app.store.close().await?;
    tracing::info!("stopped");
    Ok(())
}

/// Forgets idle rate-limit buckets and authentication failures every `SWEEP_EVERY` until
/// `stop`: off the request path, one shard locked at a time.
async fn sweep_limits(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(crate::ground::limits::SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                let now = Instant::now();
                app.limiter.sweep(now);
                app.auth_throttle.sweep(now);
            }
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

/// The service of a connection from client address `client`: [`router::handle`], setting
/// `seen` at the first request.
///
/// Each request's future is boxed. hyper keeps one box of the service's future for as long as
/// an HTTP/1 connection lives, sized for the largest route's future (tens of KiB, the routes'
/// state machines nested in it); inline, every open connection held that much, idle or while
/// its answer streams. Boxed per request, the future takes its memory only until its answer's
/// head is out.
fn service(
    app: Arc<App>,
    client: IpAddr,
    seen: Arc<AtomicBool>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Answer,
    Error = Infallible,
    Future = Pin<Box<impl Future<Output = Result<Answer, Infallible>> + Send>>,
> + Clone {
    service_fn(move |req| {
        seen.store(true, Ordering::Relaxed);
        Box::pin(router::handle(app.clone(), client, req))
    })
}

/// What an HTTP/2 connection opens with.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A new connection's deadline for its first request.
struct FirstRequest<'a> {
    head: CoarseSleep,
    started: &'a AtomicBool,
    timeout: Duration,
}

impl FirstRequest<'_> {
    /// Drives `conn` to its end, closing it at the deadline if no request has arrived by then.
    /// The deadline is let go once one has: it is no longer polled with each request.
    async fn drive<E: Display>(
        self,
        conn: impl Future<Output = Result<(), E>>,
        peer: std::net::SocketAddr,
    ) {
        let FirstRequest {
            head,
            started,
            timeout,
        } = self;
        let mut head = Some(head);
        tokio::pin!(conn);
        let done = std::future::poll_fn(|cx| {
            if let Poll::Ready(done) = conn.as_mut().poll(cx) {
                return Poll::Ready(Some(done));
            }
            if let Some(sleep) = &mut head {
                if started.load(Ordering::Relaxed) {
                    head = None;
                } else if Pin::new(sleep).poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
            }
            Poll::Pending
        })
        .await;
        match done {
            Some(Ok(())) => {}
            Some(Err(e)) => tracing::debug!("connection from {peer}: {e}"),
            None => tracing::debug!("connection from {peer}: no request within {timeout:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future of the service `make` makes.
    fn future_size<S: hyper::service::Service<Request<Incoming>>>(
        _make: fn(Arc<App>, IpAddr, Arc<AtomicBool>) -> S,
    ) -> usize {
        std::mem::size_of::<S::Future>()
    }

    /// The size of the future `f` returns.
    fn handle_size<F>(_f: fn(Arc<App>, IpAddr, Request<Incoming>) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_connection_keeps_only_a_pointer_to_its_request_future() {
        // What hyper keeps for each connection's life: one pointer.
        assert_eq!(future_size(service), std::mem::size_of::<usize>());
    }

    #[test]
    fn a_request_future_stays_small() {
        // What every request allocates and moves: the largest route's future (a message's,
        // about 14 KiB; the channel test's, twice that, is boxed apart).
        let size = handle_size(router::handle);
        assert!(
            size <= 16 * 1024,
            "router::handle's future takes {size} bytes"
        );
    }
}
