//! "Find the efficient setting", in the Tune tab: choose the settings to try and where the
//! job's progress is read, start the sweep on the running job, watch throughput and energy per
//! unit of work against power (one point per setting, the running one live, the recommended
//! one marked), and save the answer as a profile. The sweep itself runs in the link thread.

use std::path::PathBuf;

use eframe::egui::{self, Color32, RichText};
use egui_plot::{Legend, Line, MarkerShape, Plot, Points};

use crate::ui::model::GpuModel;
use crate::ui::style::ERROR_TEXT;
use crate::ui::widgets::labelled::labelled;
use gputune_core::link::sweep::SweepLaunch;
use gputune_core::sweep::base::{SweepBase, plan_sweep};
use gputune_core::sweep::measure::StepResult;
use gputune_core::sweep::objective::{DEFAULT_MAX_SLOWDOWN_PCT, Objective};
use gputune_core::sweep::plan::{DEFAULT_UNDERVOLT_OFFSET_MHZ, SweepSpec, SweepStep, parse_list};
use gputune_core::sweep::report::{comparisons_of, signed_pct, significant, throttle_summary};
use gputune_core::sweep::runner::{SweepPhase, SweepTiming, SweepView};
use gputune_core::tuning::in_force::Hold;

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
        }
    }
}

