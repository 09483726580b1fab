//! What `apply` says it wrote: one sentence per setting, with what the card reports back
//! (the limit it enforces, the P-states an offset is in) where it can. `profile apply` says
//! its settings the same way (`applied_line`).

use gputune_formats::card::Constraints;
use gputune_formats::tuning::GpuApplied;
use gputune_formats::units::watts_exact;

/// One sentence per setting written, with what the card reports back where it can.
pub(super) fn read_back_lines(gpu: &GpuApplied, constraints: &Constraints) -> Vec<String> {
    gpu.applied
        .iter()
        .map(|setting| match *setting {
            gputune_formats::card::Setting::PowerLimit { power_limit_mw } => {
                let enforced = match gpu.enforced_power_limit_mw {
                    Some(enforced_mw) => format!("the card enforces {}", watts_exact(enforced_mw)),
                    None => "the card does not report the limit it enforces".to_string(),
                };
                format!(
                    "{}; {enforced}.",
                    power_limit_set(power_limit_mw, constraints)
                )
            }
            gputune_formats::card::Setting::GpuClockOffset { offset_mhz } => read_back_offset(
                "GPU",
                offset_mhz,
                gpu.in_force.gpu_clock_offset_mhz,
                &gpu.in_force.gpu_clock_offsets,
            ),
            gputune_formats::card::Setting::MemoryClockOffset { offset_mhz } => read_back_offset(
                "Memory",
                offset_mhz,
                gpu.in_force.memory_clock_offset_mhz,
                &gpu.in_force.memory_clock_offsets,
            ),
            other => applied_line(&other, constraints),
        })
        .collect()
}

/// "Power limit set to 315 W (70 % of 450 W)", without the full stop (a read-back may follow).
fn power_limit_set(power_limit_mw: u32, constraints: &Constraints) -> String {
    format!(
        "Power limit set to {}",
        gputune_formats::units::power_limit_with_share(
            power_limit_mw,
            constraints.power_limit_default_mw
        )
    )
}

/// One sentence for a setting written, with nothing read back: "Power limit set to 315 W
/// (70 % of 450 W).", "Fan 0 at 60 % applied."
pub(crate) fn applied_line(
    setting: &gputune_formats::card::Setting,
    constraints: &Constraints,
) -> String {
    match *setting {
        gputune_formats::card::Setting::PowerLimit { power_limit_mw } => {
            format!("{}.", power_limit_set(power_limit_mw, constraints))
        }
        other => format!("{} applied.", capitalized(&other.describe())),
    }
}

/// "GPU clock offset set to +150 MHz; the card reports +150 MHz (P0, P2).": the P-states the
/// card reports the offset in, where it says (compute runs in P2 on GeForce cards).
fn read_back_offset(
    clock: &str,
    offset_mhz: i32,
    reported: Option<i32>,
    pstates: &[gputune_formats::card::PstateOffset],
) -> String {
    match reported {
        Some(reported) => format!(
            "{clock} clock offset set to {offset_mhz:+} MHz; the card reports {}.",
            crate::tuning::in_force::describe_offset(reported, pstates)
        ),
        None => format!("{clock} clock offset set to {offset_mhz:+} MHz."),
    }
}

/// "fan 0 at 60 %" → "Fan 0 at 60 %"; "GPU ..." stays.
fn capitalized(text: &str) -> String {
    let mut characters = text.chars();
    match characters.next() {
        Some(first) => first.to_uppercase().chain(characters).collect(),
        None => String::new(),
    }
}
