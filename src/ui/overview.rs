//! The GPU overview: one card per GPU with its current readings, and the simulated-GPU banner.

use eframe::egui::{self, Color32, RichText};

use crate::device::{BackendKind, DeviceError, Telemetry};
use crate::telemetry::sampler::{Event, GpuInfo};
use crate::units::{NOT_AVAILABLE, energy, gib, or_na, throttle_summary, watts};

/// Width of one GPU card, in points.
const CARD_WIDTH: f32 = 330.0;
/// Inner margin of a GPU card, in points.
const CARD_MARGIN: f32 = 10.0;
const WARNING_FILL: Color32 = Color32::from_rgb(0x5a, 0x45, 0x10);
const ERROR_TEXT: Color32 = Color32::from_rgb(0xff, 0x8a, 0x80);

/// Where the connection to the GPUs stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Connection {
    /// The device-owner thread is still opening the backend.
    #[default]
    Connecting,
    Connected {
        backend: BackendKind,
        simulated_because: Option<String>,
    },
    Failed(String),
}

/// One GPU as the overview shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuView {
    pub info: GpuInfo,
    /// The latest reading, or why it failed; `None` before the first sample.
    pub latest: Option<Result<Telemetry, DeviceError>>,
}

/// The overview panel's state, fed by sampler events.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OverviewState {
    pub connection: Connection,
    pub gpus: Vec<GpuView>,
}

impl OverviewState {
    /// Takes in one event from the device-owner thread.
    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Connected {
                backend,
                simulated_because,
                gpus,
            } => {
                self.connection = Connection::Connected {
                    backend,
                    simulated_because,
                };
                self.gpus = gpus
                    .into_iter()
                    .map(|info| GpuView { info, latest: None })
                    .collect();
            }
            Event::Samples(samples) => {
                for (view, sample) in self.gpus.iter_mut().zip(samples) {
                    view.latest = Some(sample);
                }
            }
            Event::Failed(error) => self.connection = Connection::Failed(error.to_string()),
        }
    }

    pub fn overview_ui(&mut self, ui: &mut egui::Ui) {
        match &self.connection {
            Connection::Connecting => {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("Looking for GPUs…");
                });
                return;
            }
            Connection::Failed(message) => {
                ui.heading("No GPU could be opened");
                ui.label(RichText::new(message).color(ERROR_TEXT));
                ui.label("Start gputune with --backend sim to explore it on a simulated RTX 4090.");
                return;
            }
            Connection::Connected {
                backend: BackendKind::Sim,
                simulated_because,
            } => simulated_banner(ui, simulated_because.as_deref()),
            Connection::Connected { .. } => {}
        }
        if self.gpus.is_empty() {
            ui.label("The driver reports no GPUs.");
            return;
        }
        egui::ScrollArea::vertical().show(ui, |ui| {
            // Whole cards per row: as many as fit the window, at least one.
            let spacing = ui.spacing().item_spacing.x;
            let card_outer_width = CARD_WIDTH + 2.0 * CARD_MARGIN + spacing + 2.0;
            let per_row = ((ui.available_width() + spacing) / card_outer_width)
                .floor()
                .max(1.0) as usize;
            for row in self.gpus.chunks(per_row) {
                ui.horizontal_top(|ui| {
                    for view in row {
                        gpu_card(ui, view);
                    }
                });
            }
        });
    }
}

fn simulated_banner(ui: &mut egui::Ui, reason: Option<&str>) {
    egui::Frame::new()
        .fill(WARNING_FILL)
        .inner_margin(8.0)
        .corner_radius(4.0)
        .show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.label(
                RichText::new("Simulated GPU")
                    .strong()
                    .color(Color32::WHITE),
            );
            let detail = match reason {
                Some(reason) => format!(
                    "No NVIDIA GPU could be used, so gputune shows a simulated card. {reason}"
                ),
                None => "Started with --backend sim: these readings come from a simulated card."
                    .to_string(),
            };
            ui.label(RichText::new(detail).color(Color32::from_gray(230)));
        });
    ui.add_space(8.0);
}

