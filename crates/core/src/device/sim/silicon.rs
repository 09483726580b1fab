//! Each simulated card's silicon margin: how far its graphics clock offset can go before it
//! computes wrong results, and before it faults (Xid 13). Real cards differ (the "silicon
//! lottery"), so each card's margin is drawn from its UUID; the same UUID always gets the same
//! margin, in the simulator and behind the fake libnvidia-ml alike. Pure functions; the
//! formulas and each scenario's margins are in docs/simulator.md.

use super::card::CardSpec;
use super::seed::{splitmix64, text_seed};

/// Above this temperature the margin shrinks (hot silicon switches slower).
pub const MARGIN_WARM_FROM_C: f64 = 60.0;
/// Margin lost per °C above [`MARGIN_WARM_FROM_C`].
pub const MARGIN_LOSS_PER_C: f64 = 1.5;
/// The margin never falls below this: a card at its stock curve (offset 0) is always stable.
pub const MARGIN_FLOOR_MHZ: f64 = 30.0;

/// Wrong results per checked result 1 MHz or less past the margin: a check of a few seconds
/// (some 10¹⁰ results a second on an RTX 4090) finds it with near certainty.
pub const WRONG_RATE_AT_EDGE: f64 = 1e-9;
/// The rate grows tenfold every this many MHz past the margin.
pub const WRONG_RATE_DECADE_MHZ: f64 = 8.0;
/// The most wrong results per result (far past the margin nearly nothing works anyway).
pub const WRONG_RATE_MAX: f64 = 1e-3;

/// VRAM words read back wrong per word just past the memory margin.
pub const MEMORY_WRONG_RATE_AT_EDGE: f64 = 1e-10;
/// The memory rate grows tenfold every this many MHz of memory offset past its margin.
pub const MEMORY_WRONG_RATE_DECADE_MHZ: f64 = 50.0;
/// The most wrong VRAM words per word.
pub const MEMORY_WRONG_RATE_MAX: f64 = 1e-4;

/// One card's margins, drawn once from its UUID.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SiliconMargin {
    /// The clock the margin is quoted at: the card's boost clock (2520 MHz on an RTX 4090).
    pub reference_clock_mhz: u32,
    /// The largest stable graphics clock offset at the reference clock, at or below 60 °C.
    pub offset_at_reference_mhz: f64,
    /// Margin gained for each MHz the clock runs below the reference (lower clocks sit at the
    /// voltage floor or on the flat part of the curve, with more room).
    pub gain_per_mhz_below: f64,
    /// Margin lost for each MHz the clock runs above the reference.
    pub loss_per_mhz_above: f64,
    /// How far past the margin the card faults (Xid 13) while busy.
    pub hard_extra_mhz: f64,
    /// The largest memory clock offset (NVML's units) at which VRAM reads back right.
    pub memory_offset_mhz: f64,
}

/// The ranges a model's cards are drawn from.
struct ModelRanges {
    reference_clock_mhz: u32,
    offset_at_reference_mhz: (f64, f64),
    gain_per_mhz_below: f64,
    loss_per_mhz_above: f64,
    hard_extra_mhz: (f64, f64),
    memory_offset_mhz: (f64, f64),
}

fn model_ranges(spec: &CardSpec) -> ModelRanges {
    if spec.architecture == "Hopper" {
        // Datacenter parts ship with less guard band, and HBM3 has little memory headroom.
        ModelRanges {
            reference_clock_mhz: 1980,
            offset_at_reference_mhz: (60.0, 150.0),
            gain_per_mhz_below: 0.2,
            loss_per_mhz_above: 0.12,
            hard_extra_mhz: (60.0, 90.0),
            memory_offset_mhz: (100.0, 250.0),
        }
    } else {
        // RTX 4090: undervolts of +90..+210 MHz at a 2520 MHz lock are what owners report;
        // GDDR6X takes +1000..+1800 MHz of memory offset before it errs.
        ModelRanges {
            reference_clock_mhz: 2520,
            offset_at_reference_mhz: (90.0, 210.0),
            gain_per_mhz_below: 0.25,
            loss_per_mhz_above: 0.12,
            hard_extra_mhz: (60.0, 90.0),
            memory_offset_mhz: (1000.0, 1800.0),
        }
    }
}

/// A number in [0, 1) drawn from `seed` and `salt`.
fn draw(seed: u64, salt: u64) -> f64 {
    (splitmix64(seed ^ splitmix64(salt)) >> 11) as f64 / (1u64 << 53) as f64
}

