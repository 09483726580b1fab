//! The application: `AppState` holds what the window shows and routes the panels' actions (it
//! is what UI tests drive); `GpuTuneApp` connects it to eframe, the link to the tuning service,
//! file dialogs and storage.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

use eframe::egui;
use serde::{Deserialize, Serialize};

use super::link::{Link, LinkCommand, LinkEvent, TuneCommand};
use super::model::{Connection, Model};
use super::monitor::{MonitorAction, MonitorView, monitor_ui};
use super::overview::overview_ui;
use super::plan::{PlanAction, PlanPanel};
use super::profiles::{ProfileAction, ProfilesPanel};
use super::sweep_panel::{SweepAction, SweepPanel};
use super::tune::TunePanel;
use super::widgets::banner::{ERROR_TEXT, connection_banner};
use crate::device::sim::wall_clock_ms;
use crate::notice::Notice;
use crate::service::INTERVAL_RANGE_MS;
use crate::service::client::TuningOptions;
use eframe::egui::RichText;

/// The window's sampling interval when the user has not chosen one.
pub const DEFAULT_INTERVAL_MS: u64 = 500;

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
    /// A change for the engine to validate and write.
    Tune(TuneCommand),
    /// Something the Profiles tab asked for, on the GPU the Tune and Profiles tabs work on.
    Profile(ProfileAction),
    /// Something the planner panel asked for (a file dialog, an export).
    Plan(PlanAction),
    /// Tell the device-owner thread to sample at this interval.
    SetInterval { interval_ms: u64 },
    /// Ask for a file name and save this GPU's history as CSV.
    ExportCsv { gpu_index: usize },
    /// Something the sweep panel asked for.
    Sweep(SweepAction),
}

/// What the Tune tab shows: the settings, or the sweep that finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TuneView {
    #[default]
    Settings,
    Sweep,
}

/// Everything the window shows and the user chose.
pub struct AppState {
    pub tab: Tab,
    pub profiles: ProfilesPanel,
    pub apply_default_profiles_on_start: bool,
    pub tune: TunePanel,
    pub tune_view: TuneView,
    pub sweep: SweepPanel,
    /// The GPU the Tune tab works on.
    pub tune_gpu: usize,
    /// The Tune tab's settings are for every GPU at once ("All GPUs").
    pub tune_all: bool,
    pub plan: PlanPanel,
    pub model: Model,
    /// The GPU whose graphs are open; `None` shows the overview.
    pub selected_gpu: Option<usize>,
    pub monitor: MonitorView,
    pub interval_ms: u64,
    /// The last message for the user (an export's result).
    pub status: Option<Notice>,
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
            tune_view: TuneView::default(),
            sweep: SweepPanel::default(),
            tune_gpu: 0,
            tune_all: false,
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

