//! State shared by the relays of one deployment through Redis (`[cluster] redis_url`): the
//! rate-limit buckets (each a hash that expires once it would be full again; a task's only for
//! its owner's polls, so made-up ids make none), the invalidation of every relay's key cache, and the chat reservations
//! held against a key's quota. Without `redis_url` none of this exists and each relay keeps
//! that state in its own memory (`limits`, `auth::KeyCache`, `chat_ledger`).
//!
//! Every Redis call is bounded by [`CALL_TIMEOUT`]; a call that fails or times out is an
//! error the caller turns into its documented fallback (an in-process limit or reservation),
//! so an outage never holds a request. Scripts run with `EVALSHA` (loaded again on
//! `NOSCRIPT`), one per check, so each check is atomic across relays.
//!
//! Reservations: a hash per key, one field per running relay (`holder`: the instance id and
//! this start's ULID), and a liveness key per holder refreshed every second with a
//! [`LIVENESS`] TTL. The admission script counts only live holders' fields (and drops the
//! others), so a relay that died without releasing stops holding its keys' quota within
//! [`LIVENESS`].
//!
//! Key-cache invalidation: a key change is `PUBLISH`ed on `<prefix>keys`; every relay
//! subscribes on a connection of its own and clears its cache on each message. Every relay
//! also publishes a tick there every [`TICK`], so a subscriber that hears nothing for a
//! second knows it may have missed a change: its cache is then not used (every request reads
//! the store) until it hears again, and it subscribes afresh.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};
use store::RateLimit;

use crate::ground::auth::Heard;

/// The longest any Redis call may take before the caller falls back.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(250);
/// How often a relay publishes a tick on the invalidation channel.
pub const TICK: Duration = Duration::from_millis(250);
/// How long after its last refresh a relay's reservations still count.
pub const LIVENESS: Duration = Duration::from_secs(5);
/// How often the liveness key is refreshed.
const LIVENESS_REFRESH: Duration = Duration::from_secs(1);
/// A subscriber that heard nothing (not even its own ticks) this long subscribes afresh.
const SILENCE: Duration = Duration::from_secs(2);
/// Reservation hashes and release counters of keys no relay touched for a day vanish.
const IDLE_MS: u64 = 86_400_000;

/// The message that says a key changed.
const CHANGED: &str = "keys";
/// The message that says the channel is alive.
const TICKED: &str = "tick";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("redis url {url:?}: {source}")]
    Url {
        url: String,
        source: redis::RedisError,
    },
    #[error("redis {what}: {source}")]
    Call {
        what: &'static str,
        source: redis::RedisError,
    },
    #[error("redis {what}: no answer in time")]
    Timeout { what: &'static str },
    #[error("redis {what}: unexpected answer {detail}")]
    Reply { what: &'static str, detail: String },
}

/// One token bucket's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    pub allowed: bool,
    /// Seconds until a token is there (when refused).
    pub wait: f64,
}

/// The admission script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Reserved.
    Admitted,
    /// What is left after the live reservations, less than the estimate.
    Short(i64),
    /// A charge was released since the balance was read: read it again.
    ReadAgain,
}

/// A release that could not reach Redis, retried by [`Cluster::run`].
#[derive(Debug, Clone)]
struct Release {
    key_id: String,
    amount: i64,
    /// A written charge's release (counted, see [`Cluster::releases`]).
    counted: bool,
}

