//! The fan safety net: after each reading, before a curve sets its speed, the fans of a card
//! gputune drives (a curve, or a manual speed a trial or a session wrote) go back to the driver
//! when the card nears its slowdown temperature, and come back to the curve once it cools.

use super::Engine;
use crate::device::gate::validate;
use gputune_formats::card::{FanMode, Setting, Telemetry};
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::Notice;
use gputune_formats::tuning::SessionPurpose;

/// The safety net takes over this many degrees below the card's slowdown temperature.
pub const SAFETY_MARGIN_C: u32 = 5;
/// ... and gives the fans back to the curve once the card is this far below it.
pub const SAFETY_RELEASE_C: u32 = 15;

impl Engine {
    /// After each reading: the safety net, then the curve.
    pub(super) fn drive_fans(&mut self, index: u32, reading: &Telemetry) {
        let constraints = self.gpu(index).info.constraints.clone();
        let Some(range) = constraints
            .fan_speed_range
            .filter(|_| constraints.fan_count > 0)
        else {
            return;
        };
        if self.gpu(index).lost.is_some() {
            return;
        }
        let following = self.gpu(index).fans.curve.is_some();
        let manual = self.gpu(index).in_force.fans.as_ref().is_some_and(|fans| {
            fans.iter()
                .any(|mode| matches!(mode, FanMode::Manual { .. }))
        });
        if let (Some(slowdown_c), Some(temperature_c)) =
            (constraints.slowdown_temperature_c, reading.temperature_c)
        {
            let engage_c = slowdown_c.saturating_sub(SAFETY_MARGIN_C);
            let release_c = slowdown_c.saturating_sub(SAFETY_RELEASE_C);
            if self.gpu(index).fans.safety_engaged {
                if temperature_c > release_c {
                    return;
                }
                self.gpu_mut(index).fans.safety_engaged = false;
                if following {
                    self.notice(
                        Some(index),
                        Notice::Info(format!(
                            "GPU {index} cooled to {temperature_c} °C: gputune follows the fan curve again."
                        )),
                    );
                }
                self.announce(index);
            } else if temperature_c >= engage_c && (following || manual) {
                self.engage_safety_net(index, temperature_c, slowdown_c, following);
                return;
            }
        }
        if !following {
            return;
        }
        let Some(curve) = self.gpu(index).fans.curve.clone() else {
            return;
        };
        let temperature = reading.temperature_c.map_or(f64::INFINITY, f64::from);
        let previous = self.gpu(index).fans.target_pct;
        let target = curve.target_pct(temperature, previous, range);
        if previous == Some(target) {
            return;
        }
        for fan_index in 0..constraints.fan_count {
            let setting = Setting::FanSpeed {
                fan_index,
                speed_pct: target,
            };
            if let Err(error) = self.write_curve_speed(index, setting, fan_index) {
                // Said once; no retry loop against a driver that says no.
                let fans = &mut self.gpu_mut(index).fans;
                fans.curve = None;
                fans.target_pct = None;
                let holder = self.holding(index, Hold::Fans);
                if let Some(id) = holder
                    && let Some(part) = self.session_part_mut(id, index)
                {
                    part.follows_curve = false;
                }
                self.notice(
                    Some(index),
                    Notice::Error(format!(
                        "The fan curve could not set GPU {index}'s fans ({error}); gputune stopped following it."
                    )),
                );
                // A session that was only the curve has nothing left to do: it ends, putting
                // back the fans the curve did write, if any.
                let only_the_curve = holder.is_some_and(|id| {
                    self.sessions.get(&id).is_some_and(|session| {
                        matches!(
                            session.purpose,
                            SessionPurpose::FanCurve | SessionPurpose::KeptFanCurve
                        )
                    })
                });
                if let Some(id) = holder.filter(|_| only_the_curve) {
                    self.end_session_now(id, false, "The fan curve stopped: put back");
                }
                self.announce(index);
                return;
            }
        }
        self.gpu_mut(index).fans.target_pct = Some(target);
    }

    fn engage_safety_net(
        &mut self,
        index: u32,
        temperature_c: u32,
        slowdown_c: u32,
        following: bool,
    ) {
        let constraints = self.gpu(index).info.constraints.clone();
        let mut failed = None;
        for fan_index in 0..constraints.fan_count {
            let result = validate(&constraints, Setting::FanAutomatic { fan_index })
                .map_err(|error| error.to_string())
                .and_then(|validated| {
                    self.write(index, validated)
                        .map_err(|error| error.to_string())
                });
            if let Err(error) = result {
                failed = Some(error);
                break;
            }
        }
        let fans = &mut self.gpu_mut(index).fans;
        fans.safety_engaged = true;
        fans.target_pct = None;
        let release_c = slowdown_c.saturating_sub(SAFETY_RELEASE_C);
        let notice = match failed {
            None => Notice::Warning(format!(
                "GPU {index} reached {temperature_c} °C, close to its slowdown temperature of {slowdown_c} °C: its fans are back under the driver's control{}.",
                if following {
                    format!(" until it cools to {release_c} °C")
                } else {
                    String::new()
                }
            )),
            Some(error) => Notice::Error(format!(
                "GPU {index} reached {temperature_c} °C, close to its slowdown temperature of {slowdown_c} °C, and its fans could not be handed back to the driver: {error}"
            )),
        };
        self.notice(Some(index), notice);
        self.note_change(
            index,
            "gputune's fan safety net",
            format!("fans handed to the driver at {temperature_c} °C"),
        );
    }
}
