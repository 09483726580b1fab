//! The control behind a temperature hold: from the card's readings, the power limit that keeps
//! it at or below its target. Pure (no engine, no hardware): the engine feeds it readings and
//! writes what it asks (`tuning::engine::temperature_hold`).
//!
//! Why this control: a card's temperature follows its power with a time constant of about
//! 90 s (900 J/°C against ~10 W/°C of cooling), reads in whole degrees, and the fans' own
//! curve moves the gain under it. A fast or proportional-only control on such a plant either
//! hunts or sits off its target, so this is a slow PI in velocity form, evaluated once every
//! [`STEP_INTERVAL_MS`] on the interval's mean temperature: each step moves the limit by
//! `-(Kp · Δerror + Ki · error · Δt)`, no further than [`MAX_STEP_SHARE`] of the upper bound,
//! and not at all inside a dead band of ±[`DEAD_BAND_C`] around an aim [`AIM_BELOW_C`] under the
//! target (one-degree readings would otherwise move it every step). Its integral gain keeps the
//! loop's damping above ~0.7 for the simulated 4090 (no overshoot worth a degree), its
//! proportional term adds the damping that lets the integral be that fast. A card that draws less
//! than its limit (it throttles, or its load is light) gets its lowering counted from what it
//! draws, so the limit never winds far above the power that matters.

use gputune_formats::temperature_hold::TemperatureHold;

/// How often the control moves the limit: a few times per thermal time constant.
pub const STEP_INTERVAL_MS: u64 = 5_000;
/// The control aims this far under the target, so that the target itself is rarely crossed.
pub const AIM_BELOW_C: f64 = 1.5;
/// No move while the interval's mean is within this of the aim.
pub const DEAD_BAND_C: f64 = 1.0;
/// The largest move in one step, as a share of the hold's upper bound (13.5 W on a 450 W bound).
pub const MAX_STEP_SHARE: f64 = 0.03;
/// Proportional gain, as a share of the upper bound per °C of change in the error.
const KP_SHARE_PER_C: f64 = 0.018;
/// Integral gain, as a share of the upper bound per °C of error per second.
const KI_SHARE_PER_C_S: f64 = 0.000_45;
/// When lowering, the limit starts from this much above what the card draws.
const DRAW_MARGIN_SHARE: f64 = 0.01;
/// Moves smaller than this are not written (the driver rounds to the milliwatt, the card to
/// far more).
const LEAST_MOVE_MW: u32 = 1_000;

/// What one step decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// The limit to write, when it moves.
    pub write_mw: Option<u32>,
    /// The interval's mean temperature, rounded.
    pub temperature_c: u32,
    /// The limit after this step.
    pub power_limit_mw: u32,
    /// At the lower bound and still above the target.
    pub at_floor: bool,
}

/// The control's memory between readings.
#[derive(Debug, Clone, Default)]
pub struct TemperatureControl {
    /// Where the current interval began (the readings' own time).
    interval_from_ms: Option<u64>,
    temperature_sum_c: f64,
    draw_sum_mw: f64,
    readings: u32,
    draw_readings: u32,
    /// The error of the last step, after the dead band.
    last_error_c: Option<f64>,
}

impl TemperatureControl {
    /// Starts again from nothing (after a pause: the card changed under somebody else).
    pub fn reset(&mut self) {
        *self = TemperatureControl::default();
    }

    /// Takes one reading (its time, temperature and power draw) with the limit in force; at
    /// the end of an interval, says the step.
    pub fn observe(
        &mut self,
        hold: &TemperatureHold,
        sampled_at_ms: u64,
        temperature_c: u32,
        draw_mw: Option<u32>,
        limit_mw: u32,
    ) -> Option<Step> {
        if self
            .interval_from_ms
            .is_some_and(|from_ms| sampled_at_ms < from_ms)
        {
            // The wall clock stepped back (readings carry its time): the interval starts again
            // here, or it would not end until the clock caught up.
            *self = TemperatureControl {
                last_error_c: self.last_error_c,
                ..TemperatureControl::default()
            };
        }
        let from_ms = *self.interval_from_ms.get_or_insert(sampled_at_ms);
        self.temperature_sum_c += f64::from(temperature_c);
        self.readings += 1;
        if let Some(draw_mw) = draw_mw {
            self.draw_sum_mw += f64::from(draw_mw);
            self.draw_readings += 1;
        }
        let elapsed_ms = sampled_at_ms.saturating_sub(from_ms);
        if elapsed_ms < STEP_INTERVAL_MS {
            return None;
        }
        let mean_c = self.temperature_sum_c / f64::from(self.readings);
        let mean_draw_mw =
            (self.draw_readings > 0).then(|| self.draw_sum_mw / f64::from(self.draw_readings));
        *self = TemperatureControl {
            interval_from_ms: Some(sampled_at_ms),
            last_error_c: self.last_error_c,
            ..TemperatureControl::default()
        };
        Some(self.step(hold, mean_c, mean_draw_mw, limit_mw, elapsed_ms))
    }

