//! Changing GPU settings safely: what a user asks for (`request`), fan curves, what a card
//! runs (`in_force`), the statistics of a trial, and the one engine that writes (`engine`),
//! with its state folder of locks, journals and records (`state_folder`) and the daemon's boot
//! defaults it applies at start (`boot_defaults`). Every write passes `device::gate`.

pub mod boot_defaults;
pub mod engine;
pub mod gpu_locks;
pub mod in_force;
pub mod lock_evidence;
pub mod pstate_offsets;
pub mod request;
pub mod state_folder;
pub mod stats;
pub mod temperature_control;

use gputune_formats::card::Setting;

/// "power limit 450 W, GPU clock reset"; one P-state's offsets of one value in a row are said
/// once ("GPU clock offset +0 MHz in P0 and P2").
pub fn describe_all(settings: &[Setting]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(bool, i32, Vec<u32>)> = None;
    let said = |(gpu, offset_mhz, pstates): (bool, i32, Vec<u32>)| {
        let clock = if gpu { "GPU" } else { "memory" };
        let states: Vec<String> = pstates.iter().map(|pstate| format!("P{pstate}")).collect();
        let states = match states.as_slice() {
            [rest @ .., last] if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => states.join(""),
        };
        format!("{clock} clock offset {offset_mhz:+} MHz in {states}")
    };
    for setting in settings {
        let this = match *setting {
            Setting::GpuClockOffsetAt { pstate, offset_mhz } => Some((true, offset_mhz, pstate)),
            Setting::MemoryClockOffsetAt { pstate, offset_mhz } => {
                Some((false, offset_mhz, pstate))
            }
            _ => None,
        };
        match (this, &mut run) {
            (Some((gpu, offset_mhz, pstate)), Some((run_gpu, run_offset, pstates)))
                if gpu == *run_gpu && offset_mhz == *run_offset =>
            {
                pstates.push(pstate);
            }
            (Some((gpu, offset_mhz, pstate)), _) => {
                parts.extend(run.take().map(said));
                run = Some((gpu, offset_mhz, vec![pstate]));
            }
            (None, _) => {
                parts.extend(run.take().map(said));
                parts.push(setting.describe());
            }
        }
    }
    parts.extend(run.map(said));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_in_several_p_states_is_said_once() {
        let settings = [
            Setting::PowerLimit {
                power_limit_mw: 450_000,
            },
            Setting::GpuClockOffsetAt {
                pstate: 0,
                offset_mhz: 0,
            },
            Setting::GpuClockOffsetAt {
                pstate: 2,
                offset_mhz: 0,
            },
            Setting::GpuClockOffsetAt {
                pstate: 5,
                offset_mhz: 60,
            },
        ];
        assert_eq!(
            describe_all(&settings),
            "power limit 450 W, GPU clock offset +0 MHz in P0 and P2, GPU clock offset +60 MHz in P5"
        );
    }
}
