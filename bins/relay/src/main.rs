//! The relay binary: reads the configuration, opens the store, serves; small operator
//! commands that talk to a running relay's admin API; and users' commands (`videos`, `chat`)
//! that talk to its public API with an API key.
#![forbid(unsafe_code)]

mod chat;
mod client;
mod videos;

/// mimalloc: the request path allocates and frees small buffers on every worker thread.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use server::{App, Config};
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(
    name = "relay",
    version,
    about = "A video generation relay",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
    /// Configuration file (TOML) over the embedded default.
    #[arg(long, env = "RELAY_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address; overrides the configuration's server.listen.
    #[arg(long, env = "RELAY_LISTEN")]
    listen: Option<SocketAddr>,
    /// Redis shared by the relays of a deployment; overrides the configuration's
    /// cluster.redis_url.
    #[arg(long, env = "RELAY_REDIS_URL")]
    redis_url: Option<String>,
    /// Where the store and files live.
    #[arg(long, env = "RELAY_DATA_DIR", default_value = "./data")]
    data_dir: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Start the relay (the default).
    Serve(ServeArgs),
    /// Manage API keys through a running relay's admin API.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
        /// Base URL of the running relay.
        #[arg(long, env = "RELAY_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The admin token.
        #[arg(long, env = "RELAY_ADMIN_TOKEN")]
        admin_token: String,
    },
    /// A key's quota, usage and ledger totals, from a running relay.
    Usage {
        /// The key's id (`key_...`).
        id: String,
        #[arg(long, env = "RELAY_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        #[arg(long, env = "RELAY_ADMIN_TOKEN")]
        admin_token: String,
    },
    /// Your video tasks on a running relay: create one and download its MP4, list, get.
    Videos {
        #[command(subcommand)]
        command: videos::VideosCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// Chat with a model through a running relay; the answer is printed as it streams.
    Chat {
        #[command(flatten)]
        args: chat::ChatArgs,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// Check a configuration file and exit.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Test the configuration's channels against their upstreams.
    Channels {
        #[command(subcommand)]
        command: ChannelsCommand,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key; prints it once.
    Create {
        #[arg(long, default_value = "key")]
        name: String,
        #[arg(long, default_value = "gen2")]
        group: String,
        /// Credits; unlimited when left out.
        #[arg(long)]
        quota: Option<i64>,
    },
    /// List keys.
    List,
    /// Revoke a key by id.
    Revoke { id: String },
    /// Add credits to a key's quota.
    Topup { id: String, credits: i64 },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Parse and check a configuration file.
    Check { path: PathBuf },
}

#[derive(Subcommand)]
enum ChannelsCommand {
    /// Make the cheapest authenticated call the channel's upstream offers, generating
    /// nothing, and print one line: reachable and key accepted, or why not. Exit code 0 when
    /// the channel works, 1 when it does not, 2 when it could not be tested (unknown name,
    /// bad configuration).
    Test {
        /// The channel's `name` in the configuration.
        name: String,
        /// Configuration file (TOML) over the embedded default, as the server reads it.
        #[arg(long, env = "RELAY_CONFIG")]
        config: Option<PathBuf>,
        /// How long the test may take, in seconds, before the channel counts as unreachable.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
        timeout: u64,
    },
}

/// The exit code of `relay channels test` when the channel could not be tested.
const NOT_TESTED: u8 = 2;

/// The variable that sets the allocator's purge delay, in milliseconds: how long mimalloc keeps
/// the pages it freed before it returns them to the system. Under load hyper's read buffers free pages all the
/// time, and with mimalloc's default (1 s) a serving relay's memory climbs by megabytes before
/// they go back; returned at once, it stays flat, at no CPU cost measured (docs/benchmarks-history.md).
const PURGE_DELAY_VAR: &str = "MIMALLOC_PURGE_DELAY";

/// mimalloc reads its options from the environment once, when the process starts, and this
/// binary has no unsafe code to set them afterwards: a server whose environment does not name
/// the purge delay runs itself again, in place (`exec`, the same process id), with it set to 0.
/// An operator's own setting is kept; if the new image cannot start, this one goes on.
fn allocator_settled() {
    #[cfg(unix)]
    if std::env::var_os(PURGE_DELAY_VAR).is_none() {
        use std::os::unix::process::CommandExt;
        if let Ok(exe) = std::env::current_exe() {
            let err = std::process::Command::new(exe)
                .args(std::env::args_os().skip(1))
                .env(PURGE_DELAY_VAR, "0")
                .exec();
            eprintln!("relay: running with the allocator's default purge delay ({err})");
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            print_error(&e);
            ExitCode::FAILURE
        }
    }
}

fn print_error(e: &anyhow::Error) {
    eprintln!("relay: error: {e}");
    for cause in e.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if matches!(cli.command, None | Some(Command::Serve(_))) {
        allocator_settled();
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let done = match cli.command {
        None => runtime.block_on(serve(cli.serve)),
        Some(Command::Serve(args)) => runtime.block_on(serve(args)),
        Some(Command::Keys {
            command,
            url,
            admin_token,
        }) => runtime.block_on(keys(command, &url, &admin_token)),
        Some(Command::Usage {
            id,
            url,
            admin_token,
        }) => runtime.block_on(usage(&id, &url, &admin_token)),
        Some(Command::Videos { command, api }) => runtime.block_on(async {
            let api = client::Api::new(&api)?;
            videos::run(&api, command).await
        }),
        Some(Command::Chat { args, api }) => runtime.block_on(async {
            let api = client::Api::new(&api)?;
            chat::run(&api, args).await
        }),
        Some(Command::Config {
            command: ConfigCommand::Check { path },
        }) => {
            Config::load(&path)?;
            println!("{}: ok", path.display());
            Ok(())
        }
        Some(Command::Channels {
            command:
                ChannelsCommand::Test {
                    name,
                    config,
                    timeout,
                },
        }) => {
            let limit = std::time::Duration::from_secs(timeout);
            return Ok(runtime.block_on(channels_test(&name, config.as_deref(), limit)));
        }
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// The configuration as the server reads it: the file (or the embedded default), then the
/// environment's overrides.
fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    let mut config = match path {
        Some(path) => Config::load(path)?,
        None => Config::embedded()?,
    };
    let origin = path.map_or_else(
        || "embedded default".to_owned(),
        |p| p.display().to_string(),
    );
    config.apply_env(&origin)?;
    Ok(config)
}

/// `relay channels test NAME`: one line on stdout; exit code 0 when the channel works, 1 when
/// it does not, [`NOT_TESTED`] when it could not be tested.
async fn channels_test(name: &str, config: Option<&Path>, limit: std::time::Duration) -> ExitCode {
    let tested = match load_config(config) {
        Ok(config) => server::ops::channel_test::from_config(&config, name, limit).await,
        Err(e) => Err(e),
    };
    match tested {
        Ok((_, test)) => {
            println!("{}", test.line(name));
            if test.verdict.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            print_error(&e);
            ExitCode::from(NOT_TESTED)
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = load_config(args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.server.listen = listen.to_string();
    }
    if let Some(url) = args.redis_url.filter(|u| !u.trim().is_empty()) {
        config.cluster.redis_url = url;
        config
            .check_cluster()
            .map_err(|message| anyhow::anyhow!("RELAY_REDIS_URL / --redis-url: {message}"))?;
    }
    let listen = config.server.listen.clone();
    let admin_token = std::env::var("RELAY_ADMIN_TOKEN").ok();
    let data_dir = args.data_dir.clone();
    let (app, bootstrap) = App::open(config, &data_dir, admin_token.as_deref()).await?;
    let listener = TcpListener::bind(&listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    println!("relay listening on http://{addr}");
    if let Some(key) = &bootstrap.first_key {
        println!("first API key (shown once, keep it now): {key}");
        println!("  try: curl -H \"Authorization: Bearer {key}\" http://{addr}/v1/videos");
    }
    if let Some(token) = &bootstrap.admin_token {
        println!("admin token (shown once, keep it now): {token}");
    }
    serve_until_signal(app, listener).await
}

async fn serve_until_signal(app: std::sync::Arc<App>, listener: TcpListener) -> anyhow::Result<()> {
    server::serve(app, listener, shutdown_signal()).await
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// One call to a running relay's admin API.
async fn admin_call(
    base: &str,
    token: &str,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> anyhow::Result<serde_json::Value> {
    let base = base.trim_end_matches('/');
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))?;
    let res = client
        .request(req)
        .await
        .with_context(|| format!("calling {base}{path}"))?;
    let status = res.status();
    let bytes = res.into_body().collect().await?.to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if !status.is_success() {
        bail!("{method} {path}: {status}: {value}");
    }
    Ok(value)
}

async fn keys(command: KeysCommand, url: &str, token: &str) -> anyhow::Result<()> {
    let (method, path, body) = match &command {
        KeysCommand::Create { name, group, quota } => (
            "POST",
            "/admin/keys".to_owned(),
            Some(serde_json::json!({"name": name, "group": group, "quota": quota})),
        ),
        KeysCommand::List => ("GET", "/admin/keys".to_owned(), None),
        KeysCommand::Revoke { id } => ("DELETE", format!("/admin/keys/{id}"), None),
        KeysCommand::Topup { id, credits } => (
            "PATCH",
            format!("/admin/keys/{id}"),
            Some(serde_json::json!({"quota_add": credits})),
        ),
    };
    let value = admin_call(url, token, method, &path, body).await?;
    match command {
        KeysCommand::Create { .. } => {
            println!("{}", value["key"].as_str().unwrap_or_default());
            eprintln!(
                "created {} (group {}); the key above is shown once",
                value["id"].as_str().unwrap_or_default(),
                value["group"].as_str().unwrap_or_default()
            );
        }
        KeysCommand::List => {
            for key in value["data"].as_array().into_iter().flatten() {
                println!(
                    "{}\t{}\t{}\t{}\tquota={}\tused={}",
                    key["id"].as_str().unwrap_or_default(),
                    key["name"].as_str().unwrap_or_default(),
                    key["group"].as_str().unwrap_or_default(),
                    key["status"].as_str().unwrap_or_default(),
                    key["quota"],
                    key["quota_used"],
                );
            }
        }
        KeysCommand::Revoke { id } => println!("revoked {id}"),
        KeysCommand::Topup { id, .. } => println!("{id}: quota now {}", value["quota"]),
    }
    Ok(())
}

async fn usage(id: &str, url: &str, token: &str) -> anyhow::Result<()> {
    let key = admin_call(url, token, "GET", &format!("/admin/keys/{id}"), None).await?;
    let ledger = admin_call(url, token, "GET", &format!("/admin/keys/{id}/ledger"), None).await?;
    println!(
        "{} ({}), group {}, {}",
        id,
        key["name"].as_str().unwrap_or_default(),
        key["group"].as_str().unwrap_or_default(),
        key["status"].as_str().unwrap_or_default()
    );
    match key["quota_remaining"].as_i64() {
        Some(q) => println!("quota remaining: {q} credits"),
        None => println!("quota remaining: unlimited"),
    }
    println!("quota used:      {} credits", key["quota_used"]);
    let mut totals: std::collections::BTreeMap<String, (u64, i64)> = Default::default();
    for entry in ledger["data"].as_array().into_iter().flatten() {
        let kind = entry["kind"].as_str().unwrap_or("?").to_owned();
        let t = totals.entry(kind).or_default();
        t.0 += 1;
        t.1 += entry["amount"].as_i64().unwrap_or(0);
    }
    for (kind, (count, sum)) in totals {
        println!("{kind:<10} {count:>6} entries, {sum:>10} credits");
    }
    Ok(())
}
