//! What a vendor model can make ([`ModelCaps`]), what a request asks for ([`Demand`]), and
//! the fit of one to the other: the tier and duration a channel is sent ([`fit`]), or the
//! field no channel can serve, with a sentence naming what they can ([`fit_any`]).
//!
//! The checks run in the contract's order (resolution or size, duration, ratio, frames,
//! references), so a rule joining two fields blames the later one: `1080p` with 4 s on a model
//! that makes 1080p only at 8 s is the duration's fault, reference images at 4 s on a model
//! that takes them only at 8 s the references'. A channel without an entry for its model can
//! make anything the relay's own validators accept (another relay, the simulator).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What one vendor model can make, as its vendor documents it (built in per kind, or given in
/// the configuration's `[vendor_models."<vendor model>"]`). An empty list allows any value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelCaps {
    /// Durations it makes, in seconds.
    pub durations: Vec<u32>,
    /// Resolution tiers, named by their short side (`480p`, `720p`, `1080p`, `4k`).
    pub resolutions: Vec<String>,
    /// Aspect ratios (`16:9`, `9:16`, ...).
    pub ratios: Vec<String>,
    /// Durations allowed at a tier, where it allows fewer than `durations`.
    pub durations_by_resolution: BTreeMap<String, Vec<u32>>,
    /// Whether it takes a first frame (image to video).
    pub first_frame: bool,
    /// Whether it takes a last frame.
    pub last_frame: bool,
    /// Tiers at which it takes a last frame, where fewer than `resolutions` (Kling's `pro`
    /// mode only, say).
    pub last_frame_resolutions: Vec<String>,
    /// Durations allowed with a last frame, where fewer than `durations`.
    pub last_frame_durations: Vec<u32>,
    /// Tiers it makes from a first frame only, never from text alone (MiniMax's `512p`).
    pub image_only_resolutions: Vec<String>,
    /// Reference images (subject or style references) one request may give.
    pub reference_images: u32,
    /// Durations allowed with reference images, where fewer than `durations`.
    pub reference_image_durations: Vec<u32>,
    /// Reference videos one request may give.
    pub reference_videos: u32,
    /// Reference audio tracks one request may give.
    pub reference_audios: u32,
    /// Whether its videos have a sound track.
    pub audio: bool,
}

impl Default for ModelCaps {
    /// Text and first frame to video at any duration, tier and ratio, without sound.
    fn default() -> Self {
        ModelCaps {
            durations: Vec::new(),
            resolutions: Vec::new(),
            ratios: Vec::new(),
            durations_by_resolution: BTreeMap::new(),
            first_frame: true,
            last_frame: false,
            last_frame_resolutions: Vec::new(),
            last_frame_durations: Vec::new(),
            image_only_resolutions: Vec::new(),
            reference_images: 0,
            reference_image_durations: Vec::new(),
            reference_videos: 0,
            reference_audios: 0,
            audio: false,
        }
    }
}

impl ModelCaps {
    /// Whether it makes `tier` for a request with (or without) a first frame.
    fn makes_from(&self, tier: &str, first_frame: bool) -> bool {
        first_frame || !contains(&self.image_only_resolutions, tier)
    }

    /// Whether it takes a last frame at `tier` (`None`: it names no tiers).
    fn last_frame_at(&self, tier: Option<&str>) -> bool {
        self.last_frame
            && (self.last_frame_resolutions.is_empty()
                || tier.is_none_or(|t| contains(&self.last_frame_resolutions, t)))
    }
}

/// Whether `tiers` names `tier`, case not looked at.
fn contains(tiers: &[String], tier: &str) -> bool {
    tiers.iter().any(|t| t.eq_ignore_ascii_case(tier))
}

/// What a request asks of the channel that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Demand {
    pub duration: u32,
    /// Second format: the tier asked for.
    pub resolution: Option<String>,
    /// First format: the size asked for (width, height); the tier is the smallest the model
    /// makes that is at least as large.
    pub size: Option<(u32, u32)>,
    /// The ratio chosen (never `adaptive`).
    pub ratio: String,
    pub first_frame: bool,
    pub last_frame: bool,
    pub reference_images: u32,
    pub reference_videos: u32,
    pub reference_audios: u32,
}

/// A field of a request, in the order the fit checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DemandField {
    /// The tier (second format) or the size (first format).
    Resolution,
    Duration,
    Ratio,
    FirstFrame,
    LastFrame,
    ReferenceImages,
    ReferenceVideos,
    ReferenceAudios,
}

/// Why no channel can serve a request: the field, and what the channels can do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: DemandField,
    pub detail: String,
}

