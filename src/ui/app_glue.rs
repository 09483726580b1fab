//! `GpuTuneApp`: the glue between `AppState` and eframe — the link to the tuning service,
//! file dialogs, the CSV export thread, the Plan tab's measurement thread, storage and repaint
//! pacing.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};

use eframe::egui;

use super::app::{AppCommand, AppState, STORAGE_KEY};
use super::box_view::BoxAction;
use super::model::WindowModel;
use super::plan::PlanAction;
use super::profiles::ProfileAction;
use super::tune::stability_panel::StabilityAction;
use super::tune::sweep_panel::SweepAction;
use gputune_core::clock::wall_clock_ms;
use gputune_core::link::{Link, LinkCommand, LinkEvent, TuneCommand};
use gputune_core::service::client::TuningOptions;
use gputune_formats::tuning::Notice;
use gputune_formats::window::RememberedWindow;

/// An export's outcome: the message for the user, or the error.
type ExportResult = Result<String, String>;

/// The running application.
pub struct GpuTuneApp {
    link: Link,
    state: AppState,
    export_results: (Sender<ExportResult>, Receiver<ExportResult>),
    /// The Plan tab's "Measure my job".
    measure: super::plan::measure_runner::MeasureRunner,
    /// Where the profiles are (found once, at the start).
    folders: gputune_core::folders::Folders,
    /// Notices profiles saved elsewhere (the CLI) while the Profiles tab is shown.
    profile_watch: super::profiles::folder_watch::ProfileFolderWatch,
}

