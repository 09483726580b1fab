//! `gputune rank`: the same checked GEMM load on each listed card at the same settings, alone
//! then together; a table of each card's rate, clocks, power, temperature and time throttled,
//! a sentence per card (against the best, the cause, a power limit that evens the box) and
//! the box's pace. `--json` prints the figures behind them. Changes no setting.

use std::io::Write;

use anyhow::bail;
use clap::Args;

use crate::cli::connect::{TuningOptions, choose_gpus, connect_for, refusal, snapshot};
use crate::cli::drive::{gpu_processes, refuse_if_held_elsewhere};
use crate::rank::drive::{drive, targets};
use crate::rank::engine::same_settings;
use crate::rank::options::{DEFAULT_TOGETHER_S, RankOptions};
use crate::rank::verdict::signed_pct;
use crate::rank::{RankProgress, Ranking};
use gputune_formats::protocol::Request;
use gputune_formats::reports::rank::{CardRank, PhaseFigures, RankReport, RankVerdict};
use gputune_formats::throttle::ThrottleReason;

/// Readings while the cards run: twice a second.
const SAMPLE_INTERVAL_MS: u64 = 500;
/// The longest wait for the first readings, which list the processes on each card.
const PROCESSES_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// A progress line this often (progress comes once a second).
const PROGRESS_EVERY: u32 = 10;

#[derive(Debug, Clone, Args)]
pub struct RankArgs {
    /// The GPUs: `all` (the default), or indices or UUIDs separated by commas.
    #[arg(long, default_value = "all")]
    pub gpu: String,
    /// Seconds of load on all the cards together (300: long enough for a hot slot's heat to
    /// show); each card runs alone first, for half of it, at most 30 s.
    #[arg(long, default_value_t = DEFAULT_TOGETHER_S)]
    pub duration_s: f64,
    /// Print the figures behind the table as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Rank even beside other programs computing on a card, or cards at different settings.
    #[arg(long)]
    pub force: bool,
}

/// Runs `gputune rank`; the exit status: 0 every card within 10 % of the best, 1 one slower or
/// computing wrong, 2 nothing ranked, 130 stopped.
pub fn run_command(args: &RankArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    let rank_options = RankOptions::new(args.duration_s, args.force).map_err(anyhow::Error::msg)?;
    let mut messages = std::io::stderr();
    let mut client = connect_for(options, "rank", &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let indices = choose_gpus(&snapshot, Some(&args.gpu), None)?;
    for &index in &indices {
        if let Err(message) = refuse_if_held_elsewhere(
            &client,
            &options.folders,
            &snapshot.gpus[index as usize],
            "ranking",
        ) {
            bail!(message);
        }
    }
    // Refused before waiting for readings: different settings need no measuring to see.
    let mut targets = targets(&mut client, &indices).map_err(anyhow::Error::msg)?;
    same_settings(&targets, args.force).map_err(anyhow::Error::msg)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;
    let processes = gpu_processes(&mut client, &snapshot.latest, PROCESSES_WAIT);
    for target in &mut targets {
        if let Some(listed) = processes.get(target.gpu.identity.index as usize) {
            target.processes = listed.clone();
        }
    }
    let ranking = Ranking::start(
        &mut client,
        &targets,
        rank_options,
        &crate::stability::device::open_for,
    )
    .map_err(anyhow::Error::msg)?;
    let _ = writeln!(
        messages,
        "gputune: ranking {} cards at their current settings, changing nothing: each alone for {}, then all together for {} (about {}); Ctrl-C stops it.",
        targets.len(),
        gputune_formats::units::duration_s(rank_options.alone_s),
        gputune_formats::units::duration_s(rank_options.together_s),
        gputune_formats::units::duration_s(rank_options.total_s(targets.len()))
    );
    let mut ticks = 0u32;
    let mut on_progress = |progress: &RankProgress| {
        ticks += 1;
        if ticks.is_multiple_of(PROGRESS_EVERY) {
            say_progress(progress, &mut std::io::stderr());
        }
    };
    let report = drive(&mut client, ranking, &mut on_progress, &|| {
        stop.try_recv().is_ok()
    });
    for line in &report.put_back {
        let _ = writeln!(messages, "gputune: {line}");
    }
    let mut stdout = std::io::stdout();
    if args.json {
        crate::text::write_json_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        print_table(&report, &mut stdout)?;
    }
    Ok(exit_code(&report))
}

fn say_progress(progress: &RankProgress, out: &mut dyn Write) {
    let _ = writeln!(
        out,
        "gputune: {}: {} of {}, about {} left",
        progress.phase,
        gputune_formats::units::duration_s(progress.phase_elapsed_s),
        gputune_formats::units::duration_s(progress.phase_s),
        gputune_formats::units::duration_s(progress.left_s)
    );
    for line in &progress.cards {
        let _ = writeln!(out, "gputune:   {line}");
    }
}

/// The table, each card's sentence, then the box's.
pub fn print_table(report: &RankReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Ranked at {}{}: each card alone for {}, then all {} together for {}.",
        report.settings,
        if report.forced_different_settings {
            " (different settings, forced)"
        } else {
            ""
        },
        gputune_formats::units::duration_s(report.alone_s),
        report.cards.len(),
        gputune_formats::units::duration_s(report.together_s)
    )?;
    writeln!(
        out,
        "{:<4} {:>14} {:>16} {:>8} {:>6} {:>5} {:>11}  throttled together",
        "GPU", "TFLOP/s alone", "TFLOP/s together", "vs best", "MHz", "W", "°C peak/end"
    )?;
    for card in &report.cards {
        writeln!(out, "{}", row(card, report.best_gpu_index))?;
    }
    writeln!(out)?;
    for card in &report.cards {
        writeln!(out, "{}", card.sentence)?;
    }
    for line in &report.summary {
        writeln!(out, "{line}")?;
    }
    if let Some(reason) = &report.stopped {
        writeln!(
            out,
            "Stopped before the end ({reason}): the figures cover what ran."
        )?;
    }
    Ok(())
}

