//! The Plan tab's "Measure my job": the user's training command with `{mb}` where its
//! micro-batch goes, how long each run is, the micro-batches; Measure asks the app
//! (`PlanAction::Measure`), whose runner (`measure_runner.rs`) runs `measure_job` on its
//! own thread and sends its news back here. The result: each run's peak against the plan at that
//! micro-batch, the fit, and the largest micro-batch that fits, with a button that sets the
//! plan's micro-batch to it. Nothing here touches a process or the GPU.

use std::ffi::OsString;

use eframe::egui::{self, RichText};

use super::{PlanAction, PlanPanel};
use crate::ui::style::ERROR_TEXT;
use crate::ui::widgets::labelled::labelled;
use gputune_core::measure_job::{
    DEFAULT_STEPS, JobReport, JobSpec, RunProgress, RunResult, compare_with_plan, mib,
};

/// What the runner tells the panel as a measurement goes.
#[derive(Debug, Clone)]
pub enum MeasureNews {
    /// Run `run` of `runs_planned` starts (`{mb}` put in as `micro_batch`).
    Starting {
        run: usize,
        runs_planned: usize,
        micro_batch: Option<u64>,
    },
    Progress(RunProgress),
    /// gputune's own line about the measurement.
    Message(String),
    /// The measurement ended: its report, or why nothing could be measured.
    Finished(Result<JobReport, String>),
}

/// Where the measurement is.
#[derive(Debug, Clone, Default)]
pub enum MeasureState {
    #[default]
    Idle,
    Running {
        runs_planned: usize,
        progress: RunProgress,
        /// The last line the measurement said (stopping, a stream that cannot be read).
        note: Option<String>,
        stopping: bool,
    },
    Done(Box<JobReport>),
    Failed(String),
}

/// The section's inputs and its last measurement.
#[derive(Debug, Clone)]
pub struct MeasureSection {
    /// The command as typed (split like a shell would).
    pub command: String,
    pub by_seconds: bool,
    pub steps: u64,
    pub seconds: u64,
    /// "1,2": the sizes put where `{mb}` is.
    pub micro_batches: String,
    /// Run once more at the largest micro-batch found.
    pub confirm: bool,
    pub state: MeasureState,
    /// Why the inputs cannot be measured as they are.
    pub input_error: Option<String>,
}

impl Default for MeasureSection {
    fn default() -> MeasureSection {
        MeasureSection {
            command: String::new(),
            by_seconds: false,
            steps: DEFAULT_STEPS,
            seconds: 60,
            micro_batches: "1,2".to_string(),
            confirm: false,
            state: MeasureState::Idle,
            input_error: None,
        }
    }
}

impl MeasureSection {
    pub fn running(&self) -> bool {
        matches!(self.state, MeasureState::Running { .. })
    }

    /// The inputs as a checked [`JobSpec`], or what to change.
    pub fn spec(&self) -> Result<JobSpec, String> {
        let words = shlex::split(&self.command).ok_or_else(|| {
            "The command has an unclosed quote: close it, or remove it.".to_string()
        })?;
        let mut micro_batches = Vec::new();
        for part in self
            .micro_batches
            .split([',', ' '])
            .filter(|p| !p.is_empty())
        {
            let size = part.trim().parse::<u64>().map_err(|_| {
                format!("The micro-batches are whole numbers separated by commas (1,2), not \u{201c}{part}\u{201d}.")
            })?;
            micro_batches.push(size);
        }
        let (steps, seconds) = if self.by_seconds {
            (None, Some(self.seconds as f64))
        } else {
            (Some(self.steps), None)
        };
        JobSpec::new(
            words.into_iter().map(OsString::from).collect(),
            &micro_batches,
            steps,
            seconds,
            self.confirm,
        )
    }

    /// Takes the runner's news.
    pub fn take(&mut self, news: MeasureNews) {
        match news {
            MeasureNews::Starting {
                run,
                runs_planned,
                micro_batch,
            } => {
                let stopping = matches!(self.state, MeasureState::Running { stopping: true, .. });
                self.state = MeasureState::Running {
                    runs_planned,
                    progress: RunProgress {
                        run,
                        micro_batch,
                        steps_read: 0,
                        peak_bytes: None,
                        seconds: 0.0,
                    },
                    note: None,
                    stopping,
                };
            }
            MeasureNews::Progress(new) => {
                if let MeasureState::Running { progress, .. } = &mut self.state {
                    *progress = new;
                }
            }
            MeasureNews::Message(text) => {
                if let MeasureState::Running { note, .. } = &mut self.state {
                    *note = Some(text);
                }
            }
            MeasureNews::Finished(Ok(report)) => self.state = MeasureState::Done(Box::new(report)),
            MeasureNews::Finished(Err(error)) => self.state = MeasureState::Failed(error),
        }
    }
}

