//! `gputune stability --json`: one card's check each, the figures behind its verdict, and the
//! sentences said of them (the CLI and the window say the same).

use serde::{Deserialize, Serialize};

use super::stability_watched::Watched;
pub use crate::profile::{CheckRecord, Verdict};
use crate::units::{duration_s, gib, large_count};

/// The stability report's `format_version`.
pub const STABILITY_REPORT_FORMAT: u32 = 1;

/// A check this long is thorough (`gputune stability`'s default); a shorter one finds only
/// gross instability, and its verdict says so.
pub const THOROUGH_CHECK_S: f64 = 600.0;
/// A card whose peak clock came this close to the top of its clock lock ran at the lock.
const AT_LOCK_MHZ: u32 = 30;
/// What a check calls a card that runs nothing gputune tunes.
pub const STOCK_SETTINGS: &str = "stock settings";

/// The whole of `stability --json`: one report per card checked.
#[derive(Debug, Serialize)]
pub struct StabilityReport<'a> {
    pub format_version: u32,
    pub checks: &'a [CheckReport],
}

/// Everything one card's check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub gpu_index: u32,
    pub gpu_uuid: String,
    pub gpu_name: String,
    /// What was checked: "+150 MHz offset / 2520 MHz lock", "stock settings".
    pub settings: String,
    pub pattern: LoadShape,
    pub duration_asked_s: f64,
    pub verdict: Verdict,
    #[serde(flatten)]
    pub result: RunResult,
    /// The GEMM's rate, TFLOP/s.
    pub gemm_tflops: Option<f64>,
    /// The memory test's rate (written plus read), GiB/s.
    pub vram_gib_per_s: Option<f64>,
    /// Whether the card drew within 5 % of its power limit at some reading.
    pub reached_power_limit: bool,
    /// What was put back when the check's session ended (empty when it changed nothing).
    pub put_back: Vec<String>,
    /// False when a setting could not be put back.
    pub put_back_complete: bool,
    /// Unix time the check ended, ms.
    pub ended_at_ms: u64,
    pub driver_version: Option<String>,
    pub gputune_version: String,
}

impl CheckReport {
    /// "GEMM 175.2 TFLOP/s (bf16, fp32 accumulate), VRAM 931 GiB/s written and read back
    /// (simulated)", with what was measured; None before any GEMM ran.
    pub fn rates(&self) -> Option<String> {
        let tflops = self.gemm_tflops?;
        let runtime = self
            .result
            .prepared
            .as_ref()
            .map(|prepared| format!("; {}", prepared.runtime))
            .unwrap_or_default();
        let vram = self
            .vram_gib_per_s
            .map(|gib_s| format!(", VRAM {gib_s:.0} GiB/s written and read back"))
            .unwrap_or_default();
        Some(format!(
            "GEMM {tflops:.1} TFLOP/s (bf16, fp32 accumulate{runtime}){vram}."
        ))
    }

    /// The verdict sentence: "Stable for 10 min at +150 MHz offset / 2520 MHz lock: 0 wrong of
    /// 3.1 × 10¹² checked results, 20.1 GiB of VRAM read back 240 times, no Xid; 2415–2745 MHz,
    /// 71 °C peak, …" or "Unstable after 3 min 12 s at …: 14 wrong GEMM results at 2745 MHz;
    /// put back."
    pub fn sentence(&self) -> String {
        let ran = duration_s(self.result.ran_s);
        let tally = &self.result.tally;
        match &self.result.ending {
            Ending::Completed => {
                let vram = match &self.result.prepared {
                    // A GEMM-only run (a box check, a ranking) reads no pattern back.
                    Some(prepared) if prepared.vram_tested_bytes > 0 && tally.vram_patterns > 0 => {
                        format!(
                            ", {} of VRAM read back {} times",
                            gib(prepared.vram_tested_bytes),
                            tally.vram_patterns
                        )
                    }
                    _ => ", no VRAM tested".to_string(),
                };
                format!(
                    "Stable for {ran} at {}: 0 wrong of {} checked results{vram}, no Xid; {}.{}{}",
                    self.settings,
                    large_count(tally.results()),
                    self.result.watched.summary(),
                    self.stress_note(),
                    self.short_note()
                )
            }
            Ending::Unstable { finding } => format!(
                "Unstable after {ran} at {}: {}{}",
                self.settings,
                finding.describe(),
                self.put_back_note()
            ),
            Ending::Stopped { reason } => format!(
                "Stopped after {ran} at {} ({reason}): {} wrong of {} results checked so far; not a verdict.",
                self.settings,
                tally.wrong(),
                large_count(tally.results())
            ),
            Ending::NotRun { reason } => format!("Not checked: {reason}"),
        }
    }

