//! The Tune tab's account of what the card runs: the settings in force (read back, or the
//! engine's record where NVML cannot read), who holds the card and until when, the card's last
//! crash (Xid) and what was put back, the last change and who made it, and who makes the changes.

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;
use crate::ui::style::{ERROR_TEXT, GOOD_TEXT, WARNING_TEXT};
use gputune_core::device::Constraints;
use gputune_core::notice::Notice;
use gputune_core::tuning::engine::{GpuTuning, Holder};
use gputune_core::tuning::in_force::ClockLock;
use gputune_core::units::{local_time, watts_exact};

/// What the card runs, who holds it, who changed it last, and who makes the changes.
pub(super) fn in_force_box(ui: &mut egui::Ui, gpu: &GpuModel, daemon: bool) {
    egui::Frame::group(ui.style()).inner_margin(8.0).show(ui, |ui| {
        ui.set_width(ui.available_width());
        let Some(tuning) = &gpu.tuning else {
            ui.label(RichText::new("Reading what the card runs…").weak());
            return;
        };
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("In force:").strong());
            ui.label(in_force_text(tuning, &gpu.info.constraints));
        });
        if matches!(tuning.in_force.gpu_clock_lock, ClockLock::Unknown) {
            ui.label(
                RichText::new(
                    "Clock locks: not known — NVML cannot read them back, and gputune did not set them since the driver started.",
                )
                .weak(),
            );
        }
        for holder in &tuning.holders {
            ui.label(RichText::new(holder_line(holder)).color(WARNING_TEXT));
        }
        if let Some(critical) = &tuning.last_critical {
            ui.label(
                RichText::new(format!(
                    "At {}: {}",
                    local_time(critical.at_ms, "%H:%M:%S"),
                    critical.sentence
                ))
                .color(ERROR_TEXT),
            );
        }
        if let Some(change) = &tuning.last_change {
            ui.label(
                RichText::new(format!(
                    "Last change at {}: {} (by {}).",
                    local_time(change.at_ms, "%H:%M:%S"),
                    change.what,
                    change.by
                ))
                .weak(),
            );
        }
        ui.label(
            RichText::new(if daemon {
                "Changes go through the gputune daemon, which puts back what a trial or a session changed when it ends."
            } else {
                "No gputune daemon runs: this window makes the changes itself (a real card needs administrator rights: set up the daemon once with `sudo gputune daemon install`)."
            })
            .weak(),
        );
    });
    ui.add_space(4.0);
}

/// "315 W (70 % of default), GPU clocks 210-2520 MHz, …".
pub(crate) fn in_force_text(tuning: &GpuTuning, constraints: &Constraints) -> String {
    let mut text = tuning.in_force.summary();
    if let Some(limit) = tuning.in_force.power_limit_mw
        && let Some(percent) =
            gputune_core::units::percent_of_default(limit, constraints.power_limit_default_mw)
    {
        let share = format!(" ({percent} % of default)");
        let watts = format!("power limit {}", watts_exact(limit));
        text = text.replacen(&watts, &format!("{watts}{share}"), 1);
    }
    if text.is_empty() {
        "not reported by the card".to_string()
    } else {
        text
    }
}

/// "The power limit is held by a trial of this window until 21:30:05."
pub(crate) fn holder_line(holder: &Holder) -> String {
    let until = holder
        .trial_ends_at_ms
        .map(|ends_ms| format!(" until {}", local_time(ends_ms, "%H:%M:%S")))
        .unwrap_or_default();
    let (what, verb) = gputune_core::tuning::in_force::describe_holds(&holder.controls);
    let mut what = format!("The {what} {verb}");
    if holder.controls.is_empty() {
        what = "The card is".to_string();
    }
    format!(
        "{what} held by {}{until}.",
        holder.purpose.describe_by(holder_who(holder))
    )
}

/// Who holds a card, as this window says it: "this window", or the client's description.
pub(crate) fn holder_who(holder: &Holder) -> &str {
    if holder.by.contains(&format!("pid {}", std::process::id())) {
        "this window"
    } else {
        &holder.by
    }
}

pub(crate) fn notice_label(ui: &mut egui::Ui, notice: &Notice) {
    let text = RichText::new(notice.text());
    ui.label(match notice {
        Notice::Error(_) => text.color(ERROR_TEXT),
        Notice::Warning(_) => text.color(WARNING_TEXT),
        Notice::Info(_) => text.color(GOOD_TEXT),
    });
}
