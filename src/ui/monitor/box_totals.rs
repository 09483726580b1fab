//! The whole box at a glance, above the overview's cards on a multi-GPU box: total power draw
//! against the sum of the limits, energy since the window opened, the hottest card, and VRAM
//! used of the total. Computed from the model the window already holds.

use eframe::egui::{self, RichText};

use crate::ui::model::GpuModel;
use gputune_core::device::Telemetry;
use gputune_core::units::{energy, gib, watts};

/// One GPU as the totals need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CardNow<'a> {
    pub gpu_index: u32,
    /// The latest reading, `None` when there is none or it failed.
    pub reading: Option<&'a Telemetry>,
    pub memory_total_bytes: u64,
    /// The energy counter at the window's first reading of this GPU.
    pub energy_at_open_mj: Option<u64>,
}

/// The hottest card: which, and how hot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hottest {
    pub gpu_index: u32,
    pub temperature_c: u32,
}

/// The box's totals over the GPUs that report each reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BoxTotals {
    pub gpu_count: usize,
    /// GPUs whose latest reading arrived.
    pub reporting_count: usize,
    pub power_draw_mw: u64,
    pub power_limit_mw: u64,
    /// Energy used since the window opened, over the GPUs with an energy counter; `None`
    /// when none has one.
    pub energy_since_open_mj: Option<u64>,
    pub hottest: Option<Hottest>,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

