//! Health hints in plain language, read from the recent history of one GPU: a PCIe link below
//! its maximum under load, a data loader starving the GPU, thermal throttling, a power cap hit
//! all the time. Pure: no UI, no hardware.

use crate::telemetry::history::{GpuHistory, Metric};
use gputune_formats::throttle::ThrottleReason;

/// How much the user should care.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warning,
}

/// Which situation a hint is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintKind {
    PcieBelowMaximum,
    DataLoaderStarving,
    ThermalThrottling,
    PowerCapAlways,
}

/// One hint: a title that says what is happening and advice that says what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthHint {
    pub kind: HintKind,
    pub severity: Severity,
    pub title: String,
    pub advice: String,
}

/// How far back the hints look.
pub const HINT_WINDOW_MS: u64 = 60_000;
/// Fewer samples than this say nothing reliable.
const MIN_SAMPLES: usize = 10;
/// GPU utilization at or above this counts as "under load".
const BUSY_PCT: f64 = 50.0;
/// At or below this, the GPU is waiting.
const STARVED_PCT: f64 = 5.0;

/// What the last `HINT_WINDOW_MS` before `now_ms` say about this GPU, most serious first.
pub fn health_hints(history: &GpuHistory, now_ms: u64) -> Vec<HealthHint> {
    let indices = history.range(now_ms.saturating_sub(HINT_WINDOW_MS), now_ms);
    let samples: Vec<Sample> = indices.map(|index| Sample::read(history, index)).collect();
    if samples.len() < MIN_SAMPLES {
        return Vec::new();
    }
    let mut hints: Vec<HealthHint> = [
        pcie_below_maximum(&samples),
        data_loader_starving(&samples),
        thermal_throttling(&samples),
        power_cap_always(&samples),
    ]
    .into_iter()
    .flatten()
    .collect();
    hints.sort_by_key(|hint| std::cmp::Reverse(hint.severity));
    hints
}

/// The few values of one sample the hints look at.
struct Sample {
    utilization_pct: Option<f64>,
    memory_used_gib: Option<f64>,
    link: Option<Link>,
    throttle_bits: Option<u64>,
}

#[derive(Clone, Copy, PartialEq)]
struct Link {
    generation: f64,
    width: f64,
    generation_max: f64,
    width_max: f64,
}

impl Sample {
    fn read(history: &GpuHistory, index: usize) -> Sample {
        let value = |metric| history.value(metric, index);
        let link = match (
            value(Metric::PcieLinkGen),
            value(Metric::PcieLinkWidth),
            value(Metric::PcieLinkGenMax),
            value(Metric::PcieLinkWidthMax),
        ) {
            (Some(generation), Some(width), Some(generation_max), Some(width_max)) => Some(Link {
                generation,
                width,
                generation_max,
                width_max,
            }),
            _ => None,
        };
        Sample {
            utilization_pct: value(Metric::UtilizationGpuPct),
            memory_used_gib: value(Metric::MemoryUsedGib),
            link,
            throttle_bits: history.throttle_bits(index),
        }
    }

    fn busy(&self) -> bool {
        self.utilization_pct.is_some_and(|pct| pct >= BUSY_PCT)
    }

    fn has(&self, reason: ThrottleReason) -> bool {
        self.throttle_bits
            .is_some_and(|bits| bits & reason.bit() != 0)
    }
}

fn fraction(count: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        count as f64 / total as f64
    }
}

