//! `gputune stability`: a checked compute load on one GPU, several or all at once, at the
//! card's current settings or a profile's (held by the engine and put back at the end).
//! Prints one verdict per card; `--json` prints the figures behind each.

use std::io::Write;

use anyhow::bail;
use clap::Args;

use crate::profiles::checked::CheckedOffsets;
use crate::profiles::profile::ProfileOnCard;

mod put_back;
mod together;

use put_back::{put_back, say_how_to_put_back};

use crate::cli::choices::{Choice, choice};
use crate::cli::connect::{TuningOptions, choose_gpus, connect_for, refusal, snapshot};
use crate::cli::drive::{Driven, drive};
use crate::cli::drive::{gpu_processes, refuse_if_held_elsewhere};
use crate::profiles::store::ProfileStore;
use crate::service::client::TuningClient;
use crate::stability::busy::OtherWork;
use crate::stability::check::{CardCheck, CheckSetup};
use crate::stability::rounds::CheckOptions;
use gputune_formats::card::Setting;
use gputune_formats::fan_curve::FanCurve;
use gputune_formats::protocol::{Event, Request};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::{
    profile::Verdict,
    reports::stability::{CheckReport, STABILITY_REPORT_FORMAT, StabilityReport},
};

/// Readings while a check runs: twice a second, enough for clock and power ranges.
const SAMPLE_INTERVAL_MS: u64 = 500;
/// The longest wait for the first readings, which list the processes on each card.
pub(crate) const PROCESSES_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, Clone, Args)]
pub struct StabilityArgs {
    /// The GPUs: an index or UUID, several separated by commas, or `all` (default: the
    /// profile's card, else the only GPU). Each card is checked at once, on its own.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Check this profile's settings: held while the check runs, put back at its end (and at
    /// once when the check finds instability); the verdict is saved in the profile.
    #[arg(long)]
    pub profile: Option<String>,
    /// How long to check, in seconds (600 is a thorough check).
    #[arg(long, default_value_t = 600.0)]
    pub duration_s: f64,
    /// The load: full (at the power limit), pulsed (20-80 % duty, where cards boost highest
    /// at their lowest voltage), or both.
    #[arg(long, value_parser = choice::<LoadShape>(), default_value = "both")]
    pub pattern: LoadShape,
    /// Print the figures behind each verdict as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Check even beside other programs computing on the card (the verdict says so).
    #[arg(long)]
    pub force: bool,
    /// Check nothing: put the card back after an unstable check, to the profile last checked
    /// stable on it, else to stock clock offsets and locks (the fans are left as they are).
    #[arg(long, conflicts_with_all = ["profile", "json", "force"])]
    pub put_back: bool,
    /// Check every listed card at once, in phase (the same pulse edges on every card: the
    /// worst case for the power supply), at several pulse lengths and duty cycles, then at full
    /// load (default --gpu all). Reports the box's power; when a step fails, finds the clock cap
    /// under which it passes.
    #[arg(long, conflicts_with_all = ["profile", "put_back", "pattern"])]
    pub together: bool,
    /// With --together: hold every card's clocks at or below this (a recommended cap, proven).
    #[arg(long, requires = "together")]
    pub clock_cap_mhz: Option<u32>,
}

/// `--pattern`: which load the GEMM part puts on the card.
impl Choice for LoadShape {
    fn all() -> &'static [Self] {
        &[LoadShape::Full, LoadShape::Pulsed, LoadShape::Both]
    }
    fn cli_name(self) -> &'static str {
        match self {
            LoadShape::Full => "full",
            LoadShape::Pulsed => "pulsed",
            LoadShape::Both => "both",
        }
    }
    fn help(self) -> Option<&'static str> {
        Some(match self {
            LoadShape::Full => "The tensor cores busy all the time: the card at its power limit",
            LoadShape::Pulsed => {
                "Bursts at 20-80 % duty: the card boosts highest at its lowest voltage"
            }
            LoadShape::Both => "Both, each for half of every round",
        })
    }
}

/// What each checked card gets: its settings and fan curve (from the profile, or none).
struct Target {
    index: u32,
    settings: Vec<Setting>,
    fan_curve: Option<FanCurve>,
}

/// Runs `gputune stability`; the exit status: 0 every card stable, 1 one unstable, 2 one
/// could not be checked, 130 stopped.
pub fn run_command(args: &StabilityArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    if args.put_back {
        put_back(args, options)
    } else if args.together {
        together::run(args, options)
    } else {
        check_each(args, options)
    }
}