/// The Redis side of one relay.
pub struct Cluster {
    client: redis::Client,
    conn: ConnectionManager,
    prefix: String,
    /// `[cluster] instance_id` (or this start's ULID), for logs.
    instance: String,
    /// This start's name in reservation hashes and its liveness key.
    holder: String,
    /// When the invalidation channel was last heard (shared with the key cache).
    heard: Arc<Heard>,
    /// Set while Redis cannot be reached, so an outage is logged once.
    degraded: AtomicBool,
    /// A key change not yet published.
    unpublished: AtomicBool,
    /// Releases to retry.
    pending: Mutex<Vec<Release>>,
    /// The runtime the relay runs on, for releases started where no task can wait.
    runtime: Option<tokio::runtime::Handle>,
    take: Script,
    peek: Script,
    admit: Script,
    release: Script,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("instance", &self.instance)
            .field("holder", &self.holder)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// A token bucket (the same arithmetic as `limits::Limiter`), on Redis' clock so relays with
/// skewed clocks agree. KEYS[1] the bucket; ARGV rps, burst, TTL in ms. Answers
/// {allowed, tokens left, seconds to wait}.
const TAKE: &str = r"
local rps = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
tokens = math.min(burst, tokens + math.max(0, now - at) / 1000000 * rps)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rps
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.0f', now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {allowed, string.format('%.6f', tokens), string.format('%.6f', wait)}
";

/// Tokens in a bucket now, without taking one. KEYS[1] the bucket; ARGV rps, burst.
const PEEK: &str = r"
local rps = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  return string.format('%.6f', burst)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return string.format('%.6f', math.min(burst, tokens + math.max(0, now - at) / 1000000 * rps))
";

/// Reserves an estimate against a key's stored balance less the live relays' reservations.
/// KEYS[1] the key's reservation hash, KEYS[2] its release counter; ARGV holder, estimate,
/// stored balance, the release count seen before the balance was read, liveness prefix.
/// Answers {1, available} reserved, {0, available} short, {-1, 0} read the balance again.
const ADMIT: &str = r"
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if seen ~= tonumber(ARGV[4]) then
  return {-1, 0}
end
local held = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local who = all[i]
  if who == ARGV[1] or redis.call('EXISTS', ARGV[5] .. who) == 1 then
    held = held + tonumber(all[i + 1])
  else
    redis.call('HDEL', KEYS[1], who)
  end
end
local available = tonumber(ARGV[3]) - held
if available < tonumber(ARGV[2]) then
  return {0, available}
end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {1, available}
";

/// Releases reservations. KEYS pairs of (reservation hash, release counter); ARGV holder,
/// '1' to count the releases (written charges) or '0', TTL in ms, then one amount per pair.
const RELEASE: &str = r"
for i = 1, #KEYS, 2 do
  local amount = tonumber(ARGV[3 + (i + 1) / 2])
  local left = redis.call('HINCRBY', KEYS[i], ARGV[1], -amount)
  if left <= 0 then
    redis.call('HDEL', KEYS[i], ARGV[1])
  end
  if ARGV[2] == '1' then
    redis.call('INCR', KEYS[i + 1])
    redis.call('PEXPIRE', KEYS[i + 1], ARGV[3])
  end
end
return 1
";

/// Bounds a Redis call by [`CALL_TIMEOUT`].
async fn bounded<T>(
    what: &'static str,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(ClusterError::Call { what, source }),
        Err(_) => Err(ClusterError::Timeout { what }),
    }
}

fn parse_f64(what: &'static str, text: &str) -> Result<f64, ClusterError> {
    text.parse().map_err(|_| ClusterError::Reply {
        what,
        detail: format!("{text:?} is not a number"),
    })
}

