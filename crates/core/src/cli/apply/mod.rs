//! `gputune apply`: changes a GPU's power limit, clock locks, clock offsets and fans. With
//! `--try SECONDS` the engine measures a baseline, applies, counts down and puts the card back
//! when the time is up (or on Ctrl-C / SIGTERM, or when this command dies: the daemon when the
//! connection drops, the next start of gputune from the journal), and this command prints the
//! before / during table. It only parses and prints: the engine validates, writes and restores.
//!
//! Exit status: 0 when the settings were applied, or when a trial ended (by its timer, Ctrl-C
//! or SIGTERM) and every setting was put back; a stopped trial is an ordinary end, not an
//! error. 1 for a refused value, a refused write, or a trial that could not start or could not
//! put everything back (the journal then stays and the next start of gputune restores). A
//! second Ctrl-C exits at once with 130.
//!
//! Here: the options, the plan and a plain apply; what was written and read back is said by
//! `read_back.rs`, `--try` is `trial.rs`.

pub(crate) mod read_back;
mod trial;

use std::io::Write;

use anyhow::{anyhow, bail};

use crate::cli::connect::{
    TuningOptions, choose_gpu, connect_for_changes, refusal, snapshot, unexpected,
};
use crate::service::client::TuningClient;
use crate::tuning::request::TuneRequest;
use crate::tuning::request::parse::{
    parse_clock_range, parse_fan, parse_offset, parse_power_limit,
};
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::{GpuChange, GpuInfo};

/// The longest trial: a day. Longer is a setting to apply, not to try.
const LONGEST_TRIAL_S: u64 = crate::tuning::engine::LONGEST_TRIAL_S;
/// The longest baseline.
const LONGEST_BASELINE_S: u64 = crate::tuning::engine::LONGEST_BASELINE_S;

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
            .map(|text| parse_seconds("--try", text, 1, LONGEST_TRIAL_S))
            .transpose()?;
        let baseline_s = parse_seconds("--baseline-s", &self.baseline_s, 0, LONGEST_BASELINE_S)?;
        Ok(ApplyPlan {
            request,
            gpu_queries: self.gpu.clone(),
            try_s,
            baseline_s,
        })
    }
}

fn parse_seconds(option: &str, text: &str, minimum_s: u64, maximum_s: u64) -> anyhow::Result<u64> {
    match text.trim().parse::<u64>() {
        Ok(seconds) if (minimum_s..=maximum_s).contains(&seconds) => Ok(seconds),
        _ => bail!(
            "{option} \"{}\" is not understood: expected a whole number of seconds from {minimum_s} to {maximum_s}.",
            crate::text::printable(text)
        ),
    }
}

/// Runs `gputune apply` as the command line asked: parses, connects, applies or tries.
pub fn run_command(args: &ApplyArgs, options: &TuningOptions) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let mut messages = std::io::stderr();
    let mut client = connect_for_changes(options, &mut messages)?;
    let gpus = snapshot(&mut client)?.gpus;
    let changes = changes_on_gpus(&gpus, &plan)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match plan.try_s {
        None => apply_and_read_back(&mut client, &gpus, &changes, &mut out),
        Some(try_s) => {
            let stop = crate::cli::signals::install_stop_signal(1)?;
            trial::run_trial(
                &mut client,
                &gpus,
                &changes,
                try_s,
                plan.baseline_s,
                &stop,
                &mut out,
                &mut messages,
            )
        }
    }
}

/// Picks the GPUs and turns the request into settings for each: refused values are said here
/// with the user's own words (the engine checks every value again).
pub fn changes_on_gpus(gpus: &[GpuInfo], plan: &ApplyPlan) -> anyhow::Result<Vec<GpuChange>> {
    let mut indices = Vec::new();
    if plan.gpu_queries.is_empty() {
        indices.push(choose_gpu(gpus, None, None)?);
    }
    for query in &plan.gpu_queries {
        let index = choose_gpu(gpus, Some(query), None)?;
        if !indices.contains(&index) {
            indices.push(index);
        }
    }
    let several = indices.len() > 1;
    indices
        .into_iter()
        .map(|index| {
            let gpu = &gpus[index as usize];
            let settings = plan.request.validated(&gpu.constraints).map_err(|error| {
                if several {
                    anyhow!("GPU {index}: {error}")
                } else {
                    anyhow!("{error}")
                }
            })?;
            Ok(GpuChange {
                gpu_uuid: gpu.identity.uuid.clone(),
                settings: settings.iter().map(|setting| *setting.setting()).collect(),
            })
        })
        .collect()
}

/// `apply` without `--try`: the engine writes (all or nothing), then what the card holds.
fn apply_and_read_back(
    client: &mut TuningClient,
    gpus: &[GpuInfo],
    changes: &[GpuChange],
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let applied = match client
        .request(Request::Apply {
            changes: changes.to_vec(),
        })
        .map_err(refusal)?
    {
        Response::Applied { gpus } => gpus,
        other => return Err(unexpected(&other)),
    };
    for gpu in &applied {
        let constraints = &gpus[gpu.gpu_index as usize].constraints;
        for line in read_back::read_back_lines(gpu, constraints) {
            writeln!(out, "GPU {}: {line}", gpu.gpu_index)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Backend;
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
    fn several_gpus_need_a_choice_and_are_all_validated_first() {
        let mut backend = SimBackend::new(&SimOptions {
            scenario: SimScenario::EightRtx4090,
            ..SimOptions::default()
        });
        let gpus: Vec<GpuInfo> = (0..8)
            .map(|index| GpuInfo {
                identity: backend.identity(index).unwrap(),
                constraints: backend.constraints(index).unwrap(),
            })
            .collect();
        let mut plan = ApplyArgs {
            power_limit: Some("300".to_string()),
            ..args()
        }
        .plan()
        .unwrap();
        let error = changes_on_gpus(&gpus, &plan).err().map(|e| e.to_string());
        assert!(error.is_some_and(|error| error.contains("8 GPUs")));
        plan.gpu_queries = vec!["2".to_string(), "5".to_string(), "2".to_string()];
        let changes = changes_on_gpus(&gpus, &plan).unwrap();
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[1].gpu_uuid, gpus[5].identity.uuid);
        plan.request.power_limit = Some(crate::tuning::request::PowerLimitRequest::Watts(900.0));
        let error = changes_on_gpus(&gpus, &plan)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.starts_with("GPU 2: "), "{error}");
    }
}
