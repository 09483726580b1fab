//! The sweep while it runs: the job's progress and the service's readings to the sweep, the
//! sweep's news said on stderr, Ctrl-C and the job's end.

use std::io::Write;
use std::process::ExitStatus;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use crate::job::feed::FeedMessage;
use crate::job::{Job, ended_sentence, exit_code_of};
use crate::service::client::TuningClient;
use crate::sweep::runner::{Sweep, SweepUpdate};
use gputune_formats::protocol::Event;
use gputune_formats::reports::sweep::{SweepEnd, SweepOutcome};
use gputune_formats::tuning::EngineEvent;

/// How often the loop looks at the job, its progress and the service.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Drives the sweep until it ends (handing its outcome to `finished` at once), then waits
/// for the job, its output still passed on; returns how the job ended, `None` without a job.
/// A Ctrl-C or SIGTERM stops the sweep (the card is put back) and the job by its policy.
pub(super) fn supervise(
    sweep: &mut Sweep,
    mut job: Option<Job>,
    client: &mut TuningClient,
    progress: &Receiver<FeedMessage>,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
    finished: &mut dyn FnMut(&SweepOutcome, &mut dyn Write),
) -> anyhow::Result<Option<ExitStatus>> {
    let mut said_sweep_over = false;
    let mut report_once = |sweep: &Sweep, messages: &mut dyn Write, said: &mut bool| {
        if !*said && let Some(outcome) = sweep.outcome() {
            *said = true;
            // A failure (a refusal naming the card's holder) is said on stderr first; the
            // table on stdout repeats it.
            if let SweepEnd::Failed { reason } = &outcome.ended {
                let _ = writeln!(messages, "gputune: {reason}");
            }
            finished(outcome, messages);
        }
    };
    loop {
        take_progress(sweep, progress, messages);
        if stop.try_recv().is_ok() {
            if !sweep.is_finished() {
                let _ = writeln!(
                    messages,
                    "gputune: stopping the sweep; {} put back.",
                    the_cards(sweep)
                );
                sweep.stop(
                    client,
                    SweepEnd::Stopped {
                        reason: "Interrupted (Ctrl-C or SIGTERM).".to_string(),
                    },
                );
            }
            if let Some(job) = job.as_mut() {
                let _ = writeln!(messages, "gputune: {}", job.stop().sentence());
            }
        }
        if let Some(child) = job.as_mut()
            && let Some(status) = child.poll_or_end(messages)?
        {
            job_ended(sweep, client, status, messages);
            drain_updates(sweep, messages);
            report_once(sweep, messages, &mut said_sweep_over);
            return Ok(Some(status));
        }
        if sweep.is_finished() {
            std::thread::sleep(POLL_INTERVAL);
        } else {
            follow_the_service(sweep, client, messages);
        }
        drain_updates(sweep, messages);
        if sweep.is_finished() {
            let first_time = !said_sweep_over;
            report_once(sweep, messages, &mut said_sweep_over);
            if job.is_none() {
                return Ok(None);
            }
            if first_time {
                let status = match sweep.outcome().map(|outcome| &outcome.ended) {
                    Some(SweepEnd::Failed { .. }) => {
                        "gputune waits for it, then exits with status 1 as the sweep failed, or with the command's own status if that is an error"
                    }
                    _ => "gputune waits for it and passes on its exit status",
                };
                let settings = if sweep.gpu_indices().len() > 1 {
                    "the cards' own settings"
                } else {
                    "the card's own settings"
                };
                let _ = writeln!(
                    messages,
                    "gputune: the sweep is over; the command goes on at {settings} ({status})."
                );
            }
        }
    }
}

/// The progress read since the last look, to the sweep; the sources' notes said.
fn take_progress(sweep: &mut Sweep, progress: &Receiver<FeedMessage>, messages: &mut dyn Write) {
    while let Ok(message) = progress.try_recv() {
        match message {
            FeedMessage::Reading(reading) => sweep.on_progress(reading),
            FeedMessage::Note(note) => {
                let _ = writeln!(messages, "gputune: {note}");
            }
        }
    }
}

