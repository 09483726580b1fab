//! The application: `AppState` holds what the window shows and routes the panels' actions (it
//! is what UI tests drive); `GpuTuneApp` connects it to eframe, the device-owner thread, file
//! dialogs and storage.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

use eframe::egui;
use serde::{Deserialize, Serialize};

use super::model::{Connection, Model};
use super::monitor::{MonitorAction, MonitorView, monitor_ui};
use super::overview::overview_ui;
use super::plan::{PlanAction, PlanPanel};
use super::profiles::{ProfileAction, ProfilesPanel};
use super::tune::TunePanel;
use super::widgets::banner::{ERROR_TEXT, connection_banner};
use crate::device::sim::wall_clock_ms;
use crate::device::{BackendOptions, Setting};
use crate::telemetry::sampler::{
    DEFAULT_INTERVAL_MS, Event, INTERVAL_RANGE_MS, Sampler, SamplerCommand,
};
use crate::tuning::control::TuneCommand;
use eframe::egui::RichText;

/// Storage key for what the window remembers between runs.
const STORAGE_KEY: &str = "gputune-window";

/// What the window remembers between runs (its size is kept by eframe itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RememberedState {
    /// The GPU whose graphs were open, by NVML UUID (indices can change between boots).
    pub selected_gpu_uuid: Option<String>,
    pub monitor: MonitorView,
    pub interval_ms: u64,
    pub tab: Tab,
    /// Apply each card's default profile when the window opens.
    pub apply_default_profiles_on_start: bool,
}

impl Default for RememberedState {
    fn default() -> RememberedState {
        RememberedState {
            selected_gpu_uuid: None,
            monitor: MonitorView::default(),
            interval_ms: DEFAULT_INTERVAL_MS,
            tab: Tab::Monitor,
            apply_default_profiles_on_start: false,
        }
    }
}

/// The window's top-level views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Tab {
    #[default]
    Monitor,
    Tune,
    Profiles,
    Plan,
}

/// What the app must do outside the UI.
#[derive(Debug, Clone, PartialEq)]
pub enum AppCommand {
    /// A change for the device thread to validate and write.
    Tune(TuneCommand),
    /// Something the Profiles tab asked for, on the GPU the Tune and Profiles tabs work on.
    Profile(ProfileAction),
    /// Retry settings the driver refused, through `pkexec gputune apply ...`.
    ApplyAsAdministrator {
        gpu_index: usize,
        settings: Vec<Setting>,
    },
    /// Something the planner panel asked for (a file dialog, an export).
    Plan(PlanAction),
    /// Tell the device-owner thread to sample at this interval.
    SetInterval { interval_ms: u64 },
    /// Ask for a file name and save this GPU's history as CSV.
    ExportCsv { gpu_index: usize },
}

/// Everything the window shows and the user chose.
pub struct AppState {
    pub tab: Tab,
    pub profiles: ProfilesPanel,
    pub apply_default_profiles_on_start: bool,
    pub tune: TunePanel,
    /// The GPU the Tune tab works on.
    pub tune_gpu: usize,
    pub plan: PlanPanel,
    pub model: Model,
    /// The GPU whose graphs are open; `None` shows the overview.
    pub selected_gpu: Option<usize>,
    pub monitor: MonitorView,
    pub interval_ms: u64,
    /// The last message for the user (an export's result), and whether it is an error.
    pub status: Option<(String, bool)>,
    /// A GPU remembered from the last run, opened when it shows up again.
    wanted_gpu_uuid: Option<String>,
}

