//! The Monitor tab: every GPU's card (overview.rs, with the box's totals: box_totals.rs), and
//! in this file one GPU's graphs: power against its limit, temperature, fans, clocks,
//! utilization, VRAM and throttle reasons on one shared time axis, with a time-window picker,
//! pause/follow, zoom, hover read-outs and health hints.

pub mod box_totals;
pub mod overview;

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::EarlierHistory;
use crate::ui::model::GpuModel;
use crate::ui::monitor::overview::fans_text;
use crate::ui::style::ERROR_TEXT;
use crate::ui::widgets::change_marks::{change_list, changes_in_span};
use crate::ui::widgets::gpu_switcher::gpu_switcher;
use crate::ui::widgets::processes::{job_pid, processes_table};
use crate::ui::widgets::throttle_strip::throttle_strip;
use crate::ui::widgets::time_axis::TimeSpan;
use crate::ui::widgets::time_plot::{GraphSpec, column_ms_for, graph, series};
use gputune_core::telemetry::health::{Severity, health_hints};
use gputune_core::telemetry::history::Metric;
use gputune_formats::tuning::ChangeNote;
use gputune_formats::units::{gib, or_na, watts};
use gputune_formats::window::{RememberedMonitor, TimeWindow};
use gputune_formats::{
    card::{Constraints, Telemetry},
    throttle::ThrottleReasons,
};

/// Sampling intervals offered, in milliseconds.
pub const INTERVAL_CHOICES_MS: [u64; 6] = [100, 250, 500, 1_000, 2_000, 5_000];

/// What the user chose for the graphs; the time window is kept between runs
/// (`RememberedMonitor`, made by `remembered`, read back by `From`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MonitorView {
    pub window: TimeWindow,
    /// `None` follows live data; `Some(t)` holds the graphs still, ending at Unix ms `t`.
    /// Not kept between runs: a window opens on live data, not on a pause from last week.
    pub paused_at_ms: Option<u64>,
    /// Put the time axis back to the chosen window on the next frame.
    reset_time_axis: bool,
}

impl From<RememberedMonitor> for MonitorView {
    /// The graphs as the last run left them: its time window, following live data.
    fn from(remembered: RememberedMonitor) -> MonitorView {
        MonitorView {
            window: remembered.window,
            ..MonitorView::default()
        }
    }
}

/// What the graphs ask of the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorAction {
    BackToOverview,
    /// Another GPU's graphs, in the same view.
    ShowGpu {
        gpu_index: usize,
    },
    ExportCsv,
    SetInterval {
        interval_ms: u64,
    },
}

impl MonitorView {
    /// What the next run keeps: the time window, not a pause.
    pub fn remembered(&self) -> RememberedMonitor {
        RememberedMonitor {
            window: self.window,
        }
    }

    pub fn is_following(&self) -> bool {
        self.paused_at_ms.is_none()
    }

    pub fn pause(&mut self, at_ms: u64) {
        self.paused_at_ms = Some(at_ms);
    }

    pub fn follow(&mut self) {
        self.paused_at_ms = None;
        self.reset_time_axis = true;
    }

    pub fn set_window(&mut self, window: TimeWindow) {
        self.window = window;
        self.reset_time_axis = true;
    }
}

