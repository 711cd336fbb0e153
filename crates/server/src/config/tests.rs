//! The configuration's parsing, overlaying and checks.

use super::*;

#[test]
fn embedded_default_parses() {
    let config = Config::embedded().unwrap();
    assert_eq!(config.server.listen, "127.0.0.1:8080");
    assert_eq!(config.server.max_body_bytes, 10 * 1024 * 1024);
    assert_eq!(config.tasks.timeout_secs, 600);
    assert_eq!(config.models["model_h3"].price_per_second, Some(10));
    assert_eq!(
        config.models["gen2-pro"].price_per_second(Some("1080p")),
        Some(12)
    );
    assert_eq!(config.groups["gen2"], "gen2");
    assert_eq!(config.characters.max_per_key, 100);
    assert_eq!(config.characters.price, 0);
}

#[test]
fn characters_take_a_number_and_a_price_never_negative() {
    let config = Config::from_toml(
        Some(
            "[characters]
max_per_key = 0
price = 25
",
        ),
        "relay.toml",
    )
    .unwrap();
    assert_eq!(config.characters.max_per_key, 0);
    assert_eq!(config.characters.price, 25);
    for text in [
        "[characters]
price = -1
",
        "[characters]
max_per_key = -1
",
        "[characters]
max = 3
",
    ] {
        let err = Config::from_toml(Some(text), "relay.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("relay.toml"), "{err}");
    }
}

#[test]
fn file_overrides_key_by_key() {
    let config = Config::from_toml(
        Some("[server]\nlisten = \"127.0.0.1:0\"\n[simulator]\ntask_secs = 0.5\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(config.server.listen, "127.0.0.1:0");
    assert_eq!(config.server.max_body_bytes, 10 * 1024 * 1024);
    assert_eq!(config.simulator.task_secs, 0.5);
    assert!(config.simulator.scenarios);
}

#[test]
fn unknown_keys_are_refused_naming_key_and_file() {
    let err = Config::from_toml(Some("[server]\nlisen = \"x\"\n"), "relay.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("relay.toml"), "{err}");
    assert!(err.contains("lisen"), "{err}");
    let err = Config::from_toml(Some("[nope]\na = 1\n"), "relay.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn missing_price_is_refused_naming_the_model() {
    let err = Config::from_toml(
        Some("[models.x]\nkind = \"video\"\n[[channels]]\nname = \"s\"\nmodels = [\"x\"]\n"),
        "relay.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("models.x"), "{err}");
}

#[test]
fn the_store_backend_follows_its_url() {
    let sled = Config::from_toml(None, "t.toml").unwrap();
    assert_eq!(sled.store.backend(), StoreBackend::Sled);
    let pg = Config::from_toml(
        Some("[store]\nurl = \"postgres://relay@127.0.0.1:5432/relay\"\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(pg.store.backend(), StoreBackend::Postgres);
    for (text, named) in [
        (
            "[store]\nbackend = \"postgres\"\n",
            "store.url (or RELAY_STORE_URL) is required",
        ),
        (
            "[store]\nurl = \"mysql://x\"\n",
            "store.url must be a PostgreSQL URL",
        ),
        (
            "[store]\nurl = \"postgres://x/y\"\npool_size = 0\n",
            "store.pool_size must be above 0",
        ),
        ("[store]\nbackend = \"mongo\"\n", "backend"),
    ] {
        let err = Config::from_toml(Some(text), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{text}: {err}");
    }
}

#[test]
fn zero_intervals_and_sizes_are_refused() {
    for (text, named) in [
        ("[server]\nstream_ping_ms = 0\n", "server.stream_ping_ms"),
        ("[server]\nmax_body_bytes = 0\n", "server.max_body_bytes"),
        (
            "[server]\nmax_upload_files = 0\n",
            "server.max_upload_files",
        ),
        (
            "[server]\nmax_head_bytes = 4096\n",
            "server.max_head_bytes must be from 8192",
        ),
        (
            "[limits]\ntask_buckets_max = 0\n",
            "limits.task_buckets_max",
        ),
        (
            "[limits]\nauth_failures_burst = 0\n",
            "limits.auth_failures_burst",
        ),
        (
            "[limits]\nauth_failures_per_minute = 0\n",
            "limits.auth_failures_per_minute",
        ),
        (
            "[limits]\nauth_failure_sources_max = 0\n",
            "limits.auth_failure_sources_max",
        ),
        (
            "[server]\nmax_stream_event_bytes = 1023\n",
            "server.max_stream_event_bytes",
        ),
        (
            "[server]\nmax_stream_event_bytes = 1073741825\n",
            "server.max_stream_event_bytes",
        ),
    ] {
        let err = Config::from_toml(Some(text), "relay.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{err}");
    }
    let ok = Config::from_toml(Some("[server]\nstream_ping_ms = 250\n"), "relay.toml").unwrap();
    assert_eq!(ok.server.stream_ping_ms, 250);
    // The bounds against abuse, by default.
    let default = Config::from_toml(None, "relay.toml").unwrap();
    assert_eq!(default.server.max_head_bytes, 64 * 1024);
    assert_eq!(default.server.max_upload_files, 16);
    assert_eq!(default.limits.task_buckets_max, 100_000);
    assert_eq!(default.limits.auth_failures_burst, 20);
    assert_eq!(default.limits.auth_failures_per_minute, 10);
    assert_eq!(default.limits.auth_failure_sources_max, 100_000);
    assert_eq!(ok.server.max_stream_event_bytes, 16 << 20, "the default");
}

#[test]
fn a_connection_threads_spin_is_bounded() {
    let default = Config::from_toml(None, "relay.toml").unwrap();
    assert_eq!(default.spin_us(), 50, "on the embedded store");
    let pg = "[store]\nurl = \"postgres://relay@127.0.0.1/relay\"\n";
    let on_pg = Config::from_toml(Some(pg), "relay.toml").unwrap();
    assert_eq!(on_pg.spin_us(), 0, "on PostgreSQL");
    let told = Config::from_toml(Some(&format!("{pg}[server]\nspin_us = 20\n")), "relay.toml");
    assert_eq!(told.unwrap().spin_us(), 20, "set, on PostgreSQL too");
    let off = Config::from_toml(Some("[server]\nspin_us = 0\n"), "relay.toml").unwrap();
    assert_eq!(off.spin_us(), 0);
    let most = format!("[server]\nspin_us = {MAX_SPIN_US}\n");
    assert_eq!(
        Config::from_toml(Some(&most), "relay.toml")
            .unwrap()
            .spin_us(),
        MAX_SPIN_US
    );
    let err = Config::from_toml(
        Some(&format!("[server]\nspin_us = {}\n", MAX_SPIN_US + 1)),
        "relay.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("server.spin_us must be at most 10000"),
        "{err}"
    );
}

#[test]
fn chat_channels_need_a_base_url_and_chat_models() {
    let chat = "[models.c]\nkind = \"chat\"\ninput_price_per_mtok = 1\noutput_price_per_mtok = 1\n[models.model_h3]\nkind = \"video\"\nprice_per_second = 1\n";
    let with = |channel: &str| Config::from_toml(Some(&format!("{chat}{channel}")), "t.toml");
    let err = with("[[channels]]\nname = \"u\"\nkind = \"openai-chat\"\nmodels = [\"c\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("channels.u: base_url is required"), "{err}");
    let err = with("[[channels]]\nname = \"u\"\nkind = \"anthropic\"\nbase_url = \"http://h\"\nmodels = [\"model_h3\"]\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("model_h3 is not a chat model"), "{err}");
    let ok = with("[[channels]]\nname = \"u\"\nkind = \"openai-chat\"\nbase_url = \"http://h/v1\"\nmodels = [\"c\"]\nidle_timeout_secs = 5\n")
        .unwrap();
    assert_eq!(ok.channels[0].idle_timeout_secs, Some(5));
}

#[test]
fn a_callback_secret_is_for_ark_channels_and_long_enough() {
    let channel = |kind: &str, secret: &str| {
        Config::from_toml(
            Some(&format!(
                "[[channels]]\nname = \"u\"\nkind = \"{kind}\"\nbase_url = \"http://h/api/v3\"\nmodels = [\"model_h3\"]\ncallback_secret = \"{secret}\"\n"
            )),
            "t.toml",
        )
    };
    let ok = channel("ark", "0123456789abcdef").unwrap();
    assert_eq!(
        ok.channels[0].callback_secret.as_deref(),
        Some("0123456789abcdef")
    );
    let err = channel("ark", "short").unwrap_err().to_string();
    assert!(
        err.contains("channels.u: callback_secret must be at least 16"),
        "{err}"
    );
    let err = channel("openai-videos", "0123456789abcdef")
        .unwrap_err()
        .to_string();
    assert!(err.contains("callback_secret applies to ark"), "{err}");
}

#[test]
fn status_words_are_for_relays_behind_and_name_a_known_meaning() {
    let channel = |kind: &str, words: &str| {
        Config::from_toml(
            Some(&format!(
                "[[channels]]\nname = \"u\"\nkind = \"{kind}\"\nbase_url = \"http://h\"\nmodels = [\"model_h3\"]\nstatus_words = {{ {words} }}\n"
            )),
            "t.toml",
        )
        .map_err(|e| e.to_string())
    };
    let ok = channel(
        "openai-videos",
        r#""RENDERING" = "running", "DONE_OK" = "completed", "BROKEN" = "failed", "Gone" = "expired", "stopped" = "cancelled""#,
    )
    .unwrap();
    assert_eq!(ok.channels[0].status_words.len(), 5);
    assert_eq!(ok.channels[0].status_words["DONE_OK"], "completed");
    let err = channel("openai-videos", r#""BROKEN" = "borked""#).unwrap_err();
    assert!(
        err.contains("channels.u: status_words.\"BROKEN\": unknown meaning \"borked\", expected one of running, completed, failed, cancelled, expired"),
        "{err}"
    );
    // Meanings are the configuration's words, exactly.
    let err = channel("openai-videos", r#""DONE" = "Completed""#).unwrap_err();
    assert!(
        err.contains("status_words.\"DONE\": unknown meaning"),
        "{err}"
    );
    let err = channel(
        "openai-videos",
        r#""done" = "completed", "DONE" = "failed""#,
    )
    .unwrap_err();
    assert!(err.contains("given twice"), "{err}");
    let err = channel("openai-videos", r#"" " = "completed""#).unwrap_err();
    assert!(
        err.contains("channels.u: status_words: a word is empty"),
        "{err}"
    );
    let err = channel("ark", r#""DONE" = "completed""#).unwrap_err();
    assert!(
        err.contains("channels.u: status_words applies to openai-videos channels only"),
        "{err}"
    );
    let err = Config::from_toml(
        Some("[[channels]]\nname = \"s\"\nkind = \"simulator\"\nstatus_words = { \"DONE\" = \"completed\" }\n"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("channels.s: status_words applies to openai-videos"),
        "{err}"
    );
}

#[test]
fn a_channel_kind_is_one_the_relay_knows() {
    let err = Config::from_toml(
        Some("[[channels]]\nname = \"u\"\nkind = \"sora\"\nmodels = [\"model_h3\"]\n"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown channel kind \"sora\""), "{err}");
    assert!(err.contains("openai-videos, ark"), "{err}");
    let ok = Config::from_toml(
        Some("[[channels]]\nname = \"u\"\nkind = \"ark\"\nbase_url = \"http://h\"\nmodels = [\"model_h3\"]\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.channels[0].kind, ChannelKind::Video("ark"));
    assert_eq!(ok.channels[0].kind.as_str(), "ark");
    // A kind without a default endpoint needs its base_url, naming the kind.
    let err = Config::from_toml(
        Some("[[channels]]\nname = \"u\"\nkind = \"openai-videos\"\nmodels = [\"model_h3\"]\n"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("channels.u: base_url is required for kind openai-videos"),
        "{err}"
    );
}

#[test]
fn vendor_models_describe_what_a_vendor_model_makes() {
    let config = Config::from_toml(
        Some(
            "[vendor_models.\"my-model\"]\ndurations = [5, 10]\nresolutions = [\"720p\"]\nratios = [\"16:9\"]\nlast_frame = true\nreference_images = 2\n",
        ),
        "t.toml",
    )
    .unwrap();
    let caps = &config.vendor_models["my-model"];
    assert_eq!(caps.durations, [5, 10]);
    assert!(caps.first_frame, "a first frame unless said otherwise");
    assert!(caps.last_frame);
    assert_eq!(caps.reference_images, 2);
    let err = Config::from_toml(Some("[vendor_models.m]\nduration = [5]\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("duration"), "{err}");
}

#[test]
fn a_channel_call_rate_is_checked() {
    let channel = |kind: &str, rate: &str| {
        let chat = "[models.c]\nkind = \"chat\"\ninput_price_per_mtok = 1\noutput_price_per_mtok = 1\n[models.model_h3]\nkind = \"video\"\nprice_per_second = 1\n";
        Config::from_toml(
            Some(&format!(
                "{chat}[[channels]]\nname = \"u\"\nkind = \"{kind}\"\nbase_url = \"http://h/v1\"\nmodels = [\"{}\"]\nmax_calls_per_sec = {rate}\n",
                if kind == "openai-chat" {
                    "c"
                } else {
                    "model_h3"
                }
            )),
            "t.toml",
        )
    };
    let ok = channel("ark", "5").unwrap();
    assert_eq!(ok.channels[0].max_calls_per_sec, Some(5.0));
    assert_eq!(
        channel("openai-videos", "0.5").unwrap().channels[0].max_calls_per_sec,
        Some(0.5)
    );
    for bad in ["0", "-1", "nan", "inf"] {
        let err = channel("ark", bad).unwrap_err().to_string();
        assert!(
            err.contains("channels.u: max_calls_per_sec"),
            "{bad}: {err}"
        );
    }
    let err = channel("openai-chat", "5").unwrap_err().to_string();
    assert!(err.contains("video channels only"), "{err}");
    assert!(
        Config::embedded().unwrap().channels[0]
            .max_calls_per_sec
            .is_none()
    );
}

#[test]
fn cluster_is_off_by_default_and_its_url_is_checked() {
    let config = Config::embedded().unwrap();
    assert!(config.cluster.redis_url.is_empty());
    assert_eq!(config.cluster.prefix, "relay:");
    let ok = Config::from_toml(
        Some("[cluster]\nredis_url = \"redis://127.0.0.1:6379/2\"\ninstance_id = \"a\"\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.cluster.instance_id, "a");
    let err = Config::from_toml(
        Some("[cluster]\nredis_url = \"http://127.0.0.1:6379\"\n"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cluster.redis_url"), "{err}");
    let err = Config::from_toml(Some("[cluster]\nprefix = \"\"\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("cluster.prefix"), "{err}");
}

#[test]
fn channels_replace_the_default_list() {
    let config = Config::from_toml(
        Some("[[channels]]\nname = \"only\"\nkind = \"simulator\"\nmodels = [\"model_h3\"]\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(config.channels.len(), 1);
    assert_eq!(config.channels[0].name, "only");
}

/// A remote chat channel with `extra` lines.
fn remote_channel(extra: &str) -> String {
    format!(
        "[[channels]]\nname = \"up\"\nkind = \"anthropic\"\nbase_url = \"https://api.example.com\"\n\
         models = [\"sim-chat\"]\n{extra}\n"
    )
}

#[test]
fn network_settings_are_checked_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let missing = dir.path().join("missing.pem");
    let cases = [
        (
            format!("ca_file = {:?}", missing.display().to_string()),
            "channels.up: ca_file",
        ),
        (
            format!("ca_file = {:?}", not_pem.display().to_string()),
            "no certificate in it",
        ),
        (
            "proxy = \"socks5://127.0.0.1:1080\"".to_owned(),
            "channels.up: proxy: socks5:// proxies are not supported",
        ),
        (
            "proxy = \"proxy.example.com:3128\"".to_owned(),
            "channels.up: proxy",
        ),
        (
            "proxy = \"http://u:secret@proxy.example.com:3128/path\"".to_owned(),
            "must have no path",
        ),
    ];
    for (line, expected) in cases {
        let err = Config::from_toml(Some(&remote_channel(&line)), "relay.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("relay.toml"), "{line}: {err}");
        assert!(err.contains(expected), "{line}: {err}");
        assert!(!err.contains("secret"), "{line}: {err}");
    }
    let err = Config::from_toml(Some("[upstream]\nroots = \"mine\"\n"), "relay.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("roots") || err.contains("webpki"), "{err}");
    let err = Config::from_toml(
        Some("[[channels]]\nname = \"s\"\nmodels = [\"model_h3\"]\nproxy = \"none\"\n"),
        "relay.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("channels.s: proxy applies to remote channels only"),
        "{err}"
    );
}

#[test]
fn network_settings_that_make_sense_load() {
    let config = Config::from_toml(
        Some(&format!(
            "[upstream]\nroots = \"webpki\"\n{}",
            remote_channel("proxy = \"http://user:pass@127.0.0.1:3128\"")
        )),
        "relay.toml",
    )
    .unwrap();
    assert_eq!(config.upstream.roots, RootsChoice::Webpki);
    assert_eq!(
        config.channels[0].proxy.as_deref(),
        Some("http://user:pass@127.0.0.1:3128")
    );
    Config::from_toml(Some(&remote_channel("proxy = \"none\"")), "relay.toml").unwrap();
}

/// `relay.example.toml` with its commented channel and model blocks uncommented, as an
/// operator would.
fn example_uncommented() -> String {
    let text = include_str!("../../../../relay.example.toml");
    let mut out = String::with_capacity(text.len());
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("# [[channels]]") || line.starts_with("# [models.") {
            in_block = true;
        }
        if in_block && line == "#" {
            out.push('\n');
            continue;
        }
        match line.strip_prefix("# ") {
            Some(rest) if in_block => out.push_str(rest),
            _ => {
                in_block = false;
                out.push_str(line);
            }
        }
        out.push('\n');
    }
    out
}

/// The path the example gives its service account's key file.
const EXAMPLE_KEY_FILE: &str = "/etc/relay/vertex-service-account.json";

/// A service account's JSON key file in `dir`, with an RSA key made for the test run (and
/// `token_uri` pointing nowhere: config checks make no call).
fn key_file(dir: &std::path::Path) -> std::path::PathBuf {
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    static PEM: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let pem = PEM.get_or_init(|| {
        rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
            .expect("an RSA key")
            .to_pkcs8_pem(LineEnding::LF)
            .expect("PEM")
            .to_string()
    });
    let path = dir.join("service-account.json");
    let file = serde_json::json!({
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "0123abcd",
        "private_key": pem,
        "client_email": "relay@my-project.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    std::fs::write(&path, file.to_string()).expect("write the key file");
    path
}

#[test]
fn the_example_has_a_channel_of_every_kind_and_passes_the_check() {
    // The example's key file is the operator's to put in place: here, one made for the test.
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let text = example_uncommented();
    assert!(
        text.contains(EXAMPLE_KEY_FILE),
        "the example names no key file"
    );
    let text = text.replace(EXAMPLE_KEY_FILE, &key.display().to_string());
    let config = Config::from_toml(Some(&text), "relay.example.toml (uncommented)")
        .unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = config.channels.iter().map(|c| c.kind.as_str()).collect();
    for registration in ::channels::vendors::REGISTRY {
        assert!(
            kinds.contains(&registration.kind),
            "relay.example.toml has no commented channel of kind {}",
            registration.kind
        );
    }
    for kind in ["simulator", "anthropic", "openai-chat"] {
        assert!(kinds.contains(&kind), "{kind}");
    }
    // And as it is, it passes too.
    Config::from_toml(
        Some(include_str!("../../../../relay.example.toml")),
        "relay.example.toml",
    )
    .unwrap();
}

#[test]
fn a_vendor_channel_needs_what_its_kind_needs() {
    let veo = |extra: &str| {
        Config::from_toml(
            Some(&format!(
                "[[channels]]\nname = \"g\"\nkind = \"veo\"\nmodels = [\"model_h3\"]\n{extra}"
            )),
            "t.toml",
        )
    };
    let err = veo("").unwrap_err().to_string();
    assert!(
        err.contains("channels.g: kind veo needs api_key (or api_key_env)"),
        "{err}"
    );
    // No base_url: the kind's public endpoint.
    let ok = veo("api_key_env = \"GEMINI_API_KEY\"\n").unwrap();
    assert_eq!(ok.channels[0].base_url, None);
    veo("api_key = \"k\"\nbase_url = \"http://127.0.0.1:9\"\n").unwrap();
    let err = veo("api_key = \"k\"\nbase_url = \"ftp://x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("must start with http:// or https://"), "{err}");
}

#[test]
fn a_vertex_channel_needs_a_usable_key_file_a_project_and_a_location() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let vertex = |extra: &str| {
        Config::from_toml(
            Some(&format!(
                "[[channels]]\nname = \"v\"\nkind = \"vertex-veo\"\nmodels = [\"model_h3\"]\n{extra}"
            )),
            "t.toml",
        )
        .map_err(|e| e.to_string())
    };
    let file =
        |path: &std::path::Path| format!("credentials_file = {:?}\n", path.display().to_string());
    let place = "project = \"my-project\"\nlocation = \"us-central1\"\n";
    let err = vertex(place).unwrap_err();
    assert!(
        err.contains("channels.v: kind vertex-veo needs credentials_file"),
        "{err}"
    );
    let err = vertex(&format!("{}location = \"us-central1\"\n", file(&key))).unwrap_err();
    assert!(
        err.contains("channels.v: kind vertex-veo needs project"),
        "{err}"
    );
    let err = vertex(&format!("{}project = \"p-1\"\n", file(&key))).unwrap_err();
    assert!(
        err.contains("channels.v: kind vertex-veo needs location"),
        "{err}"
    );
    let ok = vertex(&format!("{}{place}", file(&key))).unwrap();
    assert_eq!(ok.channels[0].location.as_deref(), Some("us-central1"));
    vertex(&format!(
        "{}{place}storage_uri = \"gs://relay-videos/out/\"\nstorage_base_url = \"http://127.0.0.1:9\"\n",
        file(&key)
    ))
    .unwrap();

    // A key file that is missing, not JSON, incomplete or without a usable key: the file and
    // what is wrong with it, never what it holds.
    let missing = dir.path().join("nowhere.json");
    let err = vertex(&format!("{}{place}", file(&missing))).unwrap_err();
    assert!(
        err.contains(&format!(
            "channels.v: credentials_file {}: cannot be read",
            missing.display()
        )),
        "{err}"
    );
    let good: serde_json::Value = serde_json::from_slice(&std::fs::read(&key).unwrap()).unwrap();
    let pem = good["private_key"].as_str().unwrap().to_owned();
    let variants = [
        (
            "half.json",
            pem[..pem.len() / 2].to_owned(),
            "is not JSON (line 1",
        ),
        (
            "no-key.json",
            {
                let mut v = good.clone();
                v.as_object_mut().unwrap().remove("private_key");
                v.to_string()
            },
            "lacks private_key",
        ),
        (
            "bad-key.json",
            {
                let mut v = good.clone();
                v["private_key"] = serde_json::Value::from(pem.replace("MII", "AAA"));
                v.to_string()
            },
            "private_key is not",
        ),
        (
            "no-uri.json",
            {
                let mut v = good.clone();
                v["token_uri"] = serde_json::Value::from("oauth2.googleapis.com/token");
                v.to_string()
            },
            "token_uri is not an http(s) URL",
        ),
    ];
    for (name, text, expected) in variants {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let err = vertex(&format!("{}{place}", file(&path))).unwrap_err();
        assert!(
            err.contains(&format!("credentials_file {}: {expected}", path.display())),
            "{err}"
        );
        assert!(
            !err.contains("PRIVATE KEY") && !err.contains(&pem[40..80]),
            "{err}"
        );
    }

    for (bad, expected) in [
        (
            "project = \"p\"\nlocation = \"us-central1.evil.example/x\"\n",
            "is not a Google Cloud location",
        ),
        (
            "project = \"my/project\"\nlocation = \"global\"\n",
            "is not a Google Cloud project id",
        ),
        (
            &format!("{place}storage_uri = \"s3://bucket/x\"\n"),
            "storage_uri \"s3://bucket/x\" is not a Cloud Storage location",
        ),
        (
            &format!("{place}storage_base_url = \"storage.example\"\n"),
            "storage_base_url \"storage.example\" must start with http",
        ),
    ] {
        let err = vertex(&format!("{}{bad}", file(&key))).unwrap_err();
        assert!(err.contains(expected), "{err}");
    }
    // The storage settings are Vertex AI's alone.
    let err = Config::from_toml(
        Some("[[channels]]\nname = \"g\"\nkind = \"veo\"\nmodels = [\"model_h3\"]\napi_key = \"k\"\nstorage_uri = \"gs://b/x\"\n"),
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("channels.g: storage_uri applies to vertex-veo channels only"),
        "{err}"
    );
}

#[test]
fn a_jimeng_channel_needs_both_keys_and_a_fit_region_and_service() {
    let channel = |kind: &str, extra: &str| {
        Config::from_toml(
            Some(&format!(
                "[[channels]]\nname = \"j\"\nkind = \"{kind}\"\nmodels = [\"model_h3\"]\n{extra}"
            )),
            "t.toml",
        )
        .map_err(|e| e.to_string())
    };
    let keys = "access_key = \"AK\"\nsecret_key = \"SK\"\n";
    let err = channel("jimeng", "access_key = \"AK\"\n").unwrap_err();
    assert!(
        err.contains("channels.j: kind jimeng needs secret_key (or secret_key_env)"),
        "{err}"
    );
    let err = channel("jimeng", "secret_key = \"SK\"\n").unwrap_err();
    assert!(
        err.contains("channels.j: kind jimeng needs access_key (or access_key_env)"),
        "{err}"
    );
    let ok = channel("jimeng", keys).unwrap();
    assert_eq!(ok.channels[0].region, None);
    let ok = channel(
        "jimeng",
        &format!("{keys}region = \"cn-beijing\"\nservice = \"cv\"\n"),
    )
    .unwrap();
    assert_eq!(ok.channels[0].region.as_deref(), Some("cn-beijing"));
    let err = channel("jimeng", &format!("{keys}region = \"cn/north\"\n")).unwrap_err();
    assert!(
        err.contains("channels.j: region \"cn/north\" must be"),
        "{err}"
    );
    let err = channel("jimeng", &format!("{keys}service = \"\"\n")).unwrap_err();
    assert!(err.contains("channels.j: service \"\" must be"), "{err}");
    let err = channel("kling", &format!("{keys}region = \"cn-north-1\"\n")).unwrap_err();
    assert!(
        err.contains("channels.j: region applies to jimeng channels only"),
        "{err}"
    );
}
