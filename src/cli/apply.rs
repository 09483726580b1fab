//! `gputune apply`: changes a GPU's power limit, clock locks, clock offsets and fans, every
//! value checked by `device::gate` on every selected GPU before the first write. With
//! `--try SECONDS` it measures a baseline, applies, measures again and puts the card back
//! from the journal when the time is up, on Ctrl-C or SIGTERM, or if gputune panics, then
//! prints a before/during table.
//!
//! Exit status: 0 when the settings were applied, or when a trial ended (by its timer, Ctrl-C
//! or SIGTERM) and every setting was put back; a stopped trial is an ordinary end, not an
//! error. 1 for a refused value, a refused write, a GPU lost mid-trial or a revert that did
//! not complete (the journal then stays and the next start of gputune restores). A second
//! Ctrl-C during a trial exits at once with 130, leaving the journal for the next start.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use crate::device::gate::ValidatedSetting;
use crate::device::{
    Backend, BackendKind, BackendOptions, Constraints, DeviceError, GpuIdentity, Setting,
    Telemetry, open_backend, resolve_gpu,
};
use crate::tuning::journal::{
    Journal, JournalEntry, JournalError, RestoreReport, describe_all, journal_path,
    restore_pending, restore_settings_for,
};
use crate::tuning::request::{
    TuneRequest, parse_clock_range, parse_fan, parse_offset, parse_power_limit,
};
use crate::tuning::trial::{RevertGuard, TrialStats, comparison_table};
use crate::units::watts_exact;

/// Time between samples of a baseline or a trial.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest trial or baseline: a day. Longer is a setting to apply, not to try.
const LONGEST_TRIAL_S: u64 = 86_400;

/// The options of `gputune apply`. Values are taken as text and parsed by
/// `tuning::request`, so a bad one gets one sentence that names it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ApplyArgs {
    /// The GPU to change: an index or a UUID (repeat for several). Needed when there are
    /// several GPUs.
    #[arg(long, value_name = "UUID|INDEX")]
    pub gpu: Vec<String>,
    /// Power limit: a percentage of the default ("70%") or watts ("315W", "315").
    #[arg(long, value_name = "P%|NW", allow_hyphen_values = true)]
    pub power_limit: Option<String>,
    /// Lock the GPU clocks to a range in MHz.
    #[arg(long, value_name = "MIN,MAX", allow_hyphen_values = true)]
    pub lock_gpu_clocks: Option<String>,
    /// Hand the GPU clocks back to the driver.
    #[arg(long)]
    pub reset_gpu_clocks: bool,
    /// Lock the memory clocks to a range in MHz.
    #[arg(
        long = "lock-mem-clocks",
        value_name = "MIN,MAX",
        allow_hyphen_values = true
    )]
    pub lock_memory_clocks: Option<String>,
    /// Hand the memory clocks back to the driver.
    #[arg(long = "reset-mem-clocks")]
    pub reset_memory_clocks: bool,
    /// Shift the GPU's voltage/frequency curve by this many MHz (e.g. +150 or -200).
    #[arg(long, value_name = "MHZ", allow_hyphen_values = true)]
    pub gpu_clock_offset: Option<String>,
    /// Shift the memory clock by this many MHz.
    #[arg(
        long = "mem-clock-offset",
        value_name = "MHZ",
        allow_hyphen_values = true
    )]
    pub memory_clock_offset: Option<String>,
    /// Every fan at this speed in percent, or "auto" for the driver's own curve.
    #[arg(long, value_name = "PCT|auto", allow_hyphen_values = true)]
    pub fan_speed: Option<String>,
    /// Try the settings for this many seconds, then put the card back and compare. Ctrl-C or
    /// SIGTERM ends the trial early (exit status 0 once the card is back).
    #[arg(long = "try", value_name = "SECONDS", allow_hyphen_values = true)]
    pub try_s: Option<String>,
    /// Seconds of baseline measured before a trial applies anything.
    #[arg(
        long,
        value_name = "N",
        default_value = "10",
        allow_hyphen_values = true
    )]
    pub baseline_s: String,
}

/// A checked `apply` command line: what to change, on which GPUs, for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyPlan {
    pub request: TuneRequest,
    pub gpu_queries: Vec<String>,
    /// `Some` for a trial.
    pub try_s: Option<u64>,
    pub baseline_s: u64,
}