fn within((low, high): (f64, f64), fraction: f64) -> f64 {
    low + (high - low) * fraction
}

impl SiliconMargin {
    /// The margins of the card `uuid` of model `spec` (the same UUID, the same margins).
    pub fn for_card(spec: &CardSpec, uuid: &str) -> SiliconMargin {
        let ranges = model_ranges(spec);
        let seed = text_seed(uuid);
        SiliconMargin {
            reference_clock_mhz: ranges.reference_clock_mhz,
            // Whole MHz, so the tables in the docs are exact.
            offset_at_reference_mhz: within(ranges.offset_at_reference_mhz, draw(seed, 1)).round(),
            gain_per_mhz_below: ranges.gain_per_mhz_below,
            loss_per_mhz_above: ranges.loss_per_mhz_above,
            hard_extra_mhz: within(ranges.hard_extra_mhz, draw(seed, 2)).round(),
            memory_offset_mhz: within(ranges.memory_offset_mhz, draw(seed, 3)).round(),
        }
    }

    /// The largest graphics clock offset that computes correctly at `clock_mhz` and
    /// `temperature_c`: never below [`MARGIN_FLOOR_MHZ`].
    pub fn stable_offset_mhz(&self, clock_mhz: u32, temperature_c: f64) -> f64 {
        let reference = f64::from(self.reference_clock_mhz);
        let clock = f64::from(clock_mhz);
        let by_clock = if clock <= reference {
            self.offset_at_reference_mhz + self.gain_per_mhz_below * (reference - clock)
        } else {
            self.offset_at_reference_mhz - self.loss_per_mhz_above * (clock - reference)
        };
        let by_heat = MARGIN_LOSS_PER_C * (temperature_c - MARGIN_WARM_FROM_C).max(0.0);
        (by_clock - by_heat).max(MARGIN_FLOOR_MHZ)
    }

    /// The offset past which the card faults (Xid 13) while busy.
    pub fn hard_limit_mhz(&self, clock_mhz: u32, temperature_c: f64) -> f64 {
        self.stable_offset_mhz(clock_mhz, temperature_c) + self.hard_extra_mhz
    }

    /// Wrong results per checked result at `offset_mhz` (as the card applies it), `clock_mhz`
    /// and `temperature_c`: zero at or below the margin.
    pub fn wrong_rate(&self, offset_mhz: i32, clock_mhz: u32, temperature_c: f64) -> f64 {
        wrong_rate_past(f64::from(offset_mhz) - self.stable_offset_mhz(clock_mhz, temperature_c))
    }

    /// Whether a busy card at these conditions is past its hard limit (and raises Xid 13).
    pub fn past_hard_limit(&self, offset_mhz: i32, clock_mhz: u32, temperature_c: f64) -> bool {
        f64::from(offset_mhz) > self.hard_limit_mhz(clock_mhz, temperature_c)
    }

    /// VRAM words read back wrong per word at `memory_offset_mhz`: zero at or below the
    /// memory margin.
    pub fn memory_wrong_rate(&self, memory_offset_mhz: i32) -> f64 {
        let excess = f64::from(memory_offset_mhz) - self.memory_offset_mhz;
        if excess <= 0.0 {
            return 0.0;
        }
        (MEMORY_WRONG_RATE_AT_EDGE * 10f64.powf(excess / MEMORY_WRONG_RATE_DECADE_MHZ))
            .min(MEMORY_WRONG_RATE_MAX)
    }
}

/// Wrong results per result `excess_mhz` past the margin: zero at or below it, then rising
/// tenfold every [`WRONG_RATE_DECADE_MHZ`].
pub fn wrong_rate_past(excess_mhz: f64) -> f64 {
    if excess_mhz.is_nan() || excess_mhz <= 0.0 {
        return 0.0;
    }
    (WRONG_RATE_AT_EDGE * 10f64.powf(excess_mhz / WRONG_RATE_DECADE_MHZ)).min(WRONG_RATE_MAX)
}