    fn step(
        &mut self,
        hold: &TemperatureHold,
        mean_c: f64,
        mean_draw_mw: Option<f64>,
        limit_mw: u32,
        elapsed_ms: u64,
    ) -> Step {
        let scale_mw = f64::from(hold.max_power_limit_mw);
        let aim_c = f64::from(hold.max_temperature_c) - AIM_BELOW_C;
        let raw_error_c = mean_c - aim_c;
        let error_c = if raw_error_c.abs() <= DEAD_BAND_C {
            0.0
        } else {
            raw_error_c
        };
        let change_c = error_c - self.last_error_c.unwrap_or(error_c);
        self.last_error_c = Some(error_c);
        let dt_s = elapsed_ms as f64 / 1000.0;
        let max_step_mw = MAX_STEP_SHARE * scale_mw;
        let move_mw = (-(KP_SHARE_PER_C * scale_mw * change_c
            + KI_SHARE_PER_C_S * scale_mw * error_c * dt_s))
            .clamp(-max_step_mw, max_step_mw);
        let (low_mw, high_mw) = (
            f64::from(hold.min_power_limit_mw),
            f64::from(hold.max_power_limit_mw),
        );
        let mut from_mw = f64::from(limit_mw);
        if move_mw < 0.0
            && let Some(draw_mw) = mean_draw_mw
        {
            from_mw = from_mw.min(draw_mw + DRAW_MARGIN_SHARE * scale_mw);
        }
        let target_mw = (from_mw + move_mw).clamp(low_mw, high_mw).round() as u32;
        // A limit found outside the bounds (set before the hold) comes inside at once.
        let outside = limit_mw < hold.min_power_limit_mw || limit_mw > hold.max_power_limit_mw;
        let write_mw = (outside || target_mw.abs_diff(limit_mw) >= LEAST_MOVE_MW)
            .then_some(target_mw)
            .filter(|target| *target != limit_mw);
        let power_limit_mw = write_mw.unwrap_or(limit_mw);
        Step {
            write_mw,
            temperature_c: mean_c.round().max(0.0) as u32,
            power_limit_mw,
            at_floor: power_limit_mw <= hold.min_power_limit_mw
                && mean_c > f64::from(hold.max_temperature_c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: TemperatureHold = TemperatureHold {
        max_temperature_c: 80,
        min_power_limit_mw: 270_000,
        max_power_limit_mw: 450_000,
    };

    /// Feeds one interval of readings at `temperature_c`, drawing `draw_mw`, from `at_ms`.
    fn interval(
        control: &mut TemperatureControl,
        at_ms: &mut u64,
        temperature_c: u32,
        draw_mw: u32,
        limit_mw: u32,
    ) -> Option<Step> {
        let mut last = None;
        for _ in 0..5 {
            *at_ms += 1_000;
            last = control
                .observe(&HOLD, *at_ms, temperature_c, Some(draw_mw), limit_mw)
                .or(last);
        }
        last
    }

    #[test]
    fn a_hot_card_is_lowered_in_bounded_steps_from_what_it_draws_and_never_below_the_floor() {
        let mut control = TemperatureControl::default();
        let mut at_ms = 0;
        // The first interval opens at the first reading.
        assert_eq!(
            interval(&mut control, &mut at_ms, 90, 440_000, 450_000),
            None
        );
        let mut limit_mw = 450_000;
        let mut steps = Vec::new();
        for _ in 0..40 {
            let step = interval(
                &mut control,
                &mut at_ms,
                90,
                limit_mw.min(440_000),
                limit_mw,
            )
            .expect("a step each interval");
            assert!(step.power_limit_mw >= HOLD.min_power_limit_mw);
            assert!(limit_mw.abs_diff(step.power_limit_mw) <= 13_500 + 4_500);
            limit_mw = step.power_limit_mw;
            steps.push(step);
        }
        assert_eq!(limit_mw, HOLD.min_power_limit_mw);
        assert!(steps.last().is_some_and(|step| step.at_floor));
        // The first move starts from the draw (440 W + 4.5 W), not the 450 W limit.
        assert!(
            steps[0]
                .write_mw
                .is_some_and(|mw| (444_500 - 13_500..444_500).contains(&mw)),
            "{:?}",
            steps[0]
        );
    }

    #[test]
    fn inside_the_dead_band_nothing_moves_and_a_cool_card_gets_its_power_back() {
        let mut control = TemperatureControl::default();
        let mut at_ms = 0;
        interval(&mut control, &mut at_ms, 78, 300_000, 300_000);
        for _ in 0..10 {
            let step = interval(&mut control, &mut at_ms, 78, 300_000, 300_000)
                .expect("a step each interval");
            assert_eq!(step.write_mw, None, "{step:?}");
        }
        let mut limit_mw = 300_000;
        for _ in 0..100 {
            if let Some(step) = interval(&mut control, &mut at_ms, 60, limit_mw, limit_mw) {
                limit_mw = step.power_limit_mw;
            }
        }
        assert_eq!(
            limit_mw, HOLD.max_power_limit_mw,
            "and never above the ceiling"
        );
    }

    #[test]
    fn the_wall_clock_stepping_back_restarts_the_interval_and_the_control_goes_on() {
        let mut control = TemperatureControl::default();
        let mut at_ms = 1_700_000_000_000;
        interval(&mut control, &mut at_ms, 90, 440_000, 450_000);
        assert!(interval(&mut control, &mut at_ms, 90, 440_000, 450_000).is_some());
        // NTP sets the clock an hour back: the next interval still ends after its 5 s.
        at_ms -= 3_600_000;
        let step = interval(&mut control, &mut at_ms, 90, 440_000, 450_000);
        let step = step.or_else(|| interval(&mut control, &mut at_ms, 90, 440_000, 450_000));
        assert!(step.is_some_and(|step| step.write_mw.is_some()), "{step:?}");
    }

    #[test]
    fn a_limit_outside_the_bounds_comes_inside_at_the_first_step() {
        let mut control = TemperatureControl::default();
        let mut at_ms = 0;
        interval(&mut control, &mut at_ms, 78, 500_000, 600_000);
        let step = interval(&mut control, &mut at_ms, 78, 500_000, 600_000).expect("a step");
        assert_eq!(step.write_mw, Some(HOLD.max_power_limit_mw));
    }
}
