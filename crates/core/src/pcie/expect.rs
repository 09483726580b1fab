//! What a link should give, and when a card or a pair falls short of it.

use gputune_formats::reports::links::{CopyResult, LinkVerdict, PcieLink};

/// The share of a link's raw rate a copy from pinned memory should reach: PCIe packets carry
/// 256-byte payloads behind about 24 bytes of header, framing and flow control (about 90 %
/// left), and the DMA engines and host memory take a little more. NVIDIA's bandwidthTest shows
/// 24-26.5 GB/s on Gen 4 x16 cards (RTX 4090, A100) of the 31.5 raw: 78-84 %. So Gen 4 x16
/// should give about 25 GB/s each way, Gen 3 x16 about 12.6, Gen 4 x8 about 12.6.
pub const PRACTICAL_SHARE: f64 = 0.8;

/// A copy below this share of what its link should give is slow.
pub const SLOW_BELOW: f64 = 0.75;

/// What host↔device copies should reach on `link`, GB/s.
pub fn host_gb_per_s(link: PcieLink) -> f64 {
    link.raw_gb_per_s() * PRACTICAL_SHARE
}

/// What a card-to-card copy should reach between cards whose best links are `a` and `b`:
/// peer to peer, the slower link's rate; through the host, the two copies one after the other
/// (down from one card, then up to the other), so about half of it.
pub fn pair_gb_per_s(a: PcieLink, b: PcieLink, peer: bool) -> f64 {
    let (first, second) = (host_gb_per_s(a), host_gb_per_s(b));
    if peer {
        first.min(second)
    } else if first > 0.0 && second > 0.0 {
        1.0 / (1.0 / first + 1.0 / second)
    } else {
        0.0
    }
}

/// Whether `result` reached what it should.
pub fn is_slow(result: &CopyResult) -> bool {
    result
        .expected_gb_per_s
        .is_some_and(|expected| result.gb_per_s < expected * SLOW_BELOW)
}

/// Whether a link runs below the best its card and slot can train to.
pub fn below_max(loaded: Option<PcieLink>, max: Option<PcieLink>) -> bool {
    match (loaded, max) {
        (Some(loaded), Some(max)) => loaded.generation < max.generation || loaded.width < max.width,
        _ => false,
    }
}

/// The better of two link readings (the faster one).
pub fn faster(a: Option<PcieLink>, b: Option<PcieLink>) -> Option<PcieLink> {
    match (a, b) {
        (Some(a), Some(b)) if b.raw_gb_per_s() > a.raw_gb_per_s() => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// The verdict of copies that all finished: wrong data first, then slow, else good.
pub fn verdict_of(results: &[&CopyResult], link_short: bool) -> LinkVerdict {
    if results.iter().any(|result| result.wrong_words > 0) {
        LinkVerdict::WrongData
    } else if link_short || results.iter().any(|result| is_slow(result)) {
        LinkVerdict::Slow
    } else {
        LinkVerdict::Good
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEN4_X16: PcieLink = PcieLink {
        generation: 4,
        width: 16,
    };
    const GEN4_X8: PcieLink = PcieLink {
        generation: 4,
        width: 8,
    };

    #[test]
    fn gen_4_x16_should_give_about_25_gb_per_s_and_half_through_the_host() {
        assert!((host_gb_per_s(GEN4_X16) - 25.2).abs() < 0.1);
        assert!((pair_gb_per_s(GEN4_X16, GEN4_X16, true) - 25.2).abs() < 0.1);
        assert!((pair_gb_per_s(GEN4_X16, GEN4_X16, false) - 12.6).abs() < 0.1);
        // An x8 card is the pair's slower link.
        assert!((pair_gb_per_s(GEN4_X16, GEN4_X8, true) - 12.6).abs() < 0.1);
        assert!(below_max(Some(GEN4_X8), Some(GEN4_X16)));
        assert!(!below_max(Some(GEN4_X16), Some(GEN4_X16)));
        assert_eq!(faster(Some(GEN4_X8), Some(GEN4_X16)), Some(GEN4_X16));
        assert_eq!(faster(None, Some(GEN4_X8)), Some(GEN4_X8));
    }
}