impl AppState {
    pub fn new(model: Model, remembered: RememberedState) -> AppState {
        AppState {
            tab: remembered.tab,
            profiles: ProfilesPanel::default(),
            apply_default_profiles_on_start: remembered.apply_default_profiles_on_start,
            tune: TunePanel::default(),
            tune_gpu: 0,
            plan: PlanPanel::default(),
            model,
            selected_gpu: None,
            monitor: remembered.monitor,
            interval_ms: remembered
                .interval_ms
                .clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1),
            status: None,
            wanted_gpu_uuid: remembered.selected_gpu_uuid,
        }
    }

    /// Takes in one event from the device-owner thread.
    pub fn apply(&mut self, event: Event, received_at_ms: u64) {
        let connected = matches!(event, Event::Connected { .. });
        self.model.apply(event, received_at_ms);
        if connected {
            self.plan.detected_card = self.model.gpus.first().map(|gpu| {
                let identity = &gpu.info.identity;
                crate::plan::recommend::card_for_gpu(
                    &identity.name,
                    identity.memory_total_bytes,
                    identity.architecture.as_deref(),
                )
            });
            self.selected_gpu = self
                .wanted_gpu_uuid
                .as_deref()
                .and_then(|uuid| self.model.index_of_uuid(uuid));
        }
    }

    /// What to remember for the next run.
    pub fn remembered(&self) -> RememberedState {
        let selected_gpu_uuid = match self.selected_gpu {
            Some(index) => self
                .model
                .gpus
                .get(index)
                .map(|gpu| gpu.info.identity.uuid.clone()),
            // Still connecting: keep what the last run remembered.
            None if self.model.connection == Connection::Connecting => self.wanted_gpu_uuid.clone(),
            None => None,
        };
        RememberedState {
            selected_gpu_uuid,
            monitor: self.monitor.clone(),
            interval_ms: self.interval_ms,
            tab: self.tab,
            apply_default_profiles_on_start: self.apply_default_profiles_on_start,
        }
    }

    /// Draws the window's content; returns what the app must do outside the UI.
    pub fn ui(&mut self, ui: &mut egui::Ui) -> Vec<AppCommand> {
        let mut commands = Vec::new();
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tab, Tab::Monitor, "Monitor");
            ui.selectable_value(&mut self.tab, Tab::Tune, "Tune");
            ui.selectable_value(&mut self.tab, Tab::Profiles, "Profiles");
            ui.selectable_value(&mut self.tab, Tab::Plan, "Plan");
        });
        ui.separator();
        if self.tab == Tab::Plan {
            // The planner is pure arithmetic: it works with or without a GPU.
            commands.extend(self.plan.plan_ui(ui).into_iter().map(AppCommand::Plan));
            return commands;
        }
        if !connection_banner(ui, &self.model.connection) {
            return commands;
        }
        if let Some((message, is_error)) = &self.status {
            let text = egui::RichText::new(message.as_str());
            ui.label(if *is_error {
                text.color(ERROR_TEXT)
            } else {
                text
            });
        }
        if self.tab == Tab::Tune {
            self.tune_tab(ui, &mut commands);
            return commands;
        }
        if self.tab == Tab::Profiles {
            if self.pick_tune_gpu(ui)
                && let Some(gpu) = self.model.gpus.get(self.tune_gpu)
            {
                let actions = self.profiles.profiles_ui(
                    ui,
                    gpu,
                    &self.tune.applied,
                    &mut self.apply_default_profiles_on_start,
                );
                commands.extend(actions.into_iter().map(AppCommand::Profile));
            }
            return commands;
        }
        let selected = self
            .selected_gpu
            .filter(|&index| index < self.model.gpus.len());
        match selected.and_then(|index| self.model.gpus.get(index).map(|gpu| (index, gpu))) {
            None => {
                if let Some(index) = overview_ui(ui, &self.model) {
                    self.selected_gpu = Some(index);
                }
            }
            Some((index, gpu)) => {
                for action in monitor_ui(ui, gpu, &mut self.monitor, self.interval_ms) {
                    match action {
                        MonitorAction::BackToOverview => self.selected_gpu = None,
                        MonitorAction::ExportCsv => {
                            commands.push(AppCommand::ExportCsv { gpu_index: index })
                        }
                        MonitorAction::SetInterval { interval_ms } => {
                            self.interval_ms =
                                interval_ms.clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1);
                            commands.push(AppCommand::SetInterval {
                                interval_ms: self.interval_ms,
                            });
                        }
                    }
                }
            }
        }
        commands
    }
}

impl AppState {
    /// The GPU picker of the Tune and Profiles tabs; false when there is no GPU.
    fn pick_tune_gpu(&mut self, ui: &mut egui::Ui) -> bool {
        if self.model.gpus.is_empty() {
            ui.label("The driver reports no GPUs.");
            return false;
        }
        self.tune_gpu = self.tune_gpu.min(self.model.gpus.len() - 1);
        if self.model.gpus.len() > 1 {
            let names: Vec<String> = self
                .model
                .gpus
                .iter()
                .map(super::overview::card_title)
                .collect();
            let label = ui.label("GPU");
            egui::ComboBox::from_id_salt("tune-gpu")
                .selected_text(names[self.tune_gpu].clone())
                .show_ui(ui, |ui| {
                    for (index, name) in names.iter().enumerate() {
                        ui.selectable_value(&mut self.tune_gpu, index, name);
                    }
                })
                .response
                .labelled_by(label.id);
        } else if let Some(gpu) = self.model.gpus.first() {
            ui.label(
                RichText::new(super::overview::card_title(gpu))
                    .strong()
                    .size(15.0),
            );
        }
        true
    }

