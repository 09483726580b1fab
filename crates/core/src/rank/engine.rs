//! The ranking as the CLI and the window both run it: the listed cards refused when busy or
//! at different settings, a session holding no control on each (every client sees the
//! ranking among the card's holders, as it sees a check), then the checked GEMM on one card
//! at a time (alone), then on all at once (together); the report once every session ended.
//! Never blocks: the caller passes every service event to [`Ranking::take_event`] and calls
//! [`Ranking::tick`] often; [`super::drive::rank_cards`] does both for a caller that may block.

use std::time::Instant;

use gputune_formats::card::{GpuIdentity, GpuProcess};
use gputune_formats::protocol::{Event, Request, Response};
use gputune_formats::reports::rank::{RANK_REPORT_FORMAT, RankReport};
use gputune_formats::tuning::{
    ClockLockInForce, GpuChange, GpuInfo, GpuTuning, SessionPurpose, SessionRequest,
    SettingsInForce, TuneErrorKind,
};

use super::lane::{Lane, Phase};
use super::options::RankOptions;
use super::verdict::rank;
use crate::service::client::TuningClient;
use crate::stability::busy::OtherWork;
use crate::stability::compute::{ComputeDevice, ComputeError};
use crate::stability::held::Held;
use crate::stability::report::describe_settings;
use crate::stability::run::SettingsSeen;
use crate::stability::worker::ComputeWorker;

/// One card to rank: what the service says of it.
#[derive(Debug, Clone)]
pub struct RankTarget {
    pub gpu: GpuInfo,
    pub tuning: GpuTuning,
    /// The processes on it (`None`: the driver did not list them).
    pub processes: Option<Vec<GpuProcess>>,
}

/// Opens the compute device for a card (`stability::device::open_for`, or a test's).
pub type OpenDevice<'a> = &'a dyn Fn(&GpuIdentity) -> Result<Box<dyn ComputeDevice>, ComputeError>;

/// Where the ranking stands, for a progress line or the window.
#[derive(Debug, Clone, PartialEq)]
pub struct RankProgress {
    /// "GPU 3 alone (4 of 8)", "all 8 together".
    pub phase: String,
    /// Seconds into this phase, of its length.
    pub phase_elapsed_s: f64,
    pub phase_s: f64,
    /// Seconds the whole ranking has left, about.
    pub left_s: f64,
    /// A line for each card under load now.
    pub cards: Vec<String>,
}

/// The longest wait for a first reading of every card before the first load: its idle point,
/// and the clock the simulated device computes at.
const FIRST_READINGS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for a reading of every card (since then).
    Waiting(Instant),
    /// The lane at this position runs alone.
    Alone(usize),
    Together,
    Finished,
}

/// The ranking; see the module's documentation.
pub struct Ranking {
    lanes: Vec<Lane>,
    options: RankOptions,
    settings: String,
    forced_settings: bool,
    settings_seen: Vec<SettingsSeen>,
    stage: Stage,
    started: Instant,
    stopped: Option<String>,
    report: Option<RankReport>,
}

/// What a ranking compares: the settings that change a card's speed.
fn speed_settings(
    in_force: &SettingsInForce,
) -> (
    Option<u32>,
    ClockLockInForce,
    ClockLockInForce,
    Option<i32>,
    Option<i32>,
) {
    (
        in_force.power_limit_mw,
        in_force.gpu_clock_lock,
        in_force.memory_clock_lock,
        in_force.gpu_clock_offset_mhz,
        in_force.memory_clock_offset_mhz,
    )
}

/// The settings text of a card, its power limit always named: "stock settings (450 W limit)".
fn settings_text(target: &RankTarget) -> String {
    let default_mw = target.gpu.constraints.power_limit_default_mw;
    let text = describe_settings(&target.tuning.in_force, default_mw);
    match target.tuning.in_force.power_limit_mw {
        Some(limit) if !text.contains("limit") => {
            format!("{text} ({} limit)", gputune_formats::units::watts(limit))
        }
        _ => text,
    }
}

