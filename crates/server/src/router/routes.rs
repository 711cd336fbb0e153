//! The routes: a plain `match` on method and path segments ([`route`]), each route's place
//! among the metrics' labels, and the table of every (method, path template) made from them.

use std::sync::LazyLock;

use http::Method;

/// The routes the relay serves. Path parameters borrow from the request path.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route<'a> {
    Healthz,
    Readyz,
    /// `GET /openapi.yaml`: the API description, unauthenticated.
    OpenApi,
    /// `GET /metrics`: Prometheus text, admin token.
    Metrics,
    /// `GET /console` and `/console/`: the web console's page, unauthenticated.
    Console,
    /// `GET /console/<file>`: one of the console's static files, unauthenticated.
    ConsoleFile(&'a str),
    /// `/files/<blob id>`, authorised by its signature instead of a key.
    File(&'a str),
    /// `POST /callbacks/ark/{channel}`, authorised by its token instead of a key.
    ArkCallback(&'a str),
    /// `POST /callbacks/kling/{channel}`, likewise.
    KlingCallback(&'a str),
    /// `POST /callbacks/minimax/{channel}`, likewise.
    MinimaxCallback(&'a str),
    /// `POST /callbacks/vidu/{channel}`, by its token and Vidu's signature.
    ViduCallback(&'a str),
    CreateVideo,
    ListVideos,
    GetVideo(&'a str),
    DeleteVideo(&'a str),
    VideoContent(&'a str),
    CancelVideo(&'a str),
    /// `POST /v1/videos/{task_id}/remix`.
    RemixVideo(&'a str),
    /// `POST /v1/videos/edits`.
    EditVideo,
    /// `POST /v1/videos/extensions`.
    ExtendVideo,
    /// `POST /v1/videos/characters`.
    CreateCharacter,
    /// `GET /v1/videos/characters`.
    ListCharacters,
    /// `GET /v1/videos/characters/{character_id}`.
    GetCharacter(&'a str),
    /// `DELETE /v1/videos/characters/{character_id}`.
    DeleteCharacter(&'a str),
    CreateGeneration,
    ListGenerations,
    GetGeneration(&'a str),
    CancelGeneration(&'a str),
    /// `GET /v1/video/models`.
    ListVideoModels,
    GetVideoModel(&'a str),
    CreateLibrary,
    ListLibraries,
    GetLibrary(&'a str),
    DeleteLibrary(&'a str),
    UploadAsset(&'a str),
    ListAssets(&'a str),
    GetAsset(&'a str),
    DeleteAsset(&'a str),
    Moderation,
    CreateKey,
    ListKeys,
    GetKey(&'a str),
    RevokeKey(&'a str),
    PatchKey(&'a str),
    KeyLedger(&'a str),
    /// `POST /admin/keys/{id}/webhook-secret`.
    RotateWebhookSecret(&'a str),
    AdminTasks,
    AdminWebhooks,
    AdminChannels,
    /// `POST /admin/channels/{name}/test`.
    TestChannel(&'a str),
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    ListModels,
    GetModel(&'a str),
    /// `POST /v1/messages/batches`.
    CreateBatch,
    ListBatches,
    GetBatch(&'a str),
    DeleteBatch(&'a str),
    CancelBatch(&'a str),
    BatchResults(&'a str),
}

/// Why a request matched no route.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Miss {
    NotFound,
    /// Known path, wrong method; the methods it takes.
    Method(&'static str),
}

/// `/v1/messages`, `/v1/models` and the paths under them: the vendor's endpoints.
pub(super) fn is_messages_path(path: &str) -> bool {
    ["/v1/messages", "/v1/models"].iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// One more than the segments of the longest route's path but a file's.
const MAX_SEGMENTS: usize = 6;

pub(super) fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, Miss> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(Miss::NotFound);
    };
    // The console's page is also at `/console/`, the one path with an empty last segment.
    if rest == "console/" {
        return if method == Method::GET {
            Ok(Route::Console)
        } else {
            Err(Miss::Method("GET"))
        };
    }
    // The first segments, on the stack: a path of more can only be a file's (`files/...`).
    let mut segments = [""; MAX_SEGMENTS];
    let mut count = 0;
    // One pass over the bytes; `/` is ASCII, so every cut is at a character's boundary.
    let bytes = rest.as_bytes();
    let mut start = 0;
    for end in 0..=bytes.len() {
        match bytes.get(end) {
            Some(b'%') => return Err(Miss::NotFound),
            Some(b'/') | None => {}
            Some(_) => continue,
        }
        let segment = &rest[start..end];
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(Miss::NotFound);
        }
        if count < MAX_SEGMENTS {
            segments[count] = segment;
            count += 1;
        }
        start = end + 1;
    }
    let m = method;
    use Route::*;
    match &segments[..count] {
        ["files", _, ..] if m == Method::GET => Ok(File(&rest["files/".len()..])),
        ["callbacks", "ark", channel] if m == Method::POST => Ok(ArkCallback(channel)),
        ["callbacks", "ark", _] => Err(Miss::Method("POST")),
        ["callbacks", "kling", channel] if m == Method::POST => Ok(KlingCallback(channel)),
        ["callbacks", "kling", _] => Err(Miss::Method("POST")),
        ["callbacks", "minimax", channel] if m == Method::POST => Ok(MinimaxCallback(channel)),
        ["callbacks", "minimax", _] => Err(Miss::Method("POST")),
        ["callbacks", "vidu", channel] if m == Method::POST => Ok(ViduCallback(channel)),
        ["callbacks", "vidu", _] => Err(Miss::Method("POST")),
        ["files", _, ..] => Err(Miss::Method("GET")),
        ["healthz"] if m == Method::GET => Ok(Healthz),
        ["healthz"] => Err(Miss::Method("GET")),
        ["readyz"] if m == Method::GET => Ok(Readyz),
        ["readyz"] => Err(Miss::Method("GET")),
        ["openapi.yaml"] if m == Method::GET => Ok(OpenApi),
        ["openapi.yaml"] => Err(Miss::Method("GET")),
        ["metrics"] if m == Method::GET => Ok(Metrics),
        ["metrics"] => Err(Miss::Method("GET")),
        ["console"] if m == Method::GET => Ok(Console),
        ["console", file] if m == Method::GET => Ok(ConsoleFile(file)),
        ["console"] | ["console", _] => Err(Miss::Method("GET")),
        ["v1", "videos"] if m == Method::POST => Ok(CreateVideo),
        ["v1", "videos"] if m == Method::GET => Ok(ListVideos),
        ["v1", "videos"] => Err(Miss::Method("GET, POST")),
        // Fixed names before the task id they would otherwise be read as.
        ["v1", "videos", "edits"] if m == Method::POST => Ok(EditVideo),
        ["v1", "videos", "edits"] => Err(Miss::Method("POST")),
        ["v1", "videos", "extensions"] if m == Method::POST => Ok(ExtendVideo),
        ["v1", "videos", "extensions"] => Err(Miss::Method("POST")),
        ["v1", "videos", "characters"] if m == Method::POST => Ok(CreateCharacter),
        ["v1", "videos", "characters"] if m == Method::GET => Ok(ListCharacters),
        ["v1", "videos", "characters"] => Err(Miss::Method("GET, POST")),
        ["v1", "videos", "characters", id] if m == Method::GET => Ok(GetCharacter(id)),
        ["v1", "videos", "characters", id] if m == Method::DELETE => Ok(DeleteCharacter(id)),
        ["v1", "videos", "characters", _] => Err(Miss::Method("GET, DELETE")),
        ["v1", "videos", id] if m == Method::GET => Ok(GetVideo(id)),
        ["v1", "videos", id] if m == Method::DELETE => Ok(DeleteVideo(id)),
        ["v1", "videos", _] => Err(Miss::Method("GET, DELETE")),
        ["v1", "videos", id, "content"] if m == Method::GET => Ok(VideoContent(id)),
        ["v1", "videos", _, "content"] => Err(Miss::Method("GET")),
        ["v1", "videos", id, "cancel"] if m == Method::POST => Ok(CancelVideo(id)),
        ["v1", "videos", _, "cancel"] => Err(Miss::Method("POST")),
        ["v1", "videos", id, "remix"] if m == Method::POST => Ok(RemixVideo(id)),
        ["v1", "videos", _, "remix"] => Err(Miss::Method("POST")),
        ["v1", "video", "generations"] if m == Method::POST => Ok(CreateGeneration),
        ["v1", "video", "generations"] if m == Method::GET => Ok(ListGenerations),
        ["v1", "video", "generations"] => Err(Miss::Method("GET, POST")),
        ["v1", "video", "generations", id] if m == Method::GET => Ok(GetGeneration(id)),
        ["v1", "video", "generations", _] => Err(Miss::Method("GET")),
        ["v1", "video", "generations", id, "cancel"] if m == Method::POST => {
            Ok(CancelGeneration(id))
        }
        ["v1", "video", "generations", _, "cancel"] => Err(Miss::Method("POST")),
        ["v1", "video", "models"] if m == Method::GET => Ok(ListVideoModels),
        ["v1", "video", "models"] => Err(Miss::Method("GET")),
        ["v1", "video", "models", id] if m == Method::GET => Ok(GetVideoModel(id)),
        ["v1", "video", "models", _] => Err(Miss::Method("GET")),
        ["api", "generation", "video", "moderation-result"] if m == Method::POST => Ok(Moderation),
        ["api", "generation", "video", "moderation-result"] => Err(Miss::Method("POST")),
        ["v1", "asset-libraries"] if m == Method::POST => Ok(CreateLibrary),
        ["v1", "asset-libraries"] if m == Method::GET => Ok(ListLibraries),
        ["v1", "asset-libraries"] => Err(Miss::Method("GET, POST")),
        ["v1", "asset-libraries", id] if m == Method::GET => Ok(GetLibrary(id)),
        ["v1", "asset-libraries", id] if m == Method::DELETE => Ok(DeleteLibrary(id)),
        ["v1", "asset-libraries", _] => Err(Miss::Method("GET, DELETE")),
        ["v1", "asset-libraries", id, "assets"] if m == Method::POST => Ok(UploadAsset(id)),
        ["v1", "asset-libraries", id, "assets"] if m == Method::GET => Ok(ListAssets(id)),
        ["v1", "asset-libraries", _, "assets"] => Err(Miss::Method("GET, POST")),
        ["v1", "assets", id] if m == Method::GET => Ok(GetAsset(id)),
        ["v1", "assets", id] if m == Method::DELETE => Ok(DeleteAsset(id)),
        ["v1", "assets", _] => Err(Miss::Method("GET, DELETE")),
        ["admin", "keys"] if m == Method::POST => Ok(CreateKey),
        ["admin", "keys"] if m == Method::GET => Ok(ListKeys),
        ["admin", "keys"] => Err(Miss::Method("GET, POST")),
        ["admin", "keys", id] if m == Method::GET => Ok(GetKey(id)),
        ["admin", "keys", id] if m == Method::DELETE => Ok(RevokeKey(id)),
        ["admin", "keys", id] if m == Method::PATCH => Ok(PatchKey(id)),
        ["admin", "keys", _] => Err(Miss::Method("GET, PATCH, DELETE")),
        ["admin", "keys", id, "ledger"] if m == Method::GET => Ok(KeyLedger(id)),
        ["admin", "keys", _, "ledger"] => Err(Miss::Method("GET")),
        ["admin", "keys", id, "webhook-secret"] if m == Method::POST => Ok(RotateWebhookSecret(id)),
        ["admin", "keys", _, "webhook-secret"] => Err(Miss::Method("POST")),
        ["admin", "webhooks"] if m == Method::GET => Ok(AdminWebhooks),
        ["admin", "webhooks"] => Err(Miss::Method("GET")),
        ["admin", "tasks"] if m == Method::GET => Ok(AdminTasks),
        ["admin", "tasks"] => Err(Miss::Method("GET")),
        ["admin", "channels"] if m == Method::GET => Ok(AdminChannels),
        ["admin", "channels"] => Err(Miss::Method("GET")),
        ["admin", "channels", name, "test"] if m == Method::POST => Ok(TestChannel(name)),
        ["admin", "channels", _, "test"] => Err(Miss::Method("POST")),
        ["v1", "messages"] if m == Method::POST => Ok(Messages),
        ["v1", "messages"] => Err(Miss::Method("POST")),
        ["v1", "messages", "count_tokens"] if m == Method::POST => Ok(CountTokens),
        ["v1", "messages", "count_tokens"] => Err(Miss::Method("POST")),
        ["v1", "messages", "batches"] if m == Method::POST => Ok(CreateBatch),
        ["v1", "messages", "batches"] if m == Method::GET => Ok(ListBatches),
        ["v1", "messages", "batches"] => Err(Miss::Method("GET, POST")),
        ["v1", "messages", "batches", id] if m == Method::GET => Ok(GetBatch(id)),
        ["v1", "messages", "batches", id] if m == Method::DELETE => Ok(DeleteBatch(id)),
        ["v1", "messages", "batches", _] => Err(Miss::Method("GET, DELETE")),
        ["v1", "messages", "batches", id, "cancel"] if m == Method::POST => Ok(CancelBatch(id)),
        ["v1", "messages", "batches", _, "cancel"] => Err(Miss::Method("POST")),
        ["v1", "messages", "batches", id, "results"] if m == Method::GET => Ok(BatchResults(id)),
        ["v1", "messages", "batches", _, "results"] => Err(Miss::Method("GET")),
        ["v1", "models"] if m == Method::GET => Ok(ListModels),
        ["v1", "models"] => Err(Miss::Method("GET")),
        ["v1", "models", id] if m == Method::GET => Ok(GetModel(id)),
        ["v1", "models", _] => Err(Miss::Method("GET")),
        _ => Err(Miss::NotFound),
    }
}

impl<'a> Route<'a> {
    /// The route's place in [`crate::ops::metrics::ROUTES`], whose label is its method and path
    /// template as in [`route_table`] (a test holds the two together).
    pub(super) fn slot(&self) -> usize {
        use Route::*;
        match self {
            Healthz => 0,
            Readyz => 1,
            OpenApi => 2,
            Metrics => 3,
            File(_) => 4,
            ArkCallback(_) => 5,
            CreateVideo => 6,
            ListVideos => 7,
            GetVideo(_) => 8,
            DeleteVideo(_) => 9,
            VideoContent(_) => 10,
            CancelVideo(_) => 11,
            RemixVideo(_) => 12,
            CreateGeneration => 13,
            ListGenerations => 14,
            GetGeneration(_) => 15,
            CancelGeneration(_) => 16,
            ListVideoModels => 17,
            GetVideoModel(_) => 18,
            Moderation => 19,
            CreateLibrary => 20,
            ListLibraries => 21,
            GetLibrary(_) => 22,
            DeleteLibrary(_) => 23,
            UploadAsset(_) => 24,
            ListAssets(_) => 25,
            GetAsset(_) => 26,
            DeleteAsset(_) => 27,
            CreateKey => 28,
            ListKeys => 29,
            GetKey(_) => 30,
            RevokeKey(_) => 31,
            PatchKey(_) => 32,
            KeyLedger(_) => 33,
            RotateWebhookSecret(_) => 34,
            Console => 35,
            ConsoleFile(_) => 36,
            AdminWebhooks => 37,
            AdminTasks => 38,
            AdminChannels => 39,
            Messages => 40,
            CountTokens => 41,
            ListModels => 42,
            GetModel(_) => 43,
            CreateBatch => 44,
            ListBatches => 45,
            GetBatch(_) => 46,
            DeleteBatch(_) => 47,
            CancelBatch(_) => 48,
            BatchResults(_) => 49,
            EditVideo => 50,
            ExtendVideo => 51,
            CreateCharacter => 52,
            GetCharacter(_) => 53,
            ListCharacters => 54,
            DeleteCharacter(_) => 55,
            TestChannel(_) => 56,
            KlingCallback(_) => 57,
            MinimaxCallback(_) => 58,
            ViduCallback(_) => 59,
        }
    }

    /// The route's label, `metrics::ROUTES[slot]`.
    #[cfg(test)]
    pub(super) fn label(&self) -> &'static str {
        crate::ops::metrics::ROUTES[self.slot()]
    }

    /// The path parameter, if the route has one (for `File`, the whole blob path).
    pub(super) fn param(&self) -> Option<&'a str> {
        use Route::*;
        match *self {
            File(p)
            | ArkCallback(p)
            | KlingCallback(p)
            | MinimaxCallback(p)
            | ViduCallback(p)
            | GetVideo(p)
            | DeleteVideo(p)
            | VideoContent(p)
            | CancelVideo(p)
            | RemixVideo(p)
            | GetCharacter(p)
            | DeleteCharacter(p)
            | GetGeneration(p)
            | CancelGeneration(p)
            | GetVideoModel(p)
            | GetLibrary(p)
            | DeleteLibrary(p)
            | UploadAsset(p)
            | ListAssets(p)
            | GetAsset(p)
            | DeleteAsset(p)
            | GetKey(p)
            | RevokeKey(p)
            | PatchKey(p)
            | KeyLedger(p)
            | RotateWebhookSecret(p)
            | GetModel(p)
            | GetBatch(p)
            | DeleteBatch(p)
            | CancelBatch(p)
            | BatchResults(p)
            | TestChannel(p)
            | ConsoleFile(p) => Some(p),
            Healthz | Readyz | OpenApi | Metrics | Console | CreateVideo | ListVideos
            | EditVideo | ExtendVideo | CreateCharacter | ListCharacters | CreateGeneration
            | ListGenerations | ListVideoModels | CreateLibrary | ListLibraries | Moderation
            | CreateKey | ListKeys | AdminTasks | AdminWebhooks | AdminChannels | Messages
            | CountTokens | ListModels | CreateBatch | ListBatches => None,
        }
    }
}

/// Route matching as the fuzz targets see it; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use http::Method;

    /// A matched route: the variant's name and its path parameter.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Matched<'a> {
        pub name: String,
        pub param: Option<&'a str>,
    }

    /// [`super::route`]: `Err(None)` for no route, `Err(Some(allow))` for a known path with
    /// another method.
    pub fn route<'a>(method: &Method, path: &'a str) -> Result<Matched<'a>, Option<&'static str>> {
        match super::route(method, path) {
            Ok(route) => {
                let debug = format!("{route:?}");
                let name = debug.split('(').next().unwrap_or_default().to_owned();
                Ok(Matched {
                    name,
                    param: route.param(),
                })
            }
            Err(super::Miss::NotFound) => Err(None),
            Err(super::Miss::Method(allow)) => Err(Some(allow)),
        }
    }
}

/// Every (method, path template) the router takes: the labels of [`crate::ops::metrics::ROUTES`],
/// each route's one place there, and `GET /console/`, the page `GET /console` is. The
/// OpenAPI document and the conformance suite's access checks are held to it.
/// `/files/{path}` stands for `/files/` followed by one or more segments.
pub fn route_table() -> &'static [(&'static str, &'static str)] {
    static TABLE: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
        let routes = &crate::ops::metrics::ROUTES[..crate::ops::metrics::UNMATCHED];
        let mut table: Vec<_> = routes.iter().filter_map(|l| l.split_once(' ')).collect();
        table.push(("GET", "/console/"));
        table
    });
    &TABLE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let cases = [
            (Method::GET, "/healthz", Ok(Route::Healthz)),
            (Method::POST, "/v1/messages", Ok(Route::Messages)),
            (Method::GET, "/v1/messages", Err(Miss::Method("POST"))),
            (
                Method::POST,
                "/v1/messages/count_tokens",
                Ok(Route::CountTokens),
            ),
            (Method::GET, "/v1/models", Ok(Route::ListModels)),
            (
                Method::GET,
                "/v1/models/sim-chat",
                Ok(Route::GetModel("sim-chat")),
            ),
            (Method::POST, "/v1/videos", Ok(Route::CreateVideo)),
            (Method::GET, "/v1/videos/v1", Ok(Route::GetVideo("v1"))),
            (
                Method::GET,
                "/v1/videos/v1/content",
                Ok(Route::VideoContent("v1")),
            ),
            (Method::PUT, "/v1/videos", Err(Miss::Method("GET, POST"))),
            (Method::GET, "/v1/videos/", Err(Miss::NotFound)),
            (Method::POST, "/v1/videos/edits", Ok(Route::EditVideo)),
            (Method::GET, "/v1/videos/edits", Err(Miss::Method("POST"))),
            (
                Method::GET,
                "/v1/videos/characters/char_1",
                Ok(Route::GetCharacter("char_1")),
            ),
            (
                Method::GET,
                "/v1/videos/characters",
                Ok(Route::ListCharacters),
            ),
            (
                Method::DELETE,
                "/v1/videos/characters/char_1",
                Ok(Route::DeleteCharacter("char_1")),
            ),
            (
                Method::PUT,
                "/v1/videos/characters",
                Err(Miss::Method("GET, POST")),
            ),
            (
                Method::POST,
                "/v1/videos/characters/char_1",
                Err(Miss::Method("GET, DELETE")),
            ),
            (Method::GET, "/v1/videos/../x", Err(Miss::NotFound)),
            (Method::GET, "/v1/videos/%2e%2e", Err(Miss::NotFound)),
            (Method::GET, "/nope", Err(Miss::NotFound)),
            (Method::GET, "//v1/videos", Err(Miss::NotFound)),
            (Method::GET, "/openapi.yaml", Ok(Route::OpenApi)),
            (Method::GET, "/console", Ok(Route::Console)),
            (Method::GET, "/console/", Ok(Route::Console)),
            (
                Method::GET,
                "/console/app.js",
                Ok(Route::ConsoleFile("app.js")),
            ),
            (Method::POST, "/console/", Err(Miss::Method("GET"))),
            (
                Method::POST,
                "/admin/channels/veo-main/test",
                Ok(Route::TestChannel("veo-main")),
            ),
            (
                Method::GET,
                "/admin/channels/veo-main/test",
                Err(Miss::Method("POST")),
            ),
            (
                Method::POST,
                "/admin/channels/veo-main",
                Err(Miss::NotFound),
            ),
            (Method::GET, "/console/a/b.js", Err(Miss::NotFound)),
            (Method::GET, "/console//", Err(Miss::NotFound)),
            // Paths longer than any route's: only a file's, every segment still checked.
            (
                Method::GET,
                "/files/a/b/c/d/e/f/g",
                Ok(Route::File("a/b/c/d/e/f/g")),
            ),
            (Method::GET, "/files/a/b/c/d/e/f/../g", Err(Miss::NotFound)),
            (
                Method::POST,
                "/v1/video/generations/x/cancel/y",
                Err(Miss::NotFound),
            ),
            (
                Method::POST,
                "/v1/video/generations/x/cancel/y/z",
                Err(Miss::NotFound),
            ),
        ];
        for (method, path, want) in cases {
            assert_eq!(route(&method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn messages_paths() {
        for path in [
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/messages/nope",
            "/v1/models",
            "/v1/models/%23",
        ] {
            assert!(is_messages_path(path), "{path}");
        }
        for path in ["/v1/messagesx", "/v1/modelsx/a", "/v1/videos", "/v1"] {
            assert!(!is_messages_path(path), "{path}");
        }
    }

    /// Every entry of `route_table` routes, every route has an entry, and the methods a path
    /// takes are exactly the table's (so the table cannot drift from `route`).
    #[test]
    fn route_table_matches_route() {
        let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
        let table = route_table();
        let concrete = |template: &str| {
            template
                .split('/')
                .map(|s| if s.starts_with('{') { "x1" } else { s })
                .collect::<Vec<_>>()
                .join("/")
        };
        let mut kinds = std::collections::HashSet::new();
        for (method, template) in table {
            let path = concrete(template);
            for m in methods {
                let listed = table
                    .iter()
                    .any(|(tm, tt)| *tm == m && concrete(tt) == path);
                let got = route(&Method::from_bytes(m.as_bytes()).unwrap(), &path);
                assert_eq!(got.is_ok(), listed, "{m} {path}: {got:?}");
                if let Ok(r) = got {
                    if m == *method {
                        // `/console/` is the page `/console` is.
                        let template = template.strip_suffix('/').unwrap_or(template);
                        assert_eq!(r.label(), format!("{method} {template}"));
                    }
                    let name = format!("{r:?}");
                    kinds.insert(name.split('(').next().unwrap_or_default().to_owned());
                }
            }
            assert!(route(&Method::from_bytes(method.as_bytes()).unwrap(), &path).is_ok());
        }
        // Every variant of `Route` is reached by some entry: a new variant needs its label in
        // `metrics::ROUTES` (and a path in docs/openapi.yaml), and this count goes up with it.
        assert_eq!(kinds.len(), 60, "route_table misses a route");
    }
}