    /// Takes in one event from the link to the tuning service.
    pub fn apply(&mut self, event: LinkEvent, received_at_ms: u64) {
        let connected = matches!(event, LinkEvent::Connected { .. });
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
        if let Some(notice) = &self.status {
            let text = egui::RichText::new(notice.text());
            ui.label(if notice.is_error() {
                text.color(ERROR_TEXT)
            } else {
                text
            });
        }
        for notice in &self.model.notices {
            let text = egui::RichText::new(notice.text());
            ui.label(if notice.is_error() {
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
            if self.pick_tune_gpu(ui, false)
                && let Some(gpu) = self.model.gpus.get(self.tune_gpu)
            {
                let actions =
                    self.profiles
                        .profiles_ui(ui, gpu, &mut self.apply_default_profiles_on_start);
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
            Some((index, _)) => {
                let actions = monitor_ui(
                    ui,
                    &self.model.gpus,
                    index,
                    &mut self.monitor,
                    self.interval_ms,
                );
                for action in actions {
                    match action {
                        MonitorAction::BackToOverview => self.selected_gpu = None,
                        MonitorAction::ShowGpu { gpu_index } => {
                            if gpu_index < self.model.gpus.len() {
                                self.selected_gpu = Some(gpu_index);
                            }
                        }
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
    /// The GPU picker of the Tune and Profiles tabs, with "All GPUs" when `offer_all` (the
    /// Tune tab's settings); false when there is no GPU.
    fn pick_tune_gpu(&mut self, ui: &mut egui::Ui, offer_all: bool) -> bool {
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
            let all_label = format!("All {} GPUs", names.len());
            let all = offer_all && self.tune_all;
            let label = ui.label("GPU");
            egui::ComboBox::from_id_salt("tune-gpu")
                .selected_text(if all {
                    all_label.clone()
                } else {
                    names[self.tune_gpu].clone()
                })
                .show_ui(ui, |ui| {
                    if offer_all && ui.selectable_label(all, &all_label).clicked() {
                        self.tune_all = true;
                    }
                    for (index, name) in names.iter().enumerate() {
                        if ui
                            .selectable_label(!all && self.tune_gpu == index, name)
                            .clicked()
                        {
                            self.tune_gpu = index;
                            self.tune_all = false;
                        }
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
        let offer_all = self.tune_view == TuneView::Settings && self.model.gpus.len() > 1;
        if !self.pick_tune_gpu(ui, offer_all) {
            return;
        }
        let daemon = matches!(
            self.model.connection,
            Connection::Connected { daemon: true, .. }
        );
        ui.horizontal(|ui| {
            ui.selectable_value(&mut self.tune_view, TuneView::Settings, "Settings");
            ui.selectable_value(
                &mut self.tune_view,
                TuneView::Sweep,
                "Find the efficient setting",
            );
        });
        let Some(gpu) = self.model.gpus.get(self.tune_gpu) else {
            return;
        };
        match self.tune_view {
            TuneView::Settings if offer_all && self.tune_all => {
                let tune_commands = self.tune.tune_all_ui(ui, &self.model.gpus, daemon);
                commands.extend(tune_commands.into_iter().map(AppCommand::Tune));
            }
            TuneView::Settings => {
                let tune_commands = self.tune.tune_ui(ui, gpu, daemon);
                commands.extend(tune_commands.into_iter().map(AppCommand::Tune));
            }
            TuneView::Sweep => {
                let actions = self.sweep.sweep_ui(ui, gpu);
                commands.extend(actions.into_iter().map(AppCommand::Sweep));
            }
        }
    }
}

/// An export's outcome: the message for the user, or the error.
type ExportResult = Result<String, String>;

/// The running application.
pub struct GpuTuneApp {
    link: Link,
    state: AppState,
    export_results: (Sender<ExportResult>, Receiver<ExportResult>),
}

impl GpuTuneApp {
    /// Starts the link to the tuning service; it repaints `context` whenever it has news.
    pub fn start(
        options: TuningOptions,
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
        // News redraws the window once, at most four times a second however fast it samples.
        let pacer = std::sync::Mutex::new(super::repaint::RepaintPacer::new(
            super::repaint::MIN_FRAME_INTERVAL,
        ));
        let link = Link::spawn(options, state.interval_ms, move || {
            let delay = pacer
                .lock()
                .map(|mut pacer| pacer.delay(std::time::Instant::now()))
                .unwrap_or(super::repaint::MIN_FRAME_INTERVAL);
            context.request_repaint_after(delay)
        })?;
        Ok(GpuTuneApp {
            link,
            state,
            export_results: mpsc::channel(),
        })
    }

    fn run(&mut self, command: AppCommand, context: &egui::Context) {
        match command {
            AppCommand::Tune(command) => self.link.send(LinkCommand::Tune(command)),
            AppCommand::Profile(action) => self.run_profile_action(action),
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
                self.state.plan.model_message = Some(
                    match crate::fsafe::write_atomically(&path, text.as_bytes(), 0o644) {
                        Ok(()) => format!("Saved {}.", path.display()),
                        Err(error) => error.to_string(),
                    },
                );
            }
            AppCommand::SetInterval { interval_ms } => {
                self.link.send(LinkCommand::SetInterval { interval_ms });
            }
            AppCommand::Sweep(SweepAction::Start(launch)) => {
                self.state.sweep.message = None;
                self.link.send(LinkCommand::StartSweep(launch));
            }
            AppCommand::Sweep(SweepAction::Stop { gpu_index }) => {
                self.link.send(LinkCommand::StopSweep { gpu_index });
            }
            AppCommand::Sweep(SweepAction::BrowseProgressFile) => {
                if let Some(path) = rfd::FileDialog::new()
                    .add_filter("Logs", &["log", "txt", "out"])
                    .add_filter("Any file", &["*"])
                    .pick_file()
                {
                    self.state.sweep.progress_file = path.display().to_string();
                }
            }
            AppCommand::Sweep(SweepAction::SaveProfile { gpu_index, name }) => {
                let gpu = self.state.model.gpus.get(gpu_index as usize);
                self.state.sweep.message =
                    Some(super::profile_actions::save_sweep_profile(gpu, &name));
                self.run_profile_action(ProfileAction::Refresh);
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

    /// Runs a Profiles-tab action and takes in its outcome.
    fn run_profile_action(&mut self, action: ProfileAction) {
        let outcome = super::profile_actions::run_profile_action(
            action,
            self.state.model.gpus.get(self.state.tune_gpu),
            self.state.tune.trial_duration_s,
        );
        self.state.profiles.profiles = outcome.profiles;
        self.state.profiles.problems = outcome.problems;
        if let Some(message) = outcome.message {
            self.state.profiles.message = Some(message);
        }
        for command in outcome.commands {
            self.link.send(LinkCommand::Tune(command));
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
        self.state.status = Some(Notice::Info(format!("Saving {}…", path.display())));
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
            self.state.status = Some(Notice::Error(format!(
                "The export could not start: {error}"
            )));
        }
    }
}

impl eframe::App for GpuTuneApp {
    fn logic(&mut self, _context: &egui::Context, _frame: &mut eframe::Frame) {
        let now_ms = wall_clock_ms();
        for event in self.link.drain_events() {
            let connected = matches!(event, LinkEvent::Connected { .. });
            self.state.apply(event, now_ms);
            if connected {
                if self.state.apply_default_profiles_on_start {
                    let (commands, said) =
                        super::profile_actions::default_profile_commands(&self.state.model.gpus);
                    for command in commands {
                        self.link.send(LinkCommand::Tune(command));
                    }
                    if !said.is_empty() {
                        self.state.status = Some(Notice::Info(said.join(" ")));
                    }
                }
                self.run_profile_action(ProfileAction::Refresh);
            }
        }
        while let Ok(result) = self.export_results.1.try_recv() {
            self.state.status = Some(match result {
                Ok(message) => Notice::Info(message),
                Err(message) => Notice::Error(message),
            });
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        // Counted by the repaint measurement in docs/benchmarks.md (GPUTUNE_LOG=gputune::frames=trace).
        tracing::trace!(
            target: "gputune::frames",
            "frame {} pass {} causes {:?}",
            ui.ctx().cumulative_frame_nr(),
            ui.ctx().cumulative_pass_nr(),
            ui.ctx().repaint_causes()
        );
        let context = ui.ctx().clone();
        // The panel is not filled: the window's clear colour is the panel's colour. Under a
        // software renderer (Mesa llvmpipe) every filled pixel is shaded, and a window-sized
        // fill cost more than everything drawn on it (docs/benchmarks.md).
        let panel = egui::CentralPanel::default()
            .frame(egui::Frame::central_panel(ui.style()).fill(egui::Color32::TRANSPARENT));
        let commands = panel.show(ui, |ui| self.state.ui(ui)).inner;
        for command in commands {
            self.run(command, &context);
        }
    }

    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        visuals.panel_fill.to_normalized_gamma_f32()
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, STORAGE_KEY, &self.state.remembered());
    }
}
