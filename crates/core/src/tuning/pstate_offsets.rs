//! Clock offsets per P-state in what a card runs: which controls an offset for compute changes
//! (each compute P-state, put back on its own), and how an offset is said with the P-states it
//! covers ("+150 MHz (P0, P2)"). docs/architecture.md, "Offsets per P-state".

use crate::device::{COMPUTE_PSTATES, adjustable_compute_pstates, describe_pstates};
use crate::tuning::in_force::Control;
use gputune_formats::card::{Constraints, PstateOffset, Setting};
use gputune_formats::tuning::SettingsInForce;

/// The controls a write of `setting` changes, each to be put back on its own: an offset for
/// compute changes each adjustable compute P-state the card reports (P0 and P2), which are put
/// back to their own values; on a card that does not say per P-state, the one offset.
pub fn controls_written(
    setting: &Setting,
    constraints: &Constraints,
    in_force: &SettingsInForce,
) -> Vec<Control> {
    let per_pstate = |ranges, offsets: &[PstateOffset], at: fn(u32) -> Control| {
        let pstates: Vec<Control> = adjustable_compute_pstates(ranges)
            .into_iter()
            .filter(|pstate| offset_in(offsets, *pstate).is_some())
            .map(at)
            .collect();
        (!pstates.is_empty()).then_some(pstates)
    };
    let controls = match setting {
        Setting::GpuClockOffset { .. } => per_pstate(
            &constraints.gpu_clock_offset_pstates,
            &in_force.gpu_clock_offsets,
            |pstate| Control::GpuClockOffsetAt { pstate },
        ),
        Setting::MemoryClockOffset { .. } => per_pstate(
            &constraints.memory_clock_offset_pstates,
            &in_force.memory_clock_offsets,
            |pstate| Control::MemoryClockOffsetAt { pstate },
        ),
        _ => None,
    };
    controls.unwrap_or_else(|| vec![Control::of(setting)])
}

/// P-state `pstate`'s offset among `offsets`.
pub(crate) fn offset_in(offsets: &[PstateOffset], pstate: u32) -> Option<i32> {
    offsets
        .iter()
        .find(|offset| offset.pstate == pstate)
        .map(|offset| offset.offset_mhz)
}

/// Sets the offset of each of `pstates` listed in `offsets` (a state not listed is not the
/// card's).
pub(crate) fn set_offsets(offsets: &mut [PstateOffset], pstates: &[u32], offset_mhz: i32) {
    for offset in offsets.iter_mut() {
        if pstates.contains(&offset.pstate) {
            offset.offset_mhz = offset_mhz;
        }
    }
}

/// The P-states among `offsets` that run `offset_mhz` ([P0, P2]); `None` when the card does not
/// say per P-state.
pub fn pstates_at(offset_mhz: i32, offsets: &[PstateOffset]) -> Option<Vec<u32>> {
    (!offsets.is_empty()).then(|| {
        offsets
            .iter()
            .filter(|offset| offset.offset_mhz == offset_mhz)
            .map(|offset| offset.pstate)
            .collect()
    })
}

/// "+150 MHz (P0, P2)": an offset compute runs at, with the P-states it covers, and each
/// compute P-state that runs another ("+150 MHz (P2; P0 at +0 MHz)"); just "+150 MHz" when the
/// card does not say per P-state.
pub fn describe_offset(offset_mhz: i32, offsets: &[PstateOffset]) -> String {
    let Some(mut covered) = pstates_at(offset_mhz, offsets) else {
        return format!("{offset_mhz:+} MHz");
    };
    // An idle state at no offset (P8: its range is 0 to 0) says nothing about compute.
    covered.retain(|pstate| COMPUTE_PSTATES.contains(pstate) || offset_mhz != 0);
    if covered.is_empty() {
        return format!("{offset_mhz:+} MHz");
    }
    let others: Vec<String> = offsets
        .iter()
        .filter(|offset| {
            offset.offset_mhz != offset_mhz && COMPUTE_PSTATES.contains(&offset.pstate)
        })
        .map(|offset| format!("P{} at {:+} MHz", offset.pstate, offset.offset_mhz))
        .collect();
    let mut text = format!("{offset_mhz:+} MHz ({}", describe_pstates(&covered));
    if !others.is_empty() {
        text.push_str(&format!("; {}", others.join(", ")));
    }
    text.push(')');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::in_force::ControlsInForce;
    use gputune_formats::card::PstateOffsetRange;
    use gputune_formats::tuning::ClockLockInForce;

    fn tuned() -> SettingsInForce {
        SettingsInForce {
            power_limit_mw: Some(315_000),
            gpu_clock_lock: ClockLockInForce::Unlocked,
            gpu_clock_offset_mhz: Some(150),
            gpu_clock_offsets: vec![
                PstateOffset {
                    pstate: 0,
                    offset_mhz: 100,
                },
                PstateOffset {
                    pstate: 2,
                    offset_mhz: 150,
                },
            ],
            ..SettingsInForce::default()
        }
    }

    #[test]
    fn an_offset_for_compute_is_put_back_per_p_state_where_the_card_says() {
        let ranges = |pstates: &[(u32, i32)]| Constraints {
            gpu_clock_offset_pstates: pstates
                .iter()
                .map(|&(pstate, room)| PstateOffsetRange {
                    pstate,
                    min_mhz: -room,
                    max_mhz: room,
                })
                .collect(),
            ..Constraints::default()
        };
        let mut in_force = tuned();
        let setting = Setting::GpuClockOffset { offset_mhz: 200 };
        let rtx = ranges(&[(0, 1000), (2, 1000), (8, 0)]);
        assert_eq!(
            controls_written(&setting, &rtx, &in_force),
            vec![
                Control::GpuClockOffsetAt { pstate: 0 },
                Control::GpuClockOffsetAt { pstate: 2 }
            ]
        );
        assert_eq!(
            controls_written(&setting, &Constraints::default(), &in_force),
            vec![Control::GpuClockOffset],
            "a driver that does not say per P-state: the one offset"
        );
        in_force.record_applied(&setting);
        assert_eq!(
            pstates_at(200, &in_force.gpu_clock_offsets),
            Some(vec![0, 2])
        );
        assert_eq!(
            describe_offset(200, &in_force.gpu_clock_offsets),
            "+200 MHz (P0, P2)"
        );
        in_force.record_applied(&Setting::GpuClockOffsetAt {
            pstate: 2,
            offset_mhz: -30,
        });
        assert_eq!(in_force.gpu_clock_offset_mhz, Some(-30), "P2's counts");
        assert_eq!(describe_offset(7, &[]), "+7 MHz");
        let with_idle = |p8_mhz| {
            let mut offsets = tuned().gpu_clock_offsets;
            offsets.push(PstateOffset {
                pstate: 8,
                offset_mhz: p8_mhz,
            });
            offsets
        };
        assert_eq!(
            describe_offset(150, &with_idle(0)),
            "+150 MHz (P2; P0 at +100 MHz)"
        );
        assert_eq!(
            describe_offset(100, &with_idle(100)),
            "+100 MHz (P0, P8; P2 at +150 MHz)",
            "an idle state at the same offset is named"
        );
        let mut stock = with_idle(0);
        stock.iter_mut().for_each(|offset| offset.offset_mhz = 0);
        assert_eq!(
            describe_offset(0, &stock),
            "+0 MHz (P0, P2)",
            "the idle P8 at no offset is not listed"
        );
    }
}
