//! What the copy test found, in words: a short note per card and pair, and the sentences that
//! say what it means for a data-parallel job (the CLI and the window say the same).

use super::expect::{below_max, is_slow};
use gputune_formats::reports::links::{
    CardLinks, CopyPath, CopyResult, LinkVerdict, P2pStatus, PairLinks, Topology,
};

/// "wrong data host→device at byte 4096", "at Gen 4 x8 of Gen 4 x16", "as it should".
pub fn card_note(card: &CardLinks) -> String {
    let directions = [
        ("host→device", &card.host_to_device),
        ("device→host", &card.device_to_host),
    ];
    for (direction, result) in directions {
        if let Some(result) = result.as_ref().filter(|result| result.wrong_words > 0) {
            return format!("wrong data {direction}{}", at_byte(result));
        }
    }
    if below_max(card.link_loaded, card.link_max)
        && let (Some(loaded), Some(max)) = (card.link_loaded, card.link_max)
    {
        return format!("at {} of {}", loaded.describe(), max.describe());
    }
    for (direction, result) in directions {
        if let Some(result) = result.as_ref().filter(|result| is_slow(result)) {
            return format!("{direction} {}", rate_against(result));
        }
    }
    "as it should".to_string()
}

/// "wrong data at byte 4096", "8.7 of 12.6 GB/s expected: GPU 5 at Gen 4 x8", "as it
/// should"; `cards` say which of the two runs below its best link.
pub fn pair_note(pair: &PairLinks, cards: &[CardLinks]) -> String {
    let narrow = cards
        .iter()
        .filter(|card| card.gpu_index == pair.from_gpu || card.gpu_index == pair.to_gpu)
        .find(|card| below_max(card.link_loaded, card.link_max))
        .and_then(|card| {
            Some(format!(
                ": GPU {} at {}",
                card.gpu_index,
                card.link_loaded?.describe()
            ))
        })
        .unwrap_or_default();
    match &pair.copy {
        Some(result) if result.wrong_words > 0 => format!("wrong data{}", at_byte(result)),
        Some(result) if is_slow(result) => format!("{}{narrow}", rate_against(result)),
        Some(_) => "as it should".to_string(),
        None => pair.note.clone(),
    }
}

fn at_byte(result: &CopyResult) -> String {
    result
        .first_wrong_offset_bytes
        .map(|offset| format!(" at byte {offset}"))
        .unwrap_or_default()
}

fn rate_against(result: &CopyResult) -> String {
    match result.expected_gb_per_s {
        Some(expected) => format!("{:.1} of {expected:.1} GB/s expected", result.gb_per_s),
        None => format!("{:.1} GB/s", result.gb_per_s),
    }
}

fn path_words(path: CopyPath) -> &'static str {
    match path {
        CopyPath::Direct => "direct",
        CopyPath::PeerToPeer => "peer to peer",
        CopyPath::ThroughHost => "through the host",
    }
}

/// "half", "a quarter", "60 %": how fast a link is against another.
fn share_words(share: f64) -> String {
    if (share - 0.5).abs() < 0.05 {
        "about half as fast".to_string()
    } else if (share - 0.25).abs() < 0.04 {
        "about a quarter as fast".to_string()
    } else {
        format!("{:.0} % as fast", share * 100.0)
    }
}

/// The sentences, the loudest first: wrong data, then slow links, then P2P and topology.
pub fn say(cards: &[CardLinks], pairs: &[PairLinks]) -> Vec<String> {
    let mut said = Vec::new();
    for card in cards
        .iter()
        .filter(|card| card.verdict == LinkVerdict::WrongData)
    {
        said.push(format!(
            "WRONG DATA: GPU {}'s copies came back wrong ({}). A card whose copies are wrong \
             corrupts training silently: reseat it, check its riser and slot, and do not train \
             on it until this test passes.",
            card.gpu_index, card.note
        ));
    }
    for pair in pairs
        .iter()
        .filter(|pair| pair.verdict == LinkVerdict::WrongData)
    {
        let path = pair
            .copy
            .as_ref()
            .map_or(CopyPath::ThroughHost, |copy| copy.path);
        let advice = if path == CopyPath::PeerToPeer {
            "patched P2P drivers do this: go back to the stock driver, or turn P2P off \
             (NCCL_P2P_DISABLE=1) and test again"
        } else {
            "check both cards' slots and risers, and test again"
        };
        said.push(format!(
            "WRONG DATA: copies from GPU {} to GPU {} ({}) came back wrong ({}): gradients \
             exchanged this way would be corrupt; {advice}.",
            pair.from_gpu,
            pair.to_gpu,
            path_words(path),
            pair.note
        ));
    }
    said.extend(slow_cards(cards));
    said.extend(p2p_and_topology(pairs));
    for card in cards
        .iter()
        .filter(|card| card.verdict == LinkVerdict::NotTested)
    {
        said.push(format!(
            "GPU {} was not tested: {}",
            card.gpu_index, card.note
        ));
    }
    let untested: Vec<&PairLinks> = pairs
        .iter()
        .filter(|pair| pair.verdict == LinkVerdict::NotTested)
        .collect();
    if let Some(first) = untested.first() {
        said.push(format!(
            "{} of {} pairs were not tested (GPU {} → GPU {}: {})",
            untested.len(),
            pairs.len(),
            first.from_gpu,
            first.to_gpu,
            first.note
        ));
    }
    if !cards.is_empty()
        && cards.iter().all(|card| card.verdict == LinkVerdict::Good)
        && pairs.iter().all(|pair| pair.verdict == LinkVerdict::Good)
    {
        said.push(format!(
            "Every copy came back right and every link runs as it should ({} cards, {} pairs).",
            cards.len(),
            pairs.len()
        ));
    }
    said
}