/// The settings the cards all run, and whether they differ (ranked anyway, forced); a
/// refusal that says what to do when they differ and the ranking is not forced.
pub fn same_settings(targets: &[RankTarget], force: bool) -> Result<(String, bool), String> {
    let Some(first) = targets.first() else {
        return Err("There is no GPU to rank.".to_string());
    };
    let texts: Vec<String> = targets.iter().map(settings_text).collect();
    let first = speed_settings(&first.tuning.in_force);
    let differ = targets
        .iter()
        .any(|target| speed_settings(&target.tuning.in_force) != first);
    if !differ {
        return Ok((texts[0].clone(), false));
    }
    let each: Vec<String> = targets
        .iter()
        .zip(&texts)
        .map(|(target, text)| format!("GPU {}: {text}", target.gpu.identity.index))
        .collect();
    if force {
        return Ok((each.join("; "), true));
    }
    Err(format!(
        "The cards run different settings ({}), so their speeds would not compare. Give them the same power limit and clocks first (`gputune apply --gpu N …`, or `gputune profile apply` on each), or rank them as they are with --force. Nothing was measured.",
        each.join("; ")
    ))
}

impl Ranking {
    /// Refuses the whole ranking when a card is busy (another check or scan, other programs
    /// computing, unless forced) or the cards run different settings (unless forced); else
    /// opens every card's device, starts its session and the first card's load.
    pub fn start(
        client: &mut TuningClient,
        targets: &[RankTarget],
        options: RankOptions,
        open: OpenDevice<'_>,
    ) -> Result<Ranking, String> {
        let (settings, differ) = same_settings(targets, options.force)?;
        let mut refusals = Vec::new();
        for target in targets {
            let other_work = OtherWork {
                processes: target.processes.clone(),
                force: options.force,
                force_hint: ", or rank beside them with --force".to_string(),
            };
            if let Err(message) =
                other_work.refusal(target.gpu.identity.index, &target.tuning, "ranking")
            {
                refusals.push(message);
            }
        }
        if !refusals.is_empty() {
            return Err(refusals.join("\n"));
        }
        let mut devices = Vec::new();
        for target in targets {
            let device = open(&target.gpu.identity).map_err(|error| {
                format!(
                    "GPU {} ({}) cannot be loaded: {error} Nothing was measured.",
                    target.gpu.identity.index, target.gpu.identity.name
                )
            })?;
            devices.push(device);
        }
        let mut lanes: Vec<Lane> = Vec::new();
        for (target, device) in targets.iter().zip(devices) {
            let started = start_session(client, &target.gpu).and_then(|held| {
                let worker = ComputeWorker::start(device, &target.gpu.identity.index.to_string());
                match worker {
                    Ok(worker) => Ok(Lane::new(target.gpu.clone(), held, worker)),
                    Err(message) => {
                        let mut held = held;
                        held.end(client);
                        Err(message)
                    }
                }
            });
            match started {
                Ok(lane) => lanes.push(lane),
                Err(message) => {
                    for lane in &mut lanes {
                        lane.end(client);
                    }
                    return Err(message);
                }
            }
        }
        let settings_seen = targets
            .iter()
            .map(|target| SettingsSeen::of(&target.tuning.in_force))
            .collect();
        let ranking = Ranking {
            lanes,
            options,
            settings,
            forced_settings: differ,
            settings_seen,
            stage: Stage::Waiting(Instant::now()),
            started: Instant::now(),
            stopped: None,
            report: None,
        };
        Ok(ranking)
    }

    pub fn take_event(&mut self, event: &Event) {
        for lane in &mut self.lanes {
            lane.take_event(event);
        }
    }

    /// Moves the ranking on; its report once it has ended (and every session is ended).
    pub fn tick(&mut self, client: &mut TuningClient) -> Option<&RankReport> {
        match self.stage {
            Stage::Waiting(since) => {
                if self.lanes.iter().all(Lane::has_reading)
                    || since.elapsed() >= FIRST_READINGS_WAIT
                {
                    self.start_alone(0);
                }
            }
            Stage::Alone(position) => {
                if self.lanes.get_mut(position).is_none_or(Lane::tick) {
                    self.start_alone(position + 1);
                }
            }
            Stage::Together => {
                let mut all_done = true;
                for lane in &mut self.lanes {
                    all_done &= lane.tick();
                }
                if all_done {
                    self.stage = Stage::Finished;
                }
            }
            Stage::Finished => {}
        }
        if self.stage == Stage::Finished && self.report.is_none() {
            self.conclude(client);
        }
        self.report.as_ref()
    }

    /// Stops it now (Ctrl-C, the window's Stop): what was measured is reported.
    pub fn stop(&mut self, client: &mut TuningClient, reason: &str) {
        self.stopped.get_or_insert_with(|| reason.to_string());
        for lane in &mut self.lanes {
            lane.stop(reason);
        }
        self.stage = Stage::Finished;
        self.tick(client);
    }

