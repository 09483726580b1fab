//! What the Box view says about the box as a whole from the readings alone: a card much hotter
//! than the others (a hot slot, worse when it slows down for heat) and a link below its
//! maximum under load. A data-parallel job waits for its slowest card every step, so one such
//! card slows the whole box. Pure: readings in, sentences out.

use super::cells::{busy, link_share, thermal_throttling};
use gputune_formats::card::Telemetry;

/// A card this much hotter than the others' middle temperature is in a hot slot.
pub const HOT_SLOT_C: u32 = 8;

/// One card's reading as the findings need it.
#[derive(Debug, Clone, Copy)]
pub struct CardReading<'a> {
    pub gpu_index: u32,
    pub reading: &'a Telemetry,
}

/// What is worth saying about the box, one sentence per finding, the worst first.
pub fn findings(cards: &[CardReading<'_>]) -> Vec<String> {
    let mut said = hot_slots(cards);
    said.extend(narrow_links(cards));
    said
}

/// The median of the other cards' temperatures; `None` with no other reading.
fn others_median_c(cards: &[CardReading<'_>], gpu_index: u32) -> Option<u32> {
    let mut others: Vec<u32> = cards
        .iter()
        .filter(|card| card.gpu_index != gpu_index)
        .filter_map(|card| card.reading.temperature_c)
        .collect();
    others.sort_unstable();
    let middle = others.len() / 2;
    match others.len() {
        0 => None,
        n if n % 2 == 1 => Some(others[middle]),
        _ => Some((others[middle - 1] + others[middle]) / 2),
    }
}

fn hot_slots(cards: &[CardReading<'_>]) -> Vec<String> {
    let mut hot: Vec<(u32, String)> = cards
        .iter()
        .filter_map(|card| {
            let temperature_c = card.reading.temperature_c?;
            let median_c = others_median_c(cards, card.gpu_index)?;
            let hotter_c = temperature_c.checked_sub(median_c)?;
            (hotter_c >= HOT_SLOT_C).then(|| {
                let throttling = if thermal_throttling(card.reading.throttle_reasons) {
                    " and slows down for heat: a hot slot. The whole job waits for it every \
                     step; more air, or a lower power limit on this card, evens the box"
                } else {
                    ": a hot slot, if it stays so under load"
                };
                (
                    hotter_c,
                    format!(
                        "GPU {} runs {hotter_c} °C hotter than the others ({temperature_c} °C \
                         against {median_c} °C){throttling}.",
                        card.gpu_index
                    ),
                )
            })
        })
        .collect();
    hot.sort_by_key(|hot| std::cmp::Reverse(hot.0));
    hot.into_iter().map(|(_, sentence)| sentence).collect()
}

fn narrow_links(cards: &[CardReading<'_>]) -> Vec<String> {
    cards
        .iter()
        .filter(|card| busy(card.reading))
        .filter_map(|card| {
            let share = link_share(card.reading).filter(|share| *share < 1.0)?;
            let reading = card.reading;
            Some(format!(
                "GPU {}'s link runs at Gen {} x{} under load, of Gen {} x{}: {:.0} % of the \
                 bandwidth, so its share of the all-reduce is that much slower.",
                card.gpu_index,
                reading.pcie_link_gen?,
                reading.pcie_link_width?,
                reading.pcie_link_gen_max?,
                reading.pcie_link_width_max?,
                share * 100.0
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::throttle::ThrottleReason;

    fn busy_card(temperature_c: u32) -> Telemetry {
        Telemetry {
            temperature_c: Some(temperature_c),
            utilization_gpu_pct: Some(99),
            pcie_link_gen: Some(4),
            pcie_link_width: Some(16),
            pcie_link_gen_max: Some(4),
            pcie_link_width_max: Some(16),
            ..Telemetry::default()
        }
    }

    fn cards(readings: &[Telemetry]) -> Vec<CardReading<'_>> {
        (0u32..)
            .zip(readings)
            .map(|(gpu_index, reading)| CardReading { gpu_index, reading })
            .collect()
    }

    #[test]
    fn a_card_twelve_degrees_hotter_and_throttling_is_a_hot_slot() {
        let mut readings: Vec<Telemetry> = [72, 73, 74, 86, 75, 74, 73, 72]
            .into_iter()
            .map(busy_card)
            .collect();
        readings[3].throttle_reasons =
            Some([ThrottleReason::SwThermalSlowdown].into_iter().collect());
        let said = findings(&cards(&readings));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].starts_with("GPU 3 runs 13 °C hotter"), "{said:?}");
        assert!(said[0].contains("slows down for heat"), "{said:?}");
    }

    #[test]
    fn an_even_box_says_nothing_and_two_cards_compare_with_each_other() {
        let even: Vec<Telemetry> = [70, 74, 77, 72].into_iter().map(busy_card).collect();
        assert!(findings(&cards(&even)).is_empty());
        let pair: Vec<Telemetry> = [70, 80].into_iter().map(busy_card).collect();
        let said = findings(&cards(&pair));
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("if it stays so under load"), "{said:?}");
        assert!(findings(&cards(&[busy_card(90)])).is_empty());
    }

    #[test]
    fn a_link_below_its_maximum_counts_only_under_load() {
        let mut readings: Vec<Telemetry> = [70, 70, 70].into_iter().map(busy_card).collect();
        readings[1].pcie_link_width = Some(8);
        let said = findings(&cards(&readings));
        assert_eq!(said.len(), 1);
        assert!(
            said[0].starts_with("GPU 1's link runs at Gen 4 x8"),
            "{said:?}"
        );
        assert!(said[0].contains("50 %"), "{said:?}");
        readings[1].utilization_gpu_pct = Some(0);
        readings[2].pcie_link_gen = Some(1);
        readings[2].utilization_gpu_pct = Some(0);
        assert!(findings(&cards(&readings)).is_empty());
    }
}
