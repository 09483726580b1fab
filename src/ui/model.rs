//! What the window knows about the GPUs: the connection, each GPU's identity, latest reading,
//! history, and what it runs. Fed only by events from the link to the tuning service.

pub use crate::ui::reconnect::{Reconnected, Reconnecting};
use gputune_core::link::LinkEvent;
use gputune_core::link::stability::StabilityView;
use gputune_core::sweep::runner::SweepView;
use gputune_core::telemetry::history::GpuHistory;
use gputune_formats::card::{BackendKind, DeviceError, Telemetry};
use gputune_formats::history::HistoryRow;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{
    ChangeNote, GpuApplied, GpuInfo, GpuTuning, TrialPhase, TrialStatus, TuneError,
};

/// Where the connection to the GPUs stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Connection {
    /// The device-owner thread is still opening the backend.
    #[default]
    Connecting,
    Connected {
        backend: BackendKind,
        /// Why the simulator stands in for NVML, when it does.
        simulated_because: Option<String>,
        /// A daemon does the tuning (else an engine in this window).
        daemon: bool,
    },
    Failed(String),
    /// The daemon went away (or does not answer yet): the link tries again by itself, and the
    /// window keeps what it has meanwhile.
    Reconnecting(Reconnecting),
}

/// One GPU as the window knows it.
pub struct GpuModel {
    pub info: GpuInfo,
    /// The latest reading, or why it failed; `None` before the first sample.
    pub latest: Option<Result<Telemetry, DeviceError>>,
    pub history: GpuHistory,
    /// The last word about tuning this GPU.
    pub tune_message: Option<Notice>,
    /// When `tune_message` came (Unix ms): a setting change on the card after it makes it
    /// stale, and it gives way to what the card runs.
    pub tune_message_at_ms: u64,
    /// How many answers to applies and trials this GPU had: the Profiles tab waits for the
    /// next one to say how its apply went.
    pub answers: u64,
    /// The trial running on this GPU, or the last one that ended.
    pub trial: Option<TrialStatus>,
    /// When the ended `trial` came (Unix ms): a setting change on the card after it
    /// supersedes it ("Kept power limit 360 W" is no longer what the card runs).
    pub trial_ended_at_ms: u64,
    /// The ended trial is superseded by a later change: the Tune tab no longer shows it.
    pub trial_superseded: bool,
    /// What the card runs, who holds it, its fan state: the card's truth, from the engine.
    pub tuning: Option<GpuTuning>,
    /// The sweep started from this window on this GPU (running, or the last one's result).
    pub sweep: Option<SweepState>,
    /// The stability check or scan started from this window (running, or the last one's).
    pub stability: Option<StabilityView>,
    /// The card's energy counter (mJ) at the window's first reading that had one.
    pub energy_at_open_mj: Option<u64>,
    /// Setting changes the engine reported while the window was open (and the last one before
    /// it), oldest first, at most [`CHANGES_KEPT`]: the graphs mark them.
    pub changes: Vec<ChangeNote>,
    /// What the daemon kept of this GPU before the window opened.
    pub earlier: EarlierHistory,
}

/// The history from before the window opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EarlierHistory {
    /// No daemon answers: nothing was kept while no window was open.
    NotKept,
    /// A simulated card: it exists only while this window runs.
    Simulated,
    /// The daemon's history is being read.
    Loading,
    /// Read: this many samples, from this time (Unix ms), lead `history`.
    Loaded {
        samples: usize,
        from_ms: Option<u64>,
    },
}

impl GpuModel {
    fn new(info: GpuInfo, history_capacity: usize, earlier: EarlierHistory) -> GpuModel {
        GpuModel {
            info,
            latest: None,
            history: GpuHistory::with_capacity(history_capacity),
            tune_message: None,
            tune_message_at_ms: 0,
            answers: 0,
            trial: None,
            trial_ended_at_ms: 0,
            trial_superseded: false,
            tuning: None,
            sweep: None,
            stability: None,
            energy_at_open_mj: None,
            changes: Vec::new(),
            earlier,
        }
    }

    /// What the card runs now: its change joins the graphs' marks, and a message or an ended
    /// trial from before that change goes stale.
    fn take_tuning(&mut self, tuning: GpuTuning) {
        if let Some(change) = &tuning.last_change
            && self.changes.last() != Some(change)
        {
            if self.changes.len() >= CHANGES_KEPT {
                self.changes.remove(0);
            }
            self.changes.push(change.clone());
        }
        // A change made after the last message (here, in a terminal, by another
        // program) makes it stale: the in-force box says what the card runs now.
        if tuning
            .last_change
            .as_ref()
            .is_some_and(|change| change.at_ms > self.tune_message_at_ms)
        {
            self.tune_message = None;
        }
        // The same for an ended trial's message and numbers.
        if self
            .trial
            .as_ref()
            .is_some_and(|trial| trial.phase == TrialPhase::Ended)
            && tuning
                .last_change
                .as_ref()
                .is_some_and(|change| change.at_ms > self.trial_ended_at_ms)
        {
            self.trial_superseded = true;
        }
        self.tuning = Some(tuning);
    }

