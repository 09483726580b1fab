//! The copy test itself: every card's link under load and its host copies, then every ordered
//! pair's topology, P2P status and card-to-card copy; each copy checked bit for bit.

use std::ops::ControlFlow;
use std::time::Instant;

use super::bench::{CopyBench, CopyChecked, Route, open_bench};
use super::deadline::{COPY_DEADLINE, DeadlineBench};
use super::expect::{below_max, faster, host_gb_per_s, pair_gb_per_s, verdict_of};
use super::sentences;
use crate::device::{Backend, BackendOptions, open_backend};
use crate::stability::compute::ComputeError;
use gputune_formats::card::GpuIdentity;
use gputune_formats::reports::links::{
    CardLinks, CopyPath, CopyResult, LINKS_REPORT_FORMAT, LinkVerdict, LinksOutcome, LinksReport,
    PairLinks, PcieLink,
};

/// How big and how many copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinksOptions {
    /// Bytes of one copy.
    pub size_bytes: u64,
    /// Timed copies each way (after one that loads the link).
    pub passes: u32,
}

impl Default for LinksOptions {
    /// 256 MiB, three times: about 10 ms a copy on Gen 4 x16, long past the DMA's start-up.
    fn default() -> LinksOptions {
        LinksOptions {
            size_bytes: 256 << 20,
            passes: 3,
        }
    }
}

/// Where the test is: `done` of `total` cards and pairs, and what it does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinksProgress {
    pub done: u32,
    pub total: u32,
    /// "GPU 3: host↔device", "GPU 2 → GPU 5".
    pub doing: String,
}

/// Tests the links of `gpus` (NVML indices): opens the copy bench that fits the cards (the
/// simulated one for simulated cards, CUDA's otherwise) and runs [`run_links`]. Nothing is
/// written to any card's settings. The one entry point for the CLI and the window. `progress`
/// is told before each card and pair; its `Break(why)` stops the test there (between copies).
pub fn test_links(
    backend: &mut dyn Backend,
    gpus: &[u32],
    options: &LinksOptions,
    progress: &mut dyn FnMut(&LinksProgress) -> ControlFlow<String>,
) -> LinksReport {
    let started = Instant::now();
    let identities: Result<Vec<GpuIdentity>, _> =
        gpus.iter().map(|gpu| backend.identity(*gpu)).collect();
    let opened = identities
        .map_err(|error| error.to_string())
        .and_then(|cards| {
            open_bench(&cards)
                .map(|bench| (cards, bench))
                .map_err(|error| error.to_string())
        });
    match opened {
        Ok((cards, bench)) => {
            let mut bench = DeadlineBench::start(bench, COPY_DEADLINE);
            run_links(backend, &cards, &mut bench, options, progress)
        }
        Err(message) => untested(options, message, started),
    }
}

/// [`test_links`] on a device handle of its own, opened from `options` (a front end without
/// one, such as the window's link thread: the test only reads the cards and copies).
pub fn test_links_opening(
    options: &BackendOptions,
    gpus: &[u32],
    links_options: &LinksOptions,
    progress: &mut dyn FnMut(&LinksProgress) -> ControlFlow<String>,
) -> LinksReport {
    match open_backend(options) {
        Ok(mut opened) => test_links(opened.backend.as_mut(), gpus, links_options, progress),
        Err(error) => untested(links_options, error.to_string(), Instant::now()),
    }
}

