//! "Check stability" and "Find my undervolt", in the Tune tab: a checked compute load at the
//! card's settings, and the scanner that finds the largest stable clock offset at a lock. The
//! check and the scan run in the link thread; the panel shows their views.

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::GpuModel;
use crate::ui::style::{ERROR_TEXT, WARNING_TEXT};
use crate::ui::widgets::labelled::labelled;
use gputune_core::link::stability::{StabilityKind, StabilityLaunch, StabilityView};
use gputune_core::stability::busy::checking_holder;
use gputune_core::stability::plan::LoadShape;
use gputune_core::stability::put_back::stock_clocks;
use gputune_core::stability::report::{CheckReport, Verdict, describe_settings};
use gputune_core::stability::scan::ScanStep;
use gputune_core::units::{duration_s, large_count};

const STABLE_TEXT: Color32 = Color32::from_rgb(0x69, 0xf0, 0xae);

/// What the panel asks the app to do.
#[derive(Debug, Clone, PartialEq)]
pub enum StabilityAction {
    Start(Box<StabilityLaunch>),
    Stop {
        gpu_index: u32,
    },
    /// Put the card back after it was found unstable at its own settings: to the profile
    /// last checked stable on it, else to stock clock offsets and locks.
    PutBack {
        gpu_index: u32,
    },
    /// Save the last scan's confirmed offset on this GPU as a profile.
    SaveScanProfile {
        gpu_index: u32,
        name: String,
    },
}

/// The panel's inputs.
pub struct StabilityPanel {
    pub duration_s: f64,
    pub shape: LoadShape,
    /// 0: the card's rated boost clock.
    pub lock_mhz: u32,
    pub step_mhz: i32,
    pub step_s: f64,
    pub margin_steps: u32,
    pub confirm_s: f64,
    pub profile_name: String,
    /// What saving the profile said.
    pub message: Option<Result<String, String>>,
}

impl Default for StabilityPanel {
    fn default() -> StabilityPanel {
        StabilityPanel {
            duration_s: 600.0,
            shape: LoadShape::Both,
            lock_mhz: 0,
            step_mhz: 15,
            step_s: 60.0,
            margin_steps: 2,
            confirm_s: 600.0,
            profile_name: "Undervolt".to_string(),
            message: None,
        }
    }
}

impl StabilityPanel {
    pub fn stability_ui(&mut self, ui: &mut egui::Ui, gpu: &GpuModel) -> Vec<StabilityAction> {
        let mut actions = Vec::new();
        let gpu_index = gpu.info.identity.index;
        ui.label(
            "A checked load on the card: tensor-core GEMMs (bf16, the math training runs) \
             compared bit for bit, FMA chains against the CPU's exact results, and VRAM \
             patterns read back. An undervolt a little too deep does not always crash; it \
             computes wrong results. 0 wrong means the card is right at these settings.",
        );
        let settings = gpu.tuning.as_ref().map_or_else(
            || "not known yet".to_string(),
            |tuning| {
                describe_settings(
                    &tuning.in_force,
                    gpu.info.constraints.power_limit_default_mw,
                )
            },
        );
        ui.label(format!("The card runs: {settings}."));
        ui.add_space(6.0);
        let view = gpu.stability.as_ref();
        let running = view.is_some_and(|view| view.running);
        // Another client's check or scan (the CLI's, another window's): named, and no second.
        let other = gpu
            .tuning
            .as_ref()
            .and_then(checking_holder)
            .filter(|_| !running);
        if let Some(holder) = other {
            ui.label(
                RichText::new(format!(
                    "GPU {gpu_index} is busy: {} since {}. Check and Find are off until it ends.",
                    holder
                        .purpose
                        .describe_by(&gputune_core::text::printable(&holder.by)),
                    gputune_core::units::local_time(holder.since_ms, "%H:%M:%S")
                ))
                .strong(),
            );
        }
        ui.add_enabled_ui(!running && other.is_none() && gpu.tuning.is_some(), |ui| {
            self.check_inputs_ui(ui, gpu, &mut actions);
            ui.add_space(6.0);
            self.scan_inputs_ui(ui, gpu, &mut actions);
        });
        if let Some(view) = view {
            ui.separator();
            if view.running && ui.button("Stop").clicked() {
                actions.push(StabilityAction::Stop { gpu_index });
            }
            if view.scanning {
                self.scan_view_ui(ui, view, &mut actions);
            } else {
                check_view_ui(ui, view);
                self.put_back_ui(ui, gpu, view, &mut actions);
            }
            // The answer to the last action (a put-back, a saved profile), under either view.
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
        actions
    }

    /// After "Unstable" at settings the card still runs: the way back.
    fn put_back_ui(
        &self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        view: &StabilityView,
        actions: &mut Vec<StabilityAction>,
    ) {
        let unstable = view
            .report
            .as_ref()
            .is_some_and(|report| report.verdict == Verdict::Unstable);
        let Some(tuning) = gpu.tuning.as_ref().filter(|_| unstable && !view.running) else {
            return;
        };
        if !stock_clocks(&gpu.info, &tuning.in_force, false).is_empty() {
            ui.horizontal(|ui| {
                ui.label(format!(
                    "The card still runs {}.",
                    describe_settings(&tuning.in_force, gpu.info.constraints.power_limit_default_mw)
                ));
                if ui
                    .button("Put back")
                    .on_hover_text(
                        "To the profile last checked stable on this card, else to stock clock offsets and locks; the fans stay as they are.",
                    )
                    .clicked()
                {
                    actions.push(StabilityAction::PutBack {
                        gpu_index: gpu.info.identity.index,
                    });
                }
            });
        }
    }

    fn check_inputs_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        actions: &mut Vec<StabilityAction>,
    ) {
        ui.heading("Stability check");
        ui.horizontal(|ui| {
            labelled(
                ui,
                "Duration",
                egui::DragValue::new(&mut self.duration_s)
                    .range(10.0..=3600.0)
                    .speed(10.0)
                    .suffix(" s"),
            );
            let label = ui.label("Load");
            egui::ComboBox::from_id_salt(("stability-load", gpu.info.identity.index))
                .selected_text(shape_text(self.shape))
                .show_ui(ui, |ui| {
                    for shape in [LoadShape::Both, LoadShape::Full, LoadShape::Pulsed] {
                        ui.selectable_value(&mut self.shape, shape, shape_text(shape));
                    }
                })
                .response
                .labelled_by(label.id);
            if ui.button("Check stability").clicked()
                && let Some(tuning) = gpu.tuning.clone()
            {
                actions.push(StabilityAction::Start(Box::new(StabilityLaunch {
                    gpu_index: gpu.info.identity.index,
                    kind: StabilityKind::Check {
                        duration_s: self.duration_s,
                        shape: self.shape,
                    },
                    tuning,
                })));
            }
        });
    }

