//! `gputune links`'s table: a line per card, a line per ordered pair, then the sentences.

use std::io::Write;

use gputune_formats::reports::links::{
    CardLinks, CopyPath, CopyResult, LinkVerdict, LinksReport, PairLinks, PcieLink,
};

/// Prints the report for people.
pub fn print(out: &mut dyn Write, report: &LinksReport) -> std::io::Result<()> {
    if !report.gpus.is_empty() {
        writeln!(
            out,
            "Links of {} GPU{} ({}; {} MiB copies, {} each way, each checked bit for bit; rates are measured / expected)",
            report.gpus.len(),
            if report.gpus.len() == 1 { "" } else { "s" },
            report.runtime,
            report.size_bytes >> 20,
            report.passes
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<4} {:<10} {:<11} {:<10} {:<20} {:<20} Verdict",
            "GPU", "Idle", "Under load", "Max", "Host→device", "Device→host"
        )?;
        for card in &report.gpus {
            card_line(out, card)?;
        }
    }
    if !report.pairs.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{:<8} {:<9} {:<9} {:<20} {:<13} Verdict",
            "Pair", "Topology", "P2P r/w", "Card to card", "Path"
        )?;
        for pair in &report.pairs {
            pair_line(out, pair)?;
        }
    }
    if !report.gpus.is_empty() || !report.pairs.is_empty() {
        writeln!(out)?;
    }
    for sentence in &report.sentences {
        writeln!(out, "{sentence}")?;
    }
    Ok(())
}

fn link(link: Option<PcieLink>) -> String {
    link.map_or_else(|| "n/a".to_string(), PcieLink::describe)
}

/// "26.1 / 25.2 GB/s": measured against expected.
fn rate(result: &Option<CopyResult>) -> String {
    match result {
        Some(result) => match result.expected_gb_per_s {
            Some(expected) => format!("{:.1} / {expected:.1} GB/s", result.gb_per_s),
            None => format!("{:.1} GB/s", result.gb_per_s),
        },
        None => "-".to_string(),
    }
}

/// "good", "slow: at Gen 4 x8 of Gen 4 x16".
fn verdict(verdict: LinkVerdict, note: &str) -> String {
    if verdict == LinkVerdict::Good {
        verdict.word().to_string()
    } else {
        format!("{}: {note}", verdict.word())
    }
}

fn card_line(out: &mut dyn Write, card: &CardLinks) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<4} {:<10} {:<11} {:<10} {:<20} {:<20} {}",
        card.gpu_index,
        link(card.link_idle),
        link(card.link_loaded),
        link(card.link_max),
        rate(&card.host_to_device),
        rate(&card.device_to_host),
        verdict(card.verdict, &card.note)
    )
}

fn pair_line(out: &mut dyn Write, pair: &PairLinks) -> std::io::Result<()> {
    let path = match pair.copy.as_ref().map(|copy| copy.path) {
        Some(CopyPath::PeerToPeer) => "peer to peer",
        Some(CopyPath::ThroughHost) => "through host",
        Some(CopyPath::Direct) => "direct",
        None => "-",
    };
    writeln!(
        out,
        "{:<8} {:<9} {:<9} {:<20} {:<13} {}",
        format!("{} → {}", pair.from_gpu, pair.to_gpu),
        pair.topology.map_or("n/a", |topology| topology.short()),
        pair.p2p
            .map_or_else(|| "n/a".to_string(), |p2p| p2p.short()),
        rate(&pair.copy),
        path,
        verdict(pair.verdict, &pair.note)
    )
}