/// What a channel is sent for a request it can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// The duration to ask for: the request's, or the next longer one the model makes when
    /// the channel allows it.
    pub duration: u32,
    /// The tier to ask for, when the model names tiers.
    pub resolution: Option<String>,
}

/// One channel's offer for a model: its capabilities (`None`: anything) and whether it may
/// make the next longer duration than asked.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    pub caps: Option<&'a ModelCaps>,
    pub nearest_longer: bool,
}

/// The short side of a tier in pixels: `720p` is 720, `4k` 2160, `2k` 1440; `None` for a
/// name that is neither.
pub fn tier_short_side(tier: &str) -> Option<u32> {
    let t = tier.trim().to_ascii_lowercase();
    match t.as_str() {
        "4k" => Some(2160),
        "2k" => Some(1440),
        _ => t.strip_suffix('p')?.parse().ok(),
    }
}

/// How `caps` serves `demand`, or the first field (in check order) it cannot.
pub fn fit(caps: &ModelCaps, demand: &Demand, nearest_longer: bool) -> Result<Fit, DemandField> {
    let resolution = tier(caps, demand).ok_or(DemandField::Resolution)?;
    let mut allowed = durations_at(caps, resolution.as_deref());
    let mut duration =
        pick_duration(&allowed, demand.duration, nearest_longer).ok_or(DemandField::Duration)?;
    if !caps.ratios.is_empty() && !caps.ratios.iter().any(|r| r == &demand.ratio) {
        return Err(DemandField::Ratio);
    }
    if demand.first_frame && !caps.first_frame {
        return Err(DemandField::FirstFrame);
    }
    if demand.last_frame {
        if !caps.last_frame_at(resolution.as_deref()) {
            return Err(DemandField::LastFrame);
        }
        if !caps.last_frame_durations.is_empty() {
            allowed = narrowed(&allowed, &caps.durations, &caps.last_frame_durations);
            duration = pick_duration(&allowed, demand.duration, nearest_longer)
                .ok_or(DemandField::LastFrame)?;
        }
    }
    if demand.reference_images > 0 {
        if demand.reference_images > caps.reference_images {
            return Err(DemandField::ReferenceImages);
        }
        if !caps.reference_image_durations.is_empty() {
            let with_refs = narrowed(&allowed, &caps.durations, &caps.reference_image_durations);
            duration = pick_duration(&with_refs, demand.duration, nearest_longer)
                .ok_or(DemandField::ReferenceImages)?;
        }
    }
    if demand.reference_videos > caps.reference_videos {
        return Err(DemandField::ReferenceVideos);
    }
    if demand.reference_audios > caps.reference_audios {
        return Err(DemandField::ReferenceAudios);
    }
    Ok(Fit {
        duration,
        resolution,
    })
}

/// The fit of the first offer that can serve `demand` (an offer without capabilities serves
/// anything as asked), or the field the offers that got furthest stop at, with a sentence
/// naming what they can do for it.
pub fn fit_any(offers: &[Offer<'_>], demand: &Demand) -> Result<Fit, Refusal> {
    let mut furthest: Option<DemandField> = None;
    let mut stopped: Vec<(&ModelCaps, bool)> = Vec::new();
    for offer in offers {
        let Some(caps) = offer.caps else {
            return Ok(Fit {
                duration: demand.duration,
                resolution: demand.resolution.clone(),
            });
        };
        match fit(caps, demand, offer.nearest_longer) {
            Ok(fit) => return Ok(fit),
            Err(field) if furthest.is_none_or(|f| field > f) => {
                furthest = Some(field);
                stopped.clear();
                stopped.push((caps, offer.nearest_longer));
            }
            Err(field) if furthest == Some(field) => stopped.push((caps, offer.nearest_longer)),
            Err(_) => {}
        }
    }
    let field = furthest.unwrap_or(DemandField::Resolution);
    Err(Refusal {
        field,
        detail: describe(field, &stopped, demand),
    })
}

/// The durations of `allowed` that `only` has too; `allowed` empty stands for any of `all`
/// (or any at all, when `all` is empty too).
fn narrowed(allowed: &[u32], all: &[u32], only: &[u32]) -> Vec<u32> {
    if allowed.is_empty() && all.is_empty() {
        return only.to_vec();
    }
    let from = if allowed.is_empty() { all } else { allowed };
    from.iter().copied().filter(|d| only.contains(d)).collect()
}

impl Offer<'_> {
    /// Whether it makes tier `tier` (any, when its model names none).
    pub fn makes_tier(&self, tier: &str) -> bool {
        self.caps.is_none_or(|c| {
            c.resolutions.is_empty() || c.resolutions.iter().any(|r| r.eq_ignore_ascii_case(tier))
        })
    }

    /// Whether it makes a first-format `width` x `height` (a tier at least as large).
    pub fn makes_size(&self, width: u32, height: u32) -> bool {
        self.caps.is_none_or(|c| {
            let demand = Demand {
                size: Some((width, height)),
                ..Demand::default()
            };
            tier(c, &demand).is_some()
        })
    }

    /// Whether it makes ratio `ratio`.
    pub fn makes_ratio(&self, ratio: &str) -> bool {
        self.caps
            .is_none_or(|c| c.ratios.is_empty() || c.ratios.iter().any(|r| r == ratio))
    }

    /// Whether it serves `duration` at `tier` (`None`: at some tier it makes), exactly or by
    /// the next longer one where it may.
    pub fn makes_duration(&self, duration: u32, tier: Option<&str>) -> bool {
        let Some(c) = self.caps else {
            return true;
        };
        let at = |t: Option<&str>| {
            pick_duration(&durations_at(c, t), duration, self.nearest_longer).is_some()
        };
        match tier {
            Some(t) => self.makes_tier(t) && at(Some(t)),
            None if c.resolutions.is_empty() => at(None),
            None => c.resolutions.iter().any(|r| at(Some(r))),
        }
    }

    /// How many of `field` (a frame or a kind of reference) one request may give it; `None`
    /// for a field that is not counted. An offer without capabilities takes any number.
    pub fn takes(&self, field: DemandField) -> Option<u32> {
        let Some(c) = self.caps else {
            return Some(u32::MAX);
        };
        Some(match field {
            DemandField::FirstFrame => u32::from(c.first_frame),
            DemandField::LastFrame => u32::from(c.last_frame),
            DemandField::ReferenceImages => c.reference_images,
            DemandField::ReferenceVideos => c.reference_videos,
            DemandField::ReferenceAudios => c.reference_audios,
            DemandField::Resolution | DemandField::Duration | DemandField::Ratio => return None,
        })
    }
}