impl PlanPanel {
    pub(super) fn measure_ui(&mut self, ui: &mut egui::Ui, actions: &mut Vec<PlanAction>) {
        ui.add_space(8.0);
        ui.separator();
        ui.heading("Measure my job");
        ui.label(
            RichText::new(
                "Runs your training command for a few steps at each micro-batch, watches its GPU memory and stops it; the fit gives the largest micro-batch that fits the card it ran on.",
            )
            .weak(),
        );
        let running = self.measure.running();
        let section = &mut self.measure;
        ui.add_enabled_ui(!running, |ui| {
            ui.horizontal(|ui| {
                labelled(
                    ui,
                    "Command:",
                    egui::TextEdit::singleline(&mut section.command)
                        .hint_text("python train.py --batch-size {mb}")
                        .desired_width(420.0),
                );
            });
            ui.horizontal(|ui| {
                let by_steps = ui.radio_value(&mut section.by_seconds, false, "Steps per run");
                ui.add(egui::DragValue::new(&mut section.steps).range(1..=100_000))
                    .labelled_by(by_steps.id)
                    .on_hover_text("progress steps read from its output, as the sweep reads it");
                let by_seconds = ui.radio_value(&mut section.by_seconds, true, "Seconds per run");
                ui.add(egui::DragValue::new(&mut section.seconds).range(1..=3_600))
                    .labelled_by(by_seconds.id)
                    .on_hover_text("for a job whose progress gputune cannot read");
            });
            ui.horizontal(|ui| {
                labelled(
                    ui,
                    "Micro-batches:",
                    egui::TextEdit::singleline(&mut section.micro_batches)
                        .hint_text("1,2")
                        .desired_width(80.0),
                );
                ui.checkbox(&mut section.confirm, "Confirm with a run at the answer");
            });
        });
        ui.horizontal(|ui| {
            if ui
                .add_enabled(!running, egui::Button::new("Measure"))
                .clicked()
            {
                match section.spec() {
                    Ok(spec) => {
                        section.input_error = None;
                        section.state = MeasureState::Running {
                            runs_planned: spec.runs_planned(),
                            progress: RunProgress {
                                run: 0,
                                micro_batch: None,
                                steps_read: 0,
                                peak_bytes: None,
                                seconds: 0.0,
                            },
                            note: None,
                            stopping: false,
                        };
                        actions.push(PlanAction::Measure(spec));
                    }
                    Err(error) => section.input_error = Some(error),
                }
            }
            if ui.add_enabled(running, egui::Button::new("Stop")).clicked() {
                if let MeasureState::Running { stopping, .. } = &mut section.state {
                    *stopping = true;
                }
                actions.push(PlanAction::StopMeasure);
            }
        });
        if let Some(error) = &section.input_error {
            ui.label(RichText::new(error).color(ERROR_TEXT));
        }
        match &self.measure.state {
            MeasureState::Idle => {}
            MeasureState::Running {
                runs_planned,
                progress,
                note,
                stopping,
            } => {
                let size = progress
                    .micro_batch
                    .map_or_else(String::new, |size| format!(" at micro-batch {size}"));
                let peak = progress.peak_bytes.map_or_else(
                    || "no memory seen yet".to_string(),
                    |bytes| format!("peak so far {}", mib(bytes as f64)),
                );
                let which = if progress.run == 0 {
                    "Starting".to_string()
                } else {
                    format!("Run {} of {runs_planned}{size}", progress.run)
                };
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label(format!(
                        "{which}: {} steps read, {peak}, {:.0} s.{}",
                        progress.steps_read,
                        progress.seconds,
                        if *stopping { " Stopping…" } else { "" }
                    ));
                });
                if let Some(note) = note {
                    ui.label(RichText::new(note).weak());
                }
            }
            MeasureState::Failed(error) => {
                ui.label(RichText::new(error).color(ERROR_TEXT));
            }
            MeasureState::Done(report) => {
                let report = report.clone();
                self.measure_report_ui(ui, &report);
            }
        }
    }

    fn measure_report_ui(&mut self, ui: &mut egui::Ui, report: &JobReport) {
        let setup = self.current_setup();
        let plan = compare_with_plan(&self.model, &setup, &report.runs, report.fit.as_ref());
        if let (Some(card), Some(bytes)) = (&report.card, report.gpu_memory_bytes) {
            ui.label(format!(
                "Measured on {} ({}).",
                gputune_core::text::printable(card),
                mib(bytes as f64)
            ));
        }
        egui::Grid::new("plan-measure-runs")
            .striped(true)
            .show(ui, |ui| {
                ui.strong("Micro-batch");
                ui.strong("Measured peak");
                ui.strong(format!("Plan ({})", self.model.name));
                ui.end_row();
                for run in &report.runs {
                    ui.label(run.micro_batch.map_or("job".to_string(), |s| s.to_string()));
                    ui.label(match &run.result {
                        RunResult::Measured => run
                            .peak_bytes
                            .map_or("no memory seen".to_string(), |b| mib(b as f64)),
                        RunResult::OutOfMemory { because } => format!("out of memory ({because})"),
                        RunResult::Failed { because } => format!("not measured: {because}"),
                    });
                    let planned = plan
                        .runs
                        .iter()
                        .find(|compared| Some(compared.micro_batch) == run.micro_batch);
                    ui.label(planned.map_or("–".to_string(), |compared| {
                        format!(
                            "{} ({:+.1} %)",
                            mib(compared.planned_bytes as f64),
                            compared.difference_pct
                        )
                    }));
                    ui.end_row();
                }
            });
        if let Some(fit) = &report.fit {
            ui.label(format!(
                "Fit: {} fixed + {} per sample.",
                mib(fit.fixed_bytes as f64),
                mib(fit.per_sample_bytes as f64)
            ));
        }
        for line in &plan.differences {
            ui.label(RichText::new(line).weak());
        }
        ui.label(RichText::new(&report.summary).strong());
        if let Some(fit) = &report.fit
            && fit.max_micro_batch > 0
            && ui
                .button(format!("Use this micro-batch ({})", fit.max_micro_batch))
                .on_hover_text("Sets the plan's micro-batch to the largest the measurement found")
                .clicked()
        {
            self.setup.micro_batch = fit.max_micro_batch;
        }
    }
}