    fn put_back_note(&self) -> String {
        if self.put_back.is_empty() && self.settings != STOCK_SETTINGS {
            "; the check changed nothing, so the card still runs these settings.".to_string()
        } else if self.put_back.is_empty() {
            ".".to_string()
        } else if self.put_back_complete {
            "; put back.".to_string()
        } else {
            "; NOT everything could be put back (see above).".to_string()
        }
    }

    /// Said only where it means something: a card held at its clock lock below the power
    /// limit was not meant to reach it.
    fn stress_note(&self) -> String {
        let watched = &self.result.watched;
        let held_at_lock = watched
            .locked_max_mhz
            .zip(watched.clock_max_mhz)
            .is_some_and(|(lock_mhz, peak_mhz)| peak_mhz + AT_LOCK_MHZ >= lock_mhz);
        if watched.readings > 0 && !watched.reached_power_limit() && !held_at_lock {
            " The card never reached its power limit, so it was not fully stressed.".to_string()
        } else {
            String::new()
        }
    }

    /// Whether it was asked to run for less than a thorough check.
    pub fn is_short(&self) -> bool {
        self.duration_asked_s < THOROUGH_CHECK_S
    }

    fn short_note(&self) -> String {
        if self.is_short() {
            format!(
                " This was a short check ({}): it finds only gross instability; a thorough one runs {}.",
                duration_s(self.duration_asked_s),
                duration_s(THOROUGH_CHECK_S)
            )
        } else {
            String::new()
        }
    }

    /// "GPU 0 (NVIDIA GeForce RTX 4090, GPU-5a1e…)": the card that was checked.
    pub fn card(&self) -> String {
        format!(
            "GPU {} ({}, {})",
            self.gpu_index, self.gpu_name, self.gpu_uuid
        )
    }

    /// The short record a profile keeps, naming the card checked.
    pub fn record(&self) -> CheckRecord {
        CheckRecord {
            ended_at_ms: self.ended_at_ms,
            ran_s: self.result.ran_s,
            verdict: self.verdict,
            summary: format!("{}: {}", self.card(), self.sentence()),
            driver_version: self.driver_version.clone(),
            gputune_version: self.gputune_version.clone(),
            gpu_uuid: Some(self.gpu_uuid.clone()),
            gpu_name: Some(self.gpu_name.clone()),
        }
    }
}

impl Verdict {
    pub fn of(ending: &Ending) -> Verdict {
        match ending {
            Ending::Completed => Verdict::Stable,
            Ending::Unstable { .. } => Verdict::Unstable,
            Ending::Stopped { .. } => Verdict::Stopped,
            Ending::NotRun { .. } => Verdict::NotRun,
        }
    }
}

/// Which load the GEMM part puts on the card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadShape {
    /// The tensor cores busy all the time: the card at its power limit.
    Full,
    /// Bursts at 20-80 % duty: the card boosts highest at its lowest voltage.
    Pulsed,
    /// Both, each for half of every round.
    #[default]
    Both,
}

impl LoadShape {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadShape::Full => "full",
            LoadShape::Pulsed => "pulsed",
            LoadShape::Both => "full and pulsed",
        }
    }
}

