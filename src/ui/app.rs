//! The application: `AppState` holds what the window shows and routes the panels' actions (it
//! is what UI tests drive); `GpuTuneApp` (app_glue.rs) connects it to eframe, the link to the
//! tuning service, file dialogs and storage.

use eframe::egui;
use eframe::egui::RichText;

use super::box_view::{BoxAction, BoxView, box_ui};
use super::model::{Connection, WindowModel};
use super::monitor::overview::overview_ui;
use super::monitor::{MonitorAction, MonitorView, monitor_ui};
use super::plan::{PlanAction, PlanPanel};
use super::profiles::{ProfileAction, ProfilesPanel};
use super::style::ERROR_TEXT;
use super::tune::TunePanel;
use super::tune::stability_panel::{StabilityAction, StabilityPanel};
use super::tune::sweep_panel::{SweepAction, SweepPanel};
use super::widgets::banner::connection_banner;
use gputune_core::link::{LinkEvent, TuneCommand};
use gputune_core::service::INTERVAL_RANGE_MS;
use gputune_formats::tuning::Notice;
use gputune_formats::window::{RememberedWindow, Tab};

/// Storage key for what the window remembers between runs (`RememberedWindow`, RON).
pub(super) const STORAGE_KEY: &str = "gputune-window";

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
    /// Something the stability panel asked for.
    Stability(StabilityAction),
    /// A run over the whole box the Box tab started or stops.
    Box(BoxAction),
}

/// What the Tune tab shows: the settings, the sweep that finds them, or the stability check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TuneView {
    #[default]
    Settings,
    Sweep,
    Stability,
}

/// Everything the window shows and the user chose.
pub struct AppState {
    pub tab: Tab,
    pub profiles: ProfilesPanel,
    pub apply_default_profiles_on_start: bool,
    pub tune: TunePanel,
    pub tune_view: TuneView,
    pub sweep: SweepPanel,
    pub stability: StabilityPanel,
    /// The GPU the Tune tab works on.
    pub tune_gpu: usize,
    /// The Tune tab's settings are for every GPU at once ("All GPUs").
    pub tune_all: bool,
    pub plan: PlanPanel,
    pub box_view: BoxView,
    pub model: WindowModel,
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
    pub fn new(model: WindowModel, remembered: RememberedWindow) -> AppState {
        AppState {
            tab: remembered.tab,
            profiles: ProfilesPanel::default(),
            apply_default_profiles_on_start: remembered.apply_default_profiles_on_start,
            tune: TunePanel::default(),
            tune_view: TuneView::default(),
            sweep: SweepPanel::default(),
            stability: StabilityPanel::default(),
            tune_gpu: 0,
            tune_all: false,
            plan: PlanPanel::default(),
            box_view: BoxView::default(),
            model,
            selected_gpu: None,
            monitor: MonitorView::from(remembered.monitor),
            interval_ms: remembered
                .interval_ms
                .clamp(INTERVAL_RANGE_MS.0, INTERVAL_RANGE_MS.1),
            status: None,
            wanted_gpu_uuid: remembered.selected_gpu_uuid,
        }
    }

    /// Takes in one event from the link to the tuning service.
    pub fn take_event(&mut self, event: LinkEvent, received_at_ms: u64) {
        // A reconnect goes on with the GPU the user looks at.
        let connected = matches!(&event, LinkEvent::Connected { gpus, .. } if !self.model.is_same_daemon_again(gpus));
        self.model.take_event(event, received_at_ms);
        if connected {
            self.plan.detected_card = self.model.gpus.first().map(|gpu| {
                let identity = &gpu.info.identity;
                gputune_core::plan::recommend::card_for_gpu(
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
    pub fn remembered(&self) -> RememberedWindow {
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
        RememberedWindow {
            selected_gpu_uuid,
            monitor: self.monitor.remembered(),
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
            ui.selectable_value(&mut self.tab, Tab::Box, "Box view")
                .on_hover_text("The cards of a multi-GPU box side by side");
        });
        ui.separator();
        if self.tab == Tab::Plan {
            // The planner is pure arithmetic: it works with or without a GPU.
            commands.extend(self.plan.plan_ui(ui).into_iter().map(AppCommand::Plan));
            return commands;
        }
        if !connection_banner(ui, &self.model) {
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
        if self.tab == Tab::Box {
            for action in box_ui(ui, &mut self.box_view, &self.model) {
                match action {
                    BoxAction::ShowGraphs { gpu_index } => {
                        self.tab = Tab::Monitor;
                        self.selected_gpu = Some(gpu_index);
                    }
                    action => commands.push(AppCommand::Box(action)),
                }
            }
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
                    (self.interval_ms, self.model.heard_at_ms),
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
                .map(super::widgets::gpu_switcher::card_title)
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
                RichText::new(super::widgets::gpu_switcher::card_title(gpu))
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
            ui.selectable_value(&mut self.tune_view, TuneView::Stability, "Stability");
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
                let actions = self.sweep.sweep_ui(ui, gpu, &self.model.gpus);
                commands.extend(actions.into_iter().map(AppCommand::Sweep));
            }
            TuneView::Stability => {
                // A finished scan's table and its "Save as profile" run past a 720 px window.
                let actions = egui::ScrollArea::vertical()
                    .id_salt("stability-view")
                    .auto_shrink([false, false])
                    .show(ui, |ui| self.stability.stability_ui(ui, gpu))
                    .inner;
                commands.extend(actions.into_iter().map(AppCommand::Stability));
            }
        }
    }
}

pub use super::app_glue::GpuTuneApp;
