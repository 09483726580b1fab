//! `gputune stability --together`: the box check (`stability::together`), every listed card at
//! once and in phase; prints the box's verdict, each step's box power and each card's line.

use std::io::Write;

use super::StabilityArgs;
use crate::cli::connect::{TuningOptions, choose_gpus, connect_for, refusal, snapshot};
use crate::cli::drive::{gpu_processes, refuse_if_held_elsewhere};
use crate::stability::rounds::CheckOptions;
use crate::stability::together::{BoxPlan, BoxProgress, run_box_check};
use gputune_formats::profile::Verdict;
use gputune_formats::protocol::Request;
use gputune_formats::reports::box_check::{BoxCheckReport, watts_text};
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::units::duration_s;

/// Readings while the box is checked: twice a second, as a single-card check.
const SAMPLE_INTERVAL_MS: u64 = 500;
/// A progress line this often.
const PROGRESS_EVERY_S: f64 = 10.0;

/// Runs the box check; the exit status: 0 the box stable, 1 a card failed, 2 nothing checked,
/// 130 stopped.
pub fn run(args: &StabilityArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    // The duration's range is a single-card check's.
    CheckOptions::new(args.duration_s, LoadShape::Full).map_err(anyhow::Error::msg)?;
    let mut messages = std::io::stderr();
    let mut client = connect_for(options, "check", &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let indices = choose_gpus(&snapshot, Some(args.gpu.as_deref().unwrap_or("all")), None)?;
    let stop = crate::cli::signals::install_stop_signal(2)?;
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;
    let processes = gpu_processes(&mut client, &snapshot.latest, super::PROCESSES_WAIT);
    for index in &indices {
        let gpu = &snapshot.gpus[*index as usize];
        if let Err(message) = refuse_if_held_elsewhere(&client, &options.folders, gpu, "box check")
        {
            let _ = writeln!(messages, "gputune: {message}");
            return Ok(2);
        }
    }
    let plan = BoxPlan::of(
        &snapshot,
        &indices,
        &processes,
        args.force,
        args.duration_s,
        args.clock_cap_mhz,
    )
    .map_err(anyhow::Error::msg)?;
    let identities: Vec<_> = plan.gpus.iter().map(|gpu| gpu.identity.clone()).collect();
    let devices = match crate::stability::device::open_for_box(&identities) {
        Ok(devices) => devices,
        Err(error) => {
            let _ = writeln!(
                messages,
                "gputune: {error} The box check did not start; nothing was measured."
            );
            return Ok(2);
        }
    };
    let cap = args
        .clock_cap_mhz
        .map(|cap| format!(", every card capped at {cap} MHz"))
        .unwrap_or_default();
    let _ = writeln!(
        messages,
        "gputune: checking GPUs {} together, in phase, for {}{cap}: 10 ms, 50 ms and 1 s pulses, then full load; Ctrl-C stops it.",
        indices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        duration_s(args.duration_s)
    );
    let mut last_said_s = 0.0;
    let mut say = |progress: &BoxProgress| {
        if progress.elapsed_s - last_said_s >= PROGRESS_EVERY_S {
            last_said_s = progress.elapsed_s;
            let _ = writeln!(messages, "gputune: {}", progress_line(progress));
        }
    };
    let mut stop_asked = || {
        stop.try_recv()
            .ok()
            .map(|()| "stopped by Ctrl-C or SIGTERM".to_string())
    };
    let report = match run_box_check(&mut client, &plan, devices, &mut stop_asked, &mut say) {
        Ok(report) => report,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "gputune: {message}");
            return Ok(2);
        }
    };
    print_report(&report, args.json)?;
    Ok(match report.verdict {
        Verdict::Stable => 0,
        Verdict::Unstable => 1,
        Verdict::NotRun => 2,
        Verdict::Stopped => 130,
    })
}

/// "box check: 12 s of 60 s, 10 ms pulses every 20 ms (50 % duty), box 3,410 W".
pub fn progress_line(progress: &BoxProgress) -> String {
    let power = progress
        .box_power_w
        .map(|watts| format!(", box {}", watts_text(watts)))
        .unwrap_or_default();
    let wrong: u64 = progress.cards.iter().map(|card| card.wrong).sum();
    format!(
        "box check: {} of {}, {}{power}, {} wrong",
        duration_s(progress.elapsed_s),
        duration_s(progress.duration_s),
        progress.stage,
        wrong
    )
}

fn print_report(report: &BoxCheckReport, json: bool) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    if json {
        crate::text::write_json_pretty(&mut stdout, report)?;
        writeln!(stdout)?;
        return Ok(());
    }
    for line in &report.put_back {
        writeln!(std::io::stderr(), "gputune: {line}")?;
    }
    writeln!(stdout, "{}", report.sentence)?;
    for step in &report.steps {
        if step.seconds <= 0.0 && step.box_power_mean_w.is_none() {
            writeln!(stdout, "  {}: not reached", step.step.describe())?;
            continue;
        }
        let watts = |value: Option<f64>| value.map_or_else(|| "n/a".to_string(), watts_text);
        let spread = step
            .edge_spread_max_ms
            .map(|ms| {
                let edges = if step.edges == 1 { "edge" } else { "edges" };
                format!(", {} {edges} within {ms:.1} ms", step.edges)
            })
            .unwrap_or_default();
        writeln!(
            stdout,
            "  {}: box {} average, {} peak{spread}",
            step.step.describe(),
            watts(step.box_power_mean_w),
            watts(step.box_power_peak_w)
        )?;
    }
    for card in &report.cards {
        writeln!(stdout, "  {}: {}", card.card(), card.sentence())?;
    }
    Ok(())
}
