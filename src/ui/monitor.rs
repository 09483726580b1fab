//! One GPU's graphs: power against its limit, temperature, fans, clocks, utilization, VRAM and
//! throttle reasons on one shared time axis, with a time-window picker, pause/follow, zoom,
//! hover read-outs and health hints.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, HoverPosition, Legend, Line, LineStyle, Plot, PlotUi};
use serde::{Deserialize, Serialize};

use crate::device::{Telemetry, ThrottleReason};
use crate::telemetry::decimate::{decimate, throttle_columns};
use crate::telemetry::health::{Severity, health_hints};
use crate::telemetry::history::{GpuHistory, Metric};
use crate::ui::model::GpuModel;
use crate::ui::overview::fans_text;
use crate::ui::widgets::banner::ERROR_TEXT;
use crate::ui::widgets::time_axis::{TimeWindow, axis_label, clock_time};
use crate::units::{gib, or_na, throttle_summary, watts};

/// Sampling intervals offered, in milliseconds.
pub const INTERVAL_CHOICES_MS: [u64; 6] = [100, 250, 500, 1_000, 2_000, 5_000];
/// Height of one graph, in points.
const PLOT_HEIGHT: f32 = 140.0;
/// Every graph reserves the same y-axis width so their time axes line up.
const Y_AXIS_WIDTH: f32 = 52.0;
/// The throttle reasons the strip has a row for, top to bottom.
const STRIP_REASONS: [ThrottleReason; 7] = [
    ThrottleReason::SwPowerCap,
    ThrottleReason::SwThermalSlowdown,
    ThrottleReason::HwThermalSlowdown,
    ThrottleReason::HwSlowdown,
    ThrottleReason::HwPowerBrakeSlowdown,
    ThrottleReason::ApplicationsClocksSetting,
    ThrottleReason::GpuIdle,
];

/// What the user chose for the graphs; kept between runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MonitorView {
    pub window: TimeWindow,
    /// `None` follows live data; `Some(t)` holds the graphs still, ending at Unix ms `t`.
    pub paused_at_ms: Option<u64>,
    /// Put the time axis back to the chosen window on the next frame.
    #[serde(skip)]
    reset_time_axis: bool,
}

/// What the graphs ask of the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorAction {
    BackToOverview,
    ExportCsv,
    SetInterval { interval_ms: u64 },
}