/// Checks every listed card at once, each on its own.
fn check_each(args: &StabilityArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    let check_options =
        CheckOptions::new(args.duration_s, args.pattern).map_err(anyhow::Error::msg)?;
    let mut messages = std::io::stderr();
    let stored = match &args.profile {
        Some(name) => {
            let store = ProfileStore::open(&options.folders)?;
            let stored = store.load(name)?;
            Some((store, stored))
        }
        None => None,
    };
    let mut client = connect_for(options, "check", &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let preferred = stored
        .as_ref()
        .map(|(_, stored)| stored.profile.card.uuid.clone());
    let indices = choose_gpus(&snapshot, args.gpu.as_deref(), preferred.as_deref())?;
    let mut targets = Vec::new();
    for index in indices {
        let gpu = &snapshot.gpus[index as usize];
        let (settings, fan_curve) = match &stored {
            Some((_, stored)) => {
                let application = stored.profile.to_check_on(&gpu.identity, &gpu.constraints);
                for notice in &application.notices {
                    let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
                }
                (application.settings, application.fan_curve)
            }
            None => (Vec::new(), None),
        };
        targets.push(Target {
            index,
            settings,
            fan_curve,
        });
    }
    let stop = crate::cli::signals::install_stop_signal(2)?;
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;
    let processes = gpu_processes(&mut client, &snapshot.latest, PROCESSES_WAIT);
    let mut checks = Vec::new();
    let mut not_run = Vec::new();
    for target in &targets {
        let gpu = &snapshot.gpus[target.index as usize];
        let Some(tuning) = snapshot.tunings.get(target.index as usize) else {
            bail!("The tuning engine sent no state for GPU {}.", target.index);
        };
        if let Err(message) = refuse_if_held_elsewhere(&client, &options.folders, gpu, "check") {
            not_run.push(message);
            continue;
        }
        let other_work = OtherWork {
            processes: processes.get(target.index as usize).cloned().flatten(),
            force: args.force,
            force_hint: ", or check beside them with --force".to_string(),
        };
        let device = match crate::stability::device::open_for(&gpu.identity) {
            Ok(device) => device,
            Err(error) => {
                not_run.push(format!(
                    "GPU {} ({}): {error}",
                    target.index, gpu.identity.name
                ));
                continue;
            }
        };
        let setup = CheckSetup {
            settings: &target.settings,
            fan_curve: target.fan_curve.as_ref(),
            other_work: &other_work,
        };
        match CardCheck::start(&mut client, gpu, tuning, &setup, check_options, device) {
            Ok(check) => {
                let _ = writeln!(
                    messages,
                    "gputune: checking GPU {} ({}) for {} ({} load){}; Ctrl-C stops it.",
                    target.index,
                    gpu.identity.name,
                    gputune_formats::units::duration_s(check_options.duration_s),
                    check_options.shape.as_str(),
                    if target.settings.is_empty() && target.fan_curve.is_none() {
                        " at its current settings, changing nothing".to_string()
                    } else {
                        format!(
                            " with {} held until the check ends",
                            crate::tuning::describe_all(&target.settings)
                        )
                    }
                );
                checks.push(check);
            }
            Err(message) => not_run.push(message),
        }
    }
    for line in &not_run {
        let _ = writeln!(messages, "gputune: {line}");
    }
    drive(&mut client, &mut Checks(&mut checks), &stop, &mut messages);
    let reports: Vec<CheckReport> = checks
        .iter()
        .filter_map(|check| check.report().cloned())
        .collect();
    print_reports(&reports, args.json)?;
    if let Some((store, stored)) = &stored {
        save_records(store, stored, &reports, &targets, &mut messages);
    }
    if stored.is_none() {
        say_how_to_put_back(&mut client, options, &reports, &mut messages);
    }
    Ok(exit_code(&reports, !not_run.is_empty()))
}

/// Every card's check, driven together.
struct Checks<'a>(&'a mut [CardCheck]);

impl Driven for Checks<'_> {
    fn take_event(&mut self, event: &Event) {
        for check in self.0.iter_mut() {
            check.take_event(event);
        }
    }

    fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        for check in self.0.iter_mut() {
            check.stop(client, reason);
        }
    }

    fn tick(&mut self, client: &mut TuningClient) -> bool {
        let mut all_done = true;
        for check in self.0.iter_mut() {
            all_done &= check.tick(client).is_some();
        }
        all_done
    }

    fn progress(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|check| check.report().is_none())
            .map(|check| {
                let progress = check.progress();
                format!(
                    "GPU {}: {} of {}, {}: {} results checked, {} wrong; {}",
                    progress.gpu_index,
                    gputune_formats::units::duration_s(progress.elapsed_s),
                    gputune_formats::units::duration_s(progress.duration_s),
                    progress.activity,
                    gputune_formats::units::large_count(progress.results),
                    progress.wrong,
                    progress.readings
                )
            })
            .collect()
    }
}