/// The copy test on `cards` through `bench`, reporting as it goes.
pub fn run_links(
    backend: &mut dyn Backend,
    cards: &[GpuIdentity],
    bench: &mut dyn CopyBench,
    options: &LinksOptions,
    progress: &mut dyn FnMut(&LinksProgress) -> ControlFlow<String>,
) -> LinksReport {
    let started = Instant::now();
    if let Err(error) = bench.prepare(options.size_bytes) {
        return untested(options, error.to_string(), started);
    }
    let pair_count = cards.len() * cards.len().saturating_sub(1);
    let total = (cards.len() + pair_count) as u32;
    let mut done = 0;
    let mut stopped = None;
    // Told before each card and pair; a stop asked is kept, with how far the test got.
    let mut step = |doing: String| -> bool {
        if let ControlFlow::Break(why) = progress(&LinksProgress { done, total, doing }) {
            stopped = Some(format!("{why}, after {done} of {total} cards and pairs"));
            return false;
        }
        done += 1;
        true
    };
    let mut gpus = Vec::new();
    let mut pairs = Vec::new();
    'test: {
        for card in cards {
            if !step(format!("GPU {}: host↔device", card.index)) {
                break 'test;
            }
            gpus.push(test_card(backend, bench, card, options));
        }
        for from in cards {
            for to in cards.iter().filter(|to| to.index != from.index) {
                if !step(format!("GPU {} → GPU {}", from.index, to.index)) {
                    break 'test;
                }
                pairs.push(test_pair(
                    backend,
                    bench,
                    &gpus,
                    (from.index, to.index),
                    options,
                ));
            }
        }
        let _ = progress(&LinksProgress {
            done: total,
            total,
            doing: "done".to_string(),
        });
    }
    let verdicts = || {
        gpus.iter()
            .map(|card| card.verdict)
            .chain(pairs.iter().map(|pair| pair.verdict))
    };
    let outcome = if verdicts().any(|verdict| verdict == LinkVerdict::WrongData) {
        LinksOutcome::WrongData
    } else if gpus.is_empty()
        || stopped.is_some()
        || verdicts().any(|verdict| verdict == LinkVerdict::NotTested)
    {
        LinksOutcome::NotTested
    } else {
        LinksOutcome::AllRight
    };
    LinksReport {
        format_version: LINKS_REPORT_FORMAT,
        outcome,
        runtime: bench.runtime(),
        size_bytes: options.size_bytes - options.size_bytes % 16,
        passes: options.passes,
        sentences: stopped
            .iter()
            .map(|why| format!("Stopped before its end ({why}): what follows is of those tested."))
            .chain(sentences::say(&gpus, &pairs))
            .collect(),
        gpus,
        pairs,
        ran_s: started.elapsed().as_secs_f64(),
        stopped,
    }
}

/// A report of nothing tested, and why.
fn untested(options: &LinksOptions, why: String, started: Instant) -> LinksReport {
    LinksReport {
        format_version: LINKS_REPORT_FORMAT,
        outcome: LinksOutcome::NotTested,
        runtime: String::new(),
        size_bytes: options.size_bytes,
        passes: options.passes,
        gpus: Vec::new(),
        pairs: Vec::new(),
        sentences: vec![format!("Nothing was tested: {why}")],
        ran_s: started.elapsed().as_secs_f64(),
        stopped: None,
    }
}

/// One direction's copies added up.
struct Tally {
    path: CopyPath,
    bytes: u64,
    copies: u32,
    elapsed_s: f64,
    wrong_words: u64,
    first_wrong_offset_bytes: Option<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            path: CopyPath::Direct,
            bytes: 0,
            copies: 0,
            elapsed_s: 0.0,
            wrong_words: 0,
            first_wrong_offset_bytes: None,
        }
    }

    /// A copy checked, its time counted when `timed`.
    fn add(&mut self, copy: &CopyChecked, timed: bool) {
        self.path = copy.path;
        self.wrong_words += copy.wrong_words;
        if self.first_wrong_offset_bytes.is_none() {
            self.first_wrong_offset_bytes = copy.first_wrong_offset_bytes;
        }
        if timed {
            self.bytes = copy.bytes;
            self.copies += 1;
            self.elapsed_s += copy.elapsed_s;
        }
    }

    fn result(&self, expected_gb_per_s: Option<f64>) -> CopyResult {
        let total_bytes = self.bytes as f64 * f64::from(self.copies);
        CopyResult {
            path: self.path,
            bytes: self.bytes,
            copies: self.copies,
            gb_per_s: if self.elapsed_s > 0.0 {
                hundredths(total_bytes / self.elapsed_s / 1e9)
            } else {
                0.0
            },
            expected_gb_per_s: expected_gb_per_s.map(hundredths),
            wrong_words: self.wrong_words,
            first_wrong_offset_bytes: self.first_wrong_offset_bytes,
        }
    }
}