impl MonitorView {
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

/// One line on a graph.
struct Series {
    name: &'static str,
    metric: Metric,
    color: Color32,
    dashed: bool,
}

const fn series(name: &'static str, metric: Metric, color: Color32, dashed: bool) -> Series {
    Series {
        name,
        metric,
        color,
        dashed,
    }
}

/// The time span the graphs show this frame, and whether to force it onto the axis.
#[derive(Clone, Copy)]
struct TimeSpan {
    from_ms: u64,
    to_ms: u64,
    force: bool,
    gap_after_ms: u64,
}

/// Draws the detail view of `gpu`; returns what the user asked for.
pub fn monitor_ui(
    ui: &mut egui::Ui,
    gpu: &GpuModel,
    view: &mut MonitorView,
    interval_ms: u64,
) -> Vec<MonitorAction> {
    let mut actions = Vec::new();
    let latest_ms = gpu.history.last_time_ms().unwrap_or(0);
    toolbar(ui, gpu, view, interval_ms, latest_ms, &mut actions);
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
    ui.add_space(4.0);

    let end_ms = view.paused_at_ms.unwrap_or(latest_ms);
    let span = TimeSpan {
        from_ms: end_ms.saturating_sub(view.window.duration_ms()),
        to_ms: end_ms,
        force: view.is_following() || view.reset_time_axis,
        gap_after_ms: (interval_ms * 3).max(1_500),
    };
    view.reset_time_axis = false;
    let mut user_moved_time_axis = false;
    egui::ScrollArea::vertical().show(ui, |ui| {
        user_moved_time_axis |= graphs(ui, gpu, span);
    });
    // Zooming or dragging a graph while following stops following, so the view stays put.
    if user_moved_time_axis && view.is_following() {
        view.pause(end_ms);
    }
    actions
}

fn toolbar(
    ui: &mut egui::Ui,
    gpu: &GpuModel,
    view: &mut MonitorView,
    interval_ms: u64,
    latest_ms: u64,
    actions: &mut Vec<MonitorAction>,
) {
    ui.horizontal_wrapped(|ui| {
        if ui.button("Back to all GPUs").clicked() {
            actions.push(MonitorAction::BackToOverview);
        }
        let identity = &gpu.info.identity;
        ui.label(
            RichText::new(format!("GPU {} · {}", identity.index, identity.name))
                .strong()
                .size(15.0),
        );
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
        ("Throttle", throttle_summary(reading.throttle_reasons)),
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
fn graphs(ui: &mut egui::Ui, gpu: &GpuModel, span: TimeSpan) -> bool {
    let orange = Color32::from_rgb(0xff, 0x9f, 0x43);
    let red = Color32::from_rgb(0xff, 0x5c, 0x5c);
    let green = Color32::from_rgb(0x5c, 0xd6, 0x7a);
    let teal = Color32::from_rgb(0x4d, 0xd0, 0xe1);
    let blue = Color32::from_rgb(0x6c, 0x9c, 0xff);
    let violet = Color32::from_rgb(0xb3, 0x88, 0xff);
    let yellow = Color32::from_rgb(0xf5, 0xd0, 0x42);
    let history = &gpu.history;
    let mut moved = false;
    moved |= graph(
        ui,
        history,
        span,
        "Power",
        "W",
        &[
            series("Power draw", Metric::PowerDrawW, orange, false),
            series("Enforced limit", Metric::PowerLimitW, red, true),
        ],
        None,
        &[0.0],
    );
    moved |= graph(
        ui,
        history,
        span,
        "Temperature",
        "°C",
        &[series("Temperature", Metric::TemperatureC, red, false)],
        None,
        &[20.0, 90.0],
    );
    let has_fans = gpu.info.constraints.fan_count > 0
        && !matches!(&gpu.latest, Some(Ok(reading)) if reading.fans.is_none());
    if has_fans {
        moved |= graph(
            ui,
            history,
            span,
            "Fans",
            "%",
            &[series("Fan speed", Metric::FanSpeedPct, teal, false)],
            None,
            &[0.0, 100.0],
        );
    } else {
        ui.label(RichText::new("Fans: n/a — this GPU reports no fans (datacenter cards are cooled by the chassis).").weak());
    }
    moved |= graph(
        ui,
        history,
        span,
        "GPU clocks",
        "MHz",
        &[
            series("Graphics", Metric::GpuClockMhz, green, false),
            series("SM", Metric::SmClockMhz, teal, true),
        ],
        None,
        &[0.0],
    );
    moved |= graph(
        ui,
        history,
        span,
        "Memory clock",
        "MHz",
        &[series(
            "Memory clock",
            Metric::MemoryClockMhz,
            violet,
            false,
        )],
        None,
        &[0.0],
    );
    moved |= graph(
        ui,
        history,
        span,
        "Utilization",
        "%",
        &[
            series("GPU", Metric::UtilizationGpuPct, yellow, false),
            series("Memory", Metric::UtilizationMemoryPct, blue, false),
        ],
        Some(("100 %", 100.0)),
        &[0.0],
    );
    let total_gib = gpu.info.identity.memory_total_bytes as f64 / (1024.0 * 1024.0 * 1024.0);
    moved |= graph(
        ui,
        history,
        span,
        "VRAM",
        "GiB",
        &[series("Used", Metric::MemoryUsedGib, violet, false)],
        Some(("Total", total_gib)),
        &[0.0],
    );
    moved |= throttle_strip(ui, history, span);
    moved
}

fn plot_base<'a>(id: &'a str, span: TimeSpan) -> Plot<'a> {
    let link = egui::Id::unique("gputune-time-axis");
    Plot::new(id)
        .height(PLOT_HEIGHT)
        .link_axis(link, [true, false])
        .link_cursor(link, [true, false])
        .allow_zoom([true, false])
        .allow_drag([true, false])
        .allow_scroll([true, false])
        .allow_boxed_zoom(false)
        .allow_double_click_reset(false)
        .auto_bounds([false, true])
        .y_axis_min_width(Y_AXIS_WIDTH)
        .set_margin_fraction(egui::Vec2::new(0.0, 0.12))
        .legend(
            Legend::default()
                .position(egui_plot::Corner::LeftTop)
                .background_alpha(0.85),
        )
        .x_axis_formatter(|mark, range| axis_label(mark.value, range.end() - range.start()))
        .default_x_bounds(seconds(span.from_ms), seconds(span.to_ms))
}

fn seconds(unix_ms: u64) -> f64 {
    unix_ms as f64 / 1000.0
}

fn unix_ms(unix_seconds: f64) -> u64 {
    (unix_seconds.max(0.0) * 1000.0) as u64
}

/// The visible time span and its width in pixels, as this frame will draw it.
fn visible_span(plot_ui: &mut PlotUi<'_>, span: TimeSpan) -> (u64, u64, usize) {
    if span.force {
        plot_ui.set_plot_bounds_x(seconds(span.from_ms)..=seconds(span.to_ms));
    }
    let columns = plot_ui.transform().frame().width().max(1.0) as usize;
    if span.force {
        (span.from_ms, span.to_ms, columns)
    } else {
        let bounds = plot_ui.plot_bounds();
        (unix_ms(bounds.min()[0]), unix_ms(bounds.max()[0]), columns)
    }
}

/// One graph; returns true when the user dragged or zoomed its time axis.
#[allow(clippy::too_many_arguments)]
fn graph(
    ui: &mut egui::Ui,
    history: &GpuHistory,
    span: TimeSpan,
    title: &'static str,
    unit: &'static str,
    lines: &[Series],
    reference: Option<(&'static str, f64)>,
    y_always_shows: &[f64],
) -> bool {
    ui.label(RichText::new(format!("{title} ({unit})")).strong());
    let mut plot = plot_base(title, span);
    for &y in y_always_shows {
        plot = plot.include_y(y);
    }
    let response = plot
        .y_grid_spacer(nice_y_grid)
        .y_axis_formatter(move |mark, _| format_value(mark.value))
        .label_formatter(move |position| hover_text(position, unit))
        .show(ui, |plot_ui| {
            let (from_ms, to_ms, columns) = visible_span(plot_ui, span);
            for line in lines {
                for segment in decimate(
                    history,
                    line.metric,
                    from_ms,
                    to_ms,
                    columns,
                    span.gap_after_ms,
                ) {
                    let style = if line.dashed {
                        LineStyle::dashed_loose()
                    } else {
                        LineStyle::Solid
                    };
                    plot_ui.line(
                        Line::new(line.name, segment)
                            .color(line.color)
                            .style(style)
                            .width(1.5),
                    );
                }
            }
            if let Some((name, value)) = reference {
                plot_ui.hline(
                    HLine::new(name, value)
                        .color(Color32::GRAY)
                        .style(LineStyle::dotted_loose()),
                );
            }
        });
    moved_by_user(&response.response)
}

fn moved_by_user(response: &egui::Response) -> bool {
    let scrolled = response.hovered()
        && response
            .ctx
            .input(|input| input.smooth_scroll_delta != egui::Vec2::ZERO);
    response.dragged() || scrolled
}

/// Three to six labelled y grid lines at round values (1, 2 or 5 × 10^k apart), with four
/// unlabelled lines between each; egui_plot's default (powers of ten) often labels none.
fn nice_y_grid(input: egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    let (min, max) = input.bounds;
    let span = max - min;
    if !span.is_finite() || span <= 0.0 {
        return Vec::new();
    }
    let raw_step = span / 5.0;
    let magnitude = 10f64.powf(raw_step.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|&step| step >= raw_step)
        .unwrap_or(10.0 * magnitude);
    let minor = step / 5.0;
    let first = (min / minor).ceil() as i64;
    let last = (max / minor).floor() as i64;
    (first..=last)
        .map(|k| {
            let value = k as f64 * minor;
            let on_major = (value / step - (value / step).round()).abs() < 1e-9;
            egui_plot::GridMark {
                value,
                step_size: if on_major { step } else { minor },
            }
        })
        .collect()
}

/// Hover text with units and the local time.
fn hover_text(position: &HoverPosition<'_>, unit: &str) -> Option<String> {
    match position {
        HoverPosition::NearDataPoint {
            plot_name,
            position,
            ..
        } => Some(format!(
            "{plot_name}: {} {unit}\n{}",
            format_value(position.y),
            clock_time(position.x, true)
        )),
        HoverPosition::Elsewhere { position } => Some(clock_time(position.x, true)),
    }
}

/// A reading for labels: whole numbers from 10 up (and whole values), one decimal below.
fn format_value(value: f64) -> String {
    if value.abs() >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// The throttle-reason timeline: one row per reason, a bar where it was active.
fn throttle_strip(ui: &mut egui::Ui, history: &GpuHistory, span: TimeSpan) -> bool {
    ui.label(RichText::new("Throttle reasons").strong())
        .on_hover_text("Why the GPU ran below its top clock. Hover a bar for plain words.");
    let rows = STRIP_REASONS.len() as f64;
    let response = plot_base("Throttle reasons", span)
        .height(STRIP_REASONS.len() as f32 * 16.0 + 36.0)
        .auto_bounds([false, false])
        .default_y_bounds(-0.5, rows - 0.5)
        .show_grid([true, false])
        .y_axis_formatter(|_, _| String::new())
        .label_formatter(|position| match position {
            HoverPosition::NearDataPoint {
                plot_name,
                position,
                ..
            } => {
                let explanation = STRIP_REASONS
                    .iter()
                    .find(|reason| reason.label() == *plot_name)
                    .map_or("", |reason| reason.explanation());
                Some(format!(
                    "{plot_name}: {explanation}\n{}",
                    clock_time(position.x, true)
                ))
            }
            HoverPosition::Elsewhere { .. } => None,
        })
        .show(ui, |plot_ui| {
            plot_ui.set_plot_bounds_y(-0.5..=rows - 0.5);
            let (from_ms, to_ms, columns) = visible_span(plot_ui, span);
            let active = throttle_columns(history, from_ms, to_ms, columns);
            let column_ms = (to_ms.saturating_sub(from_ms)) as f64 / columns.max(1) as f64;
            for (row, reason) in STRIP_REASONS.iter().enumerate() {
                let y = rows - 1.0 - row as f64;
                let color = reason_color(*reason);
                for (first, last) in runs(&active, reason.bit()) {
                    let start = seconds(from_ms) + first as f64 * column_ms / 1000.0;
                    let end = seconds(from_ms) + (last + 1) as f64 * column_ms / 1000.0;
                    plot_ui.line(
                        Line::new(reason.label(), vec![[start, y], [end, y]])
                            .color(color)
                            .width(9.0),
                    );
                }
            }
        });
    moved_by_user(&response.response)
}

/// Runs of consecutive columns in which `bit` was set: (first, last) column indices.
fn runs(columns: &[Option<u64>], bit: u64) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for (index, bits) in columns.iter().enumerate() {
        let active = bits.is_some_and(|bits| bits & bit != 0);
        match (active, start) {
            (true, None) => start = Some(index),
            (false, Some(first)) => {
                runs.push((first, index - 1));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(first) = start {
        runs.push((first, columns.len().saturating_sub(1)));
    }
    runs
}

fn reason_color(reason: ThrottleReason) -> Color32 {
    match reason {
        ThrottleReason::SwPowerCap => Color32::from_rgb(0xff, 0x9f, 0x43),
        ThrottleReason::SwThermalSlowdown => Color32::from_rgb(0xff, 0x5c, 0x5c),
        ThrottleReason::HwThermalSlowdown | ThrottleReason::HwSlowdown => {
            Color32::from_rgb(0xd6, 0x2d, 0x2d)
        }
        ThrottleReason::HwPowerBrakeSlowdown => Color32::from_rgb(0xc0, 0x5c, 0xff),
        ThrottleReason::ApplicationsClocksSetting => Color32::from_rgb(0x6c, 0x9c, 0xff),
        _ => Color32::from_gray(110),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_find_consecutive_active_columns() {
        let columns = [Some(0x4), Some(0x4), None, Some(0x1), Some(0x4), Some(0x4)];
        assert_eq!(runs(&columns, 0x4), vec![(0, 1), (4, 5)]);
        assert_eq!(runs(&columns, 0x1), vec![(3, 3)]);
        assert!(runs(&columns, 0x20).is_empty());
    }

    #[test]
    fn y_grid_labels_round_values() {
        let marks = nice_y_grid(egui_plot::GridInput {
            bounds: (13.0, 97.0),
            base_step_size: 0.5,
        });
        let major: Vec<f64> = marks
            .iter()
            .filter(|mark| mark.step_size == 20.0)
            .map(|mark| mark.value)
            .collect();
        assert_eq!(major, vec![20.0, 40.0, 60.0, 80.0]);
        assert!(
            nice_y_grid(egui_plot::GridInput {
                bounds: (5.0, 5.0),
                base_step_size: 1.0
            })
            .is_empty()
        );
    }

    #[test]
    fn values_and_intervals_read_well() {
        assert_eq!(format_value(445.3), "445");
        assert_eq!(format_value(2.46), "2.5");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(interval_label(500), "every 500 ms");
        assert_eq!(interval_label(2_000), "every 2 s");
    }
}
