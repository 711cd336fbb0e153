//! Channel tests: `POST /admin/channels/{name}/test` on a running relay's own channels, and
//! `relay channels test NAME` through the built binary, against the vendor fakes. A good key
//! is `ok`, a wrong one `key_refused`, a port nothing listens on `unreachable`, a 429
//! `rate_limited`; an unknown name is named with the channels there are; no key ever shows
//! in what either prints or answers.

use std::process::Output;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;
use serde_json::Value;

use crate::fake_chat::{FakeChat, Switches, UPSTREAM_KEY};
use crate::fake_jimeng::{self, FakeJimeng};
use crate::fake_kling::{self, FakeKling};
use crate::fake_minimax::{self, FakeMinimax};
use crate::fake_runway::{self, FakeRunway};
use crate::fake_veo::{FakeVeo, VEO_KEY};
use crate::fake_video::{FAKE_KEY, FakeVideo};
use crate::fake_vidu::{self, FakeVidu};
use crate::fake_wan::{self, FakeWan};
use crate::fake_xai::{self, FakeXai};
use crate::harness::{ADMIN_TOKEN, Body, Relay};

/// The key of the channels set up to be refused.
const WRONG: &str = "wrong-upstream-key-never-shown-7731";

/// The variable a CLI test's `veo` channel reads its key from (`api_key_env`).
const VEO_KEY_VAR: &str = "CHANNEL_TEST_VEO_KEY";

/// Every secret the channels hold: none may appear in an answer or a line printed.
const SECRETS: [&str; 13] = [
    fake_jimeng::ACCESS_KEY,
    fake_jimeng::SECRET_KEY,
    VEO_KEY,
    fake_kling::ACCESS_KEY,
    fake_kling::SECRET_KEY,
    fake_minimax::API_KEY,
    fake_wan::API_KEY,
    fake_xai::API_KEY,
    fake_runway::API_KEY,
    fake_vidu::API_KEY,
    FAKE_KEY,
    UPSTREAM_KEY,
    WRONG,
];

fn assert_no_secret(text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "a key shows: {text}");
    }
}

/// The upstreams: one fake of each vendor, a chat upstream and one answering 429 to all.
struct Fakes {
    veo: FakeVeo,
    kling: FakeKling,
    minimax: FakeMinimax,
    wan: FakeWan,
    xai: FakeXai,
    runway: FakeRunway,
    vidu: FakeVidu,
    jimeng: FakeJimeng,
    video: FakeVideo,
    chat: FakeChat,
    busy_chat: FakeChat,
    /// A port nothing listens on: bound (so no other listener can take it meanwhile), never
    /// listening, so a connection to it is refused.
    closed: tokio::net::TcpSocket,
}

impl Fakes {
    async fn start() -> Fakes {
        let closed = tokio::net::TcpSocket::new_v4().expect("socket");
        closed
            .bind("127.0.0.1:0".parse().expect("address"))
            .expect("bind");
        Fakes {
            veo: FakeVeo::start().await,
            kling: FakeKling::start().await,
            minimax: FakeMinimax::start().await,
            wan: FakeWan::start().await,
            xai: FakeXai::start().await,
            runway: FakeRunway::start().await,
            vidu: FakeVidu::start().await,
            jimeng: FakeJimeng::start().await,
            video: FakeVideo::start().await,
            chat: FakeChat::start(Switches::default()).await,
            busy_chat: FakeChat::start(Switches {
                fail_status: Some(429),
                ..Switches::default()
            })
            .await,
            closed,
        }
    }