    /// The answer to an apply: what the card took, or why not.
    fn take_applied(&mut self, result: Result<GpuApplied, TuneError>, received_at_ms: u64) {
        self.answers += 1;
        self.tune_message_at_ms = received_at_ms;
        self.tune_message = Some(match result {
            Ok(applied) => {
                let mut text = format!(
                    "Applied {}.",
                    gputune_core::tuning::describe_all(&applied.applied)
                );
                if let Some(enforced_mw) = applied.enforced_power_limit_mw {
                    text.push_str(&format!(
                        " The card enforces {}.",
                        gputune_formats::units::watts_exact(enforced_mw)
                    ));
                }
                Notice::Info(text)
            }
            Err(error) => Notice::Error(error.message),
        });
    }

    /// Where a trial stands: a new session counts as an answer, and an ended trial is shown
    /// until a later change supersedes it.
    fn take_trial(&mut self, status: TrialStatus, received_at_ms: u64) {
        let new_trial = self
            .trial
            .as_ref()
            .is_none_or(|trial| trial.session != status.session);
        if new_trial {
            self.answers += 1;
        }
        let was_ended = self
            .trial
            .as_ref()
            .is_some_and(|trial| trial.phase == TrialPhase::Ended);
        if status.phase != TrialPhase::Ended {
            self.trial_superseded = false;
        } else if new_trial || !was_ended {
            self.trial_superseded = false;
            self.trial_ended_at_ms = received_at_ms;
        }
        self.trial = Some(status);
    }

    /// The trial the Tune tab shows: a running one, or the last one that ended while no
    /// later change of the card superseded it.
    pub fn shown_trial(&self) -> Option<&TrialStatus> {
        self.trial.as_ref().filter(|_| !self.trial_superseded)
    }

    /// Puts what the daemon kept before the window opened in front of the window's own
    /// readings and changes.
    fn take_earlier(&mut self, rows: &[HistoryRow], changes: Vec<ChangeNote>) {
        let own_samples = self.history.len();
        if !rows.is_empty() {
            self.history = self.history.with_earlier(rows);
        }
        // What the history holds now: rows overlapping the window's own readings, and the
        // oldest beyond its capacity, were left out.
        let samples = self.history.len().saturating_sub(own_samples);
        self.earlier = EarlierHistory::Loaded {
            samples,
            from_ms: (samples > 0)
                .then(|| self.history.first_time_ms())
                .flatten(),
        };
        self.merge_changes(changes);
    }

    /// Puts what the daemon kept while the window was not connected between the window's
    /// readings from before and after.
    fn take_missed(&mut self, rows: &[HistoryRow], changes: Vec<ChangeNote>) {
        if !rows.is_empty() {
            self.history = self.history.with_inserted(rows);
        }
        self.merge_changes(changes);
    }

    fn merge_changes(&mut self, changes: Vec<ChangeNote>) {
        let mut merged = changes;
        merged.append(&mut self.changes);
        merged.sort_by(|a, b| (a.at_ms, &a.by, &a.what).cmp(&(b.at_ms, &b.by, &b.what)));
        merged.dedup();
        let excess = merged.len().saturating_sub(CHANGES_KEPT);
        merged.drain(..excess);
        self.changes = merged;
    }
}

/// How many setting changes per GPU the window keeps for its graphs: as many as the daemon.
pub use gputune_core::telemetry::store::changes::CHANGES_KEPT;

/// A sweep as the window knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepState {
    pub view: SweepView,
    pub notes: Vec<String>,
}

/// What the window shows (everything the panels draw), built from sampler events; not the
/// planner's `plan::model::Model`.
pub struct WindowModel {
    pub connection: Connection,
    pub gpus: Vec<GpuModel>,
    /// News not about one GPU (what the engine restored when it started).
    pub notices: Vec<Notice>,
    /// When the window last heard from the service (Unix ms): "now" for a GPU with no
    /// reading yet.
    pub heard_at_ms: u64,
    /// The last time the daemon went away and the window reached it again.
    pub reconnected: Option<Reconnected>,
    /// The runs over the whole box the Box tab started: each kind's last, kept for the session.
    pub box_runs: crate::ui::box_view::runs::BoxRunsSeen,
    /// Samples each GPU's history keeps (24 h at 10 Hz by default).
    history_capacity: usize,
}

impl Default for WindowModel {
    fn default() -> WindowModel {
        WindowModel::with_history_capacity(gputune_core::telemetry::history::DAY_AT_10_HZ)
    }
}

impl WindowModel {
    pub fn with_history_capacity(history_capacity: usize) -> WindowModel {
        WindowModel {
            connection: Connection::Connecting,
            gpus: Vec::new(),
            notices: Vec::new(),
            heard_at_ms: 0,
            reconnected: None,
            box_runs: Default::default(),
            history_capacity,
        }
    }

