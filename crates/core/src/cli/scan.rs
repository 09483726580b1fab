//! `gputune scan`: finds the largest stable graphics clock offset at a clock lock (see
//! `stability::scan`), prints each step and what the result saves, and saves it as a profile
//! on request. Every ending puts the card back.

use std::io::Write;

use clap::Args;

use crate::cli::connect::{TuningOptions, choose_gpu, connect_for, refusal, snapshot};
use crate::cli::drive::{Driven, drive, gpu_processes, refuse_if_held_elsewhere};
use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;
use crate::profiles::store::{ProfileStore, StoreError};
use crate::service::client::TuningClient;
use crate::stability::busy::OtherWork;
use crate::stability::scan::{Scan, save_scan_profile, scan_options};
use gputune_formats::protocol::{Event, Request};
use gputune_formats::reports::scan::ScanOutcome;
use gputune_formats::reports::scan::{SCAN_REPORT_FORMAT, ScanReport};

/// Readings while the scan runs.
const SAMPLE_INTERVAL_MS: u64 = 500;
/// The longest wait for the first readings, which list the processes on the card.
const PROCESSES_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, Clone, Args)]
pub struct ScanArgs {
    /// The GPU: an index or a UUID (default: the only GPU).
    #[arg(long)]
    pub gpu: Option<String>,
    /// The graphics clock to lock while scanning, MHz (default: the card's rated boost clock).
    #[arg(long)]
    pub lock_mhz: Option<u32>,
    /// How much to raise the offset each step, MHz.
    #[arg(long, default_value_t = 15)]
    pub step_mhz: i32,
    /// How long to check each step, seconds (a pulsed load).
    #[arg(long, default_value_t = 60.0)]
    pub step_s: f64,
    /// Steps to go back from the last stable offset, for safety.
    #[arg(long, default_value_t = 2)]
    pub margin_steps: u32,
    /// How long to confirm the result, seconds (full and pulsed load).
    #[arg(long, default_value_t = 600.0)]
    pub confirm_s: f64,
    /// Save the confirmed offset and lock as this profile (with its check): the scan's own
    /// settings only, the lock from the card's lowest clock to the scan's.
    #[arg(long, value_name = "NAME")]
    pub save_profile: Option<String>,
    /// With --save-profile: replace a profile of that name (refused without it).
    #[arg(long, requires = "save_profile")]
    pub replace: bool,
    /// Print the outcome as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Scan even beside other programs computing on the card.
    #[arg(long)]
    pub force: bool,
}

/// Runs `gputune scan`; exit status 0 when an offset was confirmed, 1 when none was, 2 when
/// nothing was checked (the card busy included), 130 when stopped.
pub fn run_command(args: &ScanArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    let mut messages = std::io::stderr();
    let store = match &args.save_profile {
        Some(name) => {
            crate::profiles::profile::check_name(name).map_err(anyhow::Error::msg)?;
            let store = ProfileStore::open(&options.folders)?;
            refuse_to_replace(&store, name, args.replace)?;
            Some(store)
        }
        None => None,
    };
    let mut client = connect_for(options, "check", &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let index = choose_gpu(&snapshot.gpus, args.gpu.as_deref(), None)?;
    let gpu = &snapshot.gpus[index as usize];
    let Some(tuning) = snapshot.tunings.get(index as usize) else {
        anyhow::bail!("The tuning engine sent no state for GPU {index}.");
    };
    let scan_options = scan_options(
        gpu,
        args.lock_mhz,
        args.step_mhz,
        args.step_s,
        args.margin_steps,
        args.confirm_s,
    )
    .map_err(anyhow::Error::msg)?;
    let device = crate::stability::device::open_for(&gpu.identity).map_err(anyhow::Error::msg)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;
    let other_work = OtherWork {
        processes: gpu_processes(&mut client, &snapshot.latest, PROCESSES_WAIT)
            .get(index as usize)
            .cloned()
            .flatten(),
        force: args.force,
        force_hint: ", or scan beside them with --force".to_string(),
    };
    let started = refuse_if_held_elsewhere(&client, &options.folders, gpu, "scan")
        .and_then(|()| Scan::start(&mut client, gpu, tuning, scan_options, device, &other_work));
    let scan = match started {
        Ok(scan) => scan,
        Err(message) => {
            let _ = writeln!(messages, "gputune: {message}");
            return Ok(2);
        }
    };
    let _ = writeln!(
        messages,
        "gputune: scanning GPU {index} ({}) at a {} MHz lock: offsets from +0 MHz in {} MHz steps of {} each (at most {} steps), a {} confirmation; a stock step first, at stock clock offsets and locks. Ctrl-C stops it and puts the card back.",
        gpu.identity.name,
        scan_options.lock_mhz,
        scan_options.step_mhz,
        gputune_formats::units::duration_s(scan_options.step_s),
        scan_options.most_steps(),
        gputune_formats::units::duration_s(scan_options.confirm_s),
    );
    let mut driven = ScanDriven {
        scan,
        steps_said: 0,
    };
    let stopped = drive(&mut client, &mut driven, &stop, &mut messages);
    let Some(outcome) = driven.scan.outcome().cloned() else {
        anyhow::bail!("The scan ended without an outcome; check the card with `gputune status`.");
    };
    for line in &outcome.put_back {
        let _ = writeln!(messages, "gputune: {line}");
    }
    if args.json {
        let mut stdout = std::io::stdout();
        let report = ScanReport {
            format_version: SCAN_REPORT_FORMAT,
            outcome: &outcome,
        };
        crate::text::write_json_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        print_outcome(&outcome)?;
    }
    if let (Some(store), Some(name)) = (&store, &args.save_profile) {
        save_profile(store, name, &outcome, gpu, args.replace, &mut messages);
    }
    let nothing_checked = outcome.stock.is_none() && outcome.steps.is_empty();
    Ok(if stopped {
        130
    } else if outcome.stable_offset_mhz.is_some() {
        0
    } else if nothing_checked {
        2
    } else {
        1
    })
}

/// Refuses, before anything runs, to save over an existing profile without `--replace`.
fn refuse_to_replace(store: &ProfileStore, name: &str, replace: bool) -> anyhow::Result<()> {
    match store.load(name) {
        Ok(existing) if existing.profile.name == name && !replace => anyhow::bail!(
            "A profile named \"{name}\" already exists ({}); add --replace to replace it with the scan's result, or choose another name. Nothing was scanned.",
            crate::text::path(&existing.path)
        ),
        Err(error @ StoreError::Ambiguous { .. }) => Err(error.into()),
        Ok(_) | Err(_) => Ok(()),
    }
}

/// "+45 MHz: stable, 2520 MHz, 341 W, 0 wrong of 1.2 × 10¹⁰, 2.45 J/TFLOP".
/// The scan, and how many of its steps were printed.
struct ScanDriven {
    scan: Scan,
    steps_said: usize,
}

impl Driven for ScanDriven {
    fn take_event(&mut self, event: &Event) {
        self.scan.take_event(event);
    }

    fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.scan.stop(client, reason);
    }

    fn tick(&mut self, client: &mut TuningClient) -> bool {
        self.scan.tick(client).is_some()
    }

    fn news(&mut self) -> Vec<String> {
        let lines = self.scan.steps()[self.steps_said..]
            .iter()
            .map(step_line)
            .collect();
        self.steps_said = self.scan.steps().len();
        lines
    }

    fn progress(&self) -> Vec<String> {
        vec![self.scan.progress()]
    }
}