impl SweepPanel {
    /// The sweep the inputs describe on `gpu`, with its steps; or what is wrong with them.
    pub fn launch(
        &self,
        gpu: &GpuModel,
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
        let (steps, base) = plan_sweep(&spec, &gpu.info.constraints, &in_force, false)
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
            gputune_core::sweep::progress::ProgressParser::new(Some(regex))?;
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
            },
            steps,
            base,
        ))
    }

    /// Draws the panel for one GPU.
    pub fn sweep_ui(&mut self, ui: &mut egui::Ui, gpu: &GpuModel) -> Vec<SweepAction> {
        let mut actions = Vec::new();
        let gpu_index = gpu.info.identity.index;
        let view = gpu.sweep.as_ref();
        let running = view.is_some_and(|state| state.view.outcome.is_none());
        ui.horizontal_top(|ui| {
            ui.vertical(|ui| {
                ui.set_width(350.0);
                self.inputs_ui(ui, gpu, running, &mut actions);
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

    fn inputs_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        running: bool,
        actions: &mut Vec<SweepAction>,
    ) {
        let gpu_index = gpu.info.identity.index;
        ui.heading("Find the efficient setting");
        ui.add_enabled_ui(!running, |ui| {
            egui::Grid::new(("sweep-inputs", gpu_index))
                .num_columns(2)
                .spacing([8.0, 6.0])
                .show(ui, |ui| {
                    let default_w = gpu
                        .info
                        .constraints
                        .power_limit_default_mw
                        .map_or(String::new(), gputune_core::units::watts_exact);
                    let label = ui.label("Power limits, %");
                    ui.text_edit_singleline(&mut self.power_limits)
                        .labelled_by(label.id)
                        .on_hover_text(format!(
                            "% of the default ({default_w}), tried in this order"
                        ));
                    ui.end_row();
                    let label = ui.label("Clock caps, MHz");
                    ui.add(egui::TextEdit::singleline(&mut self.clock_caps).hint_text("none"))
                        .labelled_by(label.id)
                        .on_hover_text(
                            "Highest GPU clocks to try at each power limit, e.g. 2400,2100",
                        );
                    ui.end_row();
                    ui.checkbox(&mut self.undervolt, "Undervolt-style");
                    ui.add_enabled(
                        self.undervolt,
                        egui::DragValue::new(&mut self.undervolt_offset_mhz)
                            .range(15..=500)
                            .prefix("+")
                            .suffix(" MHz"),
                    )
                    .on_hover_text("Each clock cap is also tried with this GPU clock offset");
                    ui.end_row();
                    let label = ui.label("Each setting");
                    ui.horizontal(|ui| {
                        ui.add(
                            egui::DragValue::new(&mut self.step_s)
                                .range(10.0..=3_600.0)
                                .suffix(" s"),
                        )
                        .labelled_by(label.id);
                        labelled(
                            ui,
                            "warm-up",
                            egui::DragValue::new(&mut self.warmup_s)
                                .range(0.0..=600.0)
                                .suffix(" s"),
                        );
                    });
                    ui.end_row();
                    let label = ui.label("Best means");
                    ui.horizontal(|ui| {
                        egui::ComboBox::from_id_salt(("sweep-objective", gpu_index))
                            .selected_text(match self.objective {
                                ObjectiveChoice::WithinSlowdown => "least energy, at most",
                                ObjectiveChoice::LeastEnergy => "least energy per unit",
                                ObjectiveChoice::PerfPerWatt => "throughput per watt",
                            })
                            .show_ui(ui, |ui| {
                                ui.selectable_value(
                                    &mut self.objective,
                                    ObjectiveChoice::WithinSlowdown,
                                    "least energy, at most … slower",
                                );
                                ui.selectable_value(
                                    &mut self.objective,
                                    ObjectiveChoice::LeastEnergy,
                                    "least energy per unit",
                                );
                                ui.selectable_value(
                                    &mut self.objective,
                                    ObjectiveChoice::PerfPerWatt,
                                    "throughput per watt",
                                );
                            })
                            .response
                            .labelled_by(label.id);
                        if self.objective == ObjectiveChoice::WithinSlowdown {
                            ui.add(
                                egui::DragValue::new(&mut self.max_slowdown_pct)
                                    .range(0.0..=50.0)
                                    .speed(0.1)
                                    .suffix(" % slower"),
                            );
                        }
                    });
                    ui.end_row();
                    let label = ui.label("Job's log file");
                    ui.horizontal(|ui| {
                        ui.add(
                            egui::TextEdit::singleline(&mut self.progress_file)
                                .hint_text("none: GPU-side proxy")
                                .desired_width(200.0),
                        )
                        .labelled_by(label.id);
                        if ui.button("Browse…").clicked() {
                            actions.push(SweepAction::BrowseProgressFile);
                        }
                    });
                    ui.end_row();
                    let label = ui.label("Progress regex");
                    ui.add(
                        egui::TextEdit::singleline(&mut self.progress_regex)
                            .hint_text("tqdm, Lightning, Hugging Face"),
                    )
                    .labelled_by(label.id)
                    .on_hover_text(
                        "Only for other formats: named group rate, seconds_per or count",
                    );
                    ui.end_row();
                });
        });
        ui.add_space(6.0);
        let launch = self.launch(gpu);
        match &launch {
            Ok((_, steps, base)) => {
                if let Some(sentence) = base.sentence() {
                    ui.label(RichText::new(sentence).weak());
                }
                let total_s = self.step_s * steps.len() as f64;
                ui.label(
                    RichText::new(format!(
                        "{} settings × {} s, about {}; the first is repeated at the end to measure the noise. The card is put back afterwards.",
                        steps.len(),
                        gputune_core::text::number(self.step_s),
                        if total_s < 120.0 {
                            format!("{total_s:.0} s")
                        } else {
                            format!("{:.0} min", total_s / 60.0)
                        }
                    ))
                    .weak(),
                );
            }
            Err(message) => {
                ui.label(RichText::new(message).color(ERROR_TEXT));
            }
        }
        // A session holding other controls (a fan curve) does not stand in the sweep's way.
        let swept: Vec<Hold> = launch
            .as_ref()
            .map(|(_, steps, _)| {
                steps
                    .iter()
                    .flat_map(|step| step.settings.iter().map(Hold::of))
                    .collect()
            })
            .unwrap_or_default();
        let holder = gpu
            .tuning
            .as_ref()
            .and_then(|tuning| {
                tuning
                    .holders
                    .iter()
                    .find(|holder| holder.controls.iter().any(|hold| swept.contains(hold)))
            })
            .filter(|_| !running);
        if let Some(holder) = holder {
            ui.label(
                RichText::new(format!(
                    "The card's {} {} held by {} ({}); a sweep can start when it ends.",
                    holder.controls_text(),
                    if holder.controls.len() > 1 || holder.controls == [Hold::Fans] {
                        "are"
                    } else {
                        "is"
                    },
                    holder.by,
                    holder.purpose.describe()
                ))
                .color(ERROR_TEXT),
            );
        }
        ui.horizontal(|ui| {
            if running {
                if ui.button("Stop and put the card back").clicked() {
                    actions.push(SweepAction::Stop { gpu_index });
                }
            } else {
                let ready = launch.is_ok() && holder.is_none();
                if ui
                    .add_enabled(ready, egui::Button::new("Start the sweep"))
                    .clicked()
                    && let Ok((launch, _, _)) = launch
                {
                    actions.push(SweepAction::Start(Box::new(launch)));
                }
            }
        });
    }

    fn result_ui(
        &mut self,
        ui: &mut egui::Ui,
        view: &SweepView,
        notes: &[String],
        gpu_index: u32,
        actions: &mut Vec<SweepAction>,
    ) {
        status_line(ui, view);
        let unit = view
            .measured_by
            .as_ref()
            .map_or_else(|| "unit".to_string(), |by| by.unit_name());
        ui.label(
            RichText::new(match &view.measured_by {
                Some(by) => format!("Measured by {}.", by.describe()),
                None => format!("Progress from {}.", view.progress_from),
            })
            .weak(),
        );
        for note in notes.iter().rev().take(3).rev() {
            ui.label(note);
        }
        if view.results.is_empty() && view.live.is_none() {
            ui.add_space(20.0);
            ui.label(
                RichText::new(if view.outcome.is_some() {
                    "No setting was measured to its end."
                } else {
                    "Nothing measured yet: each setting's point appears once its warm-up has passed."
                })
                .weak(),
            );
            return;
        }
        let recommended = view
            .outcome
            .as_ref()
            .and_then(|outcome| outcome.recommendation.as_ref().ok())
            .map(|recommendation| recommendation.step_index);
        ui.columns(2, |columns| {
            chart(
                &mut columns[0],
                view,
                recommended,
                ("throughput", gpu_index),
                &format!("{unit}/s"),
                |result| result.throughput.map(|throughput| throughput.units_per_s),
            );
            chart(
                &mut columns[1],
                view,
                recommended,
                ("energy", gpu_index),
                &format!("J/{unit}"),
                |result| result.energy_per_unit_j,
            );
        });
        results_grid(ui, view, recommended, &unit, gpu_index);
        let Some(outcome) = &view.outcome else {
            return;
        };
        match &outcome.recommendation {
            Ok(recommendation) => {
                ui.label(
                    RichText::new(&recommendation.sentence)
                        .strong()
                        .color(RECOMMENDED),
                );
                ui.horizontal(|ui| {
                    let label = ui.label("Save it as the profile");
                    ui.add(egui::TextEdit::singleline(&mut self.profile_name).desired_width(160.0))
                        .labelled_by(label.id);
                    if ui
                        .add_enabled(
                            !self.profile_name.trim().is_empty(),
                            egui::Button::new("Save as profile"),
                        )
                        .clicked()
                    {
                        actions.push(SweepAction::SaveProfile {
                            gpu_index,
                            name: self.profile_name.trim().to_string(),
                        });
                    }
                });
            }
            Err(why) => {
                ui.label(RichText::new(format!("No recommendation: {why}")).color(ERROR_TEXT));
            }
        }
        match &self.message {
            Some(Ok(message)) => {
                ui.label(message);
            }
            Some(Err(message)) => {
                ui.label(RichText::new(message).color(ERROR_TEXT));
            }
            None => {}
        }
    }
}

fn status_line(ui: &mut egui::Ui, view: &SweepView) {
    let count = view.plan.len().max(1);
    let (text, fraction) = match view.phase {
        SweepPhase::WaitingForProgress => (
            "Waiting for the job's first progress line…".to_string(),
            0.0,
        ),
        SweepPhase::Step {
            index,
            measuring,
            elapsed_s,
        } => {
            let label = view.plan.get(index).map_or("", |step| step.label.as_str());
            let doing = if measuring {
                format!(
                    "measuring, {:.0} of {:.0} s",
                    elapsed_s - view.timing.warmup_s,
                    view.timing.step_s - view.timing.warmup_s
                )
            } else {
                format!(
                    "warming up, {:.0} of {:.0} s",
                    elapsed_s, view.timing.warmup_s
                )
            };
            (
                format!("Setting {} of {count}: {label}, {doing}", index + 1),
                (index as f64 + (elapsed_s / view.timing.step_s).min(1.0)) / count as f64,
            )
        }
        SweepPhase::Finished => {
            let ended = match view.outcome.as_ref().map(|outcome| &outcome.ended) {
                Some(gputune_core::sweep::runner::SweepEnd::Completed) | None => {
                    "Done.".to_string()
                }
                Some(gputune_core::sweep::runner::SweepEnd::Stopped { reason }) => {
                    format!("Stopped: {reason}")
                }
                Some(gputune_core::sweep::runner::SweepEnd::JobFailed { message, .. }) => {
                    format!("Stopped: {message}")
                }
                Some(gputune_core::sweep::runner::SweepEnd::Failed { reason }) => {
                    format!("Failed: {reason}")
                }
            };
            let restored = view
                .outcome
                .as_ref()
                .map(|outcome| outcome.restored.join(" "))
                .unwrap_or_default();
            (format!("{ended} {restored}"), 1.0)
        }
    };
    ui.add(egui::ProgressBar::new(fraction as f32).text(text));
}

/// One chart: `value` of each step against its average power.
fn chart(
    ui: &mut egui::Ui,
    view: &SweepView,
    recommended: Option<usize>,
    id: (&str, u32),
    y_label: &str,
    value: impl Fn(&StepResult) -> Option<f64>,
) {
    let point = |result: &StepResult| Some([result.average_power_w?, value(result)?]);
    let stable: Vec<(usize, [f64; 2])> = view
        .results
        .iter()
        .enumerate()
        .filter(|(_, result)| result.unstable.is_none() && !result.step.is_repeat)
        .filter_map(|(index, result)| Some((index, point(result)?)))
        .collect();
    let power_only = view.plan.iter().all(|step| step.clock_cap_mhz.is_none());
    Plot::new(id)
        .height(200.0)
        .x_axis_label("average power, W")
        .y_axis_label(y_label)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .set_margin_fraction(egui::vec2(0.1, 0.15))
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            if power_only && stable.len() > 1 {
                let mut line: Vec<[f64; 2]> = stable.iter().map(|(_, point)| *point).collect();
                line.sort_by(|a, b| a[0].total_cmp(&b[0]));
                plot_ui.line(Line::new("", line).color(MEASURED.gamma_multiply(0.5)));
            }
            let measured: Vec<[f64; 2]> = stable.iter().map(|(_, point)| *point).collect();
            plot_ui.points(
                Points::new("Measured", measured)
                    .radius(4.0)
                    .color(MEASURED),
            );
            let repeats: Vec<[f64; 2]> = view
                .results
                .iter()
                .filter(|result| result.step.is_repeat)
                .filter_map(point)
                .collect();
            if !repeats.is_empty() {
                plot_ui.points(
                    Points::new("First setting again", repeats)
                        .radius(4.0)
                        .shape(MarkerShape::Square)
                        .color(REPEAT),
                );
            }
            let unstable: Vec<[f64; 2]> = view
                .results
                .iter()
                .filter(|result| result.unstable.is_some())
                .filter_map(point)
                .collect();
            if !unstable.is_empty() {
                plot_ui.points(
                    Points::new("Unstable", unstable)
                        .radius(6.0)
                        .shape(MarkerShape::Cross)
                        .color(ERROR_TEXT),
                );
            }
            if let Some(live) = view.live.as_ref().and_then(point) {
                plot_ui.points(
                    Points::new("Now", vec![live])
                        .radius(5.0)
                        .shape(MarkerShape::Diamond)
                        .color(LIVE),
                );
            }
            if let Some(best) = recommended
                .and_then(|index| view.results.get(index))
                .and_then(point)
            {
                plot_ui.points(
                    Points::new("Recommended", vec![best])
                        .radius(8.0)
                        .filled(false)
                        .color(RECOMMENDED),
                );
            }
        });
}

fn results_grid(
    ui: &mut egui::Ui,
    view: &SweepView,
    recommended: Option<usize>,
    unit: &str,
    gpu_index: u32,
) {
    let comparisons = comparisons_of(&view.results);
    egui::ScrollArea::vertical()
        .id_salt(("sweep-results", gpu_index))
        .max_height(170.0)
        .show(ui, |ui| {
            egui::Grid::new(("sweep-grid", gpu_index))
                .striped(true)
                .spacing([12.0, 2.0])
                .show(ui, |ui| {
                    for head in [
                        "Setting",
                        &format!("{unit}/s"),
                        "Power",
                        &format!("J/{unit}"),
                        "Speed",
                        "Energy",
                        "SM clock",
                        "Temp",
                        "Throttled",
                    ] {
                        ui.label(RichText::new(head).strong());
                    }
                    ui.end_row();
                    let dash = || "—".to_string();
                    for (index, result) in view.results.iter().enumerate() {
                        let comparison = comparisons.get(index).copied().flatten();
                        let mut label = RichText::new(&result.step.label);
                        if Some(index) == recommended {
                            label = label.strong().color(RECOMMENDED);
                        } else if result.unstable.is_some() {
                            label = label.color(ERROR_TEXT);
                        }
                        let row = ui.label(label);
                        if let Some(why) = result.unstable.as_ref().or(result.noisy.as_ref()) {
                            row.on_hover_text(why);
                        }
                        ui.label(result.throughput.map_or_else(dash, |throughput| {
                            format!(
                                "{:.3}{}",
                                throughput.units_per_s,
                                throughput
                                    .spread_pct
                                    .map_or_else(String::new, |spread| format!(" ±{spread:.1} %"))
                            )
                        }));
                        ui.label(
                            result
                                .average_power_w
                                .map_or_else(dash, |watts| format!("{watts:.0} W")),
                        );
                        ui.label(result.energy_per_unit_j.map_or_else(dash, significant));
                        ui.label(
                            comparison.map_or_else(dash, |comparison| {
                                signed_pct(-comparison.slowdown_pct)
                            }),
                        );
                        ui.label(comparison.map_or_else(dash, |comparison| {
                            signed_pct(-comparison.energy_saved_pct)
                        }));
                        ui.label(
                            result
                                .stats
                                .average_sm_clock_mhz
                                .map_or_else(dash, |mhz| format!("{mhz:.0} MHz")),
                        );
                        ui.label(
                            result
                                .stats
                                .average_temperature_c
                                .map_or_else(dash, |celsius| format!("{celsius:.0} °C")),
                        );
                        ui.label(if result.measured_s > 0.0 {
                            throttle_summary(result)
                        } else {
                            dash()
                        });
                        ui.end_row();
                    }
                });
        });
}
