//! The planner panel's charts: the memory breakdown of the user's setup and the recommended
//! one against the card, memory against micro-batch with the fit limit, and the strategy
//! table. The micro-batch axis starts at 1: there is no micro-batch 0, nor a negative one.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{
    Bar, BarChart, Corner, GridMark, HLine, Legend, Line, LineStyle, MarkerShape, Plot, Points,
    VLine,
};

use gputune_core::plan::memory::{MemoryBreakdown, estimate};
use gputune_core::plan::model::Model;
use gputune_core::plan::recommend::{GpuCard, PlannedSetup, Recommendation, fits};
use gputune_core::plan::setup::TrainingSetup;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

const PART_COLOURS: [(&str, Color32); 6] = [
    ("Weights", Color32::from_rgb(0x6c, 0x9c, 0xff)),
    ("Gradients", Color32::from_rgb(0xb3, 0x88, 0xff)),
    ("Optimizer", Color32::from_rgb(0xff, 0x9f, 0x43)),
    ("Activations", Color32::from_rgb(0x5c, 0xd6, 0x7a)),
    ("Temporaries", Color32::from_rgb(0xf2, 0x7c, 0xb4)),
    ("Overhead", Color32::from_gray(140)),
];

fn parts(breakdown: &MemoryBreakdown) -> [u64; 6] {
    [
        breakdown.weights,
        breakdown.gradients,
        breakdown.optimizer,
        breakdown.activations,
        breakdown.temporaries,
        breakdown.overhead,
    ]
}

