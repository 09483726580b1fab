//! `gputune run --profile NAME -- COMMAND ARGS...`: a profile in force for the length of one
//! command. The profile is a session of the engine (the daemon's, or this process's): it is
//! applied, its fan curve followed, and everything is put back when the command ends — or when
//! this process dies (`kill -9` included), by the daemon when the connection drops, else by
//! the next start of gputune from the journal. The command itself is the `job` room's: it runs
//! as the user (never as root unless asked), in a process group of its own under a guard that
//! ends every process it starts, and is stopped by the one policy (SIGTERM to its group, a
//! grace, SIGKILL). At the end: duration, energy, average power and peak temperature. With
//! several cards (`--gpu 0,1,2,3`, `all`, or a profile saved for a box) the profile is one
//! session over all of them, put back together, and the closing figures are the box's.

use crate::profiles::profile::ProfileOnCard;
use crate::stability::record::RecordedCheck;
mod energy;
mod watch;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub(crate) use energy::{cost_sentence, run_line};
use watch::{SAMPLE_INTERVAL_MS, WatchedCard, Watcher, name_the_job};

use crate::cli::connect::{
    TuningOptions, choose_gpus, connect_for_changes, refusal, snapshot, unexpected,
};
use crate::job::as_user::{InvokingUser, invoking_user, runs_as_sentence};
use crate::job::{EXIT_NOT_STARTED, Job, JobCommand, JobOutput, ended_sentence, exit_code_of};
use crate::job_energy::cost::{Price, user_price};
use crate::profiles::ProfileApplication;
use crate::profiles::store::{ProfileStore, StoredProfile};
use crate::service::client::TuningClient;
use crate::telemetry::csv::{TelemetryCsvWriter, open_for_append};
use crate::tuning::engine::report_lines;
use gputune_formats::profile::Profile;
use gputune_formats::protocol::{Request, Response, Snapshot};
use gputune_formats::tuning::{
    GpuChange, GpuFanCurve, GpuInfo, SessionId, SessionPurpose, SessionReport, SessionRequest,
};