/// A rate to 0.01 GB/s: what a rate measured to a few per cent can say (and what reads back
/// from JSON as the same number).
fn hundredths(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// How long a card's copies should take on its best link, ms, with room to spare: how long
/// the simulated link is told copies run.
fn planned_ms(options: &LinksOptions, link: Option<PcieLink>) -> u64 {
    let rate = link.map_or(1.0, host_gb_per_s).max(1.0);
    let copies = f64::from(options.passes * 2 + 1);
    (copies * options.size_bytes as f64 / (rate * 1e9) * 2000.0) as u64 + 1000
}

fn test_card(
    backend: &mut dyn Backend,
    bench: &mut dyn CopyBench,
    card: &GpuIdentity,
    options: &LinksOptions,
) -> CardLinks {
    let gpu = card.index;
    let idle = backend.pcie_link(gpu).unwrap_or_default();
    let mut links = CardLinks {
        gpu_index: gpu,
        gpu_uuid: card.uuid.clone(),
        gpu_name: card.name.clone(),
        link_idle: idle.current,
        link_loaded: None,
        link_max: idle.max,
        host_to_device: None,
        device_to_host: None,
        verdict: LinkVerdict::NotTested,
        note: String::new(),
    };
    if let Err(error) = card_copies(backend, bench, &mut links, options) {
        links.verdict = LinkVerdict::NotTested;
        links.note = error.to_string();
        return links;
    }
    let results: Vec<&CopyResult> = [&links.host_to_device, &links.device_to_host]
        .into_iter()
        .flatten()
        .collect();
    let short = below_max(links.link_loaded, links.link_max);
    links.verdict = verdict_of(&results, short);
    links.note = sentences::card_note(&links);
    links
}

fn card_copies(
    backend: &mut dyn Backend,
    bench: &mut dyn CopyBench,
    links: &mut CardLinks,
    options: &LinksOptions,
) -> Result<(), ComputeError> {
    let gpu = links.gpu_index;
    let _ = backend.copies_running(gpu, planned_ms(options, links.link_max));
    let (mut up, mut down) = (Tally::new(), Tally::new());
    // The first copy loads the link (an idle card sits at Gen 1 until traffic comes): checked
    // like the others, not timed.
    up.add(&bench.copy(Route::HostToDevice { gpu }, 0)?, false);
    let loaded = backend.pcie_link(gpu).ok().and_then(|link| link.current);
    if let Some(link) = loaded {
        bench.observe_link(gpu, link);
    }
    for pass in 1..=options.passes {
        up.add(&bench.copy(Route::HostToDevice { gpu }, pass)?, true);
        down.add(&bench.copy(Route::DeviceToHost { gpu }, pass)?, true);
    }
    let after = backend.pcie_link(gpu).ok().and_then(|link| link.current);
    links.link_loaded = faster(loaded, after);
    let expected = links.link_max.map(host_gb_per_s);
    links.host_to_device = Some(up.result(expected));
    links.device_to_host = Some(down.result(expected));
    Ok(())
}

fn test_pair(
    backend: &mut dyn Backend,
    bench: &mut dyn CopyBench,
    cards: &[CardLinks],
    (from, to): (u32, u32),
    options: &LinksOptions,
) -> PairLinks {
    let topology = backend.topology(from, to).ok().flatten();
    let p2p = backend.p2p_access(from, to).ok().flatten();
    let peer = p2p.is_some_and(|access| access.enabled());
    let mut pair = PairLinks {
        from_gpu: from,
        to_gpu: to,
        topology,
        p2p,
        copy: None,
        verdict: LinkVerdict::NotTested,
        note: String::new(),
    };
    let max_of = |gpu: u32| {
        cards
            .iter()
            .find(|card| card.gpu_index == gpu)
            .and_then(|card| card.link_max)
    };
    let expected = match (max_of(from), max_of(to)) {
        (Some(a), Some(b)) => Some(pair_gb_per_s(a, b, peer)),
        _ => None,
    };
    for gpu in [from, to] {
        let _ = backend.copies_running(gpu, planned_ms(options, max_of(gpu)));
    }
    let route = Route::DeviceToDevice { from, to, peer };
    let mut tally = Tally::new();
    for pass in 1..=options.passes {
        match bench.copy(route, pass) {
            Ok(copy) => tally.add(&copy, true),
            Err(error) => {
                pair.note = error.to_string();
                return pair;
            }
        }
    }
    let mut result = tally.result(expected);
    if result.path != CopyPath::PeerToPeer && peer {
        // The driver said P2P, CUDA would not: measured against the through-host rate.
        result.expected_gb_per_s = match (max_of(from), max_of(to)) {
            (Some(a), Some(b)) => Some(hundredths(pair_gb_per_s(a, b, false))),
            _ => None,
        };
    }
    pair.verdict = verdict_of(&[&result], false);
    pair.copy = Some(result);
    pair.note = sentences::pair_note(&pair, cards);
    pair
}
