//! The Profiles tab: the saved profiles of the chosen card, saving the Tune tab's settings as a
//! new one, apply (or try), rename, delete (after asking), default, import and export. The
//! panel only returns `ProfileAction`s; the app runs them against `profiles::store`.

use eframe::egui::{self, Color32, RichText};

use crate::profiles::profile::{CardIdentity, ClockLock, PowerLimit, Profile, SCHEMA_VERSION};
use crate::profiles::store::{LoadProblem, StoredProfile};
use crate::ui::model::GpuModel;
use crate::ui::tune::AppliedSettings;
use crate::ui::widgets::banner::ERROR_TEXT;

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
    /// The last outcome, and whether it is an error.
    pub message: Option<(String, bool)>,
    new_name: String,
    new_notes: String,
    /// A profile being renamed and the new name typed so far.
    renaming: Option<(String, String)>,
    /// A profile whose deletion waits for confirmation.
    confirm_delete: Option<String>,
}

impl ProfilesPanel {
    /// Draws the tab for the card `identity`; `tune` holds the settings "Save" captures.
    pub fn profiles_ui(
        &mut self,
        ui: &mut egui::Ui,
        gpu: &GpuModel,
        applied: &AppliedSettings,
        apply_default_on_start: &mut bool,
    ) -> Vec<ProfileAction> {
        let identity = &gpu.info.identity;
        let mut actions = Vec::new();
        if let Some((message, is_error)) = &self.message {
            let text = RichText::new(message.as_str());
            ui.label(if *is_error {
                text.color(ERROR_TEXT)
            } else {
                text.color(Color32::from_rgb(0x5c, 0xd6, 0x7a))
            });
        }
        ui.heading("Save");
        ui.horizontal(|ui| {
            let label = ui.label("Name");
            ui.add(egui::TextEdit::singleline(&mut self.new_name).hint_text("e.g. quiet-70"))
                .labelled_by(label.id);
            let notes = ui.label("Notes");
            ui.add(egui::TextEdit::singleline(&mut self.new_notes).hint_text("optional"))
                .labelled_by(notes.id);
            let name = self.new_name.trim().to_string();
            if ui
                .add_enabled(
                    !name.is_empty(),
                    egui::Button::new("Save the current settings"),
                )
                .clicked()
            {
                actions.push(ProfileAction::Save(Box::new(profile_from_card(
                    &name,
                    &self.new_notes,
                    gpu,
                    applied,
                ))));
            }
        });
        ui.label(
            RichText::new(
                "Saves the card's power limit (also as a percentage of its default), and the clock locks, offsets and \
                 fan curve this window applied.",
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
            profile_row(ui, stored, edits, &mut actions);
        }
        if !others.is_empty() {
            ui.add_space(8.0);
            ui.label(
                RichText::new("Saved on other cards (applied by percentage of this card's limits)")
                    .strong(),
            );
            for stored in others {
                profile_row(ui, stored, edits, &mut actions);
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
            ui.label(RichText::new(summary(profile)).weak());
        });
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

/// One line about what a profile sets.
fn summary(profile: &Profile) -> String {
    let mut parts = Vec::new();
    if let Some(power) = profile.power_limit {
        parts.push(format!(
            "power {:.0} % ({:.0} W)",
            power.percent_of_default, power.watts
        ));
    }
    if let Some(lock) = profile.gpu_clock_lock {
        parts.push(format!("GPU {}-{} MHz", lock.min_mhz, lock.max_mhz));
    }
    if let Some(offset) = profile.gpu_clock_offset_mhz {
        parts.push(format!("GPU offset {offset:+} MHz"));
    }
    if let Some(offset) = profile.memory_clock_offset_mhz {
        parts.push(format!("memory offset {offset:+} MHz"));
    }
    if profile.fan_curve.is_some() {
        parts.push("fan curve".to_string());
    }
    let settings = if parts.is_empty() {
        "sets nothing".to_string()
    } else {
        parts.join(", ")
    };
    if profile.notes.is_empty() {
        settings
    } else {
        format!("{settings} — {}", profile.notes)
    }
}

/// A profile of the card's current settings: its power limit as read, and the clock locks,
/// offsets and fan curve this window applied (NVML cannot read locks back).
pub fn profile_from_card(
    name: &str,
    notes: &str,
    gpu: &GpuModel,
    applied: &AppliedSettings,
) -> Profile {
    let identity = &gpu.info.identity;
    let constraints = &gpu.info.constraints;
    let enforced_mw = gpu
        .latest
        .as_ref()
        .and_then(|latest| latest.as_ref().ok())
        .and_then(|reading| reading.power_limit_mw);
    let power_limit = match (enforced_mw, constraints.power_limit_default_mw) {
        (Some(milliwatts), Some(default_mw)) if default_mw > 0 => Some(PowerLimit {
            percent_of_default: (f64::from(milliwatts) / f64::from(default_mw) * 1000.0).round()
                / 10.0,
            watts: f64::from(milliwatts) / 1000.0,
        }),
        _ => None,
    };
    let lock =
        |lock: Option<(u32, u32)>| lock.map(|(min_mhz, max_mhz)| ClockLock { min_mhz, max_mhz });
    Profile {
        schema_version: SCHEMA_VERSION,
        name: name.to_string(),
        notes: notes.trim().to_string(),
        card: CardIdentity {
            uuid: identity.uuid.clone(),
            name: identity.name.clone(),
            pci_bus_id: identity.pci_bus_id.clone(),
        },
        default_for_card: false,
        power_limit,
        gpu_clock_lock: lock(applied.gpu_clock_lock_mhz),
        memory_clock_lock: lock(applied.memory_clock_lock_mhz),
        gpu_clock_offset_mhz: applied.gpu_clock_offset_mhz,
        memory_clock_offset_mhz: applied.memory_clock_offset_mhz,
        fan_curve: applied
            .fan_curve
            .as_ref()
            .map(|curve| curve.points().to_vec()),
    }
}
