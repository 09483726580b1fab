//! One card in the ranking: its session (holding no control, so every client sees the
//! ranking among its holders), its compute worker (prepared once, used for both phases), the
//! run of checked GEMM in the phase it is in, and what it measured.

use gputune_formats::card::Telemetry;
use gputune_formats::protocol::Event;
use gputune_formats::reports::rank::PhaseFigures;
use gputune_formats::reports::stability::{Ending, LoadShape, Prepared, RunResult};
use gputune_formats::tuning::GpuInfo;

use super::verdict::Measured;
use super::watch::{IdlePoint, PhaseWatch};
use crate::device::XidMeaning;
use crate::service::client::TuningClient;
use crate::stability::compute::ComputeSetup;
use crate::stability::held::Held;
use crate::stability::rounds::CheckOptions;
use crate::stability::run::{CheckRun, SettingsSeen};
use crate::stability::worker::ComputeWorker;

/// Which phase a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Alone,
    Together,
}

/// The ranking's work: the check's 4096³ GEMM; a token FMA setup and a small VRAM region,
/// since the ranking runs neither (its memory is left to the card's other users).
pub fn rank_setup() -> ComputeSetup {
    ComputeSetup {
        fma_threads: 1 << 12,
        fma_steps: 64,
        fma_seeds: 64,
        vram_max_bytes: Some(64 << 20),
        ..ComputeSetup::standard()
    }
}

pub struct Lane {
    pub gpu: GpuInfo,
    pub held: Held,
    /// The worker between runs (and before the first); `None` while a run has it, or after
    /// it hung.
    worker: Option<ComputeWorker>,
    prepared: Option<Prepared>,
    run: Option<(Phase, CheckRun)>,
    watch: PhaseWatch,
    /// The last reading before its first load, when it showed the card at rest.
    idle: Option<IdlePoint>,
    /// The latest reading, for a new run's first batches (the simulated device's clock).
    latest: Option<Telemetry>,
    loaded: bool,
    pub alone: Option<PhaseFigures>,
    pub together: Option<PhaseFigures>,
    /// Why it takes no further part (a wrong result, a fault, its session ended).
    pub out: Option<String>,
}

impl Lane {
    pub fn new(gpu: GpuInfo, held: Held, worker: ComputeWorker) -> Lane {
        Lane {
            gpu,
            held,
            worker: Some(worker),
            prepared: None,
            run: None,
            watch: PhaseWatch::default(),
            idle: None,
            latest: None,
            loaded: false,
            alone: None,
            together: None,
            out: None,
        }
    }

    pub fn index(&self) -> u32 {
        self.gpu.identity.index
    }

    /// Whether the service has read the card since the ranking began.
    pub fn has_reading(&self) -> bool {
        self.latest.is_some()
    }

    /// Starts `phase`'s load for `duration_s`; false when the card has no worker left.
    pub fn start(&mut self, phase: Phase, duration_s: f64, settings: SettingsSeen) -> bool {
        let Some(worker) = self.worker.take() else {
            return false;
        };
        let options = CheckOptions {
            duration_s,
            shape: LoadShape::Full,
            setup: rank_setup(),
        };
        let mut run = CheckRun::start_full_gemm(worker, options, self.prepared.clone());
        run.take_settings(settings);
        if let Some(reading) = &self.latest {
            run.take_reading(reading);
        }
        self.watch = PhaseWatch::default();
        self.loaded = true;
        self.run = Some((phase, run));
        true
    }

    pub fn take_event(&mut self, event: &Event) {
        let index = self.index();
        if let Event::Samples { readings } = event
            && let Some(Ok(reading)) = readings.get(index as usize)
        {
            match &self.run {
                Some((_, run)) if run.is_running() => self.watch.take(reading),
                None if !self.loaded => self.idle = IdlePoint::of(reading),
                _ => {}
            }
            self.latest = Some(reading.clone());
        }
        match &mut self.run {
            Some((_, run)) => {
                self.held.feed(run, index, event);
            }
            None => {
                if let Some((critical, message)) = self.held.ended_by_engine(event) {
                    let why = match critical {
                        Some(critical) => format!("Xid {} ({})", critical.xid, critical.meaning()),
                        None => format!("the tuning engine ended it: {message}"),
                    };
                    self.out.get_or_insert(why);
                }
            }
        }
    }

    /// Moves its run on; true when it has none (any more).
    pub fn tick(&mut self) -> bool {
        let Some((phase, run)) = &mut self.run else {
            return true;
        };
        let Some(result) = run.tick().cloned() else {
            return false;
        };
        let phase = *phase;
        self.conclude(phase, &result);
        true
    }

    pub fn stop(&mut self, reason: &str) {
        if let Some((_, run)) = &mut self.run {
            run.stop(reason);
        }
        self.tick();
    }

    /// Seconds its run has loaded the card so far.
    pub fn elapsed_s(&self) -> f64 {
        self.run.as_ref().map_or(0.0, |(_, run)| run.elapsed_s())
    }

    /// "GPU 3: 160 TFLOP/s so far, 2700-2745 MHz, 84 °C peak, …".
    pub fn progress(&self) -> Option<String> {
        let (_, run) = self.run.as_ref()?;
        let rate = run
            .tally()
            .gemm_tflops()
            .map_or_else(String::new, |rate| format!("{rate:.0} TFLOP/s so far, "));
        Some(format!(
            "GPU {}: {}, {rate}{}",
            self.index(),
            run.activity(),
            run.watched().summary()
        ))
    }

    fn conclude(&mut self, phase: Phase, result: &RunResult) {
        let Some((_, run)) = self.run.take() else {
            return;
        };
        let figures = self.watch.figures(result);
        match &result.ending {
            Ending::Completed => {}
            Ending::Unstable { finding } => {
                self.out = Some(finding.describe());
            }
            Ending::NotRun { reason } | Ending::Stopped { reason } => {
                self.out.get_or_insert(reason.clone());
            }
        }
        match run.into_worker() {
            Some((worker, prepared)) => {
                self.worker = Some(worker);
                self.prepared = prepared;
            }
            None => {
                self.out
                    .get_or_insert("its compute worker did not come back".to_string());
            }
        }
        match phase {
            Phase::Alone => self.alone = Some(figures),
            Phase::Together => self.together = Some(figures),
        }
    }

    /// Ends its session: it is put back (it held nothing); what the engine said, and whether
    /// everything was.
    pub fn end(&mut self, client: &mut TuningClient) -> (Vec<String>, bool) {
        self.held.end(client);
        self.held.take_put_back()
    }

    pub fn measured(&self) -> Measured {
        Measured {
            gpu_index: self.index(),
            gpu_uuid: self.gpu.identity.uuid.clone(),
            gpu_name: self.gpu.identity.name.clone(),
            constraints: self.gpu.constraints.clone(),
            idle: self.idle,
            alone: self.alone.clone(),
            together: self.together.clone(),
        }
    }
}