impl ApplyArgs {
    /// Parses every value; the first one that does not parse is the error.
    pub fn plan(&self) -> anyhow::Result<ApplyPlan> {
        let request = TuneRequest {
            power_limit: self
                .power_limit
                .as_deref()
                .map(|text| parse_power_limit("--power-limit", text))
                .transpose()?,
            lock_gpu_clocks: self
                .lock_gpu_clocks
                .as_deref()
                .map(|text| parse_clock_range("--lock-gpu-clocks", text))
                .transpose()?,
            reset_gpu_clocks: self.reset_gpu_clocks,
            lock_memory_clocks: self
                .lock_memory_clocks
                .as_deref()
                .map(|text| parse_clock_range("--lock-mem-clocks", text))
                .transpose()?,
            reset_memory_clocks: self.reset_memory_clocks,
            gpu_clock_offset_mhz: self
                .gpu_clock_offset
                .as_deref()
                .map(|text| parse_offset("--gpu-clock-offset", text))
                .transpose()?,
            memory_clock_offset_mhz: self
                .memory_clock_offset
                .as_deref()
                .map(|text| parse_offset("--mem-clock-offset", text))
                .transpose()?,
            fan: self
                .fan_speed
                .as_deref()
                .map(|text| parse_fan("--fan-speed", text))
                .transpose()?,
        };
        if request.is_empty() {
            bail!(
                "Nothing to apply: give at least one of --power-limit, --lock-gpu-clocks, --reset-gpu-clocks, --lock-mem-clocks, --reset-mem-clocks, --gpu-clock-offset, --mem-clock-offset or --fan-speed."
            );
        }
        let try_s = self
            .try_s
            .as_deref()
            .map(|text| parse_seconds("--try", text, 1))
            .transpose()?;
        let baseline_s = parse_seconds("--baseline-s", &self.baseline_s, 0)?;
        Ok(ApplyPlan {
            request,
            gpu_queries: self.gpu.clone(),
            try_s,
            baseline_s,
        })
    }
}

fn parse_seconds(option: &str, text: &str, minimum_s: u64) -> anyhow::Result<u64> {
    match text.trim().parse::<u64>() {
        Ok(seconds) if (minimum_s..=LONGEST_TRIAL_S).contains(&seconds) => Ok(seconds),
        _ => bail!(
            "{option} \"{text}\" is not understood: expected a whole number of seconds from {minimum_s} to {LONGEST_TRIAL_S}."
        ),
    }
}

/// Runs `gputune apply` as the command line asked: parses, opens the backend, applies or tries.
pub fn run_command(args: &ApplyArgs, options: &BackendOptions) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let mut opened = open_backend(options)?;
    if let Some(reason) = opened.fallback_reason.as_deref() {
        bail!(
            "There is no NVIDIA GPU to change ({reason}); add --backend sim to try the settings on the simulated GPU."
        );
    }
    let backend = opened.backend.as_mut();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match plan.try_s {
        None => apply_and_read_back(backend, &plan, &mut out),
        Some(try_s) => {
            let stop = install_stop_signal()?;
            run_trial(
                backend,
                &plan,
                try_s,
                &stop,
                &mut out,
                &mut std::io::stderr(),
            )
        }
    }
}

/// What to write to one GPU, every setting already through the gate.
#[derive(Debug, Clone)]
pub struct GpuChanges {
    pub identity: GpuIdentity,
    pub constraints: Constraints,
    pub settings: Vec<ValidatedSetting>,
}

/// Picks the GPUs and validates the request on each of them; nothing is written.
pub fn validate_on_gpus(
    backend: &mut dyn Backend,
    plan: &ApplyPlan,
) -> anyhow::Result<Vec<GpuChanges>> {
    let mut indices = Vec::new();
    if plan.gpu_queries.is_empty() {
        match backend.gpu_count()? {
            0 => return Err(DeviceError::NoGpus.into()),
            1 => indices.push(0),
            count => bail!(
                "This machine has {count} GPUs: choose one with --gpu INDEX or --gpu UUID (see `gputune status`)."
            ),
        }
    } else {
        for query in &plan.gpu_queries {
            let index = resolve_gpu(backend, query)?;
            if !indices.contains(&index) {
                indices.push(index);
            }
        }
    }
    let several = indices.len() > 1;
    let mut changes = Vec::with_capacity(indices.len());
    for index in indices {
        let identity = backend.identity(index)?;
        let constraints = backend.constraints(index)?;
        let settings = plan.request.validated(&constraints).map_err(|error| {
            if several {
                anyhow!("GPU {index}: {error}")
            } else {
                anyhow!("{error}")
            }
        })?;
        changes.push(GpuChanges {
            identity,
            constraints,
            settings,
        });
    }
    Ok(changes)
}