/// What the vendor models of several channels can make together: each list the union of
/// theirs (empty when one of them allows any value), each count the largest, each yes/no
/// `true` when one of them can. `None` for no models at all.
pub fn merge<'a>(all: impl IntoIterator<Item = &'a ModelCaps>) -> Option<ModelCaps> {
    let all: Vec<&ModelCaps> = all.into_iter().collect();
    if all.is_empty() {
        return None;
    }
    let durations = union(all.iter().map(|c| c.durations.clone()));
    let mut resolutions = union_in_order(all.iter().map(|c| &c.resolutions));
    resolutions.sort_by_key(|r| tier_short_side(r).unwrap_or(u32::MAX));
    let mut durations_by_resolution = BTreeMap::new();
    for t in &resolutions {
        let makers = all.iter().filter(|c| {
            c.resolutions.is_empty() || c.resolutions.iter().any(|r| r.eq_ignore_ascii_case(t))
        });
        let at = union(makers.map(|c| durations_at(c, Some(t))));
        if !at.is_empty() && at != durations {
            durations_by_resolution.insert(t.clone(), at);
        }
    }
    let with_refs: Vec<&&ModelCaps> = all.iter().filter(|c| c.reference_images > 0).collect();
    let mut last_frame_resolutions = union_in_order(
        all.iter()
            .filter(|c| c.last_frame)
            .map(|c| &c.last_frame_resolutions),
    );
    last_frame_resolutions.sort_by_key(|r| tier_short_side(r).unwrap_or(u32::MAX));
    // A tier is made from a first frame only when every model that makes it says so.
    let image_only: Vec<String> = resolutions
        .iter()
        .filter(|t| {
            all.iter()
                .filter(|c| c.resolutions.is_empty() || contains(&c.resolutions, t))
                .all(|c| !c.makes_from(t, false))
        })
        .cloned()
        .collect();
    Some(ModelCaps {
        durations,
        resolutions,
        ratios: union_in_order(all.iter().map(|c| &c.ratios)),
        durations_by_resolution,
        first_frame: all.iter().any(|c| c.first_frame),
        last_frame: all.iter().any(|c| c.last_frame),
        last_frame_resolutions,
        last_frame_durations: union(
            all.iter()
                .filter(|c| c.last_frame)
                .map(|c| c.last_frame_durations.clone()),
        ),
        image_only_resolutions: image_only,
        reference_images: all.iter().map(|c| c.reference_images).max().unwrap_or(0),
        reference_image_durations: union(
            with_refs
                .iter()
                .map(|c| c.reference_image_durations.clone()),
        ),
        reference_videos: all.iter().map(|c| c.reference_videos).max().unwrap_or(0),
        reference_audios: all.iter().map(|c| c.reference_audios).max().unwrap_or(0),
        audio: all.iter().any(|c| c.audio),
    })
}

