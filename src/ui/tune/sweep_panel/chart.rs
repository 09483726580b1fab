//! A chart of the measured settings: a value of each against its average power, the
//! unstable ones crossed, the repeat of the first apart, the running one live and the
//! recommended one ringed.

use eframe::egui;
use egui_plot::{Legend, Line, MarkerShape, Plot, Points};

use super::{LIVE, MEASURED, RECOMMENDED, REPEAT};
use crate::ui::style::ERROR_TEXT;
use gputune_core::sweep::runner::SweepView;
use gputune_formats::reports::sweep_step::StepResult;

/// One chart: `value` of each step against its average power.
pub(super) fn chart(
    ui: &mut egui::Ui,
    view: &SweepView,
    recommended: Option<usize>,
    id: (&str, u32),
    y_label: &str,
    value: impl Fn(&StepResult) -> Option<f64>,
) {
    let point = |result: &StepResult| Some([result.average_power_w?, value(result)?]);
    let stable: Vec<(usize, [f64; 2])> = view
        .results
        .iter()
        .enumerate()
        .filter(|(_, result)| result.unstable.is_none() && !result.step.is_repeat)
        .filter_map(|(index, result)| Some((index, point(result)?)))
        .collect();
    let power_only = view.plan.iter().all(|step| step.clock_cap_mhz.is_none());
    Plot::new(id)
        .height(200.0)
        .x_axis_label("average power, W")
        .y_axis_label(y_label)
        .legend(Legend::default().position(egui_plot::Corner::LeftTop))
        .set_margin_fraction(egui::vec2(0.1, 0.15))
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            if power_only && stable.len() > 1 {
                let mut line: Vec<[f64; 2]> = stable.iter().map(|(_, point)| *point).collect();
                line.sort_by(|a, b| a[0].total_cmp(&b[0]));
                plot_ui.line(Line::new("", line).color(MEASURED.gamma_multiply(0.5)));
            }
            let measured: Vec<[f64; 2]> = stable.iter().map(|(_, point)| *point).collect();
            plot_ui.points(
                Points::new("Measured", measured)
                    .radius(4.0)
                    .color(MEASURED),
            );
            let repeats: Vec<[f64; 2]> = view
                .results
                .iter()
                .filter(|result| result.step.is_repeat)
                .filter_map(point)
                .collect();
            if !repeats.is_empty() {
                plot_ui.points(
                    Points::new("First setting again", repeats)
                        .radius(4.0)
                        .shape(MarkerShape::Square)
                        .color(REPEAT),
                );
            }
            let unstable: Vec<[f64; 2]> = view
                .results
                .iter()
                .filter(|result| result.unstable.is_some())
                .filter_map(point)
                .collect();
            if !unstable.is_empty() {
                plot_ui.points(
                    Points::new("Unstable", unstable)
                        .radius(6.0)
                        .shape(MarkerShape::Cross)
                        .color(ERROR_TEXT),
                );
            }
            if let Some(live) = view.live.as_ref().and_then(point) {
                plot_ui.points(
                    Points::new("Now", vec![live])
                        .radius(5.0)
                        .shape(MarkerShape::Diamond)
                        .color(LIVE),
                );
            }
            if let Some(best) = recommended
                .and_then(|index| view.results.get(index))
                .and_then(point)
            {
                plot_ui.points(
                    Points::new("Recommended", vec![best])
                        .radius(8.0)
                        .filled(false)
                        .color(RECOMMENDED),
                );
            }
        });
}