/// A write the driver refused, with what had been written before it.
#[derive(Debug)]
pub struct ApplyFailure {
    pub error: DeviceError,
    /// (GPU index, setting) written before the refusal.
    pub applied: Vec<(u32, Setting)>,
    /// (GPU index, setting) not written: the refused one and every one after it.
    pub not_applied: Vec<(u32, Setting)>,
}

impl ApplyFailure {
    /// The driver's message, then exactly what was and was not applied.
    pub fn message(&self) -> String {
        let list = |settings: &[(u32, Setting)]| {
            settings
                .iter()
                .map(|(index, setting)| format!("{} on GPU {index}", setting.describe()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.applied.is_empty() {
            format!("{} Nothing was changed.", self.error)
        } else {
            format!(
                "{} Applied before the refusal: {}. Not applied: {}.",
                self.error,
                list(&self.applied),
                list(&self.not_applied)
            )
        }
    }
}

/// Writes every GPU's settings in order, stopping at the first refusal.
pub fn apply_changes(
    backend: &mut dyn Backend,
    changes: &[GpuChanges],
) -> Result<Vec<(u32, Setting)>, ApplyFailure> {
    let all: Vec<(u32, &ValidatedSetting)> = changes
        .iter()
        .flat_map(|gpu| {
            gpu.settings
                .iter()
                .map(move |setting| (gpu.identity.index, setting))
        })
        .collect();
    let mut applied = Vec::new();
    for (position, (index, setting)) in all.iter().enumerate() {
        if let Err(error) = backend.apply(*index, setting) {
            return Err(ApplyFailure {
                error,
                applied,
                not_applied: all[position..]
                    .iter()
                    .map(|(index, setting)| (*index, *setting.setting()))
                    .collect(),
            });
        }
        applied.push((*index, *setting.setting()));
    }
    Ok(applied)
}

/// `apply` without `--try`: validate everywhere, write, then read back what the card holds.
pub fn apply_and_read_back(
    backend: &mut dyn Backend,
    plan: &ApplyPlan,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let changes = validate_on_gpus(backend, plan)?;
    if let Err(failure) = apply_changes(backend, &changes) {
        bail!("{}", failure.message());
    }
    for gpu in &changes {
        for line in read_back_lines(backend, gpu) {
            writeln!(out, "GPU {}: {line}", gpu.identity.index)?;
        }
    }
    Ok(())
}

/// One sentence per setting written, with what the card reports back where it can.
fn read_back_lines(backend: &mut dyn Backend, gpu: &GpuChanges) -> Vec<String> {
    let index = gpu.identity.index;
    let current = backend.current_settings(index).ok();
    let enforced_mw = backend
        .telemetry(index)
        .ok()
        .and_then(|reading| reading.power_limit_mw);
    let mut lines = Vec::new();
    for setting in gpu.settings.iter().map(ValidatedSetting::setting) {
        lines.push(match *setting {
            Setting::PowerLimit { power_limit_mw } => {
                let share = gpu
                    .constraints
                    .power_limit_default_mw
                    .filter(|default_mw| *default_mw > 0)
                    .map(|default_mw| {
                        let percent = f64::from(power_limit_mw) / f64::from(default_mw) * 100.0;
                        format!(
                            " ({} % of {})",
                            one_decimal(percent),
                            watts_exact(default_mw)
                        )
                    })
                    .unwrap_or_default();
                let enforced = match enforced_mw {
                    Some(enforced_mw) => format!("the card enforces {}", watts_exact(enforced_mw)),
                    None => "the card does not report the limit it enforces".to_string(),
                };
                format!(
                    "Power limit set to {}{share}; {enforced}.",
                    watts_exact(power_limit_mw)
                )
            }
            Setting::GpuClockOffset { offset_mhz } => read_back_offset(
                "GPU",
                offset_mhz,
                current
                    .as_ref()
                    .and_then(|current| current.gpu_clock_offset_mhz),
            ),
            Setting::MemoryClockOffset { offset_mhz } => read_back_offset(
                "Memory",
                offset_mhz,
                current
                    .as_ref()
                    .and_then(|current| current.memory_clock_offset_mhz),
            ),
            other => format!("{} applied.", capitalized(&other.describe())),
        });
    }
    lines
}

fn read_back_offset(clock: &str, offset_mhz: i32, reported: Option<i32>) -> String {
    match reported {
        Some(reported) => {
            format!(
                "{clock} clock offset set to {offset_mhz:+} MHz; the card reports {reported:+} MHz."
            )
        }
        None => format!("{clock} clock offset set to {offset_mhz:+} MHz."),
    }
}

/// "fan 0 at 60 %" → "Fan 0 at 60 %"; "GPU ..." stays.
fn capitalized(text: &str) -> String {
    let mut characters = text.chars();
    match characters.next() {
        Some(first) => first.to_uppercase().chain(characters).collect(),
        None => String::new(),
    }
}

/// "70" or "70.5".
fn one_decimal(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0}")
    } else {
        format!("{rounded:.1}")
    }
}

/// A channel that receives one message on the first SIGINT / SIGTERM / SIGHUP. A second
/// signal exits at once with 130: the journal stays, and the next start restores from it.
fn install_stop_signal() -> anyhow::Result<Receiver<()>> {
    let (sender, receiver) = mpsc::channel();
    let signals_received = AtomicU32::new(0);
    ctrlc::set_handler(move || {
        if signals_received.fetch_add(1, Ordering::SeqCst) > 0 {
            eprintln!("gputune: stopped at once; the next start of gputune restores the settings.");
            std::process::exit(130);
        }
        // After the trial no one listens, and nothing needs telling.
        let _ = sender.send(());
    })
    .map_err(|error| anyhow!("Could not install the Ctrl-C handler ({error})."))?;
    Ok(receiver)
}

/// Waits until `due`. True when a stop arrived first (or had arrived already).
fn stop_arrives_before(due: Instant, stop: &Receiver<()>) -> bool {
    let wait = due.saturating_duration_since(Instant::now());
    match stop.recv_timeout(wait) {
        Ok(()) => true,
        Err(RecvTimeoutError::Timeout) => false,
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            false
        }
    }
}

