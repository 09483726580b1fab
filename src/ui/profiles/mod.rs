//! The Profiles tab: the saved profiles of the chosen card, saving the Tune tab's settings as a
//! new one, apply (or try), rename, delete (after asking), default, import and export. The
//! panel only returns `ProfileAction`s; the app runs them against `profiles::store`
//! (actions.rs, which also saves a sweep's or a scan's result as a profile); folder_watch.rs
//! notices profiles another program saved, changed or removed.

pub(super) mod actions;
pub mod folder_watch;

use eframe::egui::{self, Color32, RichText};

use crate::ui::model::GpuModel;
use crate::ui::style::ERROR_TEXT;
use gputune_core::notice::Notice;
use gputune_core::profiles::profile::Profile;
use gputune_core::profiles::store::{LoadProblem, StoredProfile};

/// What the Profiles tab asks the app to do.
#[derive(Debug, Clone, PartialEq)]
pub enum ProfileAction {
    /// Read the profile folder again.
    Refresh,
    Save(Box<Profile>),
    /// Apply a profile to the chosen GPU, or try it first.
    Apply {
        name: String,
        try_first: bool,
    },
    Rename {
        old: String,
        new: String,
    },
    Delete {
        name: String,
    },
    SetDefault {
        name: String,
    },
    /// Ask for a file and import it.
    Import,
    /// Ask for a file name and export this profile.
    Export {
        name: String,
    },
}

/// The tab's state: what the store holds for the chosen card, and the user's edits.
#[derive(Debug, Default)]
pub struct ProfilesPanel {
    pub profiles: Vec<StoredProfile>,
    pub problems: Vec<LoadProblem>,
    /// The last outcome.
    pub message: Option<Notice>,
    new_name: String,
    new_notes: String,
    /// A profile being renamed and the new name typed so far.
    renaming: Option<(String, String)>,
    /// A profile whose deletion waits for confirmation.
    confirm_delete: Option<String>,
    /// A profile sent to the engine whose answer has not come yet.
    pending: Option<PendingApply>,
}

/// A profile being applied or tried: "Applying X" until the GPU's next answer.
#[derive(Debug, Clone, PartialEq)]
struct PendingApply {
    gpu_index: u32,
    name: String,
    try_first: bool,
    /// The GPU's answer count when it was sent.
    answers_before: u64,
}

impl ProfilesPanel {
    /// Waits for the engine's answer to profile `name` just sent to `gpu`: the tab's
    /// "Applying X" becomes "Applied X" (or the error) when it comes.
    pub fn awaiting(&mut self, gpu: &GpuModel, name: &str, try_first: bool) {
        self.pending = Some(PendingApply {
            gpu_index: gpu.info.identity.index,
            name: name.to_string(),
            try_first,
            answers_before: gpu.answers,
        });
    }

    /// Takes in the answer to a pending apply or try, once `gpu` has it.
    fn take_answer(&mut self, gpu: &GpuModel) {
        let Some(pending) = self
            .pending
            .as_ref()
            .filter(|pending| pending.gpu_index == gpu.info.identity.index)
        else {
            return;
        };
        if gpu.answers <= pending.answers_before {
            return;
        }
        let (name, index) = (&pending.name, pending.gpu_index);
        let trial = gpu.trial.as_ref().filter(|_| pending.try_first);
        self.message = Some(match (trial, &gpu.tune_message) {
            (Some(trial), _) if trial.failed => Notice::Error(format!(
                "{name} could not be tried on GPU {index}: {}",
                trial.message.clone().unwrap_or_default()
            )),
            (Some(_), _) => Notice::Info(format!(
                "Trying {name} on GPU {index}: the Tune tab counts down, with Keep and Revert."
            )),
            (None, Some(Notice::Error(error))) => {
                Notice::Error(format!("{name} was not applied on GPU {index}: {error}"))
            }
            (None, Some(notice)) => {
                Notice::Info(format!("Applied {name} on GPU {index}: {}", notice.text()))
            }
            (None, None) => Notice::Info(format!("Applied {name} on GPU {index}.")),
        });
        self.pending = None;
    }