    /// The `[[channels]]` of every case; `veo_key` is how the good `veo` channel names its
    /// key (`api_key = ...` or `api_key_env = ...`).
    fn channels(&self, veo_key: &str) -> String {
        let veo = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"veo\"\nbase_url = \"{}\"\n{key}\n\
                 models = [\"model_h3\"]\nmodel_map = {{ model_h3 = \"veo-3.1-generate-preview\" }}\n",
                self.veo.base
            )
        };
        let kling = |name: &str, secret: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"kling\"\nbase_url = \"{}\"\n\
                 access_key = \"{}\"\nsecret_key = \"{secret}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"kling-v2-6\" }}\n",
                self.kling.base,
                fake_kling::ACCESS_KEY
            )
        };
        let minimax = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"minimax\"\nbase_url = \"{}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"MiniMax-Hailuo-2.3\" }}\n",
                self.minimax.base
            )
        };
        let wan = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"wan\"\nbase_url = \"{}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"wan2.5-t2v-preview\" }}\n",
                self.wan.base
            )
        };
        let xai = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"xai\"\nbase_url = \"{}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"grok-imagine-video\" }}\n",
                self.xai.base
            )
        };
        let runway = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"runway\"\nbase_url = \"{}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"gen4.5\" }}\n",
                self.runway.base
            )
        };
        let vidu = |name: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"vidu\"\nbase_url = \"{}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"viduq3-pro\" }}\n",
                self.vidu.base
            )
        };
        let jimeng = |name: &str, secret: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"jimeng\"\nbase_url = \"{}\"\n\
                 access_key = \"{}\"\nsecret_key = \"{secret}\"\nmodels = [\"model_h3\"]\n\
                 model_map = {{ \"model_h3\" = \"jimeng_t2v_v30\" }}\n",
                self.jimeng.base,
                fake_jimeng::ACCESS_KEY
            )
        };
        let videos = |name: &str, base: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"openai-videos\"\nbase_url = \"{base}\"\n\
                 api_key = \"{key}\"\nmodels = [\"model_h3\"]\nrequest_timeout_secs = 5\n"
            )
        };
        let chat = |name: &str, kind: &str, base: &str, key: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"{kind}\"\nbase_url = \"{base}\"\n\
                 api_key = \"{key}\"\nmodels = [\"sim-chat\"]\n"
            )
        };
        let video_base = self.video.openai_base();
        [
            "[[channels]]\nname = \"sim\"\nkind = \"simulator\"\nmodels = [\"model_h3\", \"sim-chat\"]\n".to_owned(),
            veo("veo", veo_key),
            veo("veo-wrong", &format!("api_key = \"{WRONG}\"")),
            kling("kling", fake_kling::SECRET_KEY),
            kling("kling-wrong", WRONG),
            minimax("minimax", fake_minimax::API_KEY),
            minimax("minimax-wrong", WRONG),
            wan("wan", fake_wan::API_KEY),
            wan("wan-wrong", WRONG),
            xai("xai", fake_xai::API_KEY),
            xai("xai-wrong", WRONG),
            runway("runway", fake_runway::API_KEY),
            runway("runway-wrong", WRONG),
            vidu("vidu", fake_vidu::API_KEY),
            vidu("vidu-wrong", WRONG),
            jimeng("jimeng", fake_jimeng::SECRET_KEY),
            jimeng("jimeng-wrong", WRONG),
            videos("videos", &video_base, FAKE_KEY),
            videos("videos-wrong", &video_base, WRONG),
            videos("videos-busy", &video_base, FAKE_KEY),
            videos("dead", &format!("http://{}", self.closed.local_addr().expect("addr")), FAKE_KEY),
            format!(
                "[[channels]]\nname = \"ark\"\nkind = \"ark\"\nbase_url = \"{}\"\napi_key = \"{FAKE_KEY}\"\n\
                 family = \"gen2\"\nmodel_map = {{ \"gen2-pro\" = \"seedance-pro\" }}\n",
                self.video.ark_base()
            ),
            chat("native", "anthropic", &self.chat.base, UPSTREAM_KEY),
            chat("native-wrong", "anthropic", &self.chat.base, WRONG),
            chat("conv", "openai-chat", &format!("{}/v1", self.chat.base), UPSTREAM_KEY),
            chat(
                "conv-busy",
                "openai-chat",
                &format!("{}/v1", self.busy_chat.base),
                UPSTREAM_KEY,
            ),
        ]
        .concat()
    }
}