/// The service's next event (or a poll's wait) to the sweep, then its tick; a lost service
/// ends the sweep.
fn follow_the_service(sweep: &mut Sweep, client: &mut TuningClient, messages: &mut dyn Write) {
    match client.next_event(POLL_INTERVAL) {
        Ok(Some(event)) => {
            say_notice(&sweep.gpu_indices(), &event, messages);
            sweep.on_event(&event);
        }
        Ok(None) => {}
        Err(error) => {
            sweep.stop(
                client,
                SweepEnd::Failed {
                    reason: format!("{error} The daemon put the card back."),
                },
            );
        }
    }
    sweep.tick(client);
}

fn job_ended(
    sweep: &mut Sweep,
    client: &mut TuningClient,
    status: ExitStatus,
    messages: &mut dyn Write,
) {
    let _ = writeln!(messages, "gputune: {}", ended_sentence(status));
    if sweep.is_finished() {
        return;
    }
    let exit_code = exit_code_of(status);
    let ended = if exit_code == 0 {
        SweepEnd::Stopped {
            reason: "The command ended before the sweep did.".to_string(),
        }
    } else {
        SweepEnd::JobFailed {
            exit_code,
            message: ended_sentence(status),
        }
    };
    sweep.stop(client, ended);
}

/// "the card is", or "the cards are" for a sweep of several.
fn the_cards(sweep: &Sweep) -> &'static str {
    if sweep.gpu_indices().len() > 1 {
        "the cards are"
    } else {
        "the card is"
    }
}

fn say_notice(gpu_indices: &[u32], event: &Event, messages: &mut dyn Write) {
    if let Event::Engine { event } = event
        && let EngineEvent::Notice {
            gpu_index: about,
            notice,
        } = event.as_ref()
        && about.is_none_or(|about| gpu_indices.contains(&about))
    {
        let _ = writeln!(messages, "gputune: {}: {notice}", notice.level_word());
    }
}

fn drain_updates(sweep: &mut Sweep, messages: &mut dyn Write) {
    for update in sweep.take_updates() {
        let line = match update {
            SweepUpdate::Measuring {
                by_proxy_unless_progress,
            } => {
                if by_proxy_unless_progress {
                    "no progress from the job yet; starting (it is measured by the GPU-side proxy unless progress shows during the first setting).".to_string()
                } else {
                    "the job's progress shows; starting.".to_string()
                }
            }
            SweepUpdate::StepStarted {
                index,
                count,
                label,
            } => format!("[{}/{count}] {label}", index + 1),
            SweepUpdate::StepMeasured(result) => {
                let unit = sweep
                    .measured_by()
                    .map_or_else(|| "unit".to_string(), |by| by.unit_name());
                format!(
                    "{}: {}, {}, {}{}",
                    result.step.label,
                    result.throughput.map_or_else(
                        || format!("no {unit}s measured"),
                        |throughput| format!(
                            "{:.3} {unit}/s{}",
                            throughput.units_per_s,
                            throughput
                                .spread_pct
                                .map_or_else(String::new, |spread| format!(" (±{spread:.1} %)"))
                        )
                    ),
                    result
                        .average_power_w
                        .map_or_else(|| "power n/a".to_string(), |watts| format!("{watts:.0} W")),
                    result.energy_per_unit_j.map_or_else(
                        || "energy n/a".to_string(),
                        |joules| format!("{joules:.3} J/{unit}")
                    ),
                    result
                        .unstable
                        .as_ref()
                        .map_or_else(String::new, |why| format!(" — unstable: {why}"))
                )
            }
            SweepUpdate::Note(note) => note,
            SweepUpdate::Finished(_) => continue,
        };
        let _ = writeln!(messages, "gputune: {line}");
    }
}