pub fn step_line(step: &gputune_formats::reports::scan::ScanStep) -> String {
    let clocks = gputune_formats::units::clock_range_mhz(step.clock_min_mhz, step.clock_max_mhz)
        .unwrap_or_else(|| "clock not read".to_string());
    let power = step.power_mean_w.map_or_else(
        || "power not read".to_string(),
        |power| format!("{power:.0} W"),
    );
    let energy = step
        .joules_per_tflop
        .map_or_else(String::new, |joules| format!(", {joules:.2} J/TFLOP"));
    format!(
        "{}: {}, {clocks}, {power}, {} wrong of {}{energy}",
        step.label(),
        step.verdict_text(),
        step.wrong,
        gputune_formats::units::large_count(step.results)
    )
}

fn print_outcome(outcome: &ScanOutcome) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(
        stdout,
        "GPU {} ({}, {}): {}",
        outcome.gpu_index, outcome.gpu_name, outcome.gpu_uuid, outcome.summary
    )?;
    if let Some(stock) = &outcome.stock {
        writeln!(stdout, "  {}", step_line(stock))?;
    }
    for step in &outcome.steps {
        writeln!(stdout, "  {}", step_line(step))?;
    }
    if let Some(report) = &outcome.confirmation {
        writeln!(stdout, "  Confirmation: {}", report.sentence())?;
        if report.is_short() && report.verdict == gputune_formats::profile::Verdict::Stable {
            writeln!(
                stdout,
                "  A thorough confirmation: --confirm-s {:.0} (the default).",
                gputune_formats::reports::stability::THOROUGH_CHECK_S
            )?;
        }
    }
    if let Some(savings) = &outcome.savings {
        writeln!(stdout, "  {savings}")?;
    }
    writeln!(
        stdout,
        "  The scan took {}.",
        gputune_formats::units::duration_s(outcome.ran_s)
    )?;
    Ok(())
}

fn save_profile(
    store: &ProfileStore,
    name: &str,
    outcome: &ScanOutcome,
    gpu: &gputune_formats::tuning::GpuInfo,
    replace: bool,
    messages: &mut dyn Write,
) {
    match save_scan_profile(outcome, store, name, gpu, replace) {
        Ok(None) => {
            let _ = writeln!(
                messages,
                "gputune: no offset was confirmed stable, so no profile was saved."
            );
        }
        Ok(Some((profile, path))) if !profile.is_for(&gpu.identity.uuid) => {
            let _ = writeln!(
                messages,
                "gputune: recorded GPU {} ({}, {})'s own offset in the profile \"{}\" (saved from another card, whose settings it keeps), in {}:",
                gpu.identity.index,
                gpu.identity.name,
                gpu.identity.uuid,
                profile.name,
                crate::text::path(&path)
            );
            for line in profile.checked_card_lines() {
                let _ = writeln!(messages, "gputune:   {line}");
            }
            if let Some(caveat) = crate::stability::scan::lock_caveat(
                &profile,
                outcome.options.lock_mhz,
                &gpu.identity.uuid,
            ) {
                let _ = writeln!(messages, "gputune: {caveat}");
            }
        }
        Ok(Some((profile, path))) => {
            let _ = writeln!(
                messages,
                "gputune: saved the profile \"{}\" for GPU {} ({}, {}): {}; {}; in {}.",
                profile.name,
                gpu.identity.index,
                profile.card.name,
                profile.card.uuid,
                profile.summary(),
                profile.check_text(),
                crate::text::path(&path)
            );
        }
        Err(error) => {
            let _ = writeln!(messages, "gputune: the profile could not be saved: {error}");
        }
    }
}
