//! The last link test in the Box view: each card's link reached against its maximum, its host
//! copies and its copies to the other cards in the table (wrong data said loudly), the test's
//! sentences below it.

use eframe::egui::{self, RichText};

use super::cells::{Cell, Tone, drawable};
use super::columns::Table;
use crate::ui::style::ERROR_TEXT;
use gputune_formats::reports::links::{
    CardLinks, CopyPath, CopyResult, LinkVerdict, LinksOutcome, LinksReport, PairLinks, Topology,
};

fn tone(verdict: LinkVerdict) -> Tone {
    match verdict {
        LinkVerdict::Good => Tone::Good,
        LinkVerdict::Slow => Tone::Warning,
        LinkVerdict::WrongData => Tone::Bad,
        LinkVerdict::NotTested => Tone::Plain,
    }
}

/// The link reached under the copies against its maximum: "Gen 4 x8 of 4 x16".
pub fn reached(card: &CardLinks) -> Cell {
    let text = match (card.link_loaded, card.link_max) {
        (Some(loaded), Some(max)) => {
            format!("{} of {} x{}", loaded.describe(), max.generation, max.width)
        }
        (Some(loaded), None) => loaded.describe(),
        _ => card.verdict.word().to_string(),
    };
    let tone = match card.verdict {
        // The copies were right; the verdict's slowness may be the link's.
        LinkVerdict::Slow | LinkVerdict::Good => match (card.link_loaded, card.link_max) {
            (Some(loaded), Some(max)) if loaded != max => Tone::Warning,
            _ => Tone::Good,
        },
        verdict => tone(verdict),
    };
    Cell {
        text,
        tone,
        hover: Some(drawable(&card.note)),
    }
}

fn gb_per_s(copy: Option<&CopyResult>) -> String {
    copy.map_or_else(|| "—".to_string(), |copy| format!("{:.1}", copy.gb_per_s))
}

fn copy_line(name: &str, copy: Option<&CopyResult>) -> String {
    match copy {
        None => format!("{name}: not copied"),
        Some(copy) => {
            let expected = copy
                .expected_gb_per_s
                .map_or_else(String::new, |gb| format!(" (should give {gb:.1})"));
            let wrong = if copy.wrong_words > 0 {
                format!(
                    ", {} words WRONG from byte {}",
                    copy.wrong_words,
                    copy.first_wrong_offset_bytes.unwrap_or(0)
                )
            } else {
                ", every word right".to_string()
            };
            format!("{name}: {:.1} GB/s{expected}{wrong}", copy.gb_per_s)
        }
    }
}

/// Host to card and back, GB/s: "24.6 / 25.1 GB/s"; wrong data loudly.
pub fn host_copies(card: &CardLinks) -> Cell {
    let hover = format!(
        "{}\n{}",
        copy_line("Host → card", card.host_to_device.as_ref()),
        copy_line("Card → host", card.device_to_host.as_ref())
    );
    let text = if card.verdict == LinkVerdict::WrongData {
        "WRONG DATA".to_string()
    } else {
        format!(
            "{} / {} GB/s",
            gb_per_s(card.host_to_device.as_ref()),
            gb_per_s(card.device_to_host.as_ref())
        )
    };
    Cell {
        text,
        tone: tone(card.verdict),
        hover: Some(hover),
    }
}

/// The card's copies to every other card: the slowest rate and how they went ("P2P", "via
/// host"), wrong data loudly, every pair on hover.
pub fn to_other_cards(gpu_index: u32, pairs: &[PairLinks]) -> Cell {
    let from: Vec<&PairLinks> = pairs
        .iter()
        .filter(|pair| pair.from_gpu == gpu_index)
        .collect();
    if from.is_empty() {
        return Cell::plain("—");
    }
    let hover: Vec<String> = from.iter().map(|pair| pair_line(pair)).collect();
    let wrong: Vec<String> = from
        .iter()
        .filter(|pair| pair.verdict == LinkVerdict::WrongData)
        .map(|pair| pair.to_gpu.to_string())
        .collect();
    if !wrong.is_empty() {
        return Cell {
            text: format!("WRONG DATA to GPU {}", wrong.join(", ")),
            tone: Tone::Bad,
            hover: Some(hover.join("\n")),
        };
    }
    let slowest = from
        .iter()
        .filter_map(|pair| pair.copy.as_ref())
        .map(|copy| copy.gb_per_s)
        .fold(f64::INFINITY, f64::min);
    let peer = from.iter().all(|pair| {
        pair.copy
            .as_ref()
            .is_some_and(|copy| copy.path == CopyPath::PeerToPeer)
    });
    let worst = from
        .iter()
        .map(|pair| pair.verdict)
        .max_by_key(|verdict| match verdict {
            LinkVerdict::Good => 0,
            LinkVerdict::NotTested => 1,
            LinkVerdict::Slow => 2,
            LinkVerdict::WrongData => 3,
        })
        .unwrap_or(LinkVerdict::NotTested);
    let text = if slowest.is_finite() {
        format!(
            "{} ≥ {slowest:.1} GB/s",
            if peer { "P2P" } else { "via host" }
        )
    } else {
        worst.word().to_string()
    };
    Cell {
        text,
        tone: tone(worst),
        hover: Some(hover.join("\n")),
    }
}

