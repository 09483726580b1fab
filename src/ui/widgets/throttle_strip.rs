//! The throttle-reason strip: one row per reason, a bar where it was active.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HoverPosition, Line};

use crate::ui::widgets::time_axis::{TimeSpan, clock_time, seconds};
use crate::ui::widgets::time_plot::{WHEEL_HINT, moved_by_user, plot_base, visible_span};
use gputune_core::device::ThrottleReason;
use gputune_core::telemetry::decimate::throttle_columns;
use gputune_core::telemetry::history::GpuHistory;

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

/// The throttle-reason timeline: one row per reason, a bar where it was active.
pub(crate) fn throttle_strip(ui: &mut egui::Ui, history: &GpuHistory, span: TimeSpan) -> bool {
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
                    "{plot_name}: {explanation}\n{}\n{WHEEL_HINT}",
                    clock_time(position.x, true)
                ))
            }
            HoverPosition::Elsewhere { position } => {
                Some(format!("{}\n{WHEEL_HINT}", clock_time(position.x, true)))
            }
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
}