fn gpu_card(ui: &mut egui::Ui, view: &GpuView) {
    let identity = &view.info.identity;
    egui::Frame::group(ui.style())
        .inner_margin(10.0)
        .show(ui, |ui| {
            ui.set_width(CARD_WIDTH);
            ui.vertical(|ui| {
                ui.label(
                    RichText::new(format!("GPU {} · {}", identity.index, identity.name))
                        .strong()
                        .size(15.0),
                );
                ui.label(
                    RichText::new(format!("{}  ·  {}", identity.uuid, identity.pci_bus_id))
                        .small()
                        .weak(),
                );
                ui.add_space(4.0);
                match &view.latest {
                    None => {
                        ui.label("Waiting for the first reading…");
                    }
                    Some(Err(error)) => {
                        ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
                    }
                    Some(Ok(reading)) => readings_grid(ui, view, reading),
                }
            });
        });
}

fn readings_grid(ui: &mut egui::Ui, view: &GpuView, reading: &Telemetry) {
    let identity = &view.info.identity;
    if let (Some(draw_mw), Some(limit_mw)) = (reading.power_draw_mw, reading.power_limit_mw) {
        let fraction = if limit_mw == 0 {
            0.0
        } else {
            draw_mw as f32 / limit_mw as f32
        };
        ui.add(
            egui::ProgressBar::new(fraction.clamp(0.0, 1.0)).text(format!(
                "Power {} of {}",
                watts(draw_mw),
                watts(limit_mw)
            )),
        );
    }
    if let Some(used) = reading.memory_used_bytes
        && identity.memory_total_bytes > 0
    {
        let fraction = used as f32 / identity.memory_total_bytes as f32;
        ui.add(
            egui::ProgressBar::new(fraction.clamp(0.0, 1.0)).text(format!(
                "VRAM {} of {}",
                gib(used),
                gib(identity.memory_total_bytes)
            )),
        );
    }
    ui.add_space(4.0);
    egui::Grid::new(("readings", identity.index))
        .num_columns(2)
        .spacing([16.0, 3.0])
        .show(ui, |ui| {
            let mut row = |label: &str, value: String| {
                ui.label(RichText::new(label).weak());
                ui.label(value);
                ui.end_row();
            };
            row(
                "Temperature",
                or_na(reading.temperature_c, |c| format!("{c} °C")),
            );
            row("Fans", fans_text(reading));
            row(
                "Graphics / SM clock",
                format!(
                    "{} / {}",
                    or_na(reading.gpu_clock_mhz, |mhz| format!("{mhz} MHz")),
                    or_na(reading.sm_clock_mhz, |mhz| format!("{mhz} MHz"))
                ),
            );
            row(
                "Memory clock",
                or_na(reading.memory_clock_mhz, |mhz| format!("{mhz} MHz")),
            );
            row(
                "Utilization",
                format!(
                    "GPU {} · memory {}",
                    or_na(reading.utilization_gpu_pct, |pct| format!("{pct} %")),
                    or_na(reading.utilization_memory_pct, |pct| format!("{pct} %"))
                ),
            );
            row(
                "Performance state",
                or_na(reading.performance_state, |p| format!("P{p}")),
            );
            row("Throttle", throttle_summary(reading.throttle_reasons));
            row(
                "PCIe link",
                format!(
                    "Gen {} x{} (max Gen {} x{})",
                    or_na(reading.pcie_link_gen, |g| g.to_string()),
                    or_na(reading.pcie_link_width, |w| w.to_string()),
                    or_na(reading.pcie_link_gen_max, |g| g.to_string()),
                    or_na(reading.pcie_link_width_max, |w| w.to_string())
                ),
            );
            row(
                "Energy since driver load",
                or_na(reading.energy_total_mj, energy),
            );
        });
}

fn fans_text(reading: &Telemetry) -> String {
    match &reading.fans {
        None => NOT_AVAILABLE.to_string(),
        Some(fans) => fans
            .iter()
            .map(|fan| or_na(fan.speed_pct, |pct| format!("{pct} %")))
            .collect::<Vec<_>>()
            .join(" · "),
    }
}