    fn scan_inputs_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        actions: &mut Vec<StabilityAction>,
    ) {
        ui.heading("Undervolt scanner");
        let constraints = &gpu.info.constraints;
        let Some(offsets) = constraints.adjustable_gpu_clock_offset_range() else {
            ui.label(
                RichText::new(
                    "This card takes no graphics clock offset (datacenter cards, drivers before 555): there is no undervolt to find.",
                )
                .weak(),
            );
            return;
        };
        if self.lock_mhz == 0 {
            self.lock_mhz = constraints.boost_clock_mhz.unwrap_or(0);
        }
        let range = constraints.gpu_clock_range;
        ui.label(
            "At a clock lock, the offset rises a step at a time, each step checked; the first \
             instability ends the stepping, a margin is taken off, and a long check confirms.",
        );
        egui::Grid::new(("scan-inputs", gpu.info.identity.index))
            .num_columns(4)
            .show(ui, |ui| {
                let (low, high) = range.map_or((0, 5000), |range| (range.min_mhz, range.max_mhz));
                labelled(
                    ui,
                    "Lock the clock at",
                    egui::DragValue::new(&mut self.lock_mhz)
                        .range(low..=high)
                        .suffix(" MHz"),
                );
                labelled(
                    ui,
                    "Step",
                    egui::DragValue::new(&mut self.step_mhz)
                        .range(1..=200)
                        .suffix(" MHz"),
                );
                ui.end_row();
                labelled(
                    ui,
                    "Each step for",
                    egui::DragValue::new(&mut self.step_s)
                        .range(5.0..=600.0)
                        .suffix(" s"),
                );
                labelled(
                    ui,
                    "Margin",
                    egui::DragValue::new(&mut self.margin_steps)
                        .range(0..=10)
                        .suffix(" steps"),
                );
                ui.end_row();
                labelled(
                    ui,
                    "Confirm for",
                    egui::DragValue::new(&mut self.confirm_s)
                        .range(10.0..=3600.0)
                        .speed(10.0)
                        .suffix(" s"),
                );
                ui.end_row();
            });
        let most_steps = offsets.max_mhz.max(0) / self.step_mhz.max(1) + 1;
        let longest_s = self.step_s * f64::from(most_steps + 1) + self.confirm_s;
        ui.label(
            RichText::new(format!(
                "Offsets +0 to {:+} MHz: at most {most_steps} steps and a stock step, up to {} in all.",
                offsets.max_mhz,
                duration_s(longest_s)
            ))
            .weak(),
        );
        if ui.button("Find my undervolt").clicked()
            && let Some(tuning) = gpu.tuning.clone()
        {
            actions.push(StabilityAction::Start(Box::new(StabilityLaunch {
                gpu_index: gpu.info.identity.index,
                kind: StabilityKind::Scan {
                    lock_mhz: (self.lock_mhz > 0).then_some(self.lock_mhz),
                    step_mhz: self.step_mhz,
                    step_s: self.step_s,
                    margin_steps: self.margin_steps,
                    confirm_s: self.confirm_s,
                },
                tuning,
            })));
        }
    }

    fn scan_view_ui(
        &mut self,
        ui: &mut egui::Ui,
        view: &StabilityView,
        actions: &mut Vec<StabilityAction>,
    ) {
        match &view.scan_outcome {
            None => {
                ui.label(RichText::new("Finding the undervolt…").strong());
                if let Some(progress) = &view.scan_progress {
                    ui.label(progress);
                }
            }
            Some(outcome) => {
                let color = if outcome.stable_offset_mhz.is_some() {
                    STABLE_TEXT
                } else {
                    ERROR_TEXT
                };
                ui.label(RichText::new(&outcome.summary).strong().color(color));
                if let Some(savings) = &outcome.savings {
                    ui.label(savings);
                }
                for line in &outcome.put_back {
                    ui.label(RichText::new(line).weak());
                }
            }
        }
        let steps = view
            .scan_outcome
            .as_ref()
            .map_or(&view.scan_steps, |outcome| &outcome.steps);
        let stock = view
            .scan_outcome
            .as_ref()
            .map_or(view.scan_stock.as_ref(), |outcome| outcome.stock.as_ref());
        if !steps.is_empty() || stock.is_some() {
            steps_grid(ui, view.gpu_index, stock, steps);
        }
        if let Some(outcome) = &view.scan_outcome {
            if let Some(report) = &outcome.confirmation {
                ui.label(format!("Confirmation: {}", report.sentence()));
            }
            if outcome.stable_offset_mhz.is_some() {
                ui.horizontal(|ui| {
                    let label = ui.label("Save as profile");
                    ui.add(egui::TextEdit::singleline(&mut self.profile_name).desired_width(160.0))
                        .labelled_by(label.id);
                    if ui.button("Save").clicked() {
                        actions.push(StabilityAction::SaveScanProfile {
                            gpu_index: view.gpu_index,
                            name: self.profile_name.trim().to_string(),
                        });
                    }
                });
            }
        }
    }
}

