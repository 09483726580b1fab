//! A ranking's options, checked before anything runs.

/// The together phase's length by default: two minutes, long enough for a card's temperature
/// (time constant about 90 s under load) to show most of its rise and a hot slot to throttle.
pub const DEFAULT_TOGETHER_S: f64 = 120.0;
/// The shortest together phase accepted (each card alone half of it).
pub const SHORTEST_TOGETHER_S: f64 = 1.0;
/// An hour together is longer than any ranking needs.
pub const LONGEST_TOGETHER_S: f64 = 3_600.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankOptions {
    /// Seconds of load on each card alone: half the together phase.
    pub alone_s: f64,
    /// Seconds of load on every card at once.
    pub together_s: f64,
    /// Rank beside other programs computing, and cards at different settings.
    pub force: bool,
}

impl RankOptions {
    /// Options for a together phase of `together_s` (each card alone for half of it).
    pub fn new(together_s: f64, force: bool) -> Result<RankOptions, String> {
        if !together_s.is_finite()
            || !(SHORTEST_TOGETHER_S..=LONGEST_TOGETHER_S).contains(&together_s)
        {
            return Err(format!(
                "--duration-s {together_s}: give {SHORTEST_TOGETHER_S} to {LONGEST_TOGETHER_S} seconds of load together ({DEFAULT_TOGETHER_S}, the default, lets heat show; each card runs alone for half of it)."
            ));
        }
        Ok(RankOptions {
            alone_s: together_s / 2.0,
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
    fn each_card_runs_alone_for_half_the_together_phase_and_absurd_lengths_are_refused() {
        let options = RankOptions::new(120.0, false).expect("options");
        assert_eq!(options.alone_s, 60.0);
        assert_eq!(options.total_s(8), 600.0);
        for bad in [0.5, -1.0, f64::NAN, f64::INFINITY, 1e6] {
            let error = RankOptions::new(bad, false).err();
            assert!(
                error.as_deref().is_some_and(|e| e.contains("1 to 3600")),
                "{bad}: {error:?}"
            );
        }
    }
}
