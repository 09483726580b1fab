//! Time-series graphs on the shared time axis: plot setup, decimated lines, y grid, hover text.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, HoverPosition, Legend, Line, LineStyle, Plot, PlotUi};

use crate::telemetry::decimate::decimate;
use crate::telemetry::history::{GpuHistory, Metric};
use crate::tuning::engine::ChangeNote;
use crate::ui::widgets::change_marks::mark_changes;
use crate::ui::widgets::time_axis::{axis_label, clock_time};

/// Height of one graph, in points.
const PLOT_HEIGHT: f32 = 140.0;
/// Every graph reserves the same y-axis width so their time axes line up.
const Y_AXIS_WIDTH: f32 = 52.0;

/// One line on a graph.
pub(crate) struct Series {
    name: &'static str,
    metric: Metric,
    color: Color32,
    dashed: bool,
}

pub(crate) const fn series(
    name: &'static str,
    metric: Metric,
    color: Color32,
    dashed: bool,
) -> Series {
    Series {
        name,
        metric,
        color,
        dashed,
    }
}

/// The time span the graphs show this frame, and whether to force it onto the axis.
#[derive(Clone, Copy)]
pub(crate) struct TimeSpan {
    pub(crate) from_ms: u64,
    pub(crate) to_ms: u64,
    pub(crate) force: bool,
    pub(crate) gap_after_ms: u64,
}

pub(crate) fn plot_base<'a>(id: &'a str, span: TimeSpan) -> Plot<'a> {
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
        // No filled background: the grid marks the plot, and under a software renderer each
        // graph's fill was as costly as its lines.
        .show_background(false)
}

pub(crate) fn seconds(unix_ms: u64) -> f64 {
    unix_ms as f64 / 1000.0
}

fn unix_ms(unix_seconds: f64) -> u64 {
    (unix_seconds.max(0.0) * 1000.0) as u64
}

/// The visible time span and its width in pixels, as this frame will draw it.
pub(crate) fn visible_span(plot_ui: &mut PlotUi<'_>, span: TimeSpan) -> (u64, u64, usize) {
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

/// One graph: a title with its unit, its lines, an optional reference line, and values the
/// y axis always shows.
pub(crate) struct GraphSpec {
    pub title: &'static str,
    pub unit: &'static str,
    pub lines: Vec<Series>,
    pub reference: Option<(&'static str, f64)>,
    pub y_always_shows: &'static [f64],
}

/// Draws one graph; returns true when the user dragged or zoomed its time axis.
pub(crate) fn graph(
    ui: &mut egui::Ui,
    history: &GpuHistory,
    span: TimeSpan,
    spec: &GraphSpec,
    changes: &[&ChangeNote],
) -> bool {
    let GraphSpec {
        title,
        unit,
        lines,
        reference,
        y_always_shows,
    } = spec;
    let (title, unit, reference) = (*title, *unit, *reference);
    ui.label(RichText::new(format!("{title} ({unit})")).strong());
    let mut plot = plot_base(title, span);
    for &y in y_always_shows.iter() {
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
            mark_changes(plot_ui, changes);
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

pub(crate) fn moved_by_user(response: &egui::Response) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn values_read_well() {
        assert_eq!(format_value(445.3), "445");
        assert_eq!(format_value(2.46), "2.5");
        assert_eq!(format_value(0.0), "0");
    }
}
