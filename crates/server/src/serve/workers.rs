//! The connection threads: each runs a single-threaded runtime of its own and keeps the
//! connections handed to it, with their requests and their upstream connections.

use std::time::Duration;

use crate::serve::{coarse_timer, spin};

/// The threads that serve connections, each running a single-threaded runtime of its own: a
/// connection is handed to one of them when accepted and stays there, with its requests, the
/// work they spawn and (through the thread's lane of the upstream pools) the upstream
/// connections they use. A request's work wakes no other thread, where a shared runtime's
/// workers would wake each other and hand tasks across. Background work (the engine, the
/// charge writer, webhooks) stays on the runtime `serve` runs on.
pub(super) struct Workers {
    pub(super) handles: Vec<tokio::runtime::Handle>,
    stops: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: usize,
}

impl Workers {
    /// Starts `count` threads; each spins for `spin` after a request before it sleeps
    /// ([`spin`]), unless `spin` is zero.
    pub(super) fn start(count: usize, spin: Duration) -> anyhow::Result<Workers> {
        let mut workers = Workers {
            handles: Vec::with_capacity(count),
            stops: Vec::with_capacity(count),
            threads: Vec::with_capacity(count),
            next: 0,
        };
        for i in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            workers.handles.push(runtime.handle().clone());
            workers.stops.push(stop);
            let thread = std::thread::Builder::new()
                .name(format!("relay-worker-{i}"))
                .spawn(move || {
                    channels::http::client::set_lane(i + 1);
                    runtime.block_on(async {
                        let ticker = tokio::spawn(coarse_timer::tick());
                        let spinner = (!spin.is_zero()).then(|| tokio::spawn(spin::run(spin)));
                        let _ = stopped.await;
                        ticker.abort();
                        if let Some(spinner) = spinner {
                            spinner.abort();
                        }
                    });
                    // What is left (idle connections past the grace period) is dropped.
                    runtime.shutdown_timeout(Duration::from_secs(1));
                })?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// The next thread's runtime, in turn.
    pub(super) fn next(&mut self) -> &tokio::runtime::Handle {
        self.next = (self.next + 1) % self.handles.len();
        &self.handles[self.next]
    }

    /// Stops every thread and waits until they have ended.
    pub(super) async fn stop(self) {
        for stop in self.stops {
            let _ = stop.send(());
        }
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                if thread.join().is_err() {
                    tracing::error!("a connection thread panicked");
                }
            }
        })
        .await;
    }
}