fn shape_text(shape: LoadShape) -> &'static str {
    match shape {
        LoadShape::Both => "full and pulsed",
        LoadShape::Full => "full (at the power limit)",
        LoadShape::Pulsed => "pulsed (20-80 % duty)",
    }
}

fn check_view_ui(ui: &mut egui::Ui, view: &StabilityView) {
    match &view.report {
        None => {
            if let Some(progress) = &view.progress {
                let fraction = if progress.duration_s > 0.0 {
                    (progress.elapsed_s / progress.duration_s).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                ui.add(egui::ProgressBar::new(fraction as f32).text(format!(
                    "{} of {}: {}",
                    duration_s(progress.elapsed_s),
                    duration_s(progress.duration_s),
                    progress.activity
                )));
                let wrong = format!(
                    "{} results checked, {} wrong",
                    large_count(progress.results),
                    progress.wrong
                );
                if progress.wrong > 0 {
                    ui.label(RichText::new(wrong).color(ERROR_TEXT));
                } else {
                    ui.label(wrong);
                }
                ui.label(RichText::new(&progress.readings).weak());
            }
        }
        Some(report) => report_ui(ui, report),
    }
}

fn report_ui(ui: &mut egui::Ui, report: &CheckReport) {
    let color = match report.verdict {
        // A short check found nothing gross: not the green of a thorough one.
        Verdict::Stable if report.is_short() => WARNING_TEXT,
        Verdict::Stable => STABLE_TEXT,
        Verdict::Unstable => ERROR_TEXT,
        Verdict::Stopped | Verdict::NotRun => ui.visuals().weak_text_color(),
    };
    ui.label(RichText::new(report.sentence()).strong().color(color));
    if let Some(rates) = report.rates() {
        ui.label(rates);
    }
    for line in &report.put_back {
        ui.label(RichText::new(line).weak());
    }
}

fn steps_grid(ui: &mut egui::Ui, gpu_index: u32, stock: Option<&ScanStep>, steps: &[ScanStep]) {
    egui::Grid::new(("scan-steps", gpu_index))
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            for title in ["Offset", "Verdict", "Clock", "Power", "Energy", "Checked"] {
                ui.label(RichText::new(title).strong());
            }
            ui.end_row();
            for step in stock.into_iter().chain(steps) {
                ui.label(step.label());
                match &step.finding {
                    Some(finding) if step.verdict == Verdict::Unstable => {
                        ui.label(RichText::new(format!("unstable: {finding}")).color(ERROR_TEXT));
                    }
                    Some(finding) if step.verdict == Verdict::Stopped => {
                        ui.label(format!("stopped: {finding}"));
                    }
                    Some(finding) => {
                        ui.label(format!("not run: {finding}"));
                    }
                    None => {
                        ui.label(RichText::new("stable").color(STABLE_TEXT));
                    }
                }
                ui.label(
                    gputune_core::units::clock_range_mhz(step.clock_min_mhz, step.clock_max_mhz)
                        .unwrap_or_else(|| "—".to_string()),
                );
                ui.label(
                    step.power_mean_w
                        .map_or_else(|| "—".to_string(), |power| format!("{power:.0} W")),
                );
                ui.label(
                    step.joules_per_tflop
                        .map_or_else(|| "—".to_string(), |joules| format!("{joules:.2} J/TFLOP")),
                );
                ui.label(format!(
                    "{} wrong of {}",
                    step.wrong,
                    large_count(step.results)
                ));
                ui.end_row();
            }
        });
}