    /// Draws the tab for the card of `gpu`; "Save" captures what the card runs now.
    pub fn profiles_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        apply_default_on_start: &mut bool,
    ) -> Vec<ProfileAction> {
        let identity = &gpu.info.identity;
        let mut actions = Vec::new();
        self.take_answer(gpu);
        if let Some(message) = &self.message {
            let text = RichText::new(message.text());
            ui.label(if message.is_error() {
                text.color(ERROR_TEXT)
            } else {
                text.color(Color32::from_rgb(0x5c, 0xd6, 0x7a))
            });
        }
        ui.heading("Save");
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("The card runs now:").strong());
            ui.label(match &gpu.tuning {
                Some(tuning) if !tuning.in_force.summary().is_empty() => {
                    let mut text = tuning.in_force.summary();
                    if tuning.fan_curve.is_some() {
                        text.push_str(", following a fan curve");
                    }
                    text
                }
                Some(_) => "nothing it reports".to_string(),
                None => "reading…".to_string(),
            });
        });
        ui.horizontal(|ui| {
            let label = ui.label("Name");
            ui.add(egui::TextEdit::singleline(&mut self.new_name).hint_text("e.g. quiet-70"))
                .labelled_by(label.id);
            let notes = ui.label("Notes");
            ui.add(egui::TextEdit::singleline(&mut self.new_notes).hint_text("optional"))
                .labelled_by(notes.id);
            let name = self.new_name.trim().to_string();
            let previous = self
                .profiles
                .iter()
                .find(|stored| stored.profile.name == name)
                .map(|stored| &stored.profile);
            let profile = profile_from_card(&name, &self.new_notes, gpu, previous);
            let button = ui
                .add_enabled(
                    !name.is_empty() && profile.is_some(),
                    egui::Button::new("Save the current settings"),
                )
                .on_disabled_hover_text("Type a name; the card's settings must have been read.");
            if button.clicked()
                && let Some(profile) = profile
            {
                actions.push(ProfileAction::Save(Box::new(profile)));
            }
        });
        ui.label(
            RichText::new(
                "Saves what the card runs now: its power limit (also as a percentage of its default), the clock locks \
                 gputune set, the offsets, and the fan curve gputune follows — the same file as `gputune profile save`.",
            )
            .weak(),
        );
        ui.horizontal(|ui| {
            if ui.button("Import…").clicked() {
                actions.push(ProfileAction::Import);
            }
            if ui.button("Reload").clicked() {
                actions.push(ProfileAction::Refresh);
            }
            ui.checkbox(
                apply_default_on_start,
                "Apply each card's default profile when gputune starts",
            );
        });
        ui.separator();
        ui.heading(format!("Profiles for {}", identity.name));
        let edits = &mut RowEdits {
            renaming: &mut self.renaming,
            confirm_delete: &mut self.confirm_delete,
        };
        let mine: Vec<&StoredProfile> = self
            .profiles
            .iter()
            .filter(|stored| stored.profile.is_for(&identity.uuid))
            .collect();
        let others: Vec<&StoredProfile> = self
            .profiles
            .iter()
            .filter(|stored| !stored.profile.is_for(&identity.uuid))
            .collect();
        if mine.is_empty() {
            ui.label("No profile saved for this card yet.");
        }
        for stored in mine {
            profile_row(ui, stored, &identity.uuid, edits, &mut actions);
        }
        if !others.is_empty() {
            ui.add_space(8.0);
            ui.label(
                RichText::new("Saved on other cards (applied by percentage of this card's limits)")
                    .strong(),
            );
            for stored in others {
                profile_row(ui, stored, &identity.uuid, edits, &mut actions);
            }
        }
        for problem in &self.problems {
            ui.label(
                RichText::new(format!("{}: {}", problem.path.display(), problem.message))
                    .color(ERROR_TEXT),
            );
        }
        actions
    }
}

/// The per-row edits in progress: a rename being typed, a deletion waiting for "yes".
struct RowEdits<'a> {
    renaming: &'a mut Option<(String, String)>,
    confirm_delete: &'a mut Option<String>,
}

