//! Time-series graphs on the shared time axis: plot setup, decimated lines, y grid, hover text.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, HoverPosition, Legend, Line, LineStyle, Plot, PlotUi};

use crate::ui::widgets::change_marks::{group_changes, label_groups, mark_changes};
use crate::ui::widgets::time_axis::{TimeSpan, axis_label, clock_time, seconds, unix_ms};
use gputune_core::telemetry::decimate::decimate;
use gputune_core::telemetry::history::{GpuHistory, Metric};
use gputune_core::tuning::engine::ChangeNote;

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

/// The width of a graph's pixel column in ms at `span` for graphs as wide as `ui` (its y
/// axis and the page's scroll bar off): what the text over the graphs groups changes by
/// before any graph is drawn.
pub(crate) fn column_ms_for(ui: &egui::Ui, span: TimeSpan) -> f64 {
    let scroll_bar = ui.spacing().scroll.bar_width + ui.spacing().scroll.bar_outer_margin;
    let columns = (ui.available_width() - Y_AXIS_WIDTH - scroll_bar).max(1.0);
    span.to_ms.saturating_sub(span.from_ms) as f64 / f64::from(columns)
}

/// One graph: a title with its unit, its lines, an optional reference line, values the y
/// axis always shows, and the y range it shows while no line has a point in view.
pub(crate) struct GraphSpec {
    pub title: &'static str,
    pub unit: &'static str,
    pub lines: Vec<Series>,
    pub reference: Option<(&'static str, f64)>,
    pub y_always_shows: &'static [f64],
    pub y_when_empty: (f64, f64),
}

/// What the wheel and the mouse do over a time graph, said in every graph's hover text: the
/// wheel always scrolls the page (the graphs are a long column at 720 px), zooming and moving
/// in time take a modifier or a drag.
pub(crate) const WHEEL_HINT: &str =
    "Wheel scrolls the page · Ctrl + wheel zooms time · Shift + wheel or drag moves in time";

/// Draws one graph; returns true when the user dragged or zoomed its time axis.
pub(crate) fn graph(
    ui: &mut egui::Ui,
    history: &GpuHistory,
    span: TimeSpan,
    spec: &GraphSpec,
    changes: &[&ChangeNote],
) -> bool {
    let (title, unit, reference) = (spec.title, spec.unit, spec.reference);
    ui.label(RichText::new(format!("{title} ({unit})")).strong())
        .on_hover_text(WHEEL_HINT);
    let mut plot = plot_base(title, span);
    for &y in spec.y_always_shows.iter() {
        plot = plot.include_y(y);
    }
    // The width of one pixel column in ms, as this frame draws it: past the line's ends and
    // in its gaps the hover text looks for a sample only within the hovered column.
    let column_ms = std::rc::Rc::new(std::cell::Cell::new(0.0_f64));
    let hover = Hover {
        history,
        lines: &spec.lines,
        unit,
        changes,
        column_ms: column_ms.clone(),
        gap_after_ms: span.gap_after_ms,
    };
    let response = plot
        .y_grid_spacer(nice_y_grid)
        .y_axis_formatter(move |mark, _| format_value(mark.value))
        .label_formatter(move |position| Some(hover.text(position)))
        .show(ui, |plot_ui| {
            // The y axis follows the data even after a shift-wheel moved the time axis
            // (egui_plot turns every automatic bound off on a scroll).
            plot_ui.set_auto_bounds(egui::Vec2b::new(false, true));
            let (from_ms, to_ms, columns) = visible_span(plot_ui, span);
            column_ms.set(to_ms.saturating_sub(from_ms) as f64 / columns.max(1) as f64);
            let mut drew_a_point = false;
            for line in &spec.lines {
                for segment in decimate(
                    history,
                    line.metric,
                    from_ms,
                    to_ms,
                    columns,
                    span.gap_after_ms,
                ) {
                    drew_a_point |= !segment.is_empty();
                    let style = if line.dashed {
                        LineStyle::dashed_loose()
                    } else {
                        LineStyle::Solid
                    };
                    // Not hovered as items: the hover text reads every line at the sample
                    // nearest the pointer (egui_plot's own picks the topmost item near it).
                    plot_ui.line(
                        Line::new(line.name, segment)
                            .color(line.color)
                            .style(style)
                            .width(1.5)
                            .allow_hover(false),
                    );
                }
            }
            if !drew_a_point {
                // Nothing in view: the graph's usual range, not egui_plot's -1..1 around 0.
                // A little room on both ends, as the margin gives a graph with data, so the
                // end labels stay clear of the time axis and the title.
                let (low, high) = spec.y_when_empty;
                let room = (high - low) * 0.05;
                plot_ui.set_plot_bounds_y(low - room..=high + room);
            }
            mark_changes(plot_ui, &group_changes(changes, column_ms.get()));
            if let Some((name, value)) = reference {
                plot_ui.hline(
                    HLine::new(name, value)
                        .color(Color32::GRAY)
                        .style(LineStyle::dotted_loose())
                        .allow_hover(false),
                );
            }
        });
    label_groups(
        ui,
        &response.transform,
        &group_changes(changes, column_ms.get()),
    );
    moved_by_user(&response.response)
}

/// True when the user moved a graph's time axis this frame: a drag, a zoom (Ctrl + wheel)
/// or a sideways scroll (Shift + wheel) over it. A plain wheel scrolls the page and leaves
/// the graphs following.
pub(crate) fn moved_by_user(response: &egui::Response) -> bool {
    let (zoomed, scrolled_sideways) = response.ctx.input(|input| {
        (
            input.zoom_delta() != 1.0,
            input.smooth_scroll_delta.x != 0.0,
        )
    });
    response.dragged() || (response.contains_pointer() && (zoomed || scrolled_sideways))
}

/// What a graph's hover text reads from.
struct Hover<'a> {
    history: &'a GpuHistory,
    lines: &'a [Series],
    unit: &'static str,
    changes: &'a [&'a ChangeNote],
    column_ms: std::rc::Rc<std::cell::Cell<f64>>,
    /// Samples further apart than this are a gap in the lines, and in the hover.
    gap_after_ms: u64,
}

