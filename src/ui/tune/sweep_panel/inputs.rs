//! The sweep's inputs: the settings to try, how long each runs, what "best" means and where
//! the job's progress is read; under them what the sweep will do (or what is wrong with the
//! inputs), who holds the card in its way, and Start or Stop.

use eframe::egui::{self, RichText};

use super::{ObjectiveChoice, SweepAction, SweepPanel};
use crate::ui::model::GpuModel;
use crate::ui::style::ERROR_TEXT;
use crate::ui::widgets::labelled::labelled;
use gputune_core::link::sweep::SweepLaunch;
use gputune_core::sweep::base::SweepBase;
use gputune_formats::reports::sweep_step::SweepStep;
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Holder;

/// The sweep the inputs describe, with its steps, or what is wrong with them.
type Launch = Result<(SweepLaunch, Vec<SweepStep>, SweepBase), String>;

impl SweepPanel {
    /// The left column: the inputs (locked while the sweep runs), then Start or Stop.
    pub(super) fn inputs_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        all: &[GpuModel],
        running: bool,
        actions: &mut Vec<SweepAction>,
    ) {
        let gpu_index = gpu.info.identity.index;
        ui.heading("Find the efficient setting");
        ui.add_enabled_ui(!running, |ui| {
            if all.len() > 1 {
                ui.checkbox(
                    &mut self.together,
                    format!("All {} GPUs together (one job across them)", all.len()),
                )
                .on_hover_text(
                    "Each setting is held on every card at once; the job's speed is measured once and the box's energy summed. Every card is put back when the sweep ends.",
                );
            }
            egui::Grid::new(("sweep-inputs", gpu_index))
                .num_columns(2)
                .spacing([8.0, 6.0])
                .show(ui, |ui| {
                    self.settings_rows(ui, gpu);
                    self.objective_row(ui, gpu_index);
                    self.progress_rows(ui, actions);
                });
        });
        ui.add_space(6.0);
        let launch = self.launch(gpu, all);
        self.plan_summary(ui, &launch);
        let holder = holder_in_the_way(gpu, &launch).filter(|_| !running);
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
                let several = gpu
                    .sweep
                    .as_ref()
                    .is_some_and(|state| state.view.gpu_indices.len() > 1);
                let stop = if several {
                    "Stop and put the cards back"
                } else {
                    "Stop and put the card back"
                };
                if ui.button(stop).clicked() {
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

    /// What to try: power limits, clock caps, the undervolt offset, and each setting's time.
    fn settings_rows(&mut self, ui: &mut egui::Ui, gpu: &GpuModel) {
        let default_w = gpu
            .info
            .constraints
            .power_limit_default_mw
            .map_or(String::new(), gputune_formats::units::watts_exact);
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
            .on_hover_text("Highest GPU clocks to try at each power limit, e.g. 2400,2100");
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
    }

    /// What "best" means, with the slowdown allowed where it takes one.
    fn objective_row(&mut self, ui: &mut egui::Ui, gpu_index: u32) {
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
    }

    /// Where the job's progress is read: its log file, and a pattern for other formats.
    fn progress_rows(&mut self, ui: &mut egui::Ui, actions: &mut Vec<SweepAction>) {
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
        .on_hover_text("Only for other formats: named group rate, seconds_per or count");
        ui.end_row();
    }

    /// What the sweep will do (its settings and how long), or what is wrong with the inputs.
    fn plan_summary(&self, ui: &mut egui::Ui, launch: &Launch) {
        match launch {
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
    }
}

/// The session holding a control the sweep would set. One holding other controls (a fan
/// curve) does not stand in the sweep's way.
fn holder_in_the_way<'a>(gpu: &'a GpuModel, launch: &Launch) -> Option<&'a Holder> {
    let swept: Vec<Hold> = launch
        .as_ref()
        .map(|(_, steps, _)| {
            steps
                .iter()
                .flat_map(|step| step.settings.iter().map(Hold::of))
                .collect()
        })
        .unwrap_or_default();
    gpu.tuning.as_ref().and_then(|tuning| {
        tuning
            .holders
            .iter()
            .find(|holder| holder.controls.iter().any(|hold| swept.contains(hold)))
    })
}
