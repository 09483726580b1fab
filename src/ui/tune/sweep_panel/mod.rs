//! "Find the efficient setting", in the Tune tab: choose the settings to try and where the
//! job's progress is read, start the sweep on the running job, watch throughput and energy per
//! unit of work against power (one point per setting, the running one live, the recommended
//! one marked), and save the answer as a profile. The sweep itself runs in the link thread.
//!
//! inputs.rs: the inputs, what the sweep will do, Start and Stop; result.rs: where it stands
//! and what it found, with the save-as-profile row; chart.rs and table.rs: the measured points.

use std::path::PathBuf;

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::GpuModel;
use gputune_core::link::sweep::SweepLaunch;
use gputune_core::sweep::base::{SweepBase, sweep_steps_with_base};
use gputune_core::sweep::runner::SweepTiming;
use gputune_core::sweep::steps::{DEFAULT_UNDERVOLT_OFFSET_MHZ, SweepSpec, parse_list};
use gputune_formats::reports::sweep::{DEFAULT_MAX_SLOWDOWN_PCT, Objective};
use gputune_formats::reports::sweep_step::SweepStep;

mod chart;
mod inputs;
mod result;
mod table;

// The charts' points; the recommended setting has the same colour in the table and sentence.
const MEASURED: Color32 = Color32::from_rgb(0x4d, 0xd0, 0xe1);
const RECOMMENDED: Color32 = Color32::from_rgb(0x69, 0xf0, 0xae);
const LIVE: Color32 = Color32::from_rgb(0xff, 0xc1, 0x4d);
const REPEAT: Color32 = Color32::GRAY;

/// What "best" means, as the window offers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectiveChoice {
    WithinSlowdown,
    LeastEnergy,
    PerfPerWatt,
}

/// What the panel asks the app to do.
#[derive(Debug, Clone, PartialEq)]
pub enum SweepAction {
    Start(Box<SweepLaunch>),
    Stop {
        gpu_index: u32,
    },
    /// Pick the job's log file with a file dialog.
    BrowseProgressFile,
    /// Save the last sweep's recommendation on this GPU as a profile.
    SaveProfile {
        gpu_index: u32,
        name: String,
    },
}

/// The panel's inputs.
pub struct SweepPanel {
    pub power_limits: String,
    pub clock_caps: String,
    pub undervolt: bool,
    pub undervolt_offset_mhz: i32,
    pub step_s: f64,
    pub warmup_s: f64,
    pub objective: ObjectiveChoice,
    pub max_slowdown_pct: f64,
    pub progress_file: String,
    pub progress_regex: String,
    pub profile_name: String,
    /// What saving the profile said.
    pub message: Option<Result<String, String>>,
    /// Sweep every GPU of the box together (one data-parallel job across them).
    pub together: bool,
}

impl Default for SweepPanel {
    fn default() -> SweepPanel {
        SweepPanel {
            power_limits: "100,90,80,70,60".to_string(),
            clock_caps: String::new(),
            undervolt: false,
            undervolt_offset_mhz: DEFAULT_UNDERVOLT_OFFSET_MHZ,
            step_s: 90.0,
            warmup_s: 20.0,
            objective: ObjectiveChoice::WithinSlowdown,
            max_slowdown_pct: DEFAULT_MAX_SLOWDOWN_PCT,
            progress_file: String::new(),
            progress_regex: String::new(),
            profile_name: "Efficient".to_string(),
            message: None,
            together: false,
        }
    }
}

impl SweepPanel {
    /// The sweep the inputs describe on `gpu` (with every other card of `all` when swept
    /// together), with its steps; or what is wrong with them.
    pub fn launch(
        &self,
        gpu: &GpuModel,
        all: &[GpuModel],
    ) -> Result<(SweepLaunch, Vec<SweepStep>, SweepBase), String> {
        let spec = SweepSpec {
            power_limits_pct: parse_list("Power limits", &self.power_limits)?,
            clock_caps_mhz: parse_list("Clock caps", &self.clock_caps)?,
            undervolt_offset_mhz: self.undervolt.then_some(self.undervolt_offset_mhz),
        };
        let in_force = gpu
            .tuning
            .as_ref()
            .map(|tuning| tuning.in_force.clone())
            .unwrap_or_default();
        let (steps, base) = sweep_steps_with_base(&spec, &gpu.info.constraints, &in_force, false)
            .map_err(|error| error.to_string())?;
        let timing = SweepTiming::new(self.step_s, self.warmup_s, 120.0)?;
        let objective = Objective::parse(
            match self.objective {
                ObjectiveChoice::WithinSlowdown => "within-slowdown",
                ObjectiveChoice::LeastEnergy => "energy",
                ObjectiveChoice::PerfPerWatt => "perf-per-watt",
            },
            self.max_slowdown_pct,
        )?;
        let file = self.progress_file.trim();
        let regex = self.progress_regex.trim();
        if !regex.is_empty() {
            gputune_core::job::progress::ProgressParser::new(Some(regex))?;
        }
        Ok((
            SweepLaunch {
                gpu_index: gpu.info.identity.index,
                spec,
                timing,
                objective,
                progress_file: (!file.is_empty()).then(|| PathBuf::from(file)),
                progress_regex: (!regex.is_empty()).then(|| regex.to_string()),
                in_force,
                also: if self.together && all.len() > 1 {
                    all.iter()
                        .filter(|other| other.info.identity.index != gpu.info.identity.index)
                        .map(|other| {
                            let in_force = other
                                .tuning
                                .as_ref()
                                .map(|tuning| tuning.in_force.clone())
                                .unwrap_or_default();
                            (other.info.identity.index, in_force)
                        })
                        .collect()
                } else {
                    Vec::new()
                },
            },
            steps,
            base,
        ))
    }

    /// Draws the panel for one GPU (`all`: the box's, for a sweep of them together).
    pub fn sweep_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        all: &[GpuModel],
    ) -> Vec<SweepAction> {
        let mut actions = Vec::new();
        let gpu_index = gpu.info.identity.index;
        let view = gpu.sweep.as_ref();
        let running = view.is_some_and(|state| state.view.outcome.is_none());
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width(350.0);
                self.inputs_ui(ui, gpu, all, running, &mut actions);
            });
            ui.separator();
            ui.vertical(|ui| match view {
                Some(state) => {
                    self.result_ui(ui, &state.view, &state.notes, gpu_index, &mut actions);
                }
                None => {
                    ui.add_space(40.0);
                    ui.label(
                        RichText::new(
                            "No sweep yet. Start your training job, name its log file (or leave it empty to measure by the GPU-side proxy) and press Start: each setting runs for a while, and the chart shows your job's speed and energy per unit of work at each.",
                        )
                        .weak(),
                    );
                }
            });
        });
        actions
    }
}
