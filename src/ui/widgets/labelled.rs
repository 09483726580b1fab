//! A field and its label, the field named by the label: screen readers and the window's tests
//! find it by that name.

use eframe::egui;

/// Shows `text`, then `widget` named by it.
pub fn labelled(ui: &mut egui::Ui, text: &str, widget: impl egui::Widget) -> egui::Response {
    let label = ui.label(text);
    ui.add(widget).labelled_by(label.id)
}
