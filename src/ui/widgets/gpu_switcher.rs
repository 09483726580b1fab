//! The graphs view's GPU switcher: another GPU's graphs without going back to the overview.

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;

/// A GPU's title: its overview card's button, this switcher, the Tune tab's heading; tests
/// click it by this label.
pub fn card_title(gpu: &GpuModel) -> String {
    let identity = &gpu.info.identity;
    format!("GPU {} · {}", identity.index, identity.name)
}

/// The open GPU's title, as a menu of every GPU on a multi-GPU box; returns the index of the
/// GPU the user picked, when it is another one.
pub fn gpu_switcher(ui: &mut egui::Ui, gpus: &[GpuModel], open_index: usize) -> Option<usize> {
    let open = gpus.get(open_index)?;
    if gpus.len() < 2 {
        ui.label(RichText::new(card_title(open)).strong().size(15.0));
        return None;
    }
    let mut chosen_index = open_index;
    let label = ui.label("Show");
    egui::ComboBox::from_id_salt("graphs-gpu")
        .selected_text(RichText::new(card_title(open)).strong())
        .show_ui(ui, |ui| {
            for (index, gpu) in gpus.iter().enumerate() {
                ui.selectable_value(&mut chosen_index, index, card_title(gpu));
            }
        })
        .response
        .on_hover_text("Another GPU's graphs, in the same time window")
        .labelled_by(label.id);
    (chosen_index != open_index).then_some(chosen_index)
}