impl Cluster {
    /// Prepares the connection to `url` (it is made on first use and remade whenever it
    /// breaks, so a relay starts while Redis is down). `instance`: empty for a fresh ULID.
    pub fn new(url: &str, prefix: &str, instance: &str) -> Result<Cluster, ClusterError> {
        let client = redis::Client::open(url).map_err(|source| ClusterError::Url {
            url: url.to_owned(),
            source,
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CALL_TIMEOUT))
            .set_response_timeout(Some(CALL_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), config).map_err(|source| {
                ClusterError::Url {
                    url: url.to_owned(),
                    source,
                }
            })?;
        let run = ulid::Ulid::new().to_string();
        let instance = if instance.is_empty() {
            run.clone()
        } else {
            instance.to_owned()
        };
        Ok(Cluster {
            client,
            conn,
            prefix: prefix.to_owned(),
            holder: format!("{instance}/{run}"),
            instance,
            heard: Arc::new(Heard::default()),
            degraded: AtomicBool::new(false),
            unpublished: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            runtime: tokio::runtime::Handle::try_current().ok(),
            take: Script::new(TAKE),
            peek: Script::new(PEEK),
            admit: Script::new(ADMIT),
            release: Script::new(RELEASE),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// When the invalidation channel was last heard, for the key cache.
    pub fn heard(&self) -> Arc<Heard> {
        self.heard.clone()
    }

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    fn channel(&self) -> String {
        format!("{}keys", self.prefix)
    }

    fn live_prefix(&self) -> String {
        format!("{}live:", self.prefix)
    }

    fn reservations_key(&self, key_id: &str) -> String {
        format!("{}res:{key_id}", self.prefix)
    }

    fn releases_key(&self, key_id: &str) -> String {
        format!("{}rel:{key_id}", self.prefix)
    }

    /// The bucket of `key_id`'s requests, or of its polls of its own `task`.
    pub fn bucket(&self, key_id: &str, task: Option<&str>) -> String {
        match task {
            None => format!("{}rl:{key_id}", self.prefix),
            Some(task) => format!("{}rlp:{key_id}:{task}", self.prefix),
        }
    }

    /// The bucket of all of `key_id`'s status polls, whatever their ids.
    pub fn poll_bucket(&self, key_id: &str) -> String {
        format!("{}rlq:{key_id}", self.prefix)
    }

    /// Notes a failed call: the first of an outage is logged, with what falls back.
    pub fn failed(&self, e: &ClusterError) {
        if !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "{e}; until Redis answers again, rate limits and chat reservations hold in this relay only"
            );
        }
    }

    fn succeeded(&self) {
        if self.degraded.load(Ordering::Relaxed) && self.degraded.swap(false, Ordering::Relaxed) {
            tracing::info!("redis answers again: limits and reservations shared again");
        }
    }

    fn noted<T>(&self, result: Result<T, ClusterError>) -> Result<T, ClusterError> {
        match &result {
            Ok(_) => self.succeeded(),
            Err(e) => self.failed(e),
        }
        result
    }

    /// Takes a token from `bucket` (see [`Cluster::bucket`]).
    pub async fn take(&self, bucket: &str, limit: RateLimit) -> Result<Taken, ClusterError> {
        let rps = limit.rps.max(1);
        let burst = limit.burst.max(1);
        // Idle this long, a bucket is full again: it may as well not exist.
        let ttl_ms = u64::from(burst) * 1000 / u64::from(rps) + 1000;
        let mut conn = self.conn();
        let mut call = self.take.key(bucket);
        call.arg(rps).arg(burst).arg(ttl_ms);
        let result = bounded(
            "rate limit",
            call.invoke_async::<(i64, String, String)>(&mut conn),
        )
        .await
        .and_then(|(allowed, _, wait)| {
            Ok(Taken {
                allowed: allowed == 1,
                wait: parse_f64("rate limit", &wait)?,
            })
        });
        self.noted(result)
    }

    /// Whole and fractional tokens in `bucket` now.
    pub async fn peek(&self, bucket: &str, limit: RateLimit) -> Result<f64, ClusterError> {
        let mut conn = self.conn();
        let mut call = self.peek.key(bucket);
        call.arg(limit.rps.max(1)).arg(limit.burst.max(1));
        let result = bounded("rate limit peek", call.invoke_async::<String>(&mut conn))
            .await
            .and_then(|tokens| parse_f64("rate limit peek", &tokens));
        self.noted(result)
    }

    /// How many written charges of `key_id` were released so far (read before the balance).
    pub async fn releases(&self, key_id: &str) -> Result<u64, ClusterError> {
        let mut conn = self.conn();
        let key = self.releases_key(key_id);
        let result = bounded("release count", conn.get::<_, Option<u64>>(key.as_str()))
            .await
            .map(Option::unwrap_or_default);
        self.noted(result)
    }

    /// Reserves `estimate` for `key_id` when `stored` less the live reservations covers it
    /// and no charge was released since `seen` was read.
    pub async fn admit(
        &self,
        key_id: &str,
        seen: u64,
        stored: i64,
        estimate: i64,
    ) -> Result<Admission, ClusterError> {
        let mut conn = self.conn();
        let reservations = self.reservations_key(key_id);
        let releases = self.releases_key(key_id);
        let mut call = self.admit.key(reservations.as_str());
        call.key(releases.as_str())
            .arg(&self.holder)
            .arg(estimate)
            .arg(stored)
            .arg(seen)
            .arg(self.live_prefix())
            .arg(IDLE_MS);
        let result = bounded("reservation", call.invoke_async::<(i64, i64)>(&mut conn))
            .await
            .and_then(|answer| match answer {
                (1, _) => Ok(Admission::Admitted),
                (0, available) => Ok(Admission::Short(available)),
                (-1, _) => Ok(Admission::ReadAgain),
                other => Err(ClusterError::Reply {
                    what: "reservation",
                    detail: format!("{other:?}"),
                }),
            });
        self.noted(result)
    }

    async fn release_all(&self, items: &[Release]) -> Result<(), ClusterError> {
        if items.is_empty() {
            return Ok(());
        }
        // One script call per kind of release (counted or not).
        for counted in [true, false] {
            let mut call = self.release.prepare_invoke();
            let mut any = false;
            for item in items.iter().filter(|r| r.counted == counted) {
                call.key(self.reservations_key(&item.key_id))
                    .key(self.releases_key(&item.key_id));
                any = true;
            }
            if !any {
                continue;
            }
            call.arg(&self.holder)
                .arg(if counted { "1" } else { "0" })
                .arg(IDLE_MS);
            for item in items.iter().filter(|r| r.counted == counted) {
                call.arg(item.amount);
            }
            let mut conn = self.conn();
            let result = bounded("release", call.invoke_async::<i64>(&mut conn)).await;
            self.noted(result)?;
        }
        Ok(())
    }

    /// Releases reservations of this relay; `counted` for those of written charges (so that
    /// an admission whose balance read came before the charge reads again). What cannot
    /// reach Redis now is retried every tick until it does.
    pub async fn release(&self, items: Vec<(String, i64)>, counted: bool) {
        let items: Vec<Release> = items
            .into_iter()
            .filter(|(_, amount)| *amount > 0)
            .map(|(key_id, amount)| Release {
                key_id,
                amount,
                counted,
            })
            .collect();
        if self.release_all(&items).await.is_err() {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(items);
        }
    }

    /// Releases one uncharged reservation in the background (from a `Drop`), on the relay's
    /// own runtime: a relay that is stopping releases nothing, and its reservations stop
    /// counting when its liveness key expires.
    pub fn release_later(self: &Arc<Cluster>, key_id: String, amount: i64) {
        if let Some(runtime) = &self.runtime {
            let cluster = self.clone();
            runtime.spawn(async move { cluster.release(vec![(key_id, amount)], false).await });
        }
    }

    /// Tells every relay that a key changed (its cache is cleared). When Redis cannot be
    /// reached it is told again every tick until it can.
    pub async fn key_changed(&self) {
        if self.publish(CHANGED).await.is_err() {
            self.unpublished.store(true, Ordering::Relaxed);
        }
    }

    async fn publish(&self, message: &str) -> Result<(), ClusterError> {
        let mut conn = self.conn();
        let result = bounded(
            "publish",
            conn.publish::<_, _, i64>(self.channel(), message),
        )
        .await
        .map(|_| ());
        self.noted(result)
    }

    /// The relay's Redis chores until it stops: ticks on the invalidation channel, the
    /// liveness key, and the retries of releases and publications that failed. Runs with
    /// [`Cluster::follow`].
    pub async fn run(self: Arc<Cluster>) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let per_refresh = (LIVENESS_REFRESH.as_millis() / TICK.as_millis()).max(1) as u64;
        let mut n: u64 = 0;
        let live = format!("{}{}", self.live_prefix(), self.holder);
        loop {
            ticks.tick().await;
            if n.is_multiple_of(per_refresh) {
                let mut conn = self.conn();
                let result = bounded(
                    "liveness",
                    conn.set_options::<_, _, ()>(
                        live.as_str(),
                        &self.instance,
                        redis::SetOptions::default()
                            .with_expiration(redis::SetExpiry::PX(LIVENESS.as_millis() as u64)),
                    ),
                )
                .await;
                let _ = self.noted(result);
            }
            n = n.wrapping_add(1);
            let _ = self.publish(TICKED).await;
            if self.unpublished.swap(false, Ordering::Relaxed)
                && self.publish(CHANGED).await.is_err()
            {
                self.unpublished.store(true, Ordering::Relaxed);
            }
            let retry =
                std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
            if !retry.is_empty() && self.release_all(&retry).await.is_err() {
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(retry);
            }
        }
    }

