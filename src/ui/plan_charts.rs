//! The planner panel's charts: the memory breakdown against the card, memory against
//! micro-batch with the fit limit, and the strategy table.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{Bar, BarChart, HLine, Legend, Line, LineStyle, Plot, VLine};

use crate::plan::memory::{MemoryBreakdown, estimate};
use crate::plan::model::Model;
use crate::plan::recommend::{GpuCard, Recommendation, SAFETY_MARGIN, fits};
use crate::plan::setup::TrainingSetup;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

const PART_COLOURS: [(&str, Color32); 5] = [
    ("Weights", Color32::from_rgb(0x6c, 0x9c, 0xff)),
    ("Gradients", Color32::from_rgb(0xb3, 0x88, 0xff)),
    ("Optimizer", Color32::from_rgb(0xff, 0x9f, 0x43)),
    ("Activations", Color32::from_rgb(0x5c, 0xd6, 0x7a)),
    ("Overhead", Color32::from_gray(140)),
];

/// One stacked bar of the breakdown (GiB) against a line at the card's memory.
pub fn breakdown_chart(ui: &mut egui::Ui, breakdown: &MemoryBreakdown, memory_bytes: u64) {
    ui.label(RichText::new("Where the memory goes (GiB per GPU)").strong());
    let parts = [
        breakdown.weights,
        breakdown.gradients,
        breakdown.optimizer,
        breakdown.activations,
        breakdown.overhead,
    ];
    let mut base = 0.0;
    let mut charts = Vec::new();
    for ((name, colour), bytes) in PART_COLOURS.iter().zip(parts) {
        let height = bytes as f64 / GIB;
        charts.push(
            BarChart::new(
                *name,
                vec![
                    Bar::new(0.0, height)
                        .base_offset(base)
                        .width(0.6)
                        .name(format!("{name}: {height:.2} GiB")),
                ],
            )
            .color(*colour),
        );
        base += height;
    }
    let memory_gib = memory_bytes as f64 / GIB;
    Plot::new("plan-breakdown")
        .height(220.0)
        .legend(Legend::default())
        .show_x(false)
        .show_axes([false, true])
        .show_grid([false, true])
        .include_x(-1.0)
        .include_x(1.0)
        .include_y(0.0)
        .include_y(memory_gib * 1.1)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            for chart in charts {
                plot_ui.bar_chart(chart);
            }
            plot_ui.hline(
                HLine::new("Card memory", memory_gib)
                    .color(Color32::from_rgb(0xff, 0x5c, 0x5c))
                    .style(LineStyle::dashed_loose()),
            );
        });
}

/// Memory against micro-batch, with the card's usable memory as the fit limit.
pub fn batch_curve(ui: &mut egui::Ui, model: &Model, setup: &TrainingSetup, card: &GpuCard) {
    ui.label(RichText::new("Memory per GPU vs micro-batch (GiB)").strong());
    let mut points = Vec::new();
    let mut micro_batch = 1u64;
    while micro_batch <= 256 {
        if let Ok(breakdown) = estimate(
            model,
            &TrainingSetup {
                micro_batch,
                ..*setup
            },
        ) {
            points.push([micro_batch as f64, breakdown.total() as f64 / GIB]);
            if !fits(&breakdown, card.memory_bytes)
                && breakdown.total() as f64 > 2.0 * card.memory_bytes as f64
            {
                break;
            }
        }
        micro_batch = if micro_batch < 16 {
            micro_batch + 1
        } else {
            micro_batch * 2
        };
    }
    let limit = card.memory_bytes as f64 * (1.0 - SAFETY_MARGIN) / GIB;
    Plot::new("plan-batch-curve")
        .height(200.0)
        .legend(Legend::default())
        .include_y(0.0)
        .x_axis_label("micro-batch")
        .allow_drag(false)
        .allow_scroll(false)
        .show(ui, |plot_ui| {
            plot_ui.line(
                Line::new("Memory per GPU", points)
                    .color(Color32::from_rgb(0x6c, 0x9c, 0xff))
                    .width(2.0),
            );
            plot_ui.hline(
                HLine::new("Fit limit (95 % of the card)", limit)
                    .color(Color32::from_rgb(0xff, 0x5c, 0x5c))
                    .style(LineStyle::dashed_loose()),
            );
            plot_ui.vline(
                VLine::new("Chosen micro-batch", setup.micro_batch as f64).color(Color32::GRAY),
            );
        });
}

pub fn strategy_table(ui: &mut egui::Ui, answer: &Recommendation) {
    ui.label(RichText::new("Strategies on this card, best first").strong());
    egui::Grid::new("plan-strategies")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            for header in [
                "Method",
                "Precision",
                "Checkpointing",
                "At micro-batch 1",
                "Largest micro-batch",
            ] {
                ui.label(RichText::new(header).weak());
            }
            ui.end_row();
            for row in &answer.strategies {
                ui.label(row.method);
                ui.label(row.precision);
                ui.label(if row.checkpointing { "full" } else { "none" });
                ui.label(format!(
                    "{:.2} GiB",
                    row.per_gpu_bytes_at_batch_1 as f64 / GIB
                ));
                ui.label(
                    row.max_micro_batch
                        .map_or("does not fit".to_string(), |batch| batch.to_string()),
                );
                ui.end_row();
            }
        });
}