/// Draws the detail view of GPU `open_index` of `gpus`; returns what the user asked for.
/// `heard_at_ms` (Unix ms, when the window last heard from the service) ends the time axis
/// while the GPU has no reading yet.
pub fn monitor_ui(
    ui: &mut egui::Ui,
    gpus: &[GpuModel],
    open_index: usize,
    view: &mut MonitorView,
    (interval_ms, heard_at_ms): (u64, u64),
) -> Vec<MonitorAction> {
    let mut actions = Vec::new();
    let Some(gpu) = gpus.get(open_index) else {
        actions.push(MonitorAction::BackToOverview);
        return actions;
    };
    // Before the first reading the axis ends now, not at 1970.
    let latest_ms = gpu.history.last_time_ms().unwrap_or(heard_at_ms);
    toolbar(
        ui,
        (gpus, open_index),
        view,
        interval_ms,
        latest_ms,
        &mut actions,
    );
    ui.separator();
    match &gpu.latest {
        Some(Ok(reading)) => readout(ui, gpu, reading),
        Some(Err(error)) => {
            ui.label(RichText::new(error.to_string()).color(ERROR_TEXT));
        }
        None => {
            ui.label("Waiting for the first reading…");
        }
    }
    for hint in health_hints(&gpu.history, latest_ms) {
        let (icon, color) = match hint.severity {
            Severity::Warning => ("Warning:", Color32::from_rgb(0xff, 0xc1, 0x4d)),
            Severity::Info => ("Note:", Color32::from_rgb(0x8a, 0xc4, 0xff)),
        };
        ui.label(
            RichText::new(format!("{icon} {}", hint.title))
                .color(color)
                .strong(),
        )
        .on_hover_text(&hint.advice);
        ui.label(RichText::new(&hint.advice).weak());
    }
    if let Some(Ok(reading)) = &gpu.latest {
        processes_table(ui, reading.processes.as_deref(), job_pid(gpu));
    }
    ui.add_space(4.0);

    let end_ms = view.paused_at_ms.unwrap_or(latest_ms);
    let span = TimeSpan {
        // egui_plot needs a span longer than nothing (it asserts in debug builds).
        from_ms: end_ms
            .saturating_sub(view.window.duration_ms())
            .min(end_ms.saturating_sub(1)),
        to_ms: end_ms.max(1),
        force: view.is_following() || view.reset_time_axis,
        gap_after_ms: (interval_ms * 3).max(1_500),
    };
    view.reset_time_axis = false;
    earlier_history_note(ui, gpu.earlier);
    let changes = changes_in_span(&gpu.changes, span);
    change_list(ui, &changes, column_ms_for(ui, span));
    let mut user_moved_time_axis = false;
    egui::ScrollArea::vertical().show(ui, |ui| {
        user_moved_time_axis |= graphs(ui, gpu, span, &changes);
    });
    // Zooming or dragging a graph while following stops following, so the view stays put.
    if user_moved_time_axis && view.is_following() {
        view.pause(end_ms);
    }
    actions
}

fn toolbar(
    ui: &mut egui::Ui,
    (gpus, open_index): (&[GpuModel], usize),
    view: &mut MonitorView,
    interval_ms: u64,
    latest_ms: u64,
    actions: &mut Vec<MonitorAction>,
) {
    ui.horizontal_wrapped(|ui| {
        if ui.button("Back to all GPUs").clicked() {
            actions.push(MonitorAction::BackToOverview);
        }
        if let Some(gpu_index) = gpu_switcher(ui, gpus, open_index) {
            actions.push(MonitorAction::ShowGpu { gpu_index });
        }
        ui.separator();
        ui.label("Window");
        for window in TimeWindow::ALL {
            if ui
                .selectable_label(view.window == window, window.label())
                .clicked()
            {
                view.set_window(window);
            }
        }
        ui.separator();
        if view.is_following() {
            if ui
                .button("Pause")
                .on_hover_text("Hold the graphs still")
                .clicked()
            {
                view.pause(latest_ms);
            }
        } else if ui
            .button("Follow")
            .on_hover_text("Follow live data again")
            .clicked()
        {
            view.follow();
        }
        ui.separator();
        let mut chosen_ms = interval_ms;
        egui::ComboBox::from_label("sampling")
            .selected_text(interval_label(interval_ms))
            .show_ui(ui, |ui| {
                for choice_ms in INTERVAL_CHOICES_MS {
                    ui.selectable_value(&mut chosen_ms, choice_ms, interval_label(choice_ms));
                }
            });
        if chosen_ms != interval_ms {
            actions.push(MonitorAction::SetInterval {
                interval_ms: chosen_ms,
            });
        }
        ui.separator();
        if ui
            .button("Export CSV…")
            .on_hover_text("Save this GPU's history as CSV")
            .clicked()
        {
            actions.push(MonitorAction::ExportCsv);
        }
    });
}