fn print_reports(reports: &[CheckReport], json: bool) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    if json {
        let report = StabilityReport {
            format_version: STABILITY_REPORT_FORMAT,
            checks: reports,
        };
        crate::text::write_json_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
        return Ok(());
    }
    for report in reports {
        for line in &report.put_back {
            writeln!(std::io::stderr(), "gputune: {line}")?;
        }
        writeln!(stdout, "{}: {}", report.card(), report.sentence())?;
        if let Some(rates) = report.rates() {
            writeln!(stdout, "  {rates}")?;
        }
        if report.is_short() && report.verdict == Verdict::Stable {
            writeln!(
                stdout,
                "  A thorough check: --duration-s {:.0} (the default).",
                gputune_formats::reports::stability::THOROUGH_CHECK_S
            )?;
        }
    }
    Ok(())
}

/// Saves the verdicts in the profile: each card's own entry (the offsets held there, kept when
/// stable, removed when unstable), and the record of the last check, naming the card checked:
/// the profile's own card's when it was checked, else another card's (which counts only on
/// that card), never over a record of the profile's own card.
fn save_records(
    store: &ProfileStore,
    stored: &crate::profiles::store::StoredProfile,
    reports: &[CheckReport],
    targets: &[Target],
    messages: &mut dyn Write,
) {
    let mut profile = stored.profile.clone();
    // Only an undervolt is checked per card.
    let undervolt = stored.profile.sets_offsets();
    for report in reports.iter().filter(|_| undervolt) {
        let Some(target) = targets
            .iter()
            .find(|target| target.index == report.gpu_index)
        else {
            continue;
        };
        let (gpu_clock_offset_mhz, memory_clock_offset_mhz) =
            crate::profiles::checked::offsets_in(&target.settings);
        profile.record_checked_card(gputune_formats::profile::CheckedCard {
            gpu_uuid: report.gpu_uuid.clone(),
            gpu_name: report.gpu_name.clone(),
            gpu_clock_offset_mhz,
            memory_clock_offset_mhz,
            checked_at_ms: report.ended_at_ms,
            ran_s: report.result.ran_s,
            by: gputune_formats::profile::CheckedBy::Check,
            verdict: report.verdict,
        });
    }
    let entries_changed = profile.checked_cards != stored.profile.checked_cards;
    let profile_card = &stored.profile.card.uuid;
    let checked = reports
        .iter()
        .filter(|report| report.verdict != Verdict::NotRun);
    let mut on_its_card = checked
        .clone()
        .filter(|report| stored.profile.is_for(&report.gpu_uuid));
    let Some(report) = on_its_card.next().or_else(|| checked.clone().next()) else {
        return;
    };
    let keeps_own_record = !stored.profile.is_for(&report.gpu_uuid)
        && stored
            .profile
            .last_check
            .as_ref()
            .is_some_and(|record| record.counts_on(profile_card));
    if keeps_own_record {
        let _ = writeln!(
            messages,
            "gputune: the profile \"{}\" keeps the last check of its own card ({}); the verdict on {} is kept as that card's own.",
            stored.profile.name,
            stored.profile.card.uuid,
            report.card(),
        );
        if !entries_changed {
            return;
        }
    } else {
        profile.last_check = Some(report.record());
    }
    match store.save(&profile) {
        Ok(_) => {
            let _ = writeln!(
                messages,
                "gputune: the profile \"{}\" now says: {}; checked on {}.",
                profile.name,
                profile.check_text(),
                report.card()
            );
            for line in profile.checked_card_lines() {
                let _ = writeln!(messages, "gputune:   {line}");
            }
        }
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: the verdict could not be saved in the profile: {error}"
            );
        }
    }
}

fn exit_code(reports: &[CheckReport], some_not_run: bool) -> i32 {
    if reports
        .iter()
        .any(|report| report.verdict == Verdict::Unstable)
    {
        1
    } else if some_not_run
        || reports.is_empty()
        || reports
            .iter()
            .any(|report| report.verdict == Verdict::NotRun)
    {
        2
    } else if reports
        .iter()
        .any(|report| report.verdict == Verdict::Stopped)
    {
        130
    } else {
        0
    }
}
