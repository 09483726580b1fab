//! A ranking's options, checked before anything runs.

/// The together phase's length by default: five minutes. A card's temperature rises with a time
/// constant of one to two minutes under load (the simulated 4090 in the hot slot: 86 °C after
/// 5 min, 83 °C after 2 from rest), so a shorter phase ends before a hot slot throttles.
pub const DEFAULT_TOGETHER_S: f64 = 300.0;
/// Each card's phase alone lasts at most this long: enough for hundreds of GEMM batches, and
/// short enough that the card stays cool, so what sets it apart is its silicon, not heat.
pub const LONGEST_ALONE_S: f64 = 30.0;
/// The shortest together phase accepted (each card alone half of it).
pub const SHORTEST_TOGETHER_S: f64 = 1.0;
/// An hour together is longer than any ranking needs.
pub const LONGEST_TOGETHER_S: f64 = 3_600.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankOptions {
    /// Seconds of load on each card alone: half the together phase, at most 30 s.
    pub alone_s: f64,
    /// Seconds of load on every card at once.
    pub together_s: f64,
    /// Rank beside other programs computing, and cards at different settings.
    pub force: bool,
}

impl RankOptions {
    /// Options for a together phase of `together_s` (each card alone for half of it, at most
    /// 30 s).
    pub fn new(together_s: f64, force: bool) -> Result<RankOptions, String> {
        if !together_s.is_finite()
            || !(SHORTEST_TOGETHER_S..=LONGEST_TOGETHER_S).contains(&together_s)
        {
            return Err(format!(
                "--duration-s {together_s}: give {SHORTEST_TOGETHER_S} to {LONGEST_TOGETHER_S} seconds of load together ({DEFAULT_TOGETHER_S}, the default, lets heat show; each card runs alone first for half of it, at most {LONGEST_ALONE_S})."
            ));
        }
        Ok(RankOptions {
            alone_s: (together_s / 2.0).min(LONGEST_ALONE_S),
            together_s,
            force,
        })
    }

    /// Seconds of load the whole ranking of `cards` cards takes (preparing aside).
    pub fn total_s(&self, cards: usize) -> f64 {
        self.alone_s * cards as f64 + self.together_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_card_runs_alone_for_half_the_together_phase_at_most_30_s_and_absurd_lengths_are_refused()
     {
        let options = RankOptions::new(DEFAULT_TOGETHER_S, false).expect("options");
        assert_eq!(options.alone_s, 30.0);
        assert_eq!(options.total_s(8), 540.0);
        assert_eq!(RankOptions::new(2.0, false).map(|o| o.alone_s), Ok(1.0));
        for bad in [0.5, -1.0, f64::NAN, f64::INFINITY, 1e6] {
            let error = RankOptions::new(bad, false).err();
            assert!(
                error.as_deref().is_some_and(|e| e.contains("1 to 3600")),
                "{bad}: {error:?}"
            );
        }
    }
}