impl GpuTuneApp {
    /// Starts the link to the tuning service; it repaints `context` whenever it has news.
    pub fn start(
        options: TuningOptions,
        interval_ms: Option<u64>,
        context: egui::Context,
        storage: Option<&dyn eframe::Storage>,
    ) -> Result<GpuTuneApp, std::io::Error> {
        let mut remembered: RememberedWindow = storage
            .and_then(|storage| eframe::get_value(storage, STORAGE_KEY))
            .unwrap_or_default();
        if let Some(interval_ms) = interval_ms {
            remembered.interval_ms = interval_ms;
        }
        let state = AppState::new(WindowModel::default(), remembered);
        // News redraws the window once, at most four times a second however fast it samples.
        let pacer = std::sync::Mutex::new(super::repaint::RepaintPacer::new(
            super::repaint::MIN_FRAME_INTERVAL,
        ));
        let measure = super::plan::measure_runner::MeasureRunner::new(options.backend.clone());
        let folders = options.folders.clone();
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
            measure,
            profile_watch: super::profiles::folder_watch::ProfileFolderWatch::new(&folders),
            folders,
        })
    }

    fn run(&mut self, command: AppCommand, context: &egui::Context) {
        match command {
            AppCommand::Tune(command) => self.link.send(LinkCommand::Tune(command)),
            AppCommand::Profile(action) => self.run_profile_action(action),
            AppCommand::Plan(PlanAction::OpenModelFile) => {
                // Without an XDG desktop portal (or zenity) rfd opens nothing and answers None
                // at once, as for a cancelled dialog: the tab says so and offers its path field.
                let picked = rfd::FileDialog::new()
                    .add_filter("Model config or checkpoint", &["json", "safetensors"])
                    .pick_file();
                super::plan::files::model_file_picked(&mut self.state.plan, picked);
            }
            AppCommand::Plan(PlanAction::LoadModelPath(typed)) => {
                super::plan::files::load_typed_model_path(&mut self.state.plan, &typed);
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
                    // Shown beside the export buttons, in place of "Choose where to save it".
                    self.state.plan.model_message = Some(super::plan::files::NOT_SAVED.to_string());
                    return;
                };
                // A few hundred bytes: written here, through the path the dialog gave.
                self.state.plan.model_message = Some(
                    match gputune_core::fsafe::write_atomically(&path, text.as_bytes(), 0o644) {
                        Ok(()) => format!("Saved {}.", path.display()),
                        Err(error) => error.to_string(),
                    },
                );
            }
            AppCommand::Plan(PlanAction::Measure(spec)) => {
                let context = context.clone();
                if let Err(error) = self.measure.start(spec, move || context.request_repaint()) {
                    self.state
                        .plan
                        .measure
                        .take(super::plan::MeasureNews::Finished(Err(error)));
                }
            }
            AppCommand::Plan(PlanAction::StopMeasure) => self.measure.stop(),
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
                self.state.sweep.message = Some(super::profiles::actions::save_sweep_profile(
                    &self.folders,
                    gpu,
                    &self.state.model.gpus,
                    &name,
                ));
                self.run_profile_action(ProfileAction::Refresh);
            }
            AppCommand::Stability(StabilityAction::Start(launch)) => {
                self.state.stability.message = None;
                self.link.send(LinkCommand::StartStability(launch));
            }
            AppCommand::Stability(StabilityAction::Stop { gpu_index }) => {
                self.link.send(LinkCommand::StopStability { gpu_index });
            }
            AppCommand::Stability(StabilityAction::PutBack { gpu_index }) => {
                self.put_back(gpu_index);
            }
            AppCommand::Stability(StabilityAction::SaveScanProfile { gpu_index, name }) => {
                let gpu = self.state.model.gpus.get(gpu_index as usize);
                self.state.stability.message = Some(super::profiles::actions::save_scan_profile(
                    &self.folders,
                    gpu,
                    &name,
                ));
                self.run_profile_action(ProfileAction::Refresh);
            }
            AppCommand::Box(action) => self.run_box_action(action),
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

    /// The Box tab's runs over the whole box, for the link thread.
    fn run_box_action(&mut self, action: BoxAction) {
        match action {
            BoxAction::StartRun(launch) => {
                self.link.send(LinkCommand::StartBoxRun(Box::new(launch)));
            }
            BoxAction::StopRun => self.link.send(LinkCommand::StopBoxRun),
            // The state opens the graphs itself.
            BoxAction::ShowGraphs { .. } => {}
        }
    }

    /// Puts a card found unstable at its own settings back (the Stability view's Put back):
    /// to the profile last checked stable on it, else stock clock offsets and locks.
    fn put_back(&mut self, gpu_index: u32) {
        let Some(gpu) = self.state.model.gpus.get(gpu_index as usize) else {
            return;
        };
        let Some(tuning) = gpu.tuning.as_ref() else {
            return;
        };
        let profiles = match gputune_core::profiles::store::ProfileStore::open(&self.folders) {
            Ok(store) => store.list().0,
            Err(_) => Vec::new(),
        };
        let plan = gputune_core::stability::put_back::PutBack::for_card(
            &gpu.info,
            &tuning.in_force,
            &profiles,
        );
        if plan.settings.is_empty() {
            self.state.stability.message = Some(Ok(plan.describe()));
            return;
        }
        self.state.stability.message = Some(Ok(format!("Putting {}", plan.describe())));
        self.link.send(LinkCommand::Tune(TuneCommand::Apply {
            gpu_index,
            settings: plan.settings,
        }));
    }

    /// Runs a Profiles-tab action and takes in its outcome.
    fn run_profile_action(&mut self, action: ProfileAction) {
        let applying = match &action {
            ProfileAction::Apply { name, try_first } => Some((name.clone(), *try_first)),
            _ => None,
        };
        let outcome = super::profiles::actions::run_profile_action(
            &self.folders,
            action,
            self.state.model.gpus.get(self.state.tune_gpu),
            &self.state.model.gpus,
            self.state.tune.trial_duration_s,
        );
        self.state.profiles.profiles = outcome.profiles;
        self.state.profiles.problems = outcome.problems;
        if let Some(message) = outcome.message {
            self.state.profiles.message = Some(message);
        }
        let sends_settings = outcome.commands.iter().any(|command| {
            matches!(
                command,
                TuneCommand::Apply { .. }
                    | TuneCommand::StartTrial { .. }
                    | TuneCommand::ApplyAll { .. }
                    | TuneCommand::StartTrialAll { .. }
            )
        });
        if let (Some((name, try_first)), true, Some(gpu)) = (
            applying,
            sends_settings,
            self.state.model.gpus.get(self.state.tune_gpu),
        ) {
            self.state.profiles.awaiting(gpu, &name, try_first);
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
                let result = gputune_core::telemetry::csv::export::export_history(
                    &path, &identity, &history,
                )
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
    fn logic(&mut self, context: &egui::Context, _frame: &mut eframe::Frame) {
        let now_ms = wall_clock_ms();
        let profiles_shown = self.state.tab == gputune_formats::window::Tab::Profiles;
        self.profile_watch.reload_if_changed(
            &mut self.state.profiles,
            profiles_shown,
            std::time::Instant::now(),
        );
        if profiles_shown {
            // Looked at again even while nothing else redraws the window.
            context.request_repaint_after(super::profiles::folder_watch::LOOK_EVERY);
        }
        for event in self.link.drain_events() {
            // Default profiles go on once, at the first connection (not after a reconnect).
            let first_connection = matches!(&event, LinkEvent::Connected { gpus, .. } if !self.state.model.is_same_daemon_again(gpus));
            self.state.take_event(event, now_ms);
            if first_connection {
                if self.state.apply_default_profiles_on_start {
                    let (commands, said) = super::profiles::actions::default_profile_commands(
                        &self.folders,
                        &self.state.model.gpus,
                    );
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
        for news in self.measure.drain() {
            self.state.plan.measure.take(news);
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
