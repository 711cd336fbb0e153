//! What each channel's vendor model can make, end to end through the vendor fakes: a request no
//! channel of its model can make is refused with the field's own error and a detail naming
//! what the channels make, before anything is charged or stored; of two channels with different
//! catalogs each task goes only to one that can make it, and is sent the tier and duration that
//! fit (the next longer duration where a channel allows it, billed as asked); a finished task
//! is settled on the length its vendor reports, an unreadable report at the pre-deduction; and
//! `GET /v1/video/models` shows the same catalog.

use http::Method;
use serde_json::{Value, json};

use crate::fake_kling::{ACCESS_KEY, FakeKling, SECRET_KEY};
use crate::fake_veo::{FakeVeo, VEO_KEY};
use crate::harness::{Answer, Body, Multipart, Relay, png};
use crate::vendor_flows::{WAIT, config, entries_of, first_format};

/// `model_h3` at 10 a second and a second-format `veo-3` of family `veo`, as the catalog
/// accepts them (wider than a Veo model makes).
const MODELS: &str = r#"
[groups]
veo = "veo"
[models.model_h3]
kind = "video"
price_per_second = 10
[models.veo-3]
kind = "generation"
family = "veo"
resolutions = ["720p", "1080p"]
durations = [4, 6, 8]
ratios = ["16:9", "9:16", "adaptive"]
price_per_second_by_resolution = { "720p" = 12, "1080p" = 20 }
"#;

/// A `veo` channel on `fake` serving both models as `vendor_model`, then `extra` keys.
fn veo_channel(
    name: &str,
    fake: &FakeVeo,
    priority: i32,
    vendor_model: &str,
    extra: &str,
) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"veo\"\nbase_url = \"{}\"\napi_key = \"{VEO_KEY}\"\n\
         models = [\"model_h3\", \"veo-3\"]\npriority = {priority}\nrequest_timeout_secs = 5\n\
         model_map = {{ model_h3 = \"{vendor_model}\", \"veo-3\" = \"{vendor_model}\" }}\n{extra}\n",
        fake.base
    )
}

/// A key of group `veo` with `quota` credits: (id, secret).
async fn veo_key(relay: &Relay, quota: i64) -> (String, String) {
    let res = relay
        .admin(
            Method::POST,
            "/admin/keys",
            Body::Json(json!({"name": "caps", "group": "veo", "quota": quota})),
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let v = res.json();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["key"].as_str().unwrap().to_owned(),
    )
}

async fn post(relay: &Relay, key: &str, path: &str, body: Value) -> Answer {
    relay
        .call_as(key, Method::POST, path, Body::Json(body), &[])
        .await
}

async fn post_form(relay: &Relay, key: &str, form: Multipart) -> Answer {
    let (ct, body) = form.build();
    relay
        .call_as(key, Method::POST, "/v1/videos", Body::Raw(ct, body), &[])
        .await
}

/// The refusal's field error (as `assert_error` checks it) and its exact detail.
fn refused(res: &Answer, message: &str, param: &str, detail: &str) {
    res.assert_error(400, message, Some(param));
    assert_eq!(res.json()["error"]["detail"], detail, "{}", res.text());
}

fn frames(seconds: &str, last: bool) -> Multipart {
    let form = Multipart::new()
        .text("model", "model_h3")
        .text("prompt", "from dusk to night")
        .text("seconds", seconds)
        .text("size", "1280x720")
        .file("first_frame", "f.png", "image/png", &png(1280, 720));
    if last {
        form.file("last_frame", "l.png", "image/png", &png(1280, 720))
    } else {
        form
    }
}

