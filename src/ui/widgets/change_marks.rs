//! Where settings changed, on the graphs' time axis: a vertical line in every graph and a line
//! of text over the graphs, saying when, what and who ("another program", a client, the fan
//! safety net), as the engine reported it. Changes that fall within a few pixel columns of
//! each other at the current zoom (a scan's steps in an hour's view) are one group: one band
//! with its count, one entry in the text, every change in the hover.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{LineStyle, PlotTransform, PlotUi, Span, VLine};

use crate::ui::widgets::time_axis::{TimeSpan, clock_time, seconds};
use gputune_core::tuning::engine::ChangeNote;

/// The marks' colour: apart from every series' colour.
const MARK_COLOR: Color32 = Color32::from_rgb(0xe0, 0xe0, 0xe0);
/// A group's band: the marks' colour, faint.
const GROUP_FILL: Color32 = Color32::from_rgba_premultiplied(0x1c, 0x1c, 0x1c, 0x1c);
/// How many changes (or groups) in view are listed in words (the rest are only marked).
const LISTED_AT_MOST: usize = 5;
/// Changes at most this many pixel columns apart are one group: a scan's one-minute steps
/// are 17-20 columns apart in an hour's view, and a barcode of lines reads as nothing.
pub(crate) const GROUP_WITHIN_COLUMNS: f64 = 24.0;
/// How many of a group's changes its hover names one by one.
const HOVER_LISTS_AT_MOST: usize = 12;

/// The changes inside `span`, oldest first.
pub(crate) fn changes_in_span(changes: &[ChangeNote], span: TimeSpan) -> Vec<&ChangeNote> {
    let mut in_span: Vec<&ChangeNote> = changes
        .iter()
        .filter(|change| (span.from_ms..=span.to_ms).contains(&change.at_ms))
        .collect();
    in_span.sort_by_key(|change| change.at_ms);
    in_span
}

/// One change, or several close together at the current zoom, oldest first.
pub(crate) struct ChangeGroup<'a> {
    pub(crate) changes: Vec<&'a ChangeNote>,
}

impl ChangeGroup<'_> {
    pub(crate) fn first_ms(&self) -> u64 {
        self.changes.first().map_or(0, |change| change.at_ms)
    }

    pub(crate) fn last_ms(&self) -> u64 {
        self.changes.last().map_or(0, |change| change.at_ms)
    }

    /// Who made the changes, most changes first: "gputune scan (pid 42)", or
    /// "19 by gputune scan (pid 42), 1 by another program".
    fn made_by(&self) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for change in &self.changes {
            match counts.iter_mut().find(|(by, _)| *by == change.by) {
                Some((_, count)) => *count += 1,
                None => counts.push((&change.by, 1)),
            }
        }
        counts.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        match counts.as_slice() {
            [(by, _)] => (*by).to_string(),
            _ => counts
                .iter()
                .map(|(by, count)| format!("{count} by {by}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The group in a few words: "14:02:11 power limit 315 W (another program)", or
    /// "14:02:11–14:21:40 20 changes (gputune scan (pid 42)): GPU clock offset +0 MHz …
    /// put back GPU clock offset 0 MHz".
    pub(crate) fn summary(&self) -> String {
        let at = |ms: u64| clock_time(seconds(ms), true);
        match self.changes.as_slice() {
            [] => String::new(),
            [change] => format!("{} {} ({})", at(change.at_ms), change.what, change.by),
            [first, .., last] => format!(
                "{}–{} {} changes ({}): {} … {}",
                at(first.at_ms),
                at(last.at_ms),
                self.changes.len(),
                self.made_by(),
                first.what,
                last.what
            ),
        }
    }

    /// The hover's lines for this group: every change (when, what, who), at most a dozen.
    pub(crate) fn hover_lines(&self) -> Vec<String> {
        let line = |change: &ChangeNote| {
            format!(
                "Setting changed at {}: {} (by {})",
                clock_time(seconds(change.at_ms), true),
                change.what,
                change.by
            )
        };
        let [_, _, ..] = self.changes.as_slice() else {
            return self.changes.iter().map(|change| line(change)).collect();
        };
        let mut lines = vec![format!(
            "{} setting changes from {} to {} ({}):",
            self.changes.len(),
            clock_time(seconds(self.first_ms()), true),
            clock_time(seconds(self.last_ms()), true),
            self.made_by()
        )];
        // One author is named once, above; several, on each line.
        let one_author = self
            .changes
            .iter()
            .all(|change| change.by == self.changes[0].by);
        lines.extend(self.changes.iter().take(HOVER_LISTS_AT_MOST).map(
            |change| match one_author {
                true => format!(
                    "  {} {}",
                    clock_time(seconds(change.at_ms), true),
                    change.what
                ),
                false => format!("  {}", line(change)),
            },
        ));
        let more = self.changes.len().saturating_sub(HOVER_LISTS_AT_MOST);
        if more > 0 {
            lines.push(format!("  … and {more} more"));
        }
        lines
    }
}

/// `changes` (oldest first) grouped where neighbours are at most [`GROUP_WITHIN_COLUMNS`]
/// pixel columns of `column_ms` apart.
pub(crate) fn group_changes<'a>(
    changes: &[&'a ChangeNote],
    column_ms: f64,
) -> Vec<ChangeGroup<'a>> {
    let within_ms = (column_ms * GROUP_WITHIN_COLUMNS).max(0.0) as u64;
    let mut groups: Vec<ChangeGroup<'a>> = Vec::new();
    for &change in changes {
        match groups.last_mut() {
            Some(group) if change.at_ms.saturating_sub(group.last_ms()) <= within_ms => {
                group.changes.push(change);
            }
            _ => groups.push(ChangeGroup {
                changes: vec![change],
            }),
        }
    }
    groups
}

/// A dotted vertical line per lone change, named once in the legend; a faint band from the
/// first to the last change of a group.
pub(crate) fn mark_changes(plot_ui: &mut PlotUi<'_>, groups: &[ChangeGroup<'_>]) {
    for group in groups {
        if group.changes.len() == 1 {
            plot_ui.vline(
                VLine::new("Setting changed", seconds(group.first_ms()))
                    .color(MARK_COLOR)
                    .style(LineStyle::dotted_dense())
                    .width(1.0)
                    // The graph's hover text names the change (when, what, who).
                    .allow_hover(false),
            );
        } else {
            // No name: not in the legend; its count is drawn over it (`label_groups`).
            plot_ui.span(
                Span::new("", seconds(group.first_ms())..=seconds(group.last_ms()))
                    .fill(GROUP_FILL)
                    .border_color(MARK_COLOR)
                    .border_width(1.0)
                    .border_style(LineStyle::dotted_dense()),
            );
        }
    }
}