/// Adds up `cards`.
pub fn sum_cards(cards: &[CardNow<'_>]) -> BoxTotals {
    let mut totals = BoxTotals {
        gpu_count: cards.len(),
        ..BoxTotals::default()
    };
    for card in cards {
        totals.memory_total_bytes += card.memory_total_bytes;
        let Some(reading) = card.reading else {
            continue;
        };
        totals.reporting_count += 1;
        totals.power_draw_mw += reading.power_draw_mw.map_or(0, u64::from);
        totals.power_limit_mw += reading.power_limit_mw.map_or(0, u64::from);
        totals.memory_used_bytes += reading.memory_used_bytes.unwrap_or(0);
        if let (Some(now_mj), Some(at_open_mj)) = (reading.energy_total_mj, card.energy_at_open_mj)
        {
            let used_mj = now_mj.saturating_sub(at_open_mj);
            totals.energy_since_open_mj = Some(totals.energy_since_open_mj.unwrap_or(0) + used_mj);
        }
        if let Some(temperature_c) = reading.temperature_c
            && totals
                .hottest
                .is_none_or(|hottest| temperature_c > hottest.temperature_c)
        {
            totals.hottest = Some(Hottest {
                gpu_index: card.gpu_index,
                temperature_c,
            });
        }
    }
    totals
}

/// The totals of a multi-GPU box; `None` on a box with one GPU (its card says it all).
pub fn box_totals(gpus: &[GpuModel]) -> Option<BoxTotals> {
    if gpus.len() < 2 {
        return None;
    }
    let cards: Vec<CardNow<'_>> = gpus
        .iter()
        .map(|gpu| CardNow {
            gpu_index: gpu.info.identity.index,
            reading: gpu.latest.as_ref().and_then(|latest| latest.as_ref().ok()),
            memory_total_bytes: gpu.info.identity.memory_total_bytes,
            energy_at_open_mj: gpu.energy_at_open_mj,
        })
        .collect();
    Some(sum_cards(&cards))
}

/// Milliwatts summed over a box as watts.
fn total_watts(milliwatts: u64) -> String {
    watts(u32::try_from(milliwatts).unwrap_or(u32::MAX))
}

/// The totals' line; nothing on a one-GPU box.
pub fn box_totals_ui(ui: &mut egui::Ui, gpus: &[GpuModel]) {
    let Some(totals) = box_totals(gpus) else {
        return;
    };
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.horizontal_wrapped(|ui| {
            let heading = if totals.reporting_count == totals.gpu_count {
                format!("All {} GPUs", totals.gpu_count)
            } else {
                format!(
                    "{} of {} GPUs reporting",
                    totals.reporting_count, totals.gpu_count
                )
            };
            ui.label(RichText::new(heading).strong());
            ui.separator();
            ui.label(format!(
                "Power {} of {}",
                total_watts(totals.power_draw_mw),
                total_watts(totals.power_limit_mw)
            ))
            .on_hover_text("Total power draw against the sum of the cards' power limits");
            ui.separator();
            if let Some(used_mj) = totals.energy_since_open_mj {
                ui.label(format!(
                    "Energy {} since the window opened",
                    energy(used_mj)
                ))
                .on_hover_text("From the cards' energy counters");
                ui.separator();
            }
            if let Some(hottest) = totals.hottest {
                ui.label(format!(
                    "Hottest GPU {} at {} °C",
                    hottest.gpu_index, hottest.temperature_c
                ));
                ui.separator();
            }
            ui.label(format!(
                "VRAM {} of {}",
                gib(totals.memory_used_bytes),
                gib(totals.memory_total_bytes)
            ));
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(draw_w: u32, limit_w: u32, temperature_c: u32, used_gib: u64) -> Telemetry {
        Telemetry {
            power_draw_mw: Some(draw_w * 1000),
            power_limit_mw: Some(limit_w * 1000),
            temperature_c: Some(temperature_c),
            memory_used_bytes: Some(used_gib << 30),
            energy_total_mj: Some(10_000_000),
            ..Telemetry::default()
        }
    }

    fn card(gpu_index: u32, reading: Option<&Telemetry>) -> CardNow<'_> {
        CardNow {
            gpu_index,
            reading,
            memory_total_bytes: 24 << 30,
            energy_at_open_mj: Some(6_400_000),
        }
    }

    #[test]
    fn sums_power_vram_energy_and_finds_the_hottest() {
        let cool = reading(300, 450, 65, 10);
        let hot = reading(440, 450, 81, 20);
        let totals = sum_cards(&[card(0, Some(&cool)), card(1, Some(&hot))]);
        assert_eq!(totals.gpu_count, 2);
        assert_eq!(totals.reporting_count, 2);
        assert_eq!(totals.power_draw_mw, 740_000);
        assert_eq!(totals.power_limit_mw, 900_000);
        assert_eq!(totals.memory_used_bytes, 30 << 30);
        assert_eq!(totals.memory_total_bytes, 48 << 30);
        assert_eq!(totals.energy_since_open_mj, Some(2 * 3_600_000));
        assert_eq!(
            totals.hottest,
            Some(Hottest {
                gpu_index: 1,
                temperature_c: 81
            })
        );
        assert_eq!(total_watts(totals.power_draw_mw), "740 W");
    }

    #[test]
    fn a_silent_gpu_counts_its_vram_but_no_reading() {
        let hot = reading(440, 450, 81, 20);
        let totals = sum_cards(&[card(0, None), card(1, Some(&hot))]);
        assert_eq!(totals.gpu_count, 2);
        assert_eq!(totals.reporting_count, 1);
        assert_eq!(totals.power_draw_mw, 440_000);
        assert_eq!(totals.memory_total_bytes, 48 << 30);
    }

    #[test]
    fn no_energy_counter_no_energy_and_a_counter_going_back_counts_zero() {
        let mut no_counter = reading(100, 450, 50, 1);
        no_counter.energy_total_mj = None;
        let totals = sum_cards(&[card(0, Some(&no_counter))]);
        assert_eq!(totals.energy_since_open_mj, None);

        let mut reset = reading(100, 450, 50, 1);
        reset.energy_total_mj = Some(5);
        let totals = sum_cards(&[card(0, Some(&reset))]);
        assert_eq!(totals.energy_since_open_mj, Some(0));
        assert_eq!(sum_cards(&[]), BoxTotals::default());
    }

    #[test]
    fn the_first_of_equally_hot_cards_is_the_hottest() {
        let a = reading(1, 1, 70, 0);
        let b = reading(1, 1, 70, 0);
        let totals = sum_cards(&[card(4, Some(&a)), card(5, Some(&b))]);
        assert_eq!(totals.hottest.map(|hottest| hottest.gpu_index), Some(4));
    }
}
