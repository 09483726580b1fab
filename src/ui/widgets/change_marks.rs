//! Where settings changed, on the graphs' time axis: a vertical line in every graph and a line
//! of text per change in view, saying when, what and who ("another program", a client, the fan
//! safety net), as the engine reported it.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{LineStyle, PlotUi, VLine};

use crate::tuning::engine::ChangeNote;
use crate::ui::widgets::time_axis::{TimeSpan, clock_time, seconds};

/// The marks' colour: apart from every series' colour.
const MARK_COLOR: Color32 = Color32::from_rgb(0xe0, 0xe0, 0xe0);
/// How many changes in view are listed in words (the rest are only marked).
const LISTED_AT_MOST: usize = 5;

/// The changes inside `span`, oldest first.
pub(crate) fn changes_in_span(changes: &[ChangeNote], span: TimeSpan) -> Vec<&ChangeNote> {
    changes
        .iter()
        .filter(|change| (span.from_ms..=span.to_ms).contains(&change.at_ms))
        .collect()
}

/// A dotted vertical line per change, named once in the legend.
pub(crate) fn mark_changes(plot_ui: &mut PlotUi<'_>, changes: &[&ChangeNote]) {
    for change in changes {
        plot_ui.vline(
            VLine::new("Setting changed", seconds(change.at_ms))
                .color(MARK_COLOR)
                .style(LineStyle::dotted_dense())
                .width(1.0)
                // The graph's hover text names the change (when, what, who).
                .allow_hover(false),
        );
    }
}

/// The latest changes in view in words, newest first.
pub(crate) fn change_list(ui: &mut egui::Ui, changes: &[&ChangeNote]) {
    if changes.is_empty() {
        return;
    }
    let listed: Vec<String> = changes
        .iter()
        .rev()
        .take(LISTED_AT_MOST)
        .map(|change| {
            format!(
                "{} {} ({})",
                clock_time(seconds(change.at_ms), true),
                change.what,
                change.by
            )
        })
        .collect();
    let more = changes.len().saturating_sub(LISTED_AT_MOST);
    let mut text = format!("Settings changed: {}", listed.join(" · "));
    if more > 0 {
        text.push_str(&format!(" · and {more} earlier"));
    }
    ui.label(RichText::new(crate::text::printable(&text)).weak())
        .on_hover_text("Dotted lines in the graphs mark these moments.");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(at_ms: u64) -> ChangeNote {
        ChangeNote {
            at_ms,
            by: "another program".to_string(),
            what: "power limit changed".to_string(),
        }
    }

    #[test]
    fn only_changes_inside_the_span_are_marked() {
        let changes = [change(1_000), change(5_000), change(9_000)];
        let span = TimeSpan {
            from_ms: 2_000,
            to_ms: 9_000,
            force: true,
            gap_after_ms: 1_500,
        };
        let in_view: Vec<u64> = changes_in_span(&changes, span)
            .iter()
            .map(|change| change.at_ms)
            .collect();
        assert_eq!(in_view, vec![5_000, 9_000]);
    }
}