/// A card whose link runs below its best, or whose copies fall short: the job waits for it.
fn slow_cards(cards: &[CardLinks]) -> Vec<String> {
    let best = cards
        .iter()
        .filter_map(|card| card.link_loaded)
        .map(|link| link.raw_gb_per_s())
        .fold(0.0, f64::max);
    let mut said = Vec::new();
    for card in cards
        .iter()
        .filter(|card| card.verdict == LinkVerdict::Slow)
    {
        let gpu = card.gpu_index;
        let Some(loaded) = card.link_loaded else {
            continue;
        };
        let max = card.link_max.unwrap_or(loaded);
        let share = if best > 0.0 {
            loaded.raw_gb_per_s() / best
        } else {
            1.0
        };
        let sentence = if loaded.width < max.width {
            format!(
                "GPU {gpu} is at x{} (of x{}): its all-reduce is {} as the others', and in a \
                 data-parallel job every step waits for it; move it to an x{} slot, or check \
                 the riser and the BIOS's lane split.",
                loaded.width,
                max.width,
                share_words(share),
                max.width
            )
        } else if loaded.generation < max.generation {
            format!(
                "GPU {gpu} reached only Gen {} under load (Gen {} possible): its all-reduce is \
                 {} as the others'; check the BIOS's PCIe speed setting and the riser.",
                loaded.generation,
                max.generation,
                share_words(share)
            )
        } else {
            format!(
                "GPU {gpu} copies slower than its {} link should ({}): check the slot, the \
                 riser and what else uses the bus.",
                loaded.describe(),
                card.note
            )
        };
        said.push(sentence);
    }
    said
}

/// "the 16 pairs across the CPU sockets", "0-4, 1-4", "0-4, 0-5, … and 9 more" (each pair
/// once, whichever way).
fn which_pairs(pairs: &[&PairLinks]) -> String {
    let once: Vec<String> = pairs
        .iter()
        .filter(|pair| pair.from_gpu < pair.to_gpu)
        .map(|pair| format!("{}-{}", pair.from_gpu, pair.to_gpu))
        .collect();
    if pairs
        .iter()
        .all(|pair| pair.topology == Some(Topology::System))
    {
        return format!("the {} pairs across the CPU sockets", once.len());
    }
    const LISTED: usize = 6;
    if once.len() <= LISTED {
        return once.join(", ");
    }
    format!(
        "{} and {} more",
        once[..LISTED].join(", "),
        once.len() - LISTED
    )
}

/// What P2P and the topology mean for gradients between the cards.
fn p2p_and_topology(pairs: &[PairLinks]) -> Vec<String> {
    let mut said = Vec::new();
    let known: Vec<&PairLinks> = pairs.iter().filter(|pair| pair.p2p.is_some()).collect();
    let through_host: Vec<&PairLinks> = pairs
        .iter()
        .filter(|pair| {
            pair.copy
                .as_ref()
                .is_some_and(|copy| copy.path == CopyPath::ThroughHost)
        })
        .collect();
    let rate = |pairs: &[&PairLinks]| {
        let rates: Vec<f64> = pairs
            .iter()
            .filter_map(|pair| pair.copy.as_ref().map(|copy| copy.gb_per_s))
            .collect();
        let low = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let high = rates.iter().copied().fold(0.0, f64::max);
        if rates.is_empty() {
            String::new()
        } else if high - low < 0.5 {
            format!(", {low:.1} GB/s card to card here")
        } else {
            format!(", {low:.1}-{high:.1} GB/s card to card here")
        }
    };
    if !known.is_empty()
        && known
            .iter()
            .all(|pair| pair.p2p.is_some_and(|p2p| !p2p.enabled()))
    {
        let stock = known.iter().all(|pair| {
            pair.p2p
                .is_some_and(|p2p| p2p.read == P2pStatus::ChipsetNotSupported)
        });
        said.push(format!(
            "P2P is off{}: gradients go through the host (down to host memory and up to the \
             other card{}).",
            if stock {
                " (CNS: the stock driver gives GeForce cards no P2P)"
            } else {
                ""
            },
            rate(&through_host)
        ));
    } else if !through_host.is_empty() && through_host.len() < pairs.len() {
        said.push(format!(
            "P2P is on between the other cards; {} go through the host{}.",
            which_pairs(&through_host),
            rate(&through_host)
        ));
    }
    if pairs
        .iter()
        .any(|pair| pair.topology == Some(Topology::System))
    {
        said.push(
            "Some pairs cross the CPU sockets (SYS): their traffic also crosses the link between \
             the sockets; a job that fits on the cards of one socket runs its all-reduce there."
                .to_string(),
        );
    }
    said
}