/// How a sampling period ended.
enum SamplingEnd {
    TimeUp,
    Stopped,
    Lost(DeviceError),
}

/// Samples every GPU once a second for `seconds` (seconds + 1 samples, the first at once),
/// calling `each_second` with the seconds left before every wait.
fn sample_for(
    backend: &mut dyn Backend,
    indices: &[u32],
    seconds: u64,
    stop: &Receiver<()>,
    samples: &mut [Vec<Telemetry>],
    mut each_second: impl FnMut(u64),
) -> SamplingEnd {
    let started = Instant::now();
    for slot in 0..=seconds {
        let due = started + SAMPLE_INTERVAL * u32::try_from(slot).unwrap_or(u32::MAX);
        if slot > 0 && stop_arrives_before(due, stop) {
            return SamplingEnd::Stopped;
        }
        for (gpu_samples, index) in samples.iter_mut().zip(indices) {
            match backend.telemetry(*index) {
                Ok(reading) => gpu_samples.push(reading),
                Err(
                    error @ (DeviceError::GpuLost { .. } | DeviceError::DriverNotLoaded { .. }),
                ) => {
                    return SamplingEnd::Lost(error);
                }
                // A reading that fails once is a gap, not the end of the trial.
                Err(error) => tracing::warn!("GPU {index} could not be read: {error}"),
            }
        }
        if slot < seconds {
            each_second(seconds - slot);
        }
    }
    SamplingEnd::TimeUp
}