fn profile_row(
    ui: &mut egui::Ui,
    stored: &StoredProfile,
    card_uuid: &str,
    edits: &mut RowEdits<'_>,
    actions: &mut Vec<ProfileAction>,
) {
    {
        let profile = &stored.profile;
        let name = profile.name.clone();
        ui.horizontal(|ui| {
            let title = if profile.default_for_card {
                format!("{name} (default)")
            } else {
                name.clone()
            };
            ui.label(RichText::new(title).strong());
            ui.label(RichText::new(summary(profile, card_uuid)).weak());
        });
        // Each card's own undervolt: a clock offset never carries from one card to another.
        if profile.sets_offsets() {
            for line in profile.checked_card_lines() {
                ui.label(RichText::new(format!("    Undervolt on {line}")).weak());
            }
        }
        ui.horizontal(|ui| {
            if ui.button(format!("Apply {name}")).clicked() {
                actions.push(ProfileAction::Apply {
                    name: name.clone(),
                    try_first: false,
                });
            }
            if ui.button(format!("Try {name}")).clicked() {
                actions.push(ProfileAction::Apply {
                    name: name.clone(),
                    try_first: true,
                });
            }
            if !profile.default_for_card && ui.button(format!("Make {name} the default")).clicked()
            {
                actions.push(ProfileAction::SetDefault { name: name.clone() });
            }
            if ui.button(format!("Export {name}…")).clicked() {
                actions.push(ProfileAction::Export { name: name.clone() });
            }
            match &mut *edits.renaming {
                Some((old, new)) if *old == name => {
                    let label = ui.label("New name");
                    ui.add(egui::TextEdit::singleline(new).desired_width(140.0))
                        .labelled_by(label.id);
                    if ui.button("Rename").clicked() {
                        actions.push(ProfileAction::Rename {
                            old: old.clone(),
                            new: new.trim().to_string(),
                        });
                        *edits.renaming = None;
                    }
                }
                _ => {
                    if ui.button(format!("Rename {name}…")).clicked() {
                        *edits.renaming = Some((name.clone(), name.clone()));
                    }
                }
            }
            if edits.confirm_delete.as_deref() == Some(name.as_str()) {
                ui.label(RichText::new(format!("Delete {name}?")).color(ERROR_TEXT));
                if ui.button("Yes, delete").clicked() {
                    actions.push(ProfileAction::Delete { name: name.clone() });
                    *edits.confirm_delete = None;
                }
                if ui.button("Keep it").clicked() {
                    *edits.confirm_delete = None;
                }
            } else if ui.button(format!("Delete {name}…")).clicked() {
                *edits.confirm_delete = Some(name.clone());
            }
        });
        ui.add_space(4.0);
    }
}

/// One line about what a profile sets (the words of `gputune profile list`), whether it was
/// checked for stability on the card `card_uuid` (the one shown), and its notes.
fn summary(profile: &Profile, card_uuid: &str) -> String {
    let parts = profile.summary_parts();
    let mut settings = if parts.is_empty() {
        "sets nothing".to_string()
    } else {
        parts.join(", ")
    };
    if profile.changes_clocks() || profile.last_check.is_some() {
        settings = format!("{settings}; {}", profile.check_text_for(card_uuid));
    }
    if profile.notes.is_empty() {
        settings
    } else {
        format!("{settings} — {}", profile.notes)
    }
}

/// A profile of what the card runs now, as the engine reports it (the same conversion as
/// `gputune profile save`); `None` before the engine has said.
pub fn profile_from_card(
    name: &str,
    notes: &str,
    gpu: &GpuModel,
    previous: Option<&Profile>,
) -> Option<Profile> {
    let tuning = gpu.tuning.as_ref()?;
    let mut profile = Profile::from_in_force(
        name,
        &gpu.info.identity,
        &gpu.info.constraints,
        &tuning.in_force,
        tuning.fan_curve.as_ref(),
        previous,
    );
    if !notes.trim().is_empty() {
        profile.notes = notes.trim().to_string();
    }
    Some(profile)
}