/// The sorted union of lists where an empty list allows anything: empty when one is.
fn union(lists: impl IntoIterator<Item = Vec<u32>>) -> Vec<u32> {
    let mut all = BTreeSet::new();
    for list in lists {
        if list.is_empty() {
            return Vec::new();
        }
        all.extend(list);
    }
    all.into_iter().collect()
}

/// [`union`] of names, in the order they first appear (compared without case).
fn union_in_order<'a>(lists: impl IntoIterator<Item = &'a Vec<String>>) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for list in lists {
        if list.is_empty() {
            return Vec::new();
        }
        for name in list {
            if !all.iter().any(|a| a.eq_ignore_ascii_case(name)) {
                all.push(name.clone());
            }
        }
    }
    all
}

/// The tier `caps` makes for `demand`: the one asked for (second format), or the smallest at
/// least the size's short side (first format), one that takes the request's last frame when
/// there is such; never a tier it makes from a first frame only for a request without one.
/// `Some(None)` when the model names no tiers.
pub fn tier(caps: &ModelCaps, demand: &Demand) -> Option<Option<String>> {
    if caps.resolutions.is_empty() {
        return Some(demand.resolution.clone());
    }
    let usable = |r: &&String| caps.makes_from(r, demand.first_frame);
    if let Some(asked) = &demand.resolution {
        return caps
            .resolutions
            .iter()
            .find(|r| r.eq_ignore_ascii_case(asked))
            .filter(usable)
            .map(|r| Some(r.clone()));
    }
    let mut candidates: Vec<(u32, &String)> = match demand.size {
        Some((w, h)) => caps
            .resolutions
            .iter()
            .filter(usable)
            .filter_map(|r| Some((tier_short_side(r)?, r)))
            .filter(|(side, _)| *side >= w.min(h))
            .collect(),
        // Neither: the model's tiers in its order.
        None => caps
            .resolutions
            .iter()
            .filter(usable)
            .map(|r| (0, r))
            .collect(),
    };
    candidates.sort_by_key(|(side, _)| *side);
    let takes_last = |(_, r): &&(u32, &String)| caps.last_frame_at(Some(r));
    let pick = if demand.last_frame {
        candidates.iter().find(takes_last).or(candidates.first())
    } else {
        candidates.first()
    };
    pick.map(|(_, r)| Some((*r).clone()))
}

/// The durations `caps` makes at `tier` (empty: any).
fn durations_at(caps: &ModelCaps, tier: Option<&str>) -> Vec<u32> {
    let at_tier = tier.and_then(|t| {
        caps.durations_by_resolution
            .iter()
            .find(|(r, _)| r.eq_ignore_ascii_case(t))
            .map(|(_, d)| d)
    });
    match (caps.durations.is_empty(), at_tier) {
        (true, None) => Vec::new(),
        (true, Some(d)) => d.clone(),
        (false, None) => caps.durations.clone(),
        (false, Some(d)) => caps
            .durations
            .iter()
            .copied()
            .filter(|x| d.contains(x))
            .collect(),
    }
}

/// `asked` when `allowed` has it (or is empty), else the shortest longer one when
/// `nearest_longer`.
fn pick_duration(allowed: &[u32], asked: u32, nearest_longer: bool) -> Option<u32> {
    if allowed.is_empty() || allowed.contains(&asked) {
        return Some(asked);
    }
    if !nearest_longer {
        return None;
    }
    allowed.iter().copied().filter(|d| *d > asked).min()
}