    pub fn report(&self) -> Option<&RankReport> {
        self.report.as_ref()
    }

    pub fn progress(&self) -> RankProgress {
        let cards: Vec<String> = self.lanes.iter().filter_map(Lane::progress).collect();
        let (phase, phase_s, elapsed_s, alone_left) = match self.stage {
            Stage::Waiting(_) => (
                "waiting for the cards' first readings".to_string(),
                0.0,
                0.0,
                self.lanes.len() as f64 * self.options.alone_s,
            ),
            Stage::Alone(position) => {
                let lane = self.lanes.get(position);
                (
                    format!(
                        "GPU {} alone ({} of {})",
                        lane.map_or(0, Lane::index),
                        position + 1,
                        self.lanes.len()
                    ),
                    self.options.alone_s,
                    lane.map_or(0.0, Lane::elapsed_s),
                    self.lanes.len().saturating_sub(position + 1) as f64 * self.options.alone_s,
                )
            }
            Stage::Together | Stage::Finished => (
                format!("all {} together", self.lanes.len()),
                self.options.together_s,
                self.lanes.iter().map(Lane::elapsed_s).fold(0.0, f64::max),
                0.0,
            ),
        };
        let together_left = if self.stage == Stage::Together || self.stage == Stage::Finished {
            0.0
        } else {
            self.options.together_s
        };
        RankProgress {
            phase,
            phase_elapsed_s: elapsed_s,
            phase_s,
            left_s: (phase_s - elapsed_s).max(0.0) + alone_left + together_left,
            cards,
        }
    }

    /// Starts the lane at `position` alone, skipping those out; past the last, all together.
    fn start_alone(&mut self, mut position: usize) {
        while let Some(lane) = self.lanes.get_mut(position) {
            let settings = self.settings_seen[position];
            if lane.out.is_none() && lane.start(Phase::Alone, self.options.alone_s, settings) {
                self.stage = Stage::Alone(position);
                return;
            }
            position += 1;
        }
        self.stage = Stage::Together;
        for (lane, settings) in self.lanes.iter_mut().zip(&self.settings_seen) {
            if lane.out.is_none() {
                lane.start(Phase::Together, self.options.together_s, *settings);
            }
        }
    }

    fn conclude(&mut self, client: &mut TuningClient) {
        let mut put_back = Vec::new();
        for lane in &mut self.lanes {
            let (lines, _) = lane.end(client);
            put_back.extend(lines);
        }
        let measured: Vec<_> = self.lanes.iter().map(Lane::measured).collect();
        let ranked = rank(&measured);
        let ended_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        self.report = Some(RankReport {
            format_version: RANK_REPORT_FORMAT,
            alone_s: self.options.alone_s,
            together_s: self.options.together_s,
            settings: self.settings.clone(),
            forced_different_settings: self.forced_settings,
            cards: ranked.cards,
            best_gpu_index: ranked.best_gpu_index,
            box_pace: ranked.box_pace,
            summary: ranked.summary,
            stopped: self.stopped.clone(),
            put_back,
            ran_s: self.started.elapsed().as_secs_f64(),
            ended_at_ms,
        });
    }
}

/// A session holding nothing on `gpu` (purpose `stability`: another check or scan sees the
/// card busy); a user who may not change settings ranks without one, as a check does.
fn start_session(client: &mut TuningClient, gpu: &GpuInfo) -> Result<Held, String> {
    let mut held = Held::nothing();
    let request = Request::StartSession {
        session: SessionRequest {
            purpose: SessionPurpose::Stability,
            changes: vec![GpuChange {
                gpu_uuid: gpu.identity.uuid.clone(),
                settings: Vec::new(),
            }],
            fan_curves: Vec::new(),
            job_pid: None,
            job: None,
        },
    };
    match client.request(request) {
        Ok(Response::SessionStarted(started)) => held.started(started.session),
        Ok(other) => {
            return Err(format!(
                "The service answered {other:?} to the ranking's session."
            ));
        }
        Err(error)
            if error
                .refusal()
                .is_some_and(|refusal| refusal.kind == TuneErrorKind::NotAllowed) => {}
        Err(error) => {
            return Err(format!(
                "GPU {} could not be held for the ranking: {error}",
                gpu.identity.index
            ));
        }
    }
    Ok(held)
}
