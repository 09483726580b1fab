//! The 8-GPU box's power supply: a power limit caps each card's *average*, but in the first
//! milliseconds of a burst a card draws more (an RTX 4090 at 450 W spikes to about 560 W at its
//! top clocks), and when every card's bursts begin together the spikes add up. The simulated
//! supply is rated 4,200 W: eight cards at full load (about 3,560 W) stay under it, and so does
//! any one card's pulses, but eight cards pulsing in phase at 2,685 MHz ask 4,480 W for a few
//! milliseconds and trip its over-current protection: the machine goes down (every card lost)
//! until it is rebooted. A spike grows about as the cube of the clock (the voltage rises with
//! the clock), so a clock cap lowers it: at 2,625 MHz and below, the box stays up.
//!
//! [`SupplyWatch`] sees the bursts where they are made (the simulated compute devices of a box
//! check, `stability::simulated`) and says when they trip it; [`super::SimMachine::go_down`] is
//! the machine going down, which the simulator and the fake library answer as every GPU lost.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::SimScenario;

/// Bursts that begin this close together draw their spikes at once.
const IN_PHASE_WITHIN: Duration = Duration::from_millis(2);

/// A power supply and what the cards ask of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SupplyModel {
    /// What it gives before its over-current protection trips, W.
    pub rating_w: f64,
    /// A card's spike at the start of a burst at `spike_clock_mhz`, W.
    pub spike_w: f64,
    pub spike_clock_mhz: u32,
    /// A card not starting a burst just then (between bursts, or in one), on average, W.
    pub other_card_w: f64,
}

impl SupplyModel {
    /// The supply of `scenario`'s box: only the 8-GPU box has one that can trip.
    pub fn of(scenario: SimScenario) -> Option<SupplyModel> {
        (scenario == SimScenario::EightRtx4090).then_some(SupplyModel {
            rating_w: 4200.0,
            spike_w: 560.0,
            spike_clock_mhz: 2685,
            other_card_w: 250.0,
        })
    }

    /// A card's spike at the start of a burst at `clock_mhz`: about the cube of the clock.
    pub fn spike_at_w(&self, clock_mhz: u32) -> f64 {
        let ratio = f64::from(clock_mhz) / f64::from(self.spike_clock_mhz.max(1));
        self.spike_w * ratio.powi(3)
    }

    /// What the supply is asked for when the cards at `in_phase_clocks_mhz` begin a burst
    /// together and `others` cards do not.
    pub fn demand_w(&self, in_phase_clocks_mhz: &[u32], others: usize) -> f64 {
        let spikes: f64 = in_phase_clocks_mhz
            .iter()
            .map(|clock| self.spike_at_w(*clock))
            .sum();
        spikes + self.other_card_w * others as f64
    }
}

/// Why the supply tripped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trip {
    pub demand_w: f64,
    pub rating_w: f64,
    pub cards_in_phase: usize,
    pub clock_max_mhz: u32,
}

impl Trip {
    /// "4,480 W asked of a 4,200 W supply by 8 cards starting their bursts together".
    pub fn describe(&self) -> String {
        format!(
            "the simulated power supply tripped: {:.0} W asked of its {:.0} W by {} card{} starting their bursts together at up to {} MHz",
            self.demand_w,
            self.rating_w,
            self.cards_in_phase,
            if self.cards_in_phase == 1 { "" } else { "s" },
            self.clock_max_mhz
        )
    }
}

/// The bursts of one box's cards, and whether they tripped its supply. Shared by the cards'
/// devices (one per card, each on its own thread).
#[derive(Debug)]
pub struct SupplyWatch {
    model: SupplyModel,
    state: Mutex<WatchState>,
}

#[derive(Debug)]
struct WatchState {
    /// Per card, when its last burst began and at what clock.
    last_burst: Vec<Option<(Instant, u32)>>,
    tripped: Option<Trip>,
}

impl SupplyWatch {
    pub fn new(model: SupplyModel, cards: usize) -> SupplyWatch {
        SupplyWatch {
            model,
            state: Mutex::new(WatchState {
                last_burst: vec![None; cards],
                tripped: None,
            }),
        }
    }

    /// Card `card` began a burst `at` its clock `clock_mhz`; the trip, if it tripped the
    /// supply (now or before).
    pub fn burst_began(&self, card: usize, at: Instant, clock_mhz: u32) -> Option<Trip> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.tripped.is_some() {
            return state.tripped;
        }
        if let Some(slot) = state.last_burst.get_mut(card) {
            *slot = Some((at, clock_mhz));
        }
        let in_phase: Vec<u32> = state
            .last_burst
            .iter()
            .flatten()
            .filter(|(began, _)| at.max(*began) - at.min(*began) <= IN_PHASE_WITHIN)
            .map(|(_, clock)| *clock)
            .collect();
        let others = state.last_burst.len() - in_phase.len();
        let demand_w = self.model.demand_w(&in_phase, others);
        if demand_w > self.model.rating_w {
            state.tripped = Some(Trip {
                demand_w,
                rating_w: self.model.rating_w,
                cards_in_phase: in_phase.len(),
                clock_max_mhz: in_phase.iter().copied().max().unwrap_or(clock_mhz),
            });
        }
        state.tripped
    }

    pub fn tripped(&self) -> Option<Trip> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tripped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> SupplyModel {
        SupplyModel::of(SimScenario::EightRtx4090).unwrap()
    }

    #[test]
    fn eight_cards_in_phase_trip_it_at_high_clocks_and_not_under_a_cap() {
        let at = Instant::now();
        let watch = SupplyWatch::new(model(), 8);
        for card in 0..7 {
            assert_eq!(watch.burst_began(card, at, 2685), None, "card {card}");
        }
        let trip = watch
            .burst_began(7, at, 2685)
            .expect("eight in phase trip it");
        assert_eq!(trip.cards_in_phase, 8);
        assert!(trip.demand_w > 4400.0, "{trip:?}");
        assert!(watch.tripped().is_some());
        let capped = SupplyWatch::new(model(), 8);
        for card in 0..8 {
            assert_eq!(
                capped.burst_began(card, at, 2595),
                None,
                "a cap keeps it up"
            );
        }
    }

    #[test]
    fn bursts_out_of_phase_and_full_load_stay_under_the_rating() {
        let start = Instant::now();
        let watch = SupplyWatch::new(model(), 8);
        for card in 0..8 {
            let at = start + Duration::from_millis(5 * card as u64);
            assert_eq!(watch.burst_began(card, at, 2745), None, "card {card}");
        }
        // Full load: eight cards at about 445 W.
        assert!(8.0 * 445.0 < model().rating_w);
        assert!(SupplyModel::of(SimScenario::Rtx4090).is_none());
    }
}