/// One line on where the graphs' past comes from.
fn earlier_history_note(ui: &mut egui::Ui, earlier: EarlierHistory) {
    let text = match earlier {
        EarlierHistory::NotKept => "Graphs start when this window opened: the gputune daemon keeps history while no window is open (`sudo gputune daemon install`).".to_string(),
        EarlierHistory::Loading => "Reading the history the gputune daemon kept while no window was open…".to_string(),
        EarlierHistory::Simulated | EarlierHistory::Loaded { samples: 0, .. } => return,
        EarlierHistory::Loaded { samples, from_ms } => format!(
            "Includes {samples} samples the gputune daemon kept before this window opened (one a second){}.",
            from_ms.map_or(String::new(), |from_ms| format!(", from {}", gputune_formats::units::local_time(from_ms, "%-d %b %H:%M")))
        ),
    };
    ui.label(RichText::new(text).weak());
}

fn interval_label(interval_ms: u64) -> String {
    if interval_ms < 1_000 {
        format!("every {interval_ms} ms")
    } else {
        format!("every {} s", interval_ms / 1_000)
    }
}

/// The current numbers in one line, above the graphs.
fn readout(ui: &mut egui::Ui, gpu: &GpuModel, reading: &Telemetry) {
    let power = format!(
        "{} of {}",
        or_na(reading.power_draw_mw, watts),
        or_na(reading.power_limit_mw, watts)
    );
    let vram = format!(
        "{} of {}",
        or_na(reading.memory_used_bytes, gib),
        gib(gpu.info.identity.memory_total_bytes)
    );
    let items = [
        ("Power", power),
        (
            "Temperature",
            or_na(reading.temperature_c, |c| format!("{c} °C")),
        ),
        ("Fans", fans_text(reading)),
        (
            "Graphics",
            or_na(reading.gpu_clock_mhz, |mhz| format!("{mhz} MHz")),
        ),
        (
            "Memory clock",
            or_na(reading.memory_clock_mhz, |mhz| format!("{mhz} MHz")),
        ),
        (
            "Utilization",
            or_na(reading.utilization_gpu_pct, |pct| format!("{pct} %")),
        ),
        ("VRAM", vram),
        (
            "P-state",
            or_na(reading.performance_state, |p| format!("P{p}")),
        ),
        (
            "Throttle",
            ThrottleReasons::summary(reading.throttle_reasons),
        ),
        (
            "PCIe",
            format!(
                "Gen {} x{}",
                or_na(reading.pcie_link_gen, |g| g.to_string()),
                or_na(reading.pcie_link_width, |w| w.to_string())
            ),
        ),
    ];
    ui.horizontal_wrapped(|ui| {
        for (label, value) in items {
            ui.label(RichText::new(label).weak());
            ui.label(value);
            ui.add_space(8.0);
        }
    });
}

/// All graphs; returns true when the user dragged or zoomed a time axis.
fn graphs(ui: &mut egui::Ui, gpu: &GpuModel, span: TimeSpan, changes: &[&ChangeNote]) -> bool {
    let has_fans = gpu.info.constraints.fan_count > 0
        && !matches!(&gpu.latest, Some(Ok(reading)) if reading.fans.is_none());
    let total_gib = gpu.info.identity.memory_total_bytes as f64 / (1024.0 * 1024.0 * 1024.0);
    let mut moved = false;
    for spec in graph_specs(&gpu.info.constraints, total_gib) {
        if spec.title == "Fans" && !has_fans {
            ui.label(
                RichText::new("Fans: n/a — this GPU reports no fans (datacenter cards are cooled by the chassis).")
                    .weak(),
            );
            continue;
        }
        moved |= graph(ui, &gpu.history, span, &spec, changes);
    }
    moved |= throttle_strip(ui, &gpu.history, span);
    moved
}