    fn tune_tab(&mut self, ui: &mut egui::Ui, commands: &mut Vec<AppCommand>) {
        if !self.pick_tune_gpu(ui) {
            return;
        }
        if let Some(gpu) = self.model.gpus.get(self.tune_gpu) {
            let (tune_commands, elevate) = self.tune.tune_ui(ui, gpu);
            for command in &tune_commands {
                self.tune.applied.record(command);
            }
            commands.extend(tune_commands.into_iter().map(AppCommand::Tune));
            if let Some(settings) = elevate {
                commands.push(AppCommand::ApplyAsAdministrator {
                    gpu_index: self.tune_gpu,
                    settings,
                });
            }
        }
    }
}

/// An export's outcome: the message for the user, or the error.
type ExportResult = Result<String, String>;

/// The running application.
pub struct GpuTuneApp {
    sampler: Sampler,
    state: AppState,
    export_results: (Sender<ExportResult>, Receiver<ExportResult>),
}

impl GpuTuneApp {
    /// Starts the device-owner thread; it repaints `context` whenever it has news.
    pub fn start(
        options: BackendOptions,
        interval_ms: Option<u64>,
        context: egui::Context,
        storage: Option<&dyn eframe::Storage>,
    ) -> Result<GpuTuneApp, std::io::Error> {
        let mut remembered: RememberedState = storage
            .and_then(|storage| eframe::get_value(storage, STORAGE_KEY))
            .unwrap_or_default();
        if let Some(interval_ms) = interval_ms {
            remembered.interval_ms = interval_ms;
        }
        let state = AppState::new(Model::default(), remembered);
        let sampler = Sampler::spawn(options, state.interval_ms, move || {
            context.request_repaint()
        })?;
        Ok(GpuTuneApp {
            sampler,
            state,
            export_results: mpsc::channel(),
        })
    }

    /// Shows a message above the panels (e.g. what was restored at start).
    pub fn set_status(&mut self, message: String, is_error: bool) {
        self.state.status = Some((message, is_error));
    }

    fn run(&mut self, command: AppCommand, context: &egui::Context) {
        match command {
            AppCommand::Tune(command) => self.sampler.send(SamplerCommand::Tune(command)),
            AppCommand::Profile(action) => {
                super::profile_actions::run_profile_action(&mut self.state, &self.sampler, action);
            }
            AppCommand::ApplyAsAdministrator {
                gpu_index,
                settings,
            } => {
                self.apply_as_administrator(gpu_index, settings, context.clone());
            }
            AppCommand::Plan(PlanAction::OpenModelFile) => {
                let Some(path) = rfd::FileDialog::new()
                    .add_filter("Model config or checkpoint", &["json", "safetensors"])
                    .pick_file()
                else {
                    return;
                };
                match crate::plan::import::load_model(&path) {
                    Ok(model) => {
                        self.state.plan.model = model;
                        self.state.plan.model_message = None;
                    }
                    Err(error) => self.state.plan.model_message = Some(error.to_string()),
                }
            }
            AppCommand::Plan(PlanAction::Export(format)) => {
                let text = match self.state.plan.export_text(format) {
                    Ok(text) => text,
                    Err(error) => {
                        self.state.plan.model_message = Some(error.to_string());
                        return;
                    }
                };
                let Some(path) = rfd::FileDialog::new()
                    .set_file_name(format.file_name())
                    .save_file()
                else {
                    return;
                };
                // A few hundred bytes: written here, through the path the dialog gave.
                self.state.plan.model_message = Some(match std::fs::write(&path, text) {
                    Ok(()) => format!("Saved {}.", path.display()),
                    Err(error) => format!("{} could not be written: {error}", path.display()),
                });
            }
            AppCommand::SetInterval { interval_ms } => {
                self.sampler
                    .send(SamplerCommand::SetInterval { interval_ms });
            }
            AppCommand::ExportCsv { gpu_index } => {
                let Some(gpu) = self.state.model.gpus.get(gpu_index) else {
                    return;
                };
                let suggested = format!(
                    "gputune-gpu{}-{}.csv",
                    gpu.info.identity.index,
                    chrono::Local::now().format("%Y%m%d-%H%M%S")
                );
                let Some(path) = rfd::FileDialog::new()
                    .add_filter("CSV", &["csv"])
                    .set_file_name(suggested)
                    .save_file()
                else {
                    return;
                };
                self.export_in_background(gpu_index, path, context.clone());
            }
        }
    }

