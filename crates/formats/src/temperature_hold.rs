//! A temperature hold: keep a card at or below a temperature by moving its power limit within
//! bounds the user sets. What a client asks ([`TemperatureHold`], checked against the card by
//! [`TemperatureHold::check`]) and what every client is shown ([`TemperatureHoldStatus`]). The
//! engine keeps it (`tuning::engine::temperature_hold`); the control itself is
//! `tuning::temperature_control`.

use serde::{Deserialize, Serialize};

use super::card::Constraints;
use super::units::{power_limit_range, watts_exact};

/// The lowest temperature a hold may aim at: a working card runs warmer than this, so a hold
/// below it would sit at its floor for good.
pub const LOWEST_HOLD_C: u32 = 40;
/// The highest, on a card that does not say its slowdown temperature.
pub const HIGHEST_HOLD_C: u32 = 100;

/// Keep the card at or below `max_temperature_c` by moving its power limit within
/// `min_power_limit_mw..=max_power_limit_mw` (both inside the card's own range).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemperatureHold {
    pub max_temperature_c: u32,
    pub min_power_limit_mw: u32,
    pub max_power_limit_mw: u32,
}

impl TemperatureHold {
    /// Why this hold cannot run on a card with `constraints`, in one sentence that says what to
    /// ask instead; `Ok` when it can.
    pub fn check(&self, constraints: &Constraints) -> Result<(), String> {
        let highest_c = constraints
            .slowdown_temperature_c
            .map_or(HIGHEST_HOLD_C, |slowdown_c| {
                slowdown_c.saturating_sub(1).min(HIGHEST_HOLD_C)
            });
        if !(LOWEST_HOLD_C..=highest_c).contains(&self.max_temperature_c) {
            return Err(format!(
                "A temperature hold of {} °C is outside {LOWEST_HOLD_C}-{highest_c} °C{}: give e.g. --max-c 80.",
                self.max_temperature_c,
                if constraints.slowdown_temperature_c.is_some() {
                    " (below the card's slowdown temperature)"
                } else {
                    ""
                }
            ));
        }
        let (Some(card_min_mw), Some(card_max_mw)) = (
            constraints.power_limit_min_mw,
            constraints.power_limit_max_mw,
        ) else {
            return Err(
                "This card does not say its power-limit range, so gputune cannot hold its temperature with it."
                    .to_string(),
            );
        };
        let (low, high) = (self.min_power_limit_mw, self.max_power_limit_mw);
        let card_range =
            power_limit_range(card_min_mw, card_max_mw, constraints.power_limit_default_mw);
        if low >= high {
            return Err(format!(
                "The power bounds {} to {} leave the hold no room: give the lower bound first, e.g. --power 60%..100%.",
                watts_exact(low),
                watts_exact(high)
            ));
        }
        if low < card_min_mw || high > card_max_mw {
            return Err(format!(
                "The power bounds {} to {} are outside the card's range, {card_range}.",
                watts_exact(low),
                watts_exact(high)
            ));
        }
        Ok(())
    }

    /// "at or below 80 °C, power limit 270 W to 450 W".
    pub fn describe(&self) -> String {
        format!(
            "at or below {} °C, power limit {} to {}",
            self.max_temperature_c,
            watts_exact(self.min_power_limit_mw),
            watts_exact(self.max_power_limit_mw)
        )
    }
}

/// Where a hold is now, as every client shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TemperatureHoldState {
    /// No reading of the card's temperature yet.
    Starting,
    /// Holding: the card is at or below its target, or coming down, at this limit.
    Holding {
        power_limit_mw: u32,
        temperature_c: u32,
    },
    /// At its lower bound and still above its target: the hold can do no more.
    AtFloor {
        power_limit_mw: u32,
        temperature_c: u32,
    },
    /// Another session holds the power limit (a trial, a sweep, a check, `gputune run`): the
    /// hold waits until it ends.
    Paused { by: String },
    /// The driver refused the hold's last write; it tries again later.
    Refused { reason: String },
}

