//! The eframe application: connects the device-owner thread to the panels.

use eframe::egui;

use super::overview::OverviewState;
use crate::device::BackendOptions;
use crate::telemetry::sampler::{DEFAULT_INTERVAL_MS, Sampler};

/// The running application.
pub struct GpuTuneApp {
    sampler: Sampler,
    overview: OverviewState,
}

impl GpuTuneApp {
    /// Starts the device-owner thread; it repaints `context` whenever it has news.
    pub fn start(
        options: BackendOptions,
        context: egui::Context,
    ) -> Result<GpuTuneApp, std::io::Error> {
        let sampler = Sampler::spawn(options, DEFAULT_INTERVAL_MS, move || {
            context.request_repaint()
        })?;
        Ok(GpuTuneApp {
            sampler,
            overview: OverviewState::default(),
        })
    }
}

impl eframe::App for GpuTuneApp {
    fn logic(&mut self, _context: &egui::Context, _frame: &mut eframe::Frame) {
        for event in self.sampler.drain_events() {
            self.overview.apply(event);
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        egui::CentralPanel::default().show(ui, |ui| self.overview.overview_ui(ui));
    }
}