    /// Takes in one event from the link. `received_at_ms` (Unix ms) stamps a failed read,
    /// which has no timestamp of its own.
    pub fn take_event(&mut self, event: LinkEvent, received_at_ms: u64) {
        self.heard_at_ms = self.heard_at_ms.max(received_at_ms);
        match event {
            LinkEvent::Connected {
                backend,
                simulated_because,
                gpus,
                daemon,
                notices,
            } => {
                let connection = Connection::Connected {
                    backend,
                    simulated_because,
                    daemon,
                };
                if self.is_same_daemon_again(&gpus) {
                    self.reconnected_to(connection, gpus, notices, received_at_ms);
                } else {
                    self.connected(connection, gpus, notices);
                }
            }
            LinkEvent::Samples(samples) => self.take_samples(samples, received_at_ms),
            LinkEvent::Failed(message) => self.connection = Connection::Failed(message),
            LinkEvent::Lost { why } => self.lost(why, received_at_ms),
            LinkEvent::Reconnecting {
                attempt,
                retry_in_ms,
                why,
            } => {
                if let Connection::Reconnecting(reconnecting) = &mut self.connection {
                    reconnecting.attempt = attempt;
                    reconnecting.retry_in_ms = retry_in_ms;
                    reconnecting.why = why;
                }
            }
            LinkEvent::Notice { gpu_index, notice } => {
                match gpu_index.and_then(|index| self.gpus.get_mut(index as usize)) {
                    Some(gpu) => {
                        gpu.tune_message = Some(notice);
                        gpu.tune_message_at_ms = received_at_ms;
                    }
                    None => self.notices.push(notice),
                }
            }
            LinkEvent::Tuning(tuning) => {
                if let Some(gpu) = self.gpu_mut(tuning.gpu_index) {
                    gpu.take_tuning(*tuning);
                }
            }
            LinkEvent::Applied { gpu_index, result } => {
                if let Some(gpu) = self.gpu_mut(gpu_index) {
                    gpu.take_applied(result, received_at_ms);
                }
            }
            LinkEvent::Trial(status) => {
                if let Some(gpu) = self.gpu_mut(status.gpu_index) {
                    gpu.take_trial(*status, received_at_ms);
                }
            }
            LinkEvent::Stability(view) => {
                if let Some(gpu) = self.gpu_mut(view.gpu_index) {
                    gpu.stability = Some(*view);
                }
            }
            LinkEvent::BoxRun(news) => self.box_runs.take(*news),
            LinkEvent::Sweep { view, notes } => {
                if let Some(gpu) = self.gpu_mut(view.gpu_index) {
                    gpu.sweep = Some(SweepState { view: *view, notes });
                }
            }
            LinkEvent::History {
                gpu_index,
                rows,
                changes,
            } => {
                if let Some(gpu) = self.gpu_mut(gpu_index) {
                    gpu.take_earlier(&rows, changes);
                }
            }
            LinkEvent::Refilled {
                gpu_index,
                rows,
                changes,
            } => {
                if let Some(gpu) = self.gpu_mut(gpu_index) {
                    gpu.take_missed(&rows, changes);
                }
            }
        }
    }

    /// The GPU an event is about; `None` for one the window does not know.
    fn gpu_mut(&mut self, gpu_index: u32) -> Option<&mut GpuModel> {
        self.gpus.get_mut(gpu_index as usize)
    }

    /// Connected to a service (the first, or one with other cards): the GPUs start afresh.
    fn connected(&mut self, connection: Connection, gpus: Vec<GpuInfo>, notices: Vec<Notice>) {
        let earlier = match connection {
            Connection::Connected { daemon: true, .. } => EarlierHistory::Loading,
            // A simulated card exists only while this window runs.
            Connection::Connected {
                backend: BackendKind::Sim,
                ..
            } => EarlierHistory::Simulated,
            _ => EarlierHistory::NotKept,
        };
        self.connection = connection;
        self.notices = notices;
        // Runs over other cards say nothing of these.
        self.box_runs = Default::default();
        self.gpus = gpus
            .into_iter()
            .map(|info| GpuModel::new(info, self.history_capacity, earlier))
            .collect();
    }

    /// One reading (or its error) per GPU, in index order.
    fn take_samples(&mut self, samples: Vec<Result<Telemetry, DeviceError>>, received_at_ms: u64) {
        for (gpu, sample) in self.gpus.iter_mut().zip(samples) {
            match &sample {
                Ok(reading) => {
                    gpu.history.push(reading.sampled_at_ms, Some(reading));
                    if gpu.energy_at_open_mj.is_none() {
                        gpu.energy_at_open_mj = reading.energy_total_mj;
                    }
                }
                Err(_) => gpu.history.push(received_at_ms, None),
            }
            gpu.latest = Some(sample);
        }
    }

    /// The GPU with this NVML UUID, if present.
    pub fn index_of_uuid(&self, uuid: &str) -> Option<usize> {
        self.gpus
            .iter()
            .position(|gpu| gpu.info.identity.uuid == uuid)
    }
}