/// Stacked bars of the breakdown (GiB): the user's setup, and the recommended one beside it,
/// against a line at the card's memory.
pub fn breakdown_chart(ui: &mut egui::Ui, answer: &Recommendation, memory_bytes: u64) {
    ui.label(RichText::new("Where the memory goes (GiB per GPU)").strong());
    let mut columns: Vec<(&str, &PlannedSetup)> = vec![("yours", &answer.yours)];
    if let Some(planned) = &answer.recommended
        && planned.setup != answer.yours.setup
    {
        columns.push(("recommended", planned));
    }
    let mut charts = Vec::new();
    for (index, (name, colour)) in PART_COLOURS.iter().enumerate() {
        let bars = columns
            .iter()
            .enumerate()
            .map(|(column, (label, planned))| {
                let stacked = parts(&planned.breakdown);
                let base: f64 = stacked[..index]
                    .iter()
                    .map(|&bytes| bytes as f64 / GIB)
                    .sum();
                let height = stacked[index] as f64 / GIB;
                Bar::new(column as f64, height)
                    .base_offset(base)
                    .width(0.6)
                    .name(format!("{label}: {name} {height:.2} GiB"))
            })
            .collect();
        charts.push(BarChart::new(*name, bars).color(*colour));
    }
    let memory_gib = memory_bytes as f64 / GIB;
    let tallest = columns
        .iter()
        .map(|(_, planned)| planned.per_gpu_bytes as f64 / GIB)
        .fold(memory_gib, f64::max);
    let labels: Vec<&str> = columns.iter().map(|(label, _)| *label).collect();
    let last_column = (columns.len() - 1) as f64;
    Plot::new("plan-breakdown")
        .height(220.0)
        .legend(Legend::default())
        .show_axes([true, true])
        .show_grid([false, true])
        .x_axis_formatter(move |mark: GridMark, _| {
            let column = mark.value.round();
            if (mark.value - column).abs() < 1e-6 && column >= 0.0 {
                labels
                    .get(column as usize)
                    .copied()
                    .unwrap_or("")
                    .to_string()
            } else {
                String::new()
            }
        })
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .allow_double_click_reset(false)
        .show(ui, |plot_ui| {
            // Room on the right for the legend, beside the bars rather than over them.
            plot_ui.set_plot_bounds_x(-0.6..=last_column + 1.6);
            plot_ui.set_plot_bounds_y(0.0..=tallest * 1.1);
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

/// Per-GPU GiB of `setup` at micro-batches from 1 until it is far beyond the card (at most
/// 256): every one up to 16, then doubling.
fn memory_points(model: &Model, setup: &TrainingSetup, card: &GpuCard) -> Vec<[f64; 2]> {
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
    points
}

/// The x range of the memory curve: from micro-batch 1 to the last point, at least 2 wide.
pub fn micro_batch_axis(points: &[[f64; 2]], marks: &[f64]) -> (f64, f64) {
    let last = points
        .iter()
        .map(|point| point[0])
        .chain(marks.iter().copied())
        .fold(2.0, f64::max);
    (1.0, last)
}

/// Memory against micro-batch for the user's setup (and the recommended one when its options
/// differ), with the card's usable memory as the fit limit. Returns the x range drawn.
pub fn batch_curve(
    ui: &mut egui::Ui,
    model: &Model,
    answer: &Recommendation,
    card: &GpuCard,
) -> (f64, f64) {
    ui.label(RichText::new("Memory per GPU vs micro-batch (GiB)").strong());
    let yours = &answer.yours.setup;
    let your_points = memory_points(model, yours, card);
    let recommended = answer.recommended.as_ref().map(|planned| planned.setup);
    // A second curve only when the recommendation changes more than the batch.
    let same_batch = |setup: &TrainingSetup| TrainingSetup {
        micro_batch: yours.micro_batch,
        gradient_accumulation_steps: yours.gradient_accumulation_steps,
        ..*setup
    };
    let recommended_points = recommended
        .filter(|setup| same_batch(setup) != *yours)
        .map(|setup| memory_points(model, &setup, card));
    let marks: Vec<f64> = std::iter::once(yours.micro_batch as f64)
        .chain(recommended.map(|setup| setup.micro_batch as f64))
        .collect();
    let all_points: Vec<[f64; 2]> = your_points
        .iter()
        .chain(recommended_points.iter().flatten())
        .copied()
        .collect();
    let (x_min, x_max) = micro_batch_axis(&all_points, &marks);
    let limit = card.memory_bytes as f64 / GIB;
    let your_bytes = answer.yours.per_gpu_bytes as f64;
    let y_max = all_points
        .iter()
        .map(|point| point[1])
        .fold(limit, f64::max)
        * 1.05;
    Plot::new("plan-batch-curve")
        .height(200.0)
        .legend(Legend::default().position(Corner::LeftTop))
        .x_axis_label("micro-batch")
        .x_axis_formatter(|mark: GridMark, _| {
            if mark.value >= 1.0 && mark.value.fract() == 0.0 {
                format!("{}", mark.value as u64)
            } else {
                String::new()
            }
        })
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
        .allow_boxed_zoom(false)
        .allow_double_click_reset(false)
        .show(ui, |plot_ui| {
            plot_ui.set_plot_bounds_x(x_min..=x_max);
            plot_ui.set_plot_bounds_y(0.0..=y_max);
            plot_ui.line(
                Line::new("Your setup", your_points)
                    .color(Color32::from_rgb(0x6c, 0x9c, 0xff))
                    .width(2.0),
            );
            if let Some(points) = recommended_points {
                plot_ui.line(
                    Line::new("Recommended setup", points)
                        .color(Color32::from_rgb(0x5c, 0xd6, 0x7a))
                        .width(2.0),
                );
            }
            plot_ui.hline(
                // The planner fits against the whole card (no margin): the line is its memory.
                HLine::new(format!("Fit limit (the card's {limit:.2} GiB)"), limit)
                    .color(Color32::from_rgb(0xff, 0x5c, 0x5c))
                    .style(LineStyle::dashed_loose()),
            );
            // Each chosen micro-batch as a line and a point on its curve (a line at 1 would
            // sit on the axis).
            plot_ui.vline(
                VLine::new("Your micro-batch", yours.micro_batch as f64).color(Color32::GRAY),
            );
            plot_ui.points(
                Points::new(
                    "Your micro-batch",
                    vec![[yours.micro_batch as f64, your_bytes / GIB]],
                )
                .shape(MarkerShape::Circle)
                .radius(5.0)
                .color(Color32::GRAY),
            );
            if let Some(planned) = &answer.recommended {
                let green = Color32::from_rgb(0x5c, 0xd6, 0x7a);
                let micro_batch = planned.setup.micro_batch as f64;
                plot_ui.vline(
                    VLine::new("Recommended micro-batch", micro_batch)
                        .color(green)
                        .style(LineStyle::dashed_dense()),
                );
                plot_ui.points(
                    Points::new(
                        "Recommended micro-batch",
                        vec![[micro_batch, planned.per_gpu_bytes as f64 / GIB]],
                    )
                    .shape(MarkerShape::Diamond)
                    .radius(6.0)
                    .color(green),
                );
            }
        });
    (x_min, x_max)
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