fn row(card: &CardRank, best: Option<u32>) -> String {
    let rate = |figures: &Option<PhaseFigures>| {
        figures
            .as_ref()
            .and_then(|f| f.gemm_tflops)
            .map_or_else(|| "-".to_string(), |rate| format!("{rate:.1}"))
    };
    let shown = card.together.as_ref().or(card.alone.as_ref());
    let vs_best = match (card.verdict, card.vs_best_pct) {
        (RankVerdict::Failed, _) => "fails".to_string(),
        _ if best == Some(card.gpu_index) => "best".to_string(),
        (_, Some(pct)) => signed_pct(pct),
        (_, None) => "-".to_string(),
    };
    let number = |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let temperatures = shown.map_or_else(
        || "-".to_string(),
        |f| {
            format!(
                "{}/{}",
                f.temperature_peak_c
                    .map_or("-".to_string(), |t| t.to_string()),
                f.temperature_end_c
                    .map_or("-".to_string(), |t| t.to_string())
            )
        },
    );
    format!(
        "{:<4} {:>14} {:>16} {:>8} {:>6} {:>5} {:>11}  {}",
        card.gpu_index,
        rate(&card.alone),
        rate(&card.together),
        vs_best,
        number(shown.and_then(|f| f.clock_mean_mhz)),
        number(shown.and_then(|f| f.power_mean_w)),
        temperatures,
        card.together
            .as_ref()
            .map_or_else(|| "-".to_string(), throttled)
    )
}

/// "thermal 64 %, power 36 %"; "none".
fn throttled(figures: &PhaseFigures) -> String {
    let shares: Vec<String> = figures
        .throttled
        .iter()
        .filter(|share| share.time_pct >= 0.5)
        .map(|share| {
            let name = match share.reason {
                ThrottleReason::SwPowerCap => "power".to_string(),
                ThrottleReason::SwThermalSlowdown => "thermal".to_string(),
                other => other.label().to_lowercase(),
            };
            format!("{name} {:.0} %", share.time_pct)
        })
        .collect();
    if shares.is_empty() {
        "none".to_string()
    } else {
        shares.join(", ")
    }
}

fn exit_code(report: &RankReport) -> i32 {
    let verdicts = || report.cards.iter().map(|card| card.verdict);
    if verdicts().any(|v| matches!(v, RankVerdict::Slow | RankVerdict::Failed)) {
        1
    } else if report.stopped.is_some() {
        130
    } else if verdicts().all(|v| v == RankVerdict::NotRanked) {
        2
    } else {
        0
    }
}