/// `apply --try`: baseline, journal, apply, sample with a countdown, revert, compare.
/// `out` gets the table, `messages` the countdown and what happened.
pub fn run_trial(
    backend: &mut dyn Backend,
    plan: &ApplyPlan,
    try_s: u64,
    stop: &Receiver<()>,
    out: &mut dyn Write,
    messages: &mut dyn Write,
) -> anyhow::Result<()> {
    let changes = validate_on_gpus(backend, plan)?;
    let path = journal_path().ok_or(JournalError::NoStateFolder)?;
    if let Some(pending) = Journal::read(&path)? {
        if let Some(owner) = pending
            .owner
            .filter(|_| pending.owner_is_another_running_process())
        {
            bail!(
                "Another gputune trial is running (process {}); wait for it to end before starting one.",
                owner.pid
            );
        }
        return Err(JournalError::Pending { path }.into());
    }
    let indices: Vec<u32> = changes.iter().map(|gpu| gpu.identity.index).collect();

    let mut baseline = vec![Vec::new(); indices.len()];
    if plan.baseline_s > 0 {
        let _ = writeln!(
            messages,
            "Measuring a {} s baseline before changing anything; Ctrl-C to cancel.",
            plan.baseline_s
        );
        match sample_for(
            backend,
            &indices,
            plan.baseline_s,
            stop,
            &mut baseline,
            |_| {},
        ) {
            SamplingEnd::TimeUp => {}
            SamplingEnd::Stopped => {
                let _ = writeln!(messages, "Stopped before anything was changed.");
                return Ok(());
            }
            SamplingEnd::Lost(error) => bail!("{error} Nothing was changed."),
        }
    }

    let mut current = Vec::with_capacity(changes.len());
    let mut entries = Vec::with_capacity(changes.len());
    for gpu in &changes {
        let settings: Vec<Setting> = gpu
            .settings
            .iter()
            .map(|setting| *setting.setting())
            .collect();
        let now = backend.current_settings(gpu.identity.index)?;
        entries.push(JournalEntry {
            uuid: gpu.identity.uuid.clone(),
            index: gpu.identity.index,
            restore: restore_settings_for(&now, &settings),
        });
        current.push(now);
    }
    let journal = Journal::new(backend.kind(), entries);
    journal
        .write(&path)
        .map_err(|error| anyhow!("{error} Nothing was changed."))?;

    // The guard lives inside the unwind boundary: a panic drops it, and dropping reverts.
    type TrialResult = anyhow::Result<(SamplingEnd, Vec<Vec<Telemetry>>, RestoreReport)>;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> TrialResult {
        let mut guard = RevertGuard::new(backend, path.clone(), journal.clone());
        if let Err(failure) = apply_changes(guard.backend(), &changes) {
            // Undo only what was written: the rest never changed.
            let restore_only_applied = Journal {
                gpus: journal
                    .gpus
                    .iter()
                    .zip(&current)
                    .map(|(entry, current)| {
                        let applied: Vec<Setting> = failure
                            .applied
                            .iter()
                            .filter(|(index, _)| *index == entry.index)
                            .map(|(_, setting)| *setting)
                            .collect();
                        JournalEntry {
                            restore: restore_settings_for(current, &applied),
                            ..entry.clone()
                        }
                    })
                    .filter(|entry| !entry.restore.is_empty())
                    .collect(),
                ..journal.clone()
            };
            guard.set_journal(restore_only_applied)?;
            let report = guard.revert()?;
            return Err(anyhow!("{}{}", failure.message(), report_suffix(&report)));
        }
        let mut during = vec![Vec::new(); indices.len()];
        let end = sample_for(
            guard.backend(),
            &indices,
            try_s,
            stop,
            &mut during,
            |left_s| {
                let _ = writeln!(
                    messages,
                    "Trying the new settings: {left_s} s left (Ctrl-C puts the card back now)."
                );
            },
        );
        let report = guard.revert()?;
        Ok((end, during, report))
    }));
    let (end, during, report) = match outcome {
        Ok(result) => result?,
        Err(_) => bail!(
            "gputune stopped on an internal error during the trial; the settings were put back from the journal {} (see the messages above).",
            path.display()
        ),
    };

    match &end {
        SamplingEnd::Stopped => {
            let _ = writeln!(messages, "Trial stopped early.");
        }
        SamplingEnd::TimeUp | SamplingEnd::Lost(_) => {}
    }
    for line in report.lines("Reverted") {
        let _ = writeln!(messages, "{line}");
    }
    for ((gpu, before), during) in changes.iter().zip(&baseline).zip(&during) {
        writeln!(
            out,
            "GPU {} ({}): {}",
            gpu.identity.index,
            gpu.identity.name,
            describe_all(
                &gpu.settings
                    .iter()
                    .map(|setting| *setting.setting())
                    .collect::<Vec<_>>()
            )
        )?;
        write!(
            out,
            "{}",
            comparison_table(
                &TrialStats::from_samples(before),
                &TrialStats::from_samples(during)
            )
        )?;
    }
    if let SamplingEnd::Lost(error) = end {
        bail!("{error} The trial was stopped{}", report_suffix(&report));
    }
    if !report.is_complete() {
        bail!(
            "Not every setting could be put back; the journal {} is kept, so the next start of gputune tries again.",
            report.journal_path.display()
        );
    }
    Ok(())
}