/// How many pixel columns either side of a change mark still hover it.
const MARK_HOVER_COLUMNS: f64 = 4.0;

impl Hover<'_> {
    /// The sample nearest the pointer on the drawn line (or within its pixel column where no
    /// line is drawn): its time and every line's value with the unit; the setting changes marked within a few pixels (when, what,
    /// who); and what the wheel does.
    fn text(&self, position: &HoverPosition<'_>) -> String {
        let pointer = match position {
            HoverPosition::NearDataPoint { position, .. }
            | HoverPosition::Elsewhere { position } => position,
        };
        hover_text(
            self.history,
            self.lines,
            self.unit,
            self.changes,
            pointer.x,
            self.column_ms.get(),
            self.gap_after_ms,
        )
    }
}

/// [`Hover::text`] at `at_seconds` (Unix seconds) with pixel columns `column_ms` wide and
/// samples more than `gap_after_ms` apart drawn as a gap.
pub(crate) fn hover_text(
    history: &GpuHistory,
    lines: &[Series],
    unit: &str,
    changes: &[&ChangeNote],
    at_seconds: f64,
    column_ms: f64,
    gap_after_ms: u64,
) -> String {
    let at_ms = unix_ms(at_seconds);
    let half_column_ms = (column_ms / 2.0).max(0.0) as u64;
    let mut text = Vec::new();
    match history.nearest_on_line(at_ms, half_column_ms, gap_after_ms) {
        Some(index) => {
            let time_ms = history.time_ms(index).unwrap_or(at_ms);
            text.push(clock_time(seconds(time_ms), true));
            for line in lines {
                let value = history
                    .value(line.metric, index)
                    .map_or("n/a".to_string(), |value| {
                        format!("{} {unit}", format_value(value))
                    });
                text.push(format!("{}: {value}", line.name));
            }
        }
        None => {
            text.push(clock_time(at_seconds, true));
            text.push("No reading here".to_string());
        }
    }
    let reach_ms = (column_ms * MARK_HOVER_COLUMNS).max(0.0) as u64;
    for group in group_changes(changes, column_ms).iter().filter(|group| {
        group.first_ms().saturating_sub(reach_ms) <= at_ms
            && at_ms <= group.last_ms().saturating_add(reach_ms)
    }) {
        for line in group.hover_lines() {
            text.push(gputune_core::text::printable(&line));
        }
    }
    text.push(WHEEL_HINT.to_string());
    text.join("\n")
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