/// Each group's count at the top of its band, once the plot is drawn.
pub(crate) fn label_groups(ui: &egui::Ui, transform: &PlotTransform, groups: &[ChangeGroup<'_>]) {
    let frame = *transform.frame();
    let painter = ui.painter().with_clip_rect(frame);
    for group in groups.iter().filter(|group| group.changes.len() > 1) {
        let middle_s = (seconds(group.first_ms()) + seconds(group.last_ms())) / 2.0;
        let x = transform
            .position_from_point(&egui_plot::PlotPoint::new(middle_s, 0.0))
            .x;
        let galley = painter.layout_no_wrap(
            format!("{} changes", group.changes.len()),
            egui::FontId::proportional(11.0),
            MARK_COLOR,
        );
        // Inside the graph even for a group at its edge (the newest changes, while following).
        let half_width = galley.size().x / 2.0 + 2.0;
        let x = x.clamp(
            frame.left() + half_width,
            (frame.right() - half_width).max(frame.left() + half_width),
        );
        let top_left = egui::pos2(
            x - galley.size().x / 2.0,
            frame.bottom() - 2.0 - galley.size().y,
        );
        painter.galley(top_left, galley, MARK_COLOR);
    }
}

/// The latest changes in view in words, newest first; a group as one entry. `column_ms` is
/// the graphs' pixel column at this zoom.
pub(crate) fn change_list(ui: &mut egui::Ui, changes: &[&ChangeNote], column_ms: f64) {
    if changes.is_empty() {
        return;
    }
    let groups = group_changes(changes, column_ms);
    let listed: Vec<String> = groups
        .iter()
        .rev()
        .take(LISTED_AT_MOST)
        .map(ChangeGroup::summary)
        .collect();
    let more: usize = groups
        .iter()
        .rev()
        .skip(LISTED_AT_MOST)
        .map(|group| group.changes.len())
        .sum();
    let mut text = format!("Settings changed: {}", listed.join(" · "));
    if more > 0 {
        text.push_str(&format!(" · and {more} earlier"));
    }
    ui.label(RichText::new(gputune_core::text::printable(&text)).weak())
        .on_hover_text(
            "Dotted lines in the graphs mark these moments; a band, several close together.",
        );
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

    #[test]
    fn changes_within_a_few_columns_of_each_other_are_one_group() {
        // A scan's 20 steps a minute apart, then a change 10 minutes later.
        let mut changes: Vec<ChangeNote> = (0..20).map(|step| change(step * 60_000)).collect();
        changes.push(change(30 * 60_000));
        let refs: Vec<&ChangeNote> = changes.iter().collect();
        // An hour over 1200 columns: 3 s a column, a minute is 20 columns.
        let sizes: Vec<usize> = group_changes(&refs, 3_000.0)
            .iter()
            .map(|group| group.changes.len())
            .collect();
        assert_eq!(sizes, vec![20, 1]);
        // Ten minutes over 1200 columns: a minute is 120 columns, each change its own mark.
        assert_eq!(group_changes(&refs, 500.0).len(), 21);
        let groups = group_changes(&refs, 3_000.0);
        let summary = groups[0].summary();
        assert!(
            summary.contains("20 changes (another program)"),
            "{summary}"
        );
        let hover = groups[0].hover_lines();
        assert!(
            hover[0].starts_with("20 setting changes from "),
            "{hover:?}"
        );
        assert_eq!(hover.len(), 1 + HOVER_LISTS_AT_MOST + 1, "{hover:?}");
    }
}