/// "a, b or c".
fn one_of<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    match items.as_slice() {
        [] => "none".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// What the channels that stopped at `field` can do for it.
fn describe(field: DemandField, stopped: &[(&ModelCaps, bool)], demand: &Demand) -> String {
    let caps = || stopped.iter().map(|(c, _)| *c);
    let nearest = stopped.iter().any(|(_, n)| *n);
    match field {
        DemandField::Resolution => {
            let tiers = |image_only: bool| -> BTreeSet<(u32, String)> {
                caps()
                    .flat_map(|c| {
                        c.resolutions
                            .iter()
                            .filter(move |r| c.makes_from(r, demand.first_frame) != image_only)
                    })
                    .map(|r| (tier_short_side(r).unwrap_or(0), r.clone()))
                    .collect()
            };
            let offered = one_of(tiers(false).into_iter().map(|(_, r)| r));
            let from_image = tiers(true);
            let but = if from_image.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} from a first frame only)",
                    one_of(from_image.into_iter().map(|(_, r)| r))
                )
            };
            match (&demand.resolution, demand.size) {
                (Some(r), _) => {
                    format!("resolution {r}: the channels of this model make {offered}{but}")
                }
                (None, Some((w, h))) => format!(
                    "size {w}x{h}: the channels of this model make {offered} at most, no larger{but}"
                ),
                (None, None) => format!("the channels of this model make {offered}{but}"),
            }
        }
        DemandField::Duration => {
            let mut at = BTreeSet::new();
            let mut tiers = BTreeSet::new();
            for c in caps() {
                let t = tier(c, demand).flatten();
                at.extend(durations_at(c, t.as_deref()));
                tiers.extend(t);
            }
            let tier = match (tiers.len(), tiers.first()) {
                (1, Some(t)) if demand.resolution.is_some() => format!(" at {t}"),
                _ => String::new(),
            };
            let longer = if nearest {
                " (or the next longer one, for some)"
            } else {
                ""
            };
            format!(
                "duration {} s: the channels of this model make {} s{tier}{longer}",
                demand.duration,
                one_of(at)
            )
        }
        DemandField::Ratio => {
            let ratios: BTreeSet<&str> = caps()
                .flat_map(|c| c.ratios.iter().map(String::as_str))
                .collect();
            format!(
                "ratio {}: the channels of this model make {}",
                demand.ratio,
                one_of(ratios)
            )
        }
        DemandField::FirstFrame => {
            "first frame: the channels of this model make videos from text only".to_owned()
        }
        DemandField::LastFrame => {
            let takers: Vec<&ModelCaps> = caps().filter(|c| c.last_frame).collect();
            if takers.is_empty() {
                return "last frame: the channels of this model take none".to_owned();
            }
            let tiers: BTreeSet<(u32, String)> = takers
                .iter()
                .filter(|c| !c.last_frame_resolutions.is_empty())
                .flat_map(|c| c.last_frame_resolutions.iter())
                .map(|r| (tier_short_side(r).unwrap_or(0), r.clone()))
                .collect();
            let durations: BTreeSet<u32> = takers
                .iter()
                .flat_map(|c| c.last_frame_durations.iter().copied())
                .collect();
            let mut only = Vec::new();
            if !tiers.is_empty() {
                only.push(format!("at {}", one_of(tiers.into_iter().map(|(_, r)| r))));
            }
            if !durations.is_empty() {
                only.push(format!("for {} s", one_of(durations)));
            }
            format!(
                "last frame: the channels of this model take one only {}",
                only.join(", ")
            )
        }
        DemandField::ReferenceImages => {
            let most = caps().map(|c| c.reference_images).max().unwrap_or(0);
            let durations: BTreeSet<u32> = caps()
                .flat_map(|c| c.reference_image_durations.iter().copied())
                .collect();
            if demand.reference_images <= most && !durations.is_empty() {
                format!(
                    "reference images: the channels of this model take them only at {} s, not {} s",
                    one_of(durations),
                    demand.duration
                )
            } else {
                format!(
                    "{} reference images: the channels of this model take at most {most}",
                    demand.reference_images
                )
            }
        }
        DemandField::ReferenceVideos => format!(
            "{} reference videos: the channels of this model take at most {}",
            demand.reference_videos,
            caps().map(|c| c.reference_videos).max().unwrap_or(0)
        ),
        DemandField::ReferenceAudios => format!(
            "{} reference audio tracks: the channels of this model take at most {}",
            demand.reference_audios,
            caps().map(|c| c.reference_audios).max().unwrap_or(0)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Veo 3.1 on the Gemini API (docs/channels.md).
    fn veo() -> ModelCaps {
        ModelCaps {
            durations: vec![4, 6, 8],
            resolutions: vec!["720p".into(), "1080p".into(), "4k".into()],
            ratios: vec!["16:9".into(), "9:16".into()],
            durations_by_resolution: [("1080p".into(), vec![8]), ("4k".into(), vec![8])].into(),
            first_frame: true,
            last_frame: true,
            reference_images: 3,
            reference_image_durations: vec![8],
            audio: true,
            ..ModelCaps::default()
        }
    }

    fn demand(duration: u32, resolution: &str, ratio: &str) -> Demand {
        Demand {
            duration,
            resolution: Some(resolution.into()),
            ratio: ratio.into(),
            ..Demand::default()
        }
    }

    fn check(
        caps: &ModelCaps,
        d: Demand,
        nearest: bool,
        expected: Result<(u32, &str), DemandField>,
    ) {
        let got = fit(caps, &d, nearest).map(|f| (f.duration, f.resolution.unwrap_or_default()));
        let expected = expected.map(|(d, r)| (d, r.to_owned()));
        assert_eq!(got, expected, "{d:?}");
    }

    #[test]
    fn each_field_in_the_contracts_order() {
        let v = veo();
        check(&v, demand(8, "720p", "16:9"), false, Ok((8, "720p")));
        check(&v, demand(4, "720p", "9:16"), false, Ok((4, "720p")));
        check(
            &v,
            demand(4, "480p", "16:9"),
            false,
            Err(DemandField::Resolution),
        );
        check(
            &v,
            demand(5, "720p", "16:9"),
            false,
            Err(DemandField::Duration),
        );
        check(&v, demand(5, "720p", "16:9"), true, Ok((6, "720p")));
        // 1080p only at 8 s: the later field, the duration, is at fault.
        check(
            &v,
            demand(4, "1080p", "16:9"),
            false,
            Err(DemandField::Duration),
        );
        check(&v, demand(4, "1080p", "16:9"), true, Ok((8, "1080p")));
        check(&v, demand(8, "4k", "1:1"), false, Err(DemandField::Ratio));
        let mut refs = demand(4, "720p", "16:9");
        refs.reference_images = 2;
        check(&v, refs.clone(), false, Err(DemandField::ReferenceImages));
        check(&v, refs.clone(), true, Ok((8, "720p")));
        refs.duration = 8;
        check(&v, refs.clone(), false, Ok((8, "720p")));
        refs.reference_images = 4;
        check(&v, refs, false, Err(DemandField::ReferenceImages));
        let mut audio = demand(8, "720p", "16:9");
        audio.reference_audios = 1;
        check(&v, audio, false, Err(DemandField::ReferenceAudios));
        let mut text_only = v.clone();
        text_only.first_frame = false;
        let mut frames = demand(8, "720p", "16:9");
        frames.first_frame = true;
        check(
            &text_only,
            frames.clone(),
            false,
            Err(DemandField::FirstFrame),
        );
        frames.last_frame = true;
        let mut no_last = v.clone();
        no_last.last_frame = false;
        check(&no_last, frames, false, Err(DemandField::LastFrame));
    }

    #[test]
    fn a_first_format_size_takes_the_smallest_tier_at_least_as_large() {
        let v = veo();
        let sized = |w, h, d| Demand {
            duration: d,
            size: Some((w, h)),
            ratio: "16:9".into(),
            ..Demand::default()
        };
        check(&v, sized(64, 36, 8), false, Ok((8, "720p")));
        check(&v, sized(1280, 720, 6), false, Ok((6, "720p")));
        check(&v, sized(1920, 1080, 8), false, Ok((8, "1080p")));
        check(&v, sized(1920, 1080, 6), false, Err(DemandField::Duration));
        check(
            &v,
            sized(4096, 2304, 8),
            false,
            Err(DemandField::Resolution),
        );
        assert_eq!(tier_short_side("4k"), Some(2160));
        assert_eq!(tier_short_side("768P"), Some(768));
        assert_eq!(tier_short_side("big"), None);
    }

    /// Kling's kling-v2-6: a last frame in `pro` mode (1080p) only.
    fn pro_last() -> ModelCaps {
        ModelCaps {
            durations: vec![5, 10],
            resolutions: vec!["720p".into(), "1080p".into()],
            last_frame: true,
            last_frame_resolutions: vec!["1080p".into()],
            ..ModelCaps::default()
        }
    }

    /// MiniMax's Hailuo-02: 512p from a first frame only, a last frame at 768p and 1080p.
    fn hailuo_02() -> ModelCaps {
        ModelCaps {
            durations: vec![6, 10],
            resolutions: vec!["512p".into(), "768p".into(), "1080p".into()],
            durations_by_resolution: [("1080p".into(), vec![6])].into(),
            last_frame: true,
            last_frame_resolutions: vec!["768p".into(), "1080p".into()],
            image_only_resolutions: vec!["512p".into()],
            ..ModelCaps::default()
        }
    }

    fn frames(mut d: Demand, first: bool, last: bool) -> Demand {
        d.first_frame = first;
        d.last_frame = last;
        d
    }

    #[test]
    fn a_last_frame_may_be_taken_at_some_tiers_and_durations_only() {
        let pro = pro_last();
        let both = |d| frames(d, true, true);
        check(
            &pro,
            both(demand(5, "1080p", "16:9")),
            false,
            Ok((5, "1080p")),
        );
        // At 720p (std mode) the last frame is the later field of the pair, at fault.
        check(
            &pro,
            both(demand(5, "720p", "16:9")),
            false,
            Err(DemandField::LastFrame),
        );
        check(
            &pro,
            frames(demand(5, "720p", "16:9"), true, false),
            false,
            Ok((5, "720p")),
        );
        // A first-format size picks the tier that takes the last frame, not the smallest.
        let sized = |w, h| Demand {
            duration: 5,
            size: Some((w, h)),
            ratio: "16:9".into(),
            ..Demand::default()
        };
        check(&pro, both(sized(1280, 720)), false, Ok((5, "1080p")));
        check(&pro, sized(1280, 720), false, Ok((5, "720p")));

        // kling-v1: a last frame at 5 s only.
        let v1 = ModelCaps {
            durations: vec![5, 10],
            resolutions: vec!["720p".into()],
            last_frame: true,
            last_frame_durations: vec![5],
            ..ModelCaps::default()
        };
        check(&v1, both(demand(5, "720p", "16:9")), false, Ok((5, "720p")));
        check(
            &v1,
            both(demand(10, "720p", "16:9")),
            false,
            Err(DemandField::LastFrame),
        );
        check(&v1, demand(10, "720p", "16:9"), false, Ok((10, "720p")));

        let offers = |c| {
            [Offer {
                caps: Some(c),
                nearest_longer: false,
            }]
        };
        let refused = fit_any(&offers(&pro), &both(demand(5, "720p", "16:9"))).unwrap_err();
        assert_eq!(
            refused.detail,
            "last frame: the channels of this model take one only at 1080p"
        );
        let refused = fit_any(&offers(&v1), &both(demand(10, "720p", "16:9"))).unwrap_err();
        assert_eq!(
            refused.detail,
            "last frame: the channels of this model take one only for 5 s"
        );
    }

    #[test]
    fn a_tier_made_from_a_first_frame_only_is_not_made_from_text() {
        let two = hailuo_02();
        let image = |d| frames(d, true, false);
        check(
            &two,
            image(demand(6, "512p", "16:9")),
            false,
            Ok((6, "512p")),
        );
        check(
            &two,
            demand(6, "512p", "16:9"),
            false,
            Err(DemandField::Resolution),
        );
        // First and last frames: not at 512p.
        check(
            &two,
            frames(demand(6, "512p", "16:9"), true, true),
            false,
            Err(DemandField::LastFrame),
        );
        check(
            &two,
            frames(demand(6, "768p", "16:9"), true, true),
            false,
            Ok((6, "768p")),
        );
        // A small size: 512p from a first frame, 768p from text or with a last frame.
        let sized = |first, last| Demand {
            duration: 6,
            size: Some((640, 360)),
            ratio: "16:9".into(),
            first_frame: first,
            last_frame: last,
            ..Demand::default()
        };
        check(&two, sized(true, false), false, Ok((6, "512p")));
        check(&two, sized(false, false), false, Ok((6, "768p")));
        check(&two, sized(true, true), false, Ok((6, "768p")));
        let refused = fit_any(
            &[Offer {
                caps: Some(&two),
                nearest_longer: false,
            }],
            &demand(6, "512p", "16:9"),
        )
        .unwrap_err();
        assert_eq!(
            refused.detail,
            "resolution 512p: the channels of this model make 768p or 1080p (512p from a first frame only)"
        );
    }

    #[test]
    fn the_furthest_offers_name_what_they_can_do() {
        let v = veo();
        let mut lite = veo();
        lite.resolutions = vec!["720p".into(), "1080p".into()];
        lite.reference_images = 0;
        let offers = [
            Offer {
                caps: Some(&v),
                nearest_longer: false,
            },
            Offer {
                caps: Some(&lite),
                nearest_longer: false,
            },
        ];
        let refused = fit_any(&offers, &demand(5, "720p", "16:9")).unwrap_err();
        assert_eq!(refused.field, DemandField::Duration);
        assert_eq!(
            refused.detail,
            "duration 5 s: the channels of this model make 4, 6 or 8 s at 720p"
        );
        let refused = fit_any(&offers, &demand(4, "1080p", "16:9")).unwrap_err();
        assert_eq!(
            refused.detail,
            "duration 4 s: the channels of this model make 8 s at 1080p"
        );
        let refused = fit_any(&offers, &demand(8, "480p", "16:9")).unwrap_err();
        assert_eq!(refused.field, DemandField::Resolution);
        assert_eq!(
            refused.detail,
            "resolution 480p: the channels of this model make 720p, 1080p or 4k"
        );
        let refused = fit_any(&offers, &demand(8, "720p", "4:3")).unwrap_err();
        assert_eq!(
            refused.detail,
            "ratio 4:3: the channels of this model make 16:9 or 9:16"
        );
        let mut refs = demand(4, "720p", "16:9");
        refs.reference_images = 1;
        let refused = fit_any(&offers, &refs).unwrap_err();
        assert_eq!(refused.field, DemandField::ReferenceImages);
        assert!(
            refused.detail.contains("only at 8 s, not 4 s"),
            "{refused:?}"
        );
        // 4k with refs: only the full model gets that far, and it serves it at 8 s.
        refs.duration = 8;
        refs.resolution = Some("4k".into());
        assert_eq!(fit_any(&offers, &refs).unwrap().duration, 8);
        // A channel without capabilities serves anything as asked.
        let any = [Offer {
            caps: None,
            nearest_longer: false,
        }];
        assert_eq!(
            fit_any(&any, &demand(13, "480p", "21:9")),
            Ok(Fit {
                duration: 13,
                resolution: Some("480p".into())
            })
        );
    }

    #[test]
    fn offers_say_field_by_field_what_they_make() {
        let v = veo();
        let exact = Offer {
            caps: Some(&v),
            nearest_longer: false,
        };
        let longer = Offer {
            caps: Some(&v),
            nearest_longer: true,
        };
        assert!(exact.makes_tier("1080P") && !exact.makes_tier("480p"));
        assert!(exact.makes_size(1920, 1080) && !exact.makes_size(4096, 2304));
        assert!(exact.makes_ratio("9:16") && !exact.makes_ratio("1:1"));
        assert!(exact.makes_duration(4, None) && !exact.makes_duration(5, None));
        assert!(!exact.makes_duration(4, Some("1080p")) && exact.makes_duration(8, Some("4k")));
        assert!(longer.makes_duration(5, None) && longer.makes_duration(4, Some("1080p")));
        assert!(!longer.makes_duration(9, None));
        assert_eq!(exact.takes(DemandField::ReferenceImages), Some(3));
        assert_eq!(exact.takes(DemandField::LastFrame), Some(1));
        assert_eq!(exact.takes(DemandField::ReferenceAudios), Some(0));
        assert_eq!(exact.takes(DemandField::Duration), None);
        let any = Offer {
            caps: None,
            nearest_longer: false,
        };
        assert!(any.makes_tier("8k") && any.makes_duration(99, Some("8k")));
        assert_eq!(any.takes(DemandField::ReferenceVideos), Some(u32::MAX));
    }

    #[test]
    fn merged_caps_keep_where_a_last_frame_is_taken_and_what_is_made_from_images_only() {
        let merged = merge([&pro_last(), &hailuo_02()]).unwrap();
        assert_eq!(merged.last_frame_resolutions, ["768p", "1080p"]);
        assert!(merged.last_frame_durations.is_empty());
        // 512p is made by Hailuo 02 alone, from a first frame only.
        assert_eq!(merged.image_only_resolutions, ["512p"]);
        // A model taking a last frame anywhere, or making 512p from text, lifts the limit.
        let mut any = pro_last();
        any.last_frame_resolutions.clear();
        any.resolutions.push("512p".into());
        let merged = merge([&any, &hailuo_02()]).unwrap();
        assert!(merged.last_frame_resolutions.is_empty());
        assert!(merged.image_only_resolutions.is_empty());
        // Models that take no last frame say nothing of where.
        let none = ModelCaps::default();
        assert!(merge([&none]).unwrap().last_frame_resolutions.is_empty());
    }

    #[test]
    fn merged_caps_are_what_one_of_them_makes() {
        let v = veo();
        let mut other = ModelCaps {
            durations: vec![5, 10],
            resolutions: vec!["480p".into(), "1080p".into()],
            ratios: vec!["1:1".into(), "16:9".into()],
            reference_audios: 1,
            ..ModelCaps::default()
        };
        let merged = merge([&v, &other]).unwrap();
        assert_eq!(merged.durations, [4, 5, 6, 8, 10]);
        assert_eq!(merged.resolutions, ["480p", "720p", "1080p", "4k"]);
        assert_eq!(merged.ratios, ["16:9", "9:16", "1:1"]);
        // 1080p: veo's 8 s, the other's 5 and 10; 4k: veo's 8 s only.
        assert_eq!(
            merged.durations_by_resolution,
            [
                ("480p".to_owned(), vec![5, 10]),
                ("720p".to_owned(), vec![4, 6, 8]),
                ("1080p".to_owned(), vec![5, 8, 10]),
                ("4k".to_owned(), vec![8]),
            ]
            .into()
        );
        assert!(merged.first_frame && merged.last_frame && merged.audio);
        assert_eq!(
            (
                merged.reference_images,
                merged.reference_audios,
                merged.reference_videos
            ),
            (3, 1, 0)
        );
        assert_eq!(merged.reference_image_durations, [8]);
        // A model that makes any duration: so do they together.
        other.durations.clear();
        let merged = merge([&v, &other]).unwrap();
        assert!(merged.durations.is_empty());
        assert_eq!(merge([&v]).as_ref(), Some(&v));
        assert_eq!(merge(std::iter::empty()), None);
    }
}
