//! The Settings view's clocks: the GPU and memory clock locks, the clock offsets, and the
//! undervolt-style preset (a clock cap with a positive offset).

use eframe::egui::{self, RichText};

use super::{TunePanel, UNDERVOLT_CAP_MHZ, UNDERVOLT_OFFSET_MHZ, apply_or_try};
use gputune_core::link::TuneCommand;
use gputune_formats::card::{ClockRangeMhz, Constraints, OffsetRangeMhz, Setting};

impl TunePanel {
    /// The Clocks section: locks, offsets (where the card takes them) and the preset.
    pub(super) fn clock_section(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        ui.heading("Clocks");
        self.clock_lock_rows(ui, constraints, gpu_index, commands);
        ui.add_space(8.0);
        ui.label(RichText::new("Clock offsets").strong());
        // A range with no room (0 to 0 MHz on an H200) gets no slider.
        let Some(gpu_range) = constraints.adjustable_gpu_clock_offset_range() else {
            ui.label("Not supported on this GPU or driver (they need a consumer card and driver 555 or newer).");
            return;
        };
        self.offset_rows(ui, constraints, gpu_range, gpu_index, commands);
        let Some(range) = constraints.gpu_clock_range else {
            return;
        };
        self.undervolt_preset(ui, range, gpu_range, gpu_index, commands);
    }

    /// A lock's range and its Lock / Try / Reset buttons, for the GPU and the memory clock.
    fn clock_lock_rows(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        for (label, lock, range, lock_setting, reset_setting, name) in [
            (
                "GPU clock lock",
                &mut self.gpu_clock_lock_mhz,
                constraints.gpu_clock_range,
                (|min_mhz, max_mhz| Setting::LockGpuClocks { min_mhz, max_mhz })
                    as fn(u32, u32) -> Setting,
                Setting::ResetGpuClocks,
                "GPU",
            ),
            (
                "Memory clock lock",
                &mut self.memory_clock_lock_mhz,
                constraints.memory_clock_range,
                |min_mhz, max_mhz| Setting::LockMemoryClocks { min_mhz, max_mhz },
                Setting::ResetMemoryClocks,
                "memory",
            ),
        ] {
            let Some(range) = range else { continue };
            ui.horizontal(|ui| {
                let label = ui.label(label);
                ui.add(
                    egui::DragValue::new(&mut lock.0)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
                ui.label("to");
                ui.add(
                    egui::DragValue::new(&mut lock.1)
                        .range(range.min_mhz..=range.max_mhz)
                        .suffix(" MHz"),
                )
                .labelled_by(label.id);
            });
            ui.horizontal(|ui| {
                apply_or_try(
                    ui,
                    (
                        &format!("Lock {name} clocks"),
                        &format!("Try {name} clock lock"),
                    ),
                    vec![lock_setting(lock.0, lock.1)],
                    gpu_index,
                    self.trial_duration_s,
                    commands,
                );
                if ui.button(format!("Reset {name} clocks")).clicked() {
                    commands.push(TuneCommand::Apply {
                        gpu_index,
                        settings: vec![reset_setting],
                    });
                }
            });
        }
    }

    /// The GPU (and, where the card takes one, memory) clock offset, and Apply / Try.
    fn offset_rows(
        &mut self,
        ui: &mut egui::Ui,
        constraints: &Constraints,
        gpu_range: OffsetRangeMhz,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        let memory_range = constraints.adjustable_memory_clock_offset_range();
        ui.add(
            egui::Slider::new(
                &mut self.gpu_clock_offset_mhz,
                gpu_range.min_mhz..=gpu_range.max_mhz,
            )
            .suffix(" MHz")
            .text("GPU offset"),
        );
        if let Some(memory_range) = memory_range {
            ui.add(
                egui::Slider::new(
                    &mut self.memory_clock_offset_mhz,
                    memory_range.min_mhz..=memory_range.max_mhz,
                )
                .suffix(" MHz")
                .text("memory offset"),
            );
        }
        ui.label(
            RichText::new(
                "Offsets move the voltage/frequency curve and snap to the driver's 15 MHz steps. On an RTX 4090 \
                 the memory offset counts double data rate: +1000 raises the memory clock NVML reports by 500 MHz.",
            )
            .weak(),
        );
        ui.horizontal(|ui| {
            let mut offsets = vec![Setting::GpuClockOffset {
                offset_mhz: self.gpu_clock_offset_mhz,
            }];
            if memory_range.is_some() {
                offsets.push(Setting::MemoryClockOffset {
                    offset_mhz: self.memory_clock_offset_mhz,
                });
            }
            apply_or_try(
                ui,
                ("Apply offsets", "Try offsets"),
                offsets,
                gpu_index,
                self.trial_duration_s,
                commands,
            );
        });
    }

    /// One button for the undervolt-style pair (a clock cap and an offset), and its Try.
    fn undervolt_preset(
        &mut self,
        ui: &mut egui::Ui,
        range: ClockRangeMhz,
        gpu_range: OffsetRangeMhz,
        gpu_index: u32,
        commands: &mut Vec<TuneCommand>,
    ) {
        let cap = UNDERVOLT_CAP_MHZ.clamp(range.min_mhz, range.max_mhz);
        let offset_mhz = UNDERVOLT_OFFSET_MHZ.clamp(gpu_range.min_mhz, gpu_range.max_mhz);
        ui.horizontal(|ui| {
            let preset = ui
                .button(format!("Undervolt-style: cap {cap} MHz, {offset_mhz:+} MHz"))
                .on_hover_text(
                    "Capping the clock and adding an offset makes the card run that clock at the lower voltage \
                     the curve gives a slower clock, so it draws less power for the same speed.",
                );
            let try_preset = ui.button("Try it");
            let undervolt = vec![
                Setting::LockGpuClocks {
                    min_mhz: range.min_mhz,
                    max_mhz: cap,
                },
                Setting::GpuClockOffset { offset_mhz },
            ];
            if preset.clicked() || try_preset.clicked() {
                self.gpu_clock_lock_mhz = (range.min_mhz, cap);
                self.gpu_clock_offset_mhz = offset_mhz;
            }
            if preset.clicked() {
                commands.push(TuneCommand::Apply {
                    gpu_index,
                    settings: undervolt.clone(),
                });
            }
            if try_preset.clicked() {
                commands.push(TuneCommand::StartTrial {
                    gpu_index,
                    settings: undervolt,
                    duration_s: self.trial_duration_s,
                });
            }
        });
    }
}