/// The offset a card applies for `offset_mhz`: whole boost bins, as the driver does.
pub fn applied_offset_mhz(spec: &CardSpec, offset_mhz: i32) -> i32 {
    let bin = spec.clock_bin_mhz.max(1) as i32;
    offset_mhz / bin * bin
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::sim::{LoadPattern, SimMachine, SimScenario};

    fn cards() -> Vec<(CardSpec, String)> {
        [SimScenario::EightRtx4090, SimScenario::DatacenterFanless]
            .into_iter()
            .flat_map(|scenario| SimMachine::new(scenario, LoadPattern::Idle, 0).gpus)
            .map(|gpu| (gpu.spec, gpu.uuid))
            .collect()
    }

    #[test]
    fn each_card_draws_its_own_margin_within_its_models_range_and_always_the_same() {
        let mut seen = Vec::new();
        for (spec, uuid) in cards() {
            let margin = SiliconMargin::for_card(&spec, &uuid);
            assert_eq!(margin, SiliconMargin::for_card(&spec, &uuid));
            let ranges = model_ranges(&spec);
            let (low, high) = ranges.offset_at_reference_mhz;
            assert!((low..=high).contains(&margin.offset_at_reference_mhz));
            assert!((60.0..=90.0).contains(&margin.hard_extra_mhz));
            seen.push(margin.offset_at_reference_mhz);
        }
        seen.sort_by(f64::total_cmp);
        seen.dedup();
        assert!(seen.len() >= 6, "eight 4090s and an H100 differ: {seen:?}");
    }

    #[test]
    fn the_margin_shrinks_with_clock_and_heat_but_never_below_the_floor() {
        let (spec, uuid) = cards().remove(0);
        let margin = SiliconMargin::for_card(&spec, &uuid);
        let at_2520 = margin.stable_offset_mhz(2520, 50.0);
        assert_eq!(at_2520, margin.offset_at_reference_mhz);
        assert!(margin.stable_offset_mhz(2100, 50.0) > at_2520 + 100.0);
        assert!(margin.stable_offset_mhz(2745, 50.0) < at_2520);
        // 20 °C above 60 °C costs 30 MHz.
        assert_eq!(margin.stable_offset_mhz(2520, 80.0), at_2520 - 30.0);
        assert_eq!(margin.stable_offset_mhz(2520, 60.0), at_2520);
        assert_eq!(margin.stable_offset_mhz(3105, 130.0), MARGIN_FLOOR_MHZ);
        assert_eq!(
            margin.hard_limit_mhz(2520, 50.0),
            at_2520 + margin.hard_extra_mhz
        );
    }

    #[test]
    fn no_wrong_results_at_or_below_the_margin_and_a_steep_rise_past_it() {
        let (spec, uuid) = cards().remove(0);
        let margin = SiliconMargin::for_card(&spec, &uuid);
        let edge = margin.stable_offset_mhz(2520, 70.0) as i32;
        for clock_mhz in [210, 1395, 2100, 2520, 2790, 3105] {
            for temperature_c in [30.0, 70.0, 95.0] {
                assert_eq!(margin.wrong_rate(0, clock_mhz, temperature_c), 0.0);
                assert!(!margin.past_hard_limit(0, clock_mhz, temperature_c));
            }
        }
        assert_eq!(margin.wrong_rate(edge, 2520, 70.0), 0.0);
        let one_past = margin.wrong_rate(edge + 1, 2520, 70.0);
        // A few seconds of an RTX 4090's GEMM (2 × 10¹⁰ results a second) see it.
        assert!(one_past * 2e10 * 3.0 > 20.0, "{one_past}");
        assert!(margin.wrong_rate(edge + 17, 2520, 70.0) > 10.0 * one_past);
        assert_eq!(margin.wrong_rate(edge + 500, 2520, 70.0), WRONG_RATE_MAX);
        assert!(!margin.past_hard_limit(edge + 1, 2520, 70.0));
        assert!(margin.past_hard_limit(edge + 91, 2520, 70.0));
    }

    #[test]
    fn vram_errs_only_past_the_memory_margin() {
        let (spec, uuid) = cards().remove(0);
        let margin = SiliconMargin::for_card(&spec, &uuid);
        let edge = margin.memory_offset_mhz as i32;
        assert_eq!(margin.memory_wrong_rate(0), 0.0);
        assert_eq!(margin.memory_wrong_rate(edge), 0.0);
        assert!(margin.memory_wrong_rate(edge + 1) > 0.0);
        assert_eq!(margin.memory_wrong_rate(edge + 5000), MEMORY_WRONG_RATE_MAX);
    }

    #[test]
    fn offsets_apply_in_whole_bins() {
        let spec = CardSpec::rtx4090();
        assert_eq!(applied_offset_mhz(&spec, 149), 135);
        assert_eq!(applied_offset_mhz(&spec, 150), 150);
        assert_eq!(applied_offset_mhz(&spec, -20), -15);
    }
}