/// "To GPU 5: PHB, P2P CNS/CNS, through the host: 12.3 GB/s (should give 13.0), every word
/// right".
fn pair_line(pair: &PairLinks) -> String {
    let topology = pair.topology.map_or("?", |topology| topology.short());
    let p2p = pair
        .p2p
        .map_or_else(|| "?".to_string(), |access| access.short());
    let path = match pair.copy.as_ref().map(|copy| copy.path) {
        Some(CopyPath::PeerToPeer) => "peer to peer",
        Some(CopyPath::ThroughHost) => "through the host",
        Some(CopyPath::Direct) => "direct",
        None => "not copied",
    };
    let copy = copy_line(path, pair.copy.as_ref());
    format!("To GPU {}: {topology}, P2P {p2p}, {copy}", pair.to_gpu)
}

/// The link test's rows in the table.
/// The cards this one is closest to, and how ("GPU 1 (PIX)", "GPUs 2, 3 (NODE)"): the ones a
/// job split over fewer cards should keep together; every other card's topology on hover.
pub fn nearest(gpu_index: u32, pairs: &[PairLinks]) -> Cell {
    let from_here: Vec<&PairLinks> = pairs
        .iter()
        .filter(|pair| pair.from_gpu == gpu_index && pair.topology.is_some())
        .collect();
    let Some(closest) = from_here.iter().filter_map(|pair| pair.topology).min() else {
        return Cell::plain("—");
    };
    let peers: Vec<String> = from_here
        .iter()
        .filter(|pair| pair.topology == Some(closest))
        .map(|pair| pair.to_gpu.to_string())
        .collect();
    let hover = from_here
        .iter()
        .map(|pair| {
            format!(
                "GPU {}: {}",
                pair.to_gpu,
                pair.topology.map_or("unknown", Topology::short)
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    Cell {
        text: format!(
            "GPU{} {} ({})",
            if peers.len() == 1 { "" } else { "s" },
            peers.join(", "),
            closest.short()
        ),
        tone: Tone::Plain,
        hover: Some(hover),
    }
}

pub fn links_rows(table: &mut Table<'_>, report: &LinksReport) {
    let card_of = |gpu_index: u32| report.gpus.iter().find(|card| card.gpu_index == gpu_index);
    table.row(
        "Nearest cards",
        "The cards it reaches through the fewest PCIe hops, as NVML reads the topology (PIX: one \
         switch, NODE: one CPU socket, SYS: across sockets); every card on hover",
        |gpu| nearest(gpu.info.identity.index, &report.pairs),
    );
    table.row(
        "Link tested",
        "The PCIe link read while the copies ran, of the most the card and slot allow",
        |gpu| card_of(gpu.info.identity.index).map_or_else(|| Cell::plain("—"), reached),
    );
    table.row(
        "Host copies",
        "Host → card / card → host, GB/s (pinned memory), each copy checked bit for bit",
        |gpu| card_of(gpu.info.identity.index).map_or_else(|| Cell::plain("—"), host_copies),
    );
    table.row(
        "To other cards",
        "Its copies to every other card: the slowest, and whether peer to peer or through the \
         host; every pair on hover",
        |gpu| to_other_cards(gpu.info.identity.index, &report.pairs),
    );
}

/// The link test's outcome and sentences; wrong data first and in red.
pub fn links_sentences_ui(ui: &mut egui::Ui, report: &LinksReport) {
    let heading = match report.outcome {
        LinksOutcome::AllRight => "Link test: every copy right".to_string(),
        LinksOutcome::WrongData => "Link test: a copy came back WRONG".to_string(),
        LinksOutcome::NotTested => "Link test: not everything could be tested".to_string(),
    };
    let heading = RichText::new(format!(
        "{heading} ({}, {} MiB × {}, {})",
        report.runtime,
        report.size_bytes >> 20,
        report.passes,
        gputune_formats::units::duration_s(report.ran_s)
    ))
    .strong();
    ui.label(if report.outcome == LinksOutcome::WrongData {
        heading.color(ERROR_TEXT)
    } else {
        heading
    });
    for sentence in &report.sentences {
        let text = RichText::new(drawable(sentence));
        let wrong = sentence.to_lowercase().contains("wrong");
        ui.label(if wrong { text.color(ERROR_TEXT) } else { text });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(from_gpu: u32, to_gpu: u32, topology: Option<Topology>) -> PairLinks {
        PairLinks {
            from_gpu,
            to_gpu,
            topology,
            p2p: None,
            copy: None,
            verdict: LinkVerdict::Good,
            note: String::new(),
        }
    }

    #[test]
    fn the_nearest_cards_are_those_at_the_closest_topology() {
        let pairs = [
            pair(0, 1, Some(Topology::SingleSwitch)),
            pair(0, 2, Some(Topology::NumaNode)),
            pair(0, 3, Some(Topology::NumaNode)),
            pair(0, 4, Some(Topology::System)),
            pair(2, 3, Some(Topology::SingleSwitch)),
            pair(4, 0, None),
        ];
        let cell = nearest(0, &pairs);
        assert_eq!(cell.text, "GPU 1 (PIX)");
        assert_eq!(
            cell.hover.as_deref(),
            Some("GPU 1: PIX\nGPU 2: NODE\nGPU 3: NODE\nGPU 4: SYS")
        );
        let without_ones_own = [
            pair(0, 2, Some(Topology::NumaNode)),
            pair(0, 3, Some(Topology::NumaNode)),
        ];
        assert_eq!(nearest(0, &without_ones_own).text, "GPUs 2, 3 (NODE)");
        assert_eq!(nearest(4, &pairs).text, "—", "no topology known");
    }
}
