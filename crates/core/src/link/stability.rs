//! Stability checks and undervolt scans started from the window, driven by the link thread:
//! the same [`CardCheck`] and [`Scan`] the CLI runs, on the link's own connection (closing the
//! window ends their sessions and the card is put back). The link thread opens the compute
//! device (CUDA, or the simulated one) as `gputune stability` does; the window only sees views.

use std::time::{Duration, Instant};

use crate::link::LinkEvent;
use crate::service::client::TuningClient;
use crate::stability::busy::OtherWork;
use crate::stability::check::{CardCheck, CheckProgress, CheckSetup};
use crate::stability::rounds::CheckOptions;
use crate::stability::scan::{Scan, scan_options};
use gputune_formats::protocol::Event;
use gputune_formats::reports::scan::{ScanOutcome, ScanStep};
use gputune_formats::reports::stability::CheckReport;
use gputune_formats::reports::stability::LoadShape;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::{GpuInfo, GpuTuning};

/// How often the window hears of a running check.
const VIEW_EVERY: Duration = Duration::from_millis(500);

/// What the window asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum StabilityKind {
    /// A check at the card's settings as they are.
    Check { duration_s: f64, shape: LoadShape },
    /// The undervolt scanner (`lock_mhz` None: the rated boost clock).
    Scan {
        lock_mhz: Option<u32>,
        step_mhz: i32,
        step_s: f64,
        margin_steps: u32,
        confirm_s: f64,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct StabilityLaunch {
    pub gpu_index: u32,
    pub kind: StabilityKind,
    /// What the card runs now, as the window knows it from the engine.
    pub tuning: GpuTuning,
}

/// Where a check or scan stands, for the window.
#[derive(Debug, Clone, PartialEq)]
pub struct StabilityView {
    pub gpu_index: u32,
    pub scanning: bool,
    pub running: bool,
    /// A check's live figures.
    pub progress: Option<CheckProgress>,
    /// A scan's live line ("step +45 MHz: 12 s of 60 s").
    pub scan_progress: Option<String>,
    pub scan_steps: Vec<ScanStep>,
    /// A scan's stock step, once measured.
    pub scan_stock: Option<ScanStep>,
    pub report: Option<CheckReport>,
    pub scan_outcome: Option<ScanOutcome>,
}

enum Active {
    Check(Box<CardCheck>),
    Scan(Box<Scan>),
}

struct Running {
    gpu_index: u32,
    active: Active,
    viewed_at: Instant,
}

/// Every check and scan the window started.
#[derive(Default)]
pub struct StabilityRuns {
    runs: Vec<Running>,
    /// Each card's processes, as the last readings listed them (a card is refused while
    /// other programs compute on it).
    processes: Vec<Option<Vec<gputune_formats::card::GpuProcess>>>,
}

impl StabilityRuns {
    /// Starts what the window asked for; a refusal is said as a notice.
    pub fn start(
        &mut self,
        client: &mut TuningClient,
        launch: StabilityLaunch,
        gpus: &[GpuInfo],
        send: &dyn Fn(LinkEvent) -> bool,
    ) {
        let gpu_index = launch.gpu_index;
        let refused = |message: String| {
            send(LinkEvent::Notice {
                gpu_index: Some(gpu_index),
                notice: Notice::Error(message),
            });
        };
        if self.runs.iter().any(|run| run.gpu_index == gpu_index) {
            refused(format!(
                "A stability check already runs on GPU {gpu_index}."
            ));
            return;
        }
        let Some(gpu) = gpus.get(gpu_index as usize) else {
            refused(format!("There is no GPU {gpu_index}."));
            return;
        };
        let device = match crate::stability::device::open_for(&gpu.identity) {
            Ok(device) => device,
            Err(error) => {
                refused(format!("GPU {gpu_index} cannot be checked: {error}"));
                return;
            }
        };
        let other_work = OtherWork {
            processes: self.processes.get(gpu_index as usize).cloned().flatten(),
            force: false,
            force_hint: " (or use `gputune stability --force`)".to_string(),
        };
        let active = match launch.kind {
            StabilityKind::Check { duration_s, shape } => {
                let options = CheckOptions::clamped(duration_s, shape);
                let setup = CheckSetup {
                    settings: &[],
                    fan_curve: None,
                    other_work: &other_work,
                };
                CardCheck::start(client, gpu, &launch.tuning, &setup, options, device)
                    .map(|check| Active::Check(Box::new(check)))
            }
            StabilityKind::Scan {
                lock_mhz,
                step_mhz,
                step_s,
                margin_steps,
                confirm_s,
            } => scan_options(gpu, lock_mhz, step_mhz, step_s, margin_steps, confirm_s)
                .and_then(|options| {
                    Scan::start(client, gpu, &launch.tuning, options, device, &other_work)
                })
                .map(|scan| Active::Scan(Box::new(scan))),
        };
        match active {
            Ok(active) => self.runs.push(Running {
                gpu_index,
                active,
                // The window hears of it at the first tick.
                viewed_at: Instant::now() - VIEW_EVERY,
            }),
            Err(message) => refused(message),
        }
    }

    pub fn stop(&mut self, client: &mut TuningClient, gpu_index: u32) {
        for run in self
            .runs
            .iter_mut()
            .filter(|run| run.gpu_index == gpu_index)
        {
            match &mut run.active {
                Active::Check(check) => check.stop(client, "stopped from the window"),
                Active::Scan(scan) => scan.stop(client, "stopped from the window"),
            }
        }
    }

    pub fn on_event(&mut self, event: &Event) {
        if let Event::Samples { readings } = event {
            self.processes = readings
                .iter()
                .map(|reading| {
                    reading
                        .as_ref()
                        .ok()
                        .and_then(|reading| reading.processes.clone())
                })
                .collect();
        }
        for run in &mut self.runs {
            match &mut run.active {
                Active::Check(check) => check.take_event(event),
                Active::Scan(scan) => scan.take_event(event),
            }
        }
    }

    /// Moves every run on and tells the window (each half second, and at the end).
    pub fn tick(&mut self, client: &mut TuningClient, send: &dyn Fn(LinkEvent) -> bool) {
        for run in &mut self.runs {
            let finished = match &mut run.active {
                Active::Check(check) => check.tick(client).is_some(),
                Active::Scan(scan) => scan.tick(client).is_some(),
            };
            if finished || run.viewed_at.elapsed() >= VIEW_EVERY {
                run.viewed_at = Instant::now();
                send(LinkEvent::Stability(Box::new(view_of(run))));
            }
        }
        self.runs.retain(|run| match &run.active {
            Active::Check(check) => check.report().is_none(),
            Active::Scan(scan) => scan.outcome().is_none(),
        });
    }
}

fn view_of(run: &Running) -> StabilityView {
    match &run.active {
        Active::Check(check) => StabilityView {
            gpu_index: run.gpu_index,
            scanning: false,
            running: check.report().is_none(),
            progress: Some(check.progress()),
            scan_progress: None,
            scan_steps: Vec::new(),
            scan_stock: None,
            report: check.report().cloned(),
            scan_outcome: None,
        },
        Active::Scan(scan) => StabilityView {
            gpu_index: run.gpu_index,
            scanning: true,
            running: scan.outcome().is_none(),
            progress: None,
            scan_progress: Some(scan.progress()),
            scan_steps: scan.steps().to_vec(),
            scan_stock: scan.stock().cloned(),
            report: None,
            scan_outcome: scan.outcome().cloned(),
        },
    }
}