/// A card's hold: what was asked, who set it, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemperatureHoldStatus {
    pub hold: TemperatureHold,
    /// Who set it ("alice", "the gputune daemon (boot default)").
    pub set_by: String,
    pub since_ms: u64,
    pub state: TemperatureHoldState,
    /// The power limit the card goes back to when the hold is cleared.
    pub put_back_mw: Option<u32>,
}

impl TemperatureHoldState {
    /// "holding at 300 W (79 °C)", "at its floor of 270 W and still hot (84 °C)", "paused:
    /// a sweep of alice holds the power limit".
    pub fn describe(&self) -> String {
        match self {
            TemperatureHoldState::Starting => "waiting for the card's first reading".to_string(),
            TemperatureHoldState::Holding {
                power_limit_mw,
                temperature_c,
            } => format!(
                "holding at {} ({temperature_c} °C)",
                watts_exact(*power_limit_mw)
            ),
            TemperatureHoldState::AtFloor {
                power_limit_mw,
                temperature_c,
            } => format!(
                "at its floor of {} and still hot ({temperature_c} °C)",
                watts_exact(*power_limit_mw)
            ),
            TemperatureHoldState::Paused { by } => {
                format!("paused: {by} holds the power limit")
            }
            TemperatureHoldState::Refused { reason } => {
                format!("the driver refused its last write ({reason}); it tries again later")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtx4090() -> Constraints {
        Constraints {
            power_limit_min_mw: Some(150_000),
            power_limit_max_mw: Some(600_000),
            power_limit_default_mw: Some(450_000),
            slowdown_temperature_c: Some(90),
            ..Constraints::default()
        }
    }

    fn hold(max_temperature_c: u32, low_w: u32, high_w: u32) -> TemperatureHold {
        TemperatureHold {
            max_temperature_c,
            min_power_limit_mw: low_w * 1000,
            max_power_limit_mw: high_w * 1000,
        }
    }

    #[test]
    fn a_hold_inside_the_card_is_taken_and_absurd_ones_say_why() {
        assert_eq!(hold(80, 270, 450).check(&rtx4090()), Ok(()));
        let refused = |hold: TemperatureHold| hold.check(&rtx4090()).unwrap_err();
        assert!(refused(hold(500, 270, 450)).contains("outside 40-89 °C"));
        assert!(refused(hold(20, 270, 450)).contains("outside 40-89 °C"));
        assert!(refused(hold(90, 270, 450)).contains("slowdown"));
        assert!(refused(hold(80, 450, 270)).contains("lower bound first"));
        assert!(refused(hold(80, 300, 300)).contains("no room"));
        let outside = refused(hold(80, 100, 450));
        assert!(
            outside.contains("150 W to 600 W (33 % to 133 % of its 450 W default)"),
            "{outside}"
        );
        assert!(refused(hold(80, 270, 700)).contains("outside the card's range"));
        let no_range = hold(80, 270, 450)
            .check(&Constraints::default())
            .unwrap_err();
        assert!(no_range.contains("power-limit range"), "{no_range}");
    }

    #[test]
    fn a_hold_and_its_states_read_as_sentences() {
        assert_eq!(
            hold(80, 270, 450).describe(),
            "at or below 80 °C, power limit 270 W to 450 W"
        );
        let floor = TemperatureHoldState::AtFloor {
            power_limit_mw: 270_000,
            temperature_c: 84,
        };
        assert_eq!(
            floor.describe(),
            "at its floor of 270 W and still hot (84 °C)"
        );
        let text = serde_json::to_string(&floor).unwrap();
        assert_eq!(
            text,
            r#"{"type":"at_floor","power_limit_mw":270000,"temperature_c":84}"#
        );
        assert!(
            serde_json::from_str::<TemperatureHold>(
                r#"{"max_temperature_c":80,"min_power_limit_mw":1,"max_power_limit_mw":2,"x":1}"#
            )
            .is_err(),
            "a request refuses fields it does not know"
        );
    }
}