/// Each channel, its kind, and what its test must say: `status` and the vendor's HTTP
/// status (none when no answer came, or nothing was called).
const CASES: &[(&str, &str, &str, Option<u16>)] = &[
    ("sim", "simulator", "ok", None),
    ("veo", "veo", "ok", Some(200)),
    // The Gemini API refuses a key with 400 API_KEY_INVALID.
    ("veo-wrong", "veo", "key_refused", Some(400)),
    ("kling", "kling", "ok", Some(200)),
    ("kling-wrong", "kling", "key_refused", Some(401)),
    ("minimax", "minimax", "ok", Some(200)),
    // MiniMax answers a refused key with HTTP 200 and base_resp 1004.
    ("minimax-wrong", "minimax", "key_refused", Some(200)),
    ("wan", "wan", "ok", Some(200)),
    ("wan-wrong", "wan", "key_refused", Some(401)),
    ("xai", "xai", "ok", Some(200)),
    // xAI refuses a wrong key with 400 "Incorrect API key provided", naming it.
    ("xai-wrong", "xai", "key_refused", Some(400)),
    ("runway", "runway", "ok", Some(200)),
    ("runway-wrong", "runway", "key_refused", Some(401)),
    ("vidu", "vidu", "ok", Some(200)),
    // Vidu refuses a wrong key with 401 Unauthorized.
    ("vidu-wrong", "vidu", "key_refused", Some(401)),
    ("jimeng", "jimeng", "ok", Some(200)),
    // Volcengine's gateway refuses a request signed with the wrong secret key: 401
    // SignatureDoesNotMatch.
    ("jimeng-wrong", "jimeng", "key_refused", Some(401)),
    ("videos", "openai-videos", "ok", Some(200)),
    ("videos-wrong", "openai-videos", "key_refused", Some(401)),
    ("videos-busy", "openai-videos", "rate_limited", Some(429)),
    ("dead", "openai-videos", "unreachable", None),
    ("ark", "ark", "ok", Some(200)),
    ("native", "anthropic", "ok", Some(200)),
    ("native-wrong", "anthropic", "key_refused", Some(401)),
    ("conv", "openai-chat", "ok", Some(200)),
    // Its 429 body names the upstream's key: the detail must not.
    ("conv-busy", "openai-chat", "rate_limited", Some(429)),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_tests_each_running_channel() {
    let fakes = Fakes::start().await;
    let relay = Relay::start(&fakes.channels(&format!("api_key = \"{VEO_KEY}\""))).await;
    for &(name, kind, status, http_status) in CASES {
        if name == "videos-busy" {
            fakes.video.switches.lists_429.store(1, Ordering::SeqCst);
        }
        let res = relay
            .admin(
                Method::POST,
                &format!("/admin/channels/{name}/test"),
                Body::Empty,
            )
            .await;
        let text = res.text();
        assert_eq!(res.status, 200, "{name}: {text}");
        assert_no_secret(&text);
        let v: Value = res.json();
        assert_eq!(v["channel"], name, "{text}");
        assert_eq!(v["kind"], kind, "{text}");
        assert_eq!(v["status"], status, "{text}");
        assert_eq!(v["ok"], status == "ok", "{text}");
        assert_eq!(
            v["http_status"].as_u64(),
            http_status.map(u64::from),
            "{text}"
        );
        assert!(v["latency_ms"].is_u64(), "{text}");
        assert!(
            v["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{text}"
        );
        if name == "dead" {
            assert!(
                v["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("connection refused: ")),
                "{text}"
            );
        }
    }
    // The calls reached the fakes as the vendors document them.
    assert!(
        fakes
            .kling
            .state
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == "/account/costs")
    );
    assert!(fakes.chat.received().iter().any(|r| r.path == "/v1/models"
        && r.query.as_deref() == Some("limit=1")
        && r.headers.get("anthropic-version").is_some()));
    assert!(
        fakes
            .busy_chat
            .received()
            .iter()
            .all(|r| r.path == "/v1/models")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_channel_is_404_and_the_test_needs_the_admin_token() {
    let relay = Relay::start("").await;
    let res = relay
        .admin(Method::POST, "/admin/channels/nope/test", Body::Empty)
        .await;
    res.assert_error(404, "not found", Some("name"));
    let detail = res.json()["error"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains(r#"no channel named "nope"; the channels are simulator"#),
        "{detail}"
    );

    // No token, an API key, a wrong token: 401, and nothing is tested.
    let path = "/admin/channels/simulator/test";
    let none = relay.send(Method::POST, path, Body::Empty, &[]).await;
    none.assert_error(401, "unauthorized", None);
    let key = relay.call(Method::POST, path, Body::Empty).await;
    key.assert_error(401, "unauthorized", None);
    let wrong = relay
        .send(
            Method::POST,
            path,
            Body::Empty,
            &[("authorization", format!("Bearer {ADMIN_TOKEN}x"))],
        )
        .await;
    wrong.assert_error(401, "unauthorized", None);

    // Another method on the path is 405; the simulator, with the token, is ok.
    let get = relay.admin(Method::GET, path, Body::Empty).await;
    assert_eq!(get.status, 405, "{}", get.text());
    assert_eq!(get.header("allow"), Some("POST"));
    let ok = relay.admin(Method::POST, path, Body::Empty).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["ok"], true);
    assert_eq!(ok.json()["kind"], "simulator");
}

/// `relay channels test <args>` with `config`, the veo key in [`VEO_KEY_VAR`]; waits for it
/// to end (within a minute).
async fn cli(config: &std::path::Path, args: &[&str]) -> (Output, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(["channels", "test"])
        .args(args)
        .arg("--config")
        .arg(config)
        .env(VEO_KEY_VAR, VEO_KEY)
        .env("RELAY_LOG", "warn")
        .env_remove("RELAY_CONFIG")
        .env_remove("CHANNEL_TEST_UNSET_KEY")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), child)
        .await
        .unwrap_or_else(|_| panic!("relay channels test {args:?} did not end within a minute"))
        .expect("run the relay binary");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_secret(&stdout);
    assert_no_secret(&stderr);
    (out, stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_one_line_and_exits_by_the_verdict() {
    let fakes = Fakes::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("relay.toml");
    let channels = fakes.channels(&format!("api_key_env = \"{VEO_KEY_VAR}\""))
        + "[[channels]]\nname = \"unset\"\nkind = \"openai-videos\"\nbase_url = \"http://127.0.0.1:9\"\n\
           api_key_env = \"CHANNEL_TEST_UNSET_KEY\"\nmodels = [\"model_h3\"]\n";
    std::fs::write(&config, channels).unwrap();

    // (name, exit code, the start of the line, what follows the timing).
    let cases: &[(&str, i32, &str, &str)] = &[
        (
            "veo",
            0,
            "veo: reachable, key accepted (HTTP 200 in ",
            " ms)",
        ),
        ("sim", 0, "sim: ok, built in", ""),
        (
            "native",
            0,
            "native: reachable, key accepted (HTTP 200 in ",
            " ms)",
        ),
        (
            "veo-wrong",
            1,
            "veo-wrong: key refused (HTTP 400 in ",
            " ms): the vendor answered 400 Bad Request: ",
        ),
        (
            "kling-wrong",
            1,
            "kling-wrong: key refused (HTTP 401 in ",
            " ms): kling answered",
        ),
        (
            "xai-wrong",
            1,
            "xai-wrong: key refused (HTTP 400 in ",
            " ms): the vendor answered 400 Bad Request: ",
        ),
        (
            "jimeng-wrong",
            1,
            "jimeng-wrong: key refused (HTTP 401 in ",
            " ms): jimeng answered 401 Unauthorized SignatureDoesNotMatch (100010): ",
        ),
        (
            "dead",
            1,
            "dead: unreachable (after ",
            " ms): connection refused: upstream request http://127.0.0.1:",
        ),
        (
            "videos-busy",
            1,
            "videos-busy: rate limited (HTTP 429 in ",
            " ms): the vendor answered 429 Too Many Requests: ",
        ),
        (
            "conv-busy",
            1,
            "conv-busy: rate limited (HTTP 429 in ",
            " ms): the vendor answered 429 Too Many Requests: ",
        ),
    ];
    for &(name, code, start, after) in cases {
        if name == "videos-busy" {
            fakes.video.switches.lists_429.store(1, Ordering::SeqCst);
        }
        let (out, stdout, stderr) = cli(&config, &[name]).await;
        assert_eq!(out.status.code(), Some(code), "{name}: {stdout}{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {stdout}");
        let line = lines[0];
        let rest = line
            .strip_prefix(start)
            .unwrap_or_else(|| panic!("{name}: {line:?} does not start with {start:?}"));
        if after.is_empty() {
            continue;
        }
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        assert!(digits > 0, "{name}: no milliseconds in {line:?}");
        assert!(
            rest[digits..].starts_with(after),
            "{name}: {line:?} does not go on with {after:?}"
        );
    }

    // An unknown name: nothing tested, exit code 2, the channels there are named.
    let (out, stdout, stderr) = cli(&config, &["nope"]).await;
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(r#"no channel named "nope"; the channels are sim, veo, veo-wrong, kling"#),
        "{stderr}"
    );
    // A channel whose key variable is not set cannot be built: 2, naming the variable.
    let (out, _, stderr) = cli(&config, &["unset"]).await;
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "channel unset: the environment variable CHANNEL_TEST_UNSET_KEY (api_key_env) is not set"
        ),
        "{stderr}"
    );
    // The time limit is bounded.
    let (out, _, stderr) = cli(&config, &["sim", "--timeout", "0"]).await;
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--timeout"), "{stderr}");
}