/// How often gputune looks whether the command has ended.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// `gputune run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The profile to apply while the command runs.
    #[arg(long, value_name = "NAME")]
    pub profile: String,
    /// The GPU: an index or a UUID; several (0,1,2,3) or all for one job across them (default:
    /// the profile's cards, else the only GPU).
    #[arg(long, value_name = "UUID|INDEX|LIST|all")]
    pub gpu: Option<String>,
    /// Append the GPU's readings, once a second, to this CSV file (`gputune log`'s format).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Under sudo, run the command as root too (by default it runs as the user who ran sudo).
    #[arg(long)]
    pub keep_root: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs `gputune run`; returns the exit status gputune should end with (the command's).
pub fn run_command(args: &RunArgs, options: &TuningOptions) -> anyhow::Result<i32> {
    // Who the command runs as is settled before anything is applied: a sudo environment that
    // names no real user refuses the run here, with the card untouched.
    let run_as = invoking_user(args.keep_root).map_err(anyhow::Error::msg)?;
    let store = ProfileStore::open(&options.folders)?;
    let stored = store.load(&args.profile)?;
    let mut messages = std::io::stderr();
    let mut client = connect_for_changes(options, &mut messages)?;
    let snapshot = snapshot(&mut client)?;
    let indices = run_cards(&snapshot, args.gpu.as_deref(), &stored.profile)?;
    let cards: Vec<RunCard> = indices
        .iter()
        .filter_map(|index| {
            let gpu = snapshot.gpus.get(*index as usize)?.clone();
            let application = stored.profile.for_card(&gpu.identity, &gpu.constraints);
            Some(RunCard {
                index: *index,
                gpu,
                application,
            })
        })
        .collect();
    for card in &cards {
        for notice in &card.application.notices {
            let on = if cards.len() > 1 {
                format!("GPU {}: ", card.index)
            } else {
                String::new()
            };
            let _ = writeln!(messages, "gputune: {}: {on}{notice}", notice.level_word());
        }
    }
    let log = match &args.log {
        Some(path) => {
            let (file, needs_header) = open_for_append(path)?;
            Some(TelemetryCsvWriter::new(file, needs_header).with_destination_name(path))
        }
        None => None,
    };
    let stop = crate::cli::signals::install_stop_signal(2)?;
    let session = start_session(&mut client, &stored, &cards, &mut messages)?;
    client
        .request(Request::Subscribe {
            interval_ms: SAMPLE_INTERVAL_MS,
        })
        .map_err(refusal)?;
    let mut watcher = Watcher {
        cards: cards
            .iter()
            .map(|card| WatchedCard {
                index: card.index,
                identity: card.gpu.identity.clone(),
                samples: Vec::new(),
            })
            .collect(),
        log,
        log_failed: false,
        ended_by_engine: None,
    };
    // A reading at each end, so the log and the energy span the whole command.
    watcher.wait_for_reading(&mut client, &mut messages);
    let started = Instant::now();
    let started_ms = crate::clock::wall_clock_ms();
    let status = match start_job(args, run_as.as_ref(), &mut messages) {
        Some(mut job) => {
            if let Some(session) = session {
                name_the_job(&mut client, session, job.pid(), &mut messages);
            }
            Some(supervise(
                &mut job,
                &mut client,
                &mut watcher,
                &stop,
                &mut messages,
            )?)
        }
        None => None,
    };
    let duration_s = started.elapsed().as_secs_f64();
    watcher.wait_for_reading(&mut client, &mut messages);
    if let Some(writer) = watcher.log.as_mut()
        && let Err(error) = writer.flush()
    {
        let _ = writeln!(messages, "gputune: {error}");
    }
    let report = end_session(&mut client, session, &mut watcher, &mut messages)?;
    let closing = Closing {
        started_ms,
        duration_s,
        status,
    };
    Ok(say_the_end(
        &mut client,
        options,
        &watcher,
        report.as_ref(),
        &closing,
        &mut messages,
    ))
}

/// A card the run applies the profile to.
struct RunCard {
    index: u32,
    gpu: GpuInfo,
    application: ProfileApplication,
}

/// The cards of the run: those `--gpu` names; without it, a box profile's cards (each must be
/// here), else the profile's own card or the only GPU.
fn run_cards(
    snapshot: &Snapshot,
    query: Option<&str>,
    profile: &Profile,
) -> anyhow::Result<Vec<u32>> {
    if query.is_some() || profile.box_cards.is_empty() {
        return choose_gpus(snapshot, query, Some(&profile.card.uuid));
    }
    profile
        .box_cards
        .iter()
        .map(|card| {
            let found = snapshot.gpus.iter().position(|gpu| {
                gpu.identity
                    .uuid
                    .eq_ignore_ascii_case(card.gpu_uuid.trim())
            });
            match found {
                Some(index) => Ok(index as u32),
                None => Err(anyhow::anyhow!(
                    "The profile \"{}\" covers {} cards, and {} ({}) is not in this machine: name the cards to use with --gpu.",
                    profile.name,
                    profile.box_cards.len(),
                    crate::text::printable(&card.gpu_uuid),
                    crate::text::printable(&card.gpu_name)
                )),
            }
        })
        .collect()
}

/// Starts the profile's session over every card (`None` when the profile changes nothing on
/// them) and says what was applied.
fn start_session(
    client: &mut TuningClient,
    stored: &StoredProfile,
    cards: &[RunCard],
    messages: &mut dyn Write,
) -> anyhow::Result<Option<SessionId>> {
    let request = SessionRequest {
        purpose: SessionPurpose::Run,
        changes: cards
            .iter()
            .filter(|card| !card.application.settings.is_empty())
            .map(|card| GpuChange {
                gpu_uuid: card.gpu.identity.uuid.clone(),
                settings: card.application.settings.clone(),
            })
            .collect(),
        fan_curves: cards
            .iter()
            .filter_map(|card| {
                Some(GpuFanCurve {
                    gpu_uuid: card.gpu.identity.uuid.clone(),
                    curve: card.application.fan_curve.clone()?,
                })
            })
            .collect(),
        job_pid: None,
        job: None,
    };
    let session = if request.changes.is_empty() && request.fan_curves.is_empty() {
        let on = cards
            .iter()
            .map(|card| card.index.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let _ = writeln!(
            messages,
            "gputune: the profile \"{}\" changes nothing on GPU {on}; the command runs as it is.",
            stored.profile.name
        );
        None
    } else {
        match client
            .request(Request::StartSession { session: request })
            .map_err(refusal)?
        {
            Response::SessionStarted(started) => Some(started.session),
            other => return Err(unexpected(&other)),
        }
    };
    for card in cards {
        let (index, gpu, application) = (card.index, &card.gpu, &card.application);
        let _ = writeln!(
            messages,
            "gputune: applied the profile \"{}\"{} to GPU {index} ({}){}{}; restored when the command ends.",
            stored.profile.name,
            // A profile never checked on this card: its notice said so above.
            stored
                .profile
                .last_check
                .as_ref()
                .filter(|record| record.counts_on(&gpu.identity.uuid))
                .map(|record| format!(" ({})", record.describe()))
                .unwrap_or_default(),
            gpu.identity.name,
            if application.settings.is_empty() {
                String::new()
            } else {
                format!(": {}", crate::tuning::describe_all(&application.settings))
            },
            if application.fan_curve.is_some() {
                ", following its fan curve"
            } else {
                ""
            }
        );
    }
    Ok(session)
}

/// Ends the session (unless the engine ended it first) and returns its report.
fn end_session(
    client: &mut TuningClient,
    session: Option<SessionId>,
    watcher: &mut Watcher,
    messages: &mut dyn Write,
) -> anyhow::Result<Option<SessionReport>> {
    Ok(match (session, watcher.ended_by_engine.take()) {
        (_, Some(report)) => Some(report),
        (Some(session), None) => match client.request(Request::EndSession {
            session,
            keep: false,
        }) {
            Ok(Response::SessionEnded { report }) => Some(report),
            Ok(other) => return Err(unexpected(&other)),
            Err(error) => {
                let _ = writeln!(
                    messages,
                    "gputune: the connection to the tuning service was lost ({error}), so the session could not be ended from here: whether the card was put back cannot be known here. A daemon that still runs puts it back as the connection closes; one that died puts it back from its journal when it starts again. `gputune status` shows what the card runs now."
                );
                None
            }
        },
        (None, None) => None,
    })
}

/// The command's window and how it ended (`None`: it never started).
struct Closing {
    started_ms: u64,
    duration_s: f64,
    status: Option<ExitStatus>,
}

/// The session's report, the figures, the cost and how the command ended; returns the exit
/// status gputune ends with.
fn say_the_end(
    client: &mut TuningClient,
    options: &TuningOptions,
    watcher: &Watcher,
    report: Option<&SessionReport>,
    closing: &Closing,
    messages: &mut dyn Write,
) -> i32 {
    let mut complete = true;
    if let Some(report) = report {
        complete = report.is_complete();
        for line in report_lines(report) {
            let _ = writeln!(messages, "gputune: {line}");
        }
    }
    let (samples, started_ms, duration_s) = (
        watcher.samples_by_card(),
        closing.started_ms,
        closing.duration_s,
    );
    // Every figure over the command's own window: the engine's session began before the
    // first reading and ends after the last, so its statistics cover another span.
    let _ = writeln!(
        messages,
        "gputune: {}",
        run_line(&samples, started_ms, duration_s)
    );
    // At the user's own price, else the daemon's.
    let price = user_price(options.folders.config_dir.as_deref(), messages).or_else(|| {
        client.welcome().job_price.clone().map(|config| Price {
            config,
            from: "the daemon's price".to_string(),
        })
    });
    if let Some(sentence) = cost_sentence(&samples, started_ms, duration_s, price.as_ref()) {
        let _ = writeln!(messages, "gputune: {sentence}");
    }
    let exit_code = match closing.status {
        Some(status) => {
            let _ = writeln!(messages, "gputune: {}", ended_sentence(status));
            exit_code_of(status)
        }
        None => EXIT_NOT_STARTED,
    };
    if !complete {
        let _ = writeln!(
            messages,
            "gputune: not every setting could be put back; the journal is kept, so the next start of gputune (or the daemon) tries again."
        );
        if exit_code == 0 {
            return 1;
        }
    }
    exit_code
}

/// Starts the command (as the invoking user under sudo); `None` when it cannot start.
fn start_job(
    args: &RunArgs,
    run_as: Option<&InvokingUser>,
    messages: &mut dyn Write,
) -> Option<Job> {
    if let Some(user) = run_as {
        let _ = writeln!(messages, "gputune: {}", runs_as_sentence(user));
    }
    let command = JobCommand {
        words: args.command.clone(),
        run_as: run_as.cloned(),
        output: JobOutput::Inherited,
        reads_stdin: true,
    };
    match Job::start(&command) {
        Ok(job) => Some(job),
        Err(sentence) => {
            let _ = writeln!(messages, "gputune: {sentence}");
            None
        }
    }
}

/// Waits for the command while taking readings; a Ctrl-C or SIGTERM stops it by the job's
/// policy (a second one kills it).
fn supervise(
    job: &mut Job,
    client: &mut TuningClient,
    watcher: &mut Watcher,
    stop: &Receiver<()>,
    messages: &mut dyn Write,
) -> anyhow::Result<ExitStatus> {
    loop {
        if let Some(status) = job.poll_or_end(messages)? {
            return Ok(status);
        }
        if stop.try_recv().is_ok() {
            if !job.is_stopping() {
                let _ = writeln!(
                    messages,
                    "gputune: the settings are restored when the command has ended."
                );
            }
            let stopping = job.stop();
            let _ = writeln!(messages, "gputune: {}", stopping.sentence());
        }
        match client.next_event(POLL_INTERVAL) {
            Ok(Some(event)) => watcher.take_event(event, messages),
            Ok(None) => {}
            Err(error) => {
                // The daemon went away: it put the card back as it stopped. The command goes on.
                if watcher.ended_by_engine.is_none() {
                    let _ = writeln!(messages, "gputune: {error}");
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
    }
}