/// The graphs of the detail view, top to bottom; an empty view shows each from 0 to what
/// the card allows.
fn graph_specs(constraints: &Constraints, total_gib: f64) -> Vec<GraphSpec> {
    let watts_max = constraints
        .power_limit_max_mw
        .map_or(500.0, |mw| f64::from(mw) / 1000.0);
    let mhz_max = |range: Option<gputune_formats::card::ClockRangeMhz>, otherwise: f64| {
        range.map_or(otherwise, |range| f64::from(range.max_mhz))
    };
    let gpu_mhz_max = mhz_max(constraints.gpu_clock_range, 3_000.0);
    let memory_mhz_max = mhz_max(constraints.memory_clock_range, 12_000.0);
    let orange = Color32::from_rgb(0xff, 0x9f, 0x43);
    let red = Color32::from_rgb(0xff, 0x5c, 0x5c);
    let green = Color32::from_rgb(0x5c, 0xd6, 0x7a);
    let teal = Color32::from_rgb(0x4d, 0xd0, 0xe1);
    let blue = Color32::from_rgb(0x6c, 0x9c, 0xff);
    let violet = Color32::from_rgb(0xb3, 0x88, 0xff);
    let yellow = Color32::from_rgb(0xf5, 0xd0, 0x42);
    let spec = |title, unit, lines, reference, y_always_shows, y_when_empty| GraphSpec {
        title,
        unit,
        lines,
        reference,
        y_always_shows,
        y_when_empty,
    };
    vec![
        spec(
            "Power",
            "W",
            vec![
                series("Power draw", Metric::PowerDrawW, orange, false),
                series("Enforced limit", Metric::PowerLimitW, red, true),
            ],
            None,
            &[0.0],
            (0.0, watts_max),
        ),
        spec(
            "Temperature",
            "°C",
            vec![series("Temperature", Metric::TemperatureC, red, false)],
            None,
            &[20.0, 90.0],
            (20.0, 90.0),
        ),
        spec(
            "Fans",
            "%",
            vec![series("Fan speed", Metric::FanSpeedPct, teal, false)],
            None,
            &[0.0, 100.0],
            (0.0, 100.0),
        ),
        spec(
            "GPU clocks",
            "MHz",
            vec![
                series("Graphics", Metric::GpuClockMhz, green, false),
                series("SM", Metric::SmClockMhz, teal, true),
            ],
            None,
            &[0.0],
            (0.0, gpu_mhz_max),
        ),
        spec(
            "Memory clock",
            "MHz",
            vec![series(
                "Memory clock",
                Metric::MemoryClockMhz,
                violet,
                false,
            )],
            None,
            &[0.0],
            (0.0, memory_mhz_max),
        ),
        spec(
            "Utilization",
            "%",
            vec![
                series("GPU", Metric::UtilizationGpuPct, yellow, false),
                series("Memory", Metric::UtilizationMemoryPct, blue, false),
            ],
            Some(("100 %", 100.0)),
            &[0.0],
            (0.0, 100.0),
        ),
        spec(
            "VRAM",
            "GiB",
            vec![series("Used", Metric::MemoryUsedGib, violet, false)],
            Some(("Total", total_gib)),
            &[0.0],
            (0.0, total_gib.max(1.0)),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_graph_runs_from_zero_to_what_the_card_allows() {
        use gputune_core::device::sim::{CardSpec, sim_constraints};
        let specs = graph_specs(&sim_constraints(&CardSpec::rtx4090()), 24.0);
        let empty = |title: &str| {
            specs
                .iter()
                .find(|spec| spec.title == title)
                .map(|spec| spec.y_when_empty)
        };
        assert_eq!(empty("Power"), Some((0.0, 600.0)));
        assert_eq!(empty("Temperature"), Some((20.0, 90.0)));
        assert_eq!(empty("Utilization"), Some((0.0, 100.0)));
        assert_eq!(empty("VRAM"), Some((0.0, 24.0)));
        for spec in &specs {
            let (low, high) = spec.y_when_empty;
            assert!(low >= 0.0 && high > low, "{}: {low}..{high}", spec.title);
        }
    }

    #[test]
    fn intervals_read_well() {
        assert_eq!(interval_label(500), "every 500 ms");
        assert_eq!(interval_label(2_000), "every 2 s");
    }
}