fn pcie_below_maximum(samples: &[Sample]) -> Option<HealthHint> {
    let busy_links: Vec<Link> = samples
        .iter()
        .filter(|sample| sample.busy())
        .filter_map(|sample| sample.link)
        .collect();
    let degraded: Vec<&Link> = busy_links
        .iter()
        .filter(|link| link.generation < link.generation_max || link.width < link.width_max)
        .collect();
    if busy_links.len() < MIN_SAMPLES || fraction(degraded.len(), busy_links.len()) < 0.5 {
        return None;
    }
    let link = degraded.last()?;
    Some(HealthHint {
        kind: HintKind::PcieBelowMaximum,
        severity: Severity::Warning,
        title: format!(
            "PCIe link runs at Gen {:.0} x{:.0} under load, below its Gen {:.0} x{:.0} maximum",
            link.generation, link.width, link.generation_max, link.width_max
        ),
        advice: "The card sits in a slower slot or behind a riser, or the link trained down. \
                 Move it to a full x16 slot wired to the CPU, reseat it, or replace the riser; \
                 check the BIOS PCIe setting."
            .to_string(),
    })
}

fn data_loader_starving(samples: &[Sample]) -> Option<HealthHint> {
    // A job is alive when it holds memory; a starving one alternates busy and idle.
    let job_alive = samples
        .iter()
        .filter(|sample| sample.memory_used_gib.is_some_and(|gib| gib >= 1.0))
        .count();
    if fraction(job_alive, samples.len()) < 0.9 {
        return None;
    }
    let utilization: Vec<f64> = samples
        .iter()
        .filter_map(|sample| sample.utilization_pct)
        .collect();
    let starved = utilization
        .iter()
        .filter(|&&pct| pct <= STARVED_PCT)
        .count();
    let busy = utilization.iter().filter(|&&pct| pct >= BUSY_PCT).count();
    let drops = utilization
        .windows(2)
        .filter(|pair| pair[0] >= BUSY_PCT && pair[1] <= STARVED_PCT)
        .count();
    let starved_fraction = fraction(starved, utilization.len());
    if drops < 3 || starved_fraction < 0.1 || fraction(busy, utilization.len()) < 0.3 {
        return None;
    }
    Some(HealthHint {
        kind: HintKind::DataLoaderStarving,
        severity: Severity::Warning,
        title: format!(
            "GPU utilization dropped to 0 % {drops} times in the last minute ({:.0} % of the time idle)",
            starved_fraction * 100.0
        ),
        advice: "The GPU waits for data while the job runs: the data loader cannot keep up. Raise \
                 DataLoader num_workers, set pin_memory=True (and persistent_workers=True), \
                 prefetch, and avoid per-step host syncs such as loss.item() or .cpu() in the loop."
            .to_string(),
    })
}

fn thermal_throttling(samples: &[Sample]) -> Option<HealthHint> {
    let thermal = samples
        .iter()
        .filter(|sample| {
            sample.has(ThrottleReason::SwThermalSlowdown)
                || sample.has(ThrottleReason::HwThermalSlowdown)
                || sample.has(ThrottleReason::HwSlowdown)
        })
        .count();
    let share = fraction(thermal, samples.len());
    if share < 0.05 {
        return None;
    }
    Some(HealthHint {
        kind: HintKind::ThermalThrottling,
        severity: Severity::Warning,
        title: format!(
            "Thermal throttling {:.0} % of the last minute: the GPU is too hot to hold its clocks",
            share * 100.0
        ),
        advice:
            "Improve airflow (case fans, spacing between cards, dust), raise the fan curve, or \
                 lower the power limit: a lower limit runs cooler for little loss of speed."
                .to_string(),
    })
}

fn power_cap_always(samples: &[Sample]) -> Option<HealthHint> {
    let busy: Vec<&Sample> = samples.iter().filter(|sample| sample.busy()).collect();
    let capped = busy
        .iter()
        .filter(|sample| sample.has(ThrottleReason::SwPowerCap))
        .count();
    let share = fraction(capped, busy.len());
    if busy.len() < MIN_SAMPLES || share < 0.8 {
        return None;
    }
    Some(HealthHint {
        kind: HintKind::PowerCapAlways,
        severity: Severity::Info,
        title: format!(
            "At its power limit {:.0} % of the time under load",
            share * 100.0
        ),
        advice: "Normal for training: compute loads run into the power limit. The last watts buy \
                 little speed, so a lower limit (Tune) saves power and heat for a small clock loss."
            .to_string(),
    })
}