    /// Runs `pkexec gputune apply ...` on its own thread; its outcome arrives as a status.
    fn apply_as_administrator(
        &mut self,
        gpu_index: usize,
        settings: Vec<Setting>,
        context: egui::Context,
    ) {
        let Some(gpu) = self.state.model.gpus.get_mut(gpu_index) else {
            return;
        };
        gpu.needs_administrator = None;
        let uuid = gpu.info.identity.uuid.clone();
        let executable = match std::env::current_exe() {
            Ok(executable) => executable,
            Err(error) => {
                self.state.status = Some((
                    format!(
                        "gputune could not find its own program to run as administrator: {error}"
                    ),
                    true,
                ));
                return;
            }
        };
        let results = self.export_results.0.clone();
        self.state.status = Some(("Asking for administrator rights…".to_string(), false));
        let spawned = std::thread::Builder::new().name("gputune-pkexec".to_string()).spawn(move || {
            let output = crate::tuning::elevate::pkexec_command(&executable, &uuid, &settings).output();
            let result = match output {
                Ok(output) if output.status.success() => Ok(format!("Applied as administrator: {}", crate::tuning::journal::describe_all(&settings))),
                Ok(output) => {
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    Err(format!("Applying as administrator failed: {}", stderr.trim()))
                }
                Err(error) => Err(format!("pkexec could not be started ({error}): install polkit, or run `sudo gputune apply ...`.")),
            };
            let _ = results.send(result);
            context.request_repaint();
        });
        if let Err(error) = spawned {
            self.state.status = Some((format!("Could not start pkexec: {error}"), true));
        }
    }

    /// Writes the CSV on its own thread so a long history does not freeze the window.
    fn export_in_background(&mut self, gpu_index: usize, path: PathBuf, context: egui::Context) {
        let Some(gpu) = self.state.model.gpus.get(gpu_index) else {
            return;
        };
        let identity = gpu.info.identity.clone();
        let history = gpu.history.clone();
        let results = self.export_results.0.clone();
        self.state.status = Some((format!("Saving {}…", path.display()), false));
        let spawned = std::thread::Builder::new()
            .name("gputune-export".to_string())
            .spawn(move || {
                let result = crate::telemetry::csv::export_history(&path, &identity, &history)
                    .map(|rows| format!("Saved {rows} rows to {}.", path.display()))
                    .map_err(|error| error.to_string());
                let _ = results.send(result);
                context.request_repaint();
            });
        if let Err(error) = spawned {
            self.state.status = Some((format!("The export could not start: {error}"), true));
        }
    }
}

impl eframe::App for GpuTuneApp {
    fn logic(&mut self, _context: &egui::Context, _frame: &mut eframe::Frame) {
        let now_ms = wall_clock_ms();
        for event in self.sampler.drain_events() {
            let connected = matches!(event, Event::Connected { .. });
            self.state.apply(event, now_ms);
            if connected {
                super::profile_actions::apply_default_profiles(&mut self.state, &self.sampler);
                super::profile_actions::run_profile_action(
                    &mut self.state,
                    &self.sampler,
                    super::profiles::ProfileAction::Refresh,
                );
            }
        }
        while let Ok(result) = self.export_results.1.try_recv() {
            self.state.status = Some(match result {
                Ok(message) => (message, false),
                Err(message) => (message, true),
            });
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        // Counted by the repaint measurement in docs/benchmarks.md (GPUTUNE_LOG=gputune::frames=trace).
        tracing::trace!(target: "gputune::frames", "frame");
        let context = ui.ctx().clone();
        let commands = egui::CentralPanel::default()
            .show(ui, |ui| self.state.ui(ui))
            .inner;
        for command in commands {
            self.run(command, &context);
        }
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, STORAGE_KEY, &self.state.remembered());
    }
}