async fn list_len(relay: &Relay, key: &str, path: &str) -> usize {
    let res = relay
        .call_as(key, Method::GET, path, Body::Empty, &[])
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()["data"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_no_channel_can_make_is_refused_before_it_is_charged() {
    let fake = FakeVeo::start().await;
    let lite = veo_channel("lite", &fake, 0, "veo-3.1-lite-generate-preview", "");
    let relay = Relay::start(&config(&format!("{MODELS}{lite}"))).await;
    let (key_id, key) = veo_key(&relay, 1000).await;

    // Veo 3.1 Lite makes 4, 6 or 8 s; the first format accepts 5.
    let res = post(
        &relay,
        &key,
        "/v1/videos",
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "5"}),
    )
    .await;
    refused(
        &res,
        "invalid duration",
        "duration",
        "duration 5 s: the channels of this model make 4, 6 or 8 s",
    );
    // A size larger than its largest tier.
    let res = post(
        &relay,
        &key,
        "/v1/videos",
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "8", "size": "1920x1440"}),
    )
    .await;
    refused(
        &res,
        "invalid size",
        "size",
        "size 1920x1440: the channels of this model make 720p or 1080p at most, no larger",
    );
    // A ratio it does not make.
    let res = post(
        &relay,
        &key,
        "/v1/videos",
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "8", "aspect_ratio": "1:1"}),
    )
    .await;
    refused(
        &res,
        "invalid ratio",
        "aspect_ratio",
        "ratio 1:1: the channels of this model make 16:9 or 9:16",
    );
    // A last frame: Lite takes none.
    let res = post_form(&relay, &key, frames("8", true)).await;
    refused(
        &res,
        "reference limit exceeded",
        "last_frame",
        "last frame: the channels of this model take none",
    );
    // The second format: 1080p only at 8 s, so 6 s is the duration's fault.
    let res = post(
        &relay,
        &key,
        "/v1/video/generations",
        json!({"model": "veo-3", "prompt": "a heron", "duration": 6, "resolution": "1080p",
               "ratio": "16:9"}),
    )
    .await;
    refused(
        &res,
        "invalid duration",
        "duration",
        "duration 6 s: the channels of this model make 8 s at 1080p",
    );

    // Nothing charged, stored or sent.
    assert!(relay.ledger(&key_id).await.is_empty());
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota"], 1000, "{k}");
    assert_eq!(list_len(&relay, &key, "/v1/videos").await, 0);
    assert_eq!(list_len(&relay, &key, "/v1/video/generations").await, 0);
    assert!(fake.bodies().is_empty(), "{:?}", fake.bodies());

    // What it can make goes through, at the tier asked; Veo reports no length: settled as asked.
    let res = post(
        &relay,
        &key,
        "/v1/video/generations",
        json!({"model": "veo-3", "prompt": "a heron", "duration": 8, "resolution": "1080p",
               "ratio": "16:9"}),
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().unwrap().to_owned();
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        fake.bodies()[0]["parameters"],
        json!({"aspectRatio": "16:9", "durationSeconds": 8, "resolution": "1080p"})
    );
    let entries = entries_of(&relay, &key_id, &id).await;
    assert_eq!(
        entries,
        [("prededuct".to_owned(), -160), ("settle".to_owned(), 0)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_task_goes_only_to_a_channel_that_can_make_it() {
    // Veo 2 (5 to 8 s, 720p, no last frame) above Veo 3.1 (4, 6, 8 s, last frames, 1080p at
    // 8 s), which may make the next longer duration.
    let veo2 = FakeVeo::start().await;
    let veo31 = FakeVeo::start().await;
    let channels = format!(
        "{}{}",
        veo_channel("veo2", &veo2, 5, "veo-2.0-generate-001", ""),
        veo_channel(
            "veo31",
            &veo31,
            0,
            "veo-3.1-generate-preview",
            "nearest_longer_duration = true"
        )
    );
    let relay = Relay::start(&config(&format!("{MODELS}{channels}"))).await;
    let (key_id, key) = veo_key(&relay, 10_000).await;
    let done = async |id: &str| {
        let done = relay.wait_video_as(&key, id, WAIT).await;
        assert_eq!(done["status"], "completed", "{done}");
        done
    };

    // 5 s, text only: both can (Veo 3.1 as 6 s); the higher priority takes it.
    let text = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "5"}),
    )
    .await;
    done(&text).await;
    // First and last frames at 6 s: only Veo 3.1 takes a last frame.
    let res = post_form(&relay, &key, frames("6", true)).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let both = res.json()["id"].as_str().unwrap().to_owned();
    done(&both).await;
    // 7 s with a last frame: Veo 3.1's next longer, 8 s, billed as the 7 s asked.
    let res = post_form(&relay, &key, frames("7", true)).await;
    assert_eq!(res.status, 200, "{}", res.text());
    let longer = res.json()["id"].as_str().unwrap().to_owned();
    let record = done(&longer).await;
    assert_eq!(record["seconds"], "7", "the record keeps what was asked");
    // 1920x1080: Veo 2 makes 720p only; Veo 3.1 is sent 1080p.
    let tall = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "8", "size": "1920x1080"}),
    )
    .await;
    done(&tall).await;

    let sent2 = veo2.bodies();
    assert_eq!(sent2.len(), 1, "{sent2:?}");
    assert_eq!(sent2[0]["parameters"]["durationSeconds"], 5);
    let sent31 = veo31.bodies();
    assert_eq!(sent31.len(), 3, "{sent31:?}");
    let parameters: Vec<&Value> = sent31.iter().map(|b| &b["parameters"]).collect();
    assert_eq!(parameters[0]["durationSeconds"], 6);
    assert!(sent31[0]["instances"][0].get("lastFrame").is_some());
    assert_eq!(parameters[1]["durationSeconds"], 8);
    assert!(sent31[1]["instances"][0].get("lastFrame").is_some());
    assert_eq!(
        *parameters[2],
        json!({"aspectRatio": "16:9", "durationSeconds": 8, "resolution": "1080p"})
    );
    // Each settled at what was asked (Veo reports no length): never above it.
    for (id, price) in [(&text, 50), (&both, 60), (&longer, 70), (&tall, 80)] {
        assert_eq!(
            entries_of(&relay, &key_id, id).await,
            [("prededuct".to_owned(), -price), ("settle".to_owned(), 0)],
            "{id}"
        );
    }
    // No channel at all takes an audio reference.
    let res = post(
        &relay,
        &key,
        "/v1/videos",
        json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": "8",
               "audio_url": format!("data:audio/wav;base64,{}", crate::harness::base64(&crate::harness::wav()))}),
    )
    .await;
    refused(
        &res,
        "reference limit exceeded",
        "audio_url",
        "1 reference audio tracks: the channels of this model take at most 0",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_settled_on_the_length_its_vendor_reports() {
    let fake = FakeKling::start().await;
    let channel = format!(
        "[[channels]]\nname = \"kling\"\nkind = \"kling\"\nbase_url = \"{}\"\n\
         access_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n\
         models = [\"model_h3\"]\nmodel_map = {{ \"model_h3\" = \"kling-v2-6\" }}\n",
        fake.base
    );
    let relay = Relay::start(&config(&channel)).await;
    let (key_id, key) = relay.new_key("kling", Some(1000)).await;
    let ten = json!({"model": "model_h3", "prompt": "a rabbit reads the paper", "seconds": "10",
                     "size": "1280x720"});

    // 10 s asked (100 credits pre-deducted), 5.041 s made: 50 charged, 50 returned.
    *fake.state.reported_duration.lock().unwrap() = Some("5.041".into());
    let short = first_format(&relay, &key, ten.clone()).await;
    let done = relay.wait_video_as(&key, &short, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["seconds"], "10", "the record keeps what was asked");
    assert_eq!(
        entries_of(&relay, &key_id, &short).await,
        [("prededuct".to_owned(), -100), ("settle".to_owned(), 50)]
    );

    // A length that cannot be read: the pre-deduction, never zero.
    *fake.state.reported_duration.lock().unwrap() = Some("ten-ish".into());
    let unreadable = first_format(&relay, &key, ten).await;
    let done = relay.wait_video_as(&key, &unreadable, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        entries_of(&relay, &key_id, &unreadable).await,
        [("prededuct".to_owned(), -100), ("settle".to_owned(), 0)]
    );

    let balances: Vec<Value> = relay
        .ledger(&key_id)
        .await
        .iter()
        .map(|e| e["balance_after"].clone())
        .collect();
    assert_eq!(balances, [json!(900), json!(950), json!(850), json!(850)]);
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(
        (&k["quota"], &k["quota_used"]),
        (&json!(850), &json!(150)),
        "{k}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_endpoint_shows_what_the_channels_make() {
    let fake = FakeVeo::start().await;
    let lite = veo_channel("lite", &fake, 0, "veo-3.1-lite-generate-preview", "");
    let relay = Relay::start(&config(&format!("{MODELS}{lite}"))).await;
    let (_, key) = veo_key(&relay, 1000).await;
    let get = async |id: &str| {
        let res = relay
            .call_as(
                &key,
                Method::GET,
                &format!("/v1/video/models/{id}"),
                Body::Empty,
                &[],
            )
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        assert!(!res.text().contains("lite"), "a channel name leaked");
        res.json()
    };
    let lite_caps = json!({"durations": [4, 6, 8], "resolutions": ["720p", "1080p"],
        "ratios": ["16:9", "9:16"], "durations_by_resolution": {"1080p": [8]},
        "first_frame": true, "last_frame": false, "last_frame_resolutions": [],
        "last_frame_durations": [], "image_only_resolutions": [], "reference_images": 0,
        "reference_image_durations": [], "reference_videos": 0, "reference_audios": 0,
        "audio": true});
    let maxes = |m: &Value| -> Vec<(String, u64)> {
        m["references"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["max"].as_u64().unwrap(),
                )
            })
            .collect()
    };

    let h3 = get("model_h3").await;
    assert_eq!(h3["durations"], json!([6, 8]));
    assert_eq!(h3["resolutions"], json!(["1280x720", "720x1280"]));
    assert_eq!(h3["ratios"], json!(["16:9", "9:16", "adaptive"]));
    assert_eq!(h3["durations_by_resolution"], json!({"1080p": [8]}));
    assert_eq!(h3["capabilities"], lite_caps);
    assert_eq!(
        maxes(&h3),
        [
            ("first_frame".to_owned(), 1),
            ("input_reference".to_owned(), 1),
            ("last_frame".to_owned(), 0),
            ("audio_url".to_owned(), 0),
            ("reference_video".to_owned(), 0)
        ]
    );
    assert_eq!(h3["price"]["per_second"], 10);

    let veo3 = get("veo-3").await;
    assert_eq!(veo3["durations"], json!([4, 6, 8]));
    assert_eq!(veo3["resolutions"], json!(["720p", "1080p"]));
    assert_eq!(veo3["ratios"], json!(["16:9", "9:16", "adaptive"]));
    assert_eq!(veo3["durations_by_resolution"], json!({"1080p": [8]}));
    assert_eq!(veo3["capabilities"], lite_caps);
    assert_eq!(
        maxes(&veo3),
        [
            ("first_frame".to_owned(), 1),
            ("last_frame".to_owned(), 0),
            ("reference_image".to_owned(), 0),
            ("reference_video".to_owned(), 0),
            ("reference_audio".to_owned(), 0)
        ]
    );

    // Each duration listed is accepted (as far as the quota: a key without credits gets 402),
    // each one left out refused.
    let (_, broke) = veo_key(&relay, 0).await;
    for seconds in 5..=15 {
        let res = post(
            &relay,
            &broke,
            "/v1/videos",
            json!({"model": "model_h3", "prompt": "a lighthouse", "seconds": seconds}),
        )
        .await;
        let listed = h3["durations"]
            .as_array()
            .unwrap()
            .contains(&json!(seconds));
        let expected = if listed {
            "insufficient quota"
        } else {
            "invalid duration"
        };
        assert_eq!(
            res.json()["error"]["message"],
            expected,
            "{seconds} s: {}",
            res.text()
        );
    }
}