/// The work done, per part, with every result counted.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Tally {
    pub gemm: Checked,
    pub fma: Checked,
    pub vram: Checked,
    /// Memory patterns written and read back over the tested VRAM.
    pub vram_patterns: u32,
}

impl Tally {
    pub fn results(&self) -> u64 {
        self.gemm.results + self.fma.results + self.vram.results
    }

    pub fn wrong(&self) -> u64 {
        self.gemm.wrong + self.fma.wrong + self.vram.wrong
    }

    /// The GEMM's rate while it ran, TFLOP/s.
    pub fn gemm_tflops(&self) -> Option<f64> {
        (self.gemm.elapsed_s > 0.0).then(|| self.gemm.flop / self.gemm.elapsed_s / 1e12)
    }

    /// The memory test's rate (bytes written plus read), GiB/s.
    pub fn vram_gib_per_s(&self) -> Option<f64> {
        (self.vram.elapsed_s > 0.0)
            .then(|| self.vram.bytes as f64 / self.vram.elapsed_s / f64::from(1u32 << 30))
    }
}

/// What made a check call the card unstable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Finding {
    /// Results that differed from the expected ones.
    WrongResults {
        part: String,
        wrong: u64,
        clock_mhz: Option<u32>,
    },
    /// The driver reported a critical error.
    Xid { xid: u64, meaning: String },
    /// The work failed on the card (launch failure, illegal address...).
    Fault { message: String },
    /// A kernel did not finish within its deadline.
    Hung { waited_s: f64 },
    /// The card counted uncorrectable memory errors during the check.
    UncorrectedEcc { errors: u64 },
}

impl Finding {
    /// "14 wrong GEMM results at 2745 MHz", "Xid 13 (a graphics engine exception…)".
    pub fn describe(&self) -> String {
        match self {
            Finding::WrongResults {
                part,
                wrong,
                clock_mhz,
            } => {
                let plural = if *wrong == 1 { "result" } else { "results" };
                let at = clock_mhz
                    .map(|clock| format!(" at {clock} MHz"))
                    .unwrap_or_default();
                format!("{wrong} wrong {part} {plural}{at}")
            }
            Finding::Xid { xid, meaning } => format!("Xid {xid} ({meaning})"),
            Finding::Fault { message } => format!("a CUDA error: {message}"),
            Finding::Hung { waited_s } => format!(
                "a kernel that did not finish in {waited_s:.0} s (the GPU may need a reset: nvidia-smi -r)"
            ),
            Finding::UncorrectedEcc { errors } => {
                format!("{errors} uncorrectable ECC memory errors")
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Ending {
    /// It ran its whole time with nothing wrong.
    Completed,
    Unstable {
        finding: Finding,
    },
    /// Stopped before its time (Ctrl-C, the window's Stop, the engine ending the session).
    Stopped {
        reason: String,
    },
    /// It could not run (no driver, no CUDA, not enough memory): no verdict on the card.
    NotRun {
        reason: String,
    },
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub ending: Ending,
    /// Seconds of checked work (preparing excluded).
    pub ran_s: f64,
    pub tally: Tally,
    pub watched: Watched,
    pub prepared: Option<Prepared>,
}

/// What `stability::compute::ComputeDevice::prepare` (gputune-core) set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// The device as its driver names it ("NVIDIA H100 80GB HBM3").
    pub device_name: String,
    /// What runs the work: "CUDA 12.8, sm_90" or "simulated".
    pub runtime: String,
    /// VRAM the memory test covers, after the headroom.
    pub vram_tested_bytes: u64,
}

/// One batch of checked work.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Checked {
    /// Values compared with their expected value (GEMM elements, chain results, VRAM words).
    pub results: u64,
    /// Those that differed.
    pub wrong: u64,
    /// Floating-point operations done (0 for the memory test).
    pub flop: f64,
    /// Bytes written and read back (0 for the compute parts).
    pub bytes: u64,
    /// How long the device took, seconds.
    pub elapsed_s: f64,
}