    /// Follows the invalidation channel on a connection of its own until the relay stops:
    /// `changed` runs on every key change and whenever the subscription was (re)made, since
    /// changes may have been missed while it was not there.
    pub async fn follow(self: Arc<Cluster>, changed: impl Fn() + Send + Sync + 'static) {
        let channel = self.channel();
        let mut lost_logged = false;
        loop {
            let subscribed = async {
                // Not on any request's path: a subscription may take longer than a call.
                let subscribe = async {
                    let mut pubsub = self.client.get_async_pubsub().await?;
                    pubsub.subscribe(channel.as_str()).await?;
                    Ok(pubsub)
                };
                let pubsub = match tokio::time::timeout(SILENCE, subscribe).await {
                    Ok(Ok(pubsub)) => pubsub,
                    Ok(Err(source)) => {
                        return Err(ClusterError::Call {
                            what: "subscribe",
                            source,
                        });
                    }
                    Err(_) => return Err(ClusterError::Timeout { what: "subscribe" }),
                };
                Ok::<_, ClusterError>(pubsub)
            }
            .await;
            match subscribed {
                Ok(pubsub) => {
                    if lost_logged {
                        tracing::info!("key-change channel {channel} followed again");
                        lost_logged = false;
                    }
                    // Whatever changed while no one listened is forgotten now.
                    changed();
                    self.heard.now();
                    let mut messages = pubsub.into_on_message();
                    while let Ok(Some(message)) =
                        tokio::time::timeout(SILENCE, messages.next()).await
                    {
                        self.heard.now();
                        if message.get_payload_bytes() == CHANGED.as_bytes() {
                            changed();
                        }
                    }
                    self.heard.forget();
                    changed();
                    if !lost_logged {
                        tracing::warn!(
                            "key-change channel {channel} lost: every request reads its key from the store until it is back"
                        );
                        lost_logged = true;
                    }
                }
                Err(e) => {
                    self.heard.forget();
                    if !lost_logged {
                        tracing::warn!(
                            "{e}: every request reads its key from the store until the key-change channel is followed"
                        );
                        lost_logged = true;
                    }
                    tokio::time::sleep(TICK).await;
                }
            }
        }
    }

    /// Says this relay is gone (its reservations stop counting at once).
    pub async fn leave(&self) {
        let mut conn = self.conn();
        let live = format!("{}{}", self.live_prefix(), self.holder);
        let _ = bounded("leave", conn.del::<_, i64>(live.as_str())).await;
    }
}