/// "; the settings were put back." or what is left and where the journal is.
fn report_suffix(report: &RestoreReport) -> String {
    if report.is_complete() {
        if report.gpus.iter().all(|gpu| gpu.restored.is_empty()) {
            ".".to_string()
        } else {
            "; what was applied was put back.".to_string()
        }
    } else {
        format!(
            "; the settings could not be put back, so the journal {} is kept and the next start of gputune restores them.",
            report.journal_path.display()
        )
    }
}

/// At the start of every command: if a previous run left a trial's settings applied (crash,
/// `kill -9`, power cut), put them back, saying so on stderr. Costs one file check when there
/// is no journal; never stops the command.
pub fn restore_from_journal(options: &BackendOptions) -> Vec<String> {
    let mut said = Vec::new();
    let Some(path) = journal_path() else {
        return said;
    };
    if !path.exists() {
        return said;
    }
    let mut opened = match open_backend(options) {
        Ok(opened) => opened,
        Err(error) => {
            said.push(format!(
                "The settings a previous trial left applied (journal {}) could not be restored: {error}",
                path.display()
            ));
            return said;
        }
    };
    if opened.backend.kind() == BackendKind::Sim && opened.fallback_reason.is_some() {
        // The journal is for real GPUs, which are not reachable now; it waits for them.
        return said;
    }
    match restore_pending(opened.backend.as_mut()) {
        Ok(None) => {}
        Ok(Some(report)) => {
            said.extend(report.lines("restored the settings a previous run left applied on"))
        }
        Err(error) => said.push(error.to_string()),
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{SimBackend, SimOptions, SimScenario};

    fn args() -> ApplyArgs {
        ApplyArgs {
            baseline_s: "10".to_string(),
            ..ApplyArgs::default()
        }
    }

    #[test]
    fn an_empty_request_and_bad_seconds_are_refused() {
        let error = args().plan().err().map(|error| error.to_string());
        assert!(error.is_some_and(|error| error.starts_with("Nothing to apply")));
        let bad_try = ApplyArgs {
            power_limit: Some("70%".to_string()),
            try_s: Some("0".to_string()),
            ..args()
        };
        assert!(bad_try.plan().is_err());
    }

    #[test]
    fn applies_and_reads_back_the_power_limit() {
        let mut backend = SimBackend::new(&SimOptions::default());
        let plan = ApplyArgs {
            power_limit: Some("70%".to_string()),
            gpu_clock_offset: Some("-100".to_string()),
            ..args()
        }
        .plan()
        .unwrap();
        let mut out = Vec::new();
        apply_and_read_back(&mut backend, &plan, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            "GPU 0: Power limit set to 315 W (70 % of 450 W); the card enforces 315 W.\n\
             GPU 0: GPU clock offset set to -100 MHz; the card reports -100 MHz.\n"
        );
    }

    #[test]
    fn several_gpus_need_a_choice_and_are_all_validated_first() {
        let mut backend = SimBackend::new(&SimOptions {
            scenario: SimScenario::EightRtx4090,
            ..SimOptions::default()
        });
        let mut plan = ApplyArgs {
            power_limit: Some("300".to_string()),
            ..args()
        }
        .plan()
        .unwrap();
        let error = validate_on_gpus(&mut backend, &plan)
            .err()
            .map(|e| e.to_string());
        assert!(error.is_some_and(|error| error.contains("8 GPUs")));
        plan.gpu_queries = vec!["2".to_string(), "5".to_string(), "2".to_string()];
        let changes = validate_on_gpus(&mut backend, &plan).unwrap();
        assert_eq!(changes.len(), 2);
    }

    #[test]
    fn a_failure_message_says_what_was_and_was_not_applied() {
        let failure = ApplyFailure {
            error: DeviceError::NoPermission {
                action: "fan 0 at 60 %".to_string(),
            },
            applied: vec![(
                0,
                Setting::PowerLimit {
                    power_limit_mw: 300_000,
                },
            )],
            not_applied: vec![(
                0,
                Setting::FanSpeed {
                    fan_index: 0,
                    speed_pct: 60,
                },
            )],
        };
        let message = failure.message();
        assert!(message.contains("administrator rights"), "{message}");
        assert!(
            message.ends_with(
                "Applied before the refusal: power limit 300 W on GPU 0. Not applied: fan 0 at 60 % on GPU 0."
            ),
            "{message}"
        );
    }
}
