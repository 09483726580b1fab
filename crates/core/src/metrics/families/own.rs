//! gputune's own families, named the Prometheus way (`gputune_`, base units, snake_case
//! labels): readings dcgm-exporter has no default name for, the card's power-limit range, and
//! what the tuning engine holds (limits set, clock locks and offsets, fans, sessions).

use super::{Collect, Gpu, Samples, gauge, read, same_job};
use crate::metrics::exposition::{Family, Kind, Value};
use gputune_formats::throttle::ThrottleReason;
use gputune_formats::tuning::ClockLockInForce;

pub(super) const FAMILIES: &[(Family, Collect)] = &[
    (
        gauge(
            "gputune_reading_ok",
            "1 when the GPU's latest reading is fresh and complete; 0 when it failed or is stale (its readings are then left out).",
        ),
        |gpu, out| out.one(Some(Value::flag(gpu.reading.is_some()))),
    ),
    (
        gauge(
            "gputune_sample_timestamp_seconds",
            "When the GPU was last read (Unix time, in s).",
        ),
        |gpu, out| out.one(gpu.reading.map(|r| Value::seconds(r.sampled_at_ms))),
    ),
    (
        Family {
            name: "gputune_energy_joules_total",
            kind: Kind::Counter,
            help: "Energy the GPU used since the driver loaded (in J); rate() of it is the average power in W.",
        },
        |gpu, out| {
            let energy = gpu.reading.and_then(|r| r.energy_total_mj);
            out.one(energy.map(Value::joules));
        },
    ),
    (
        gauge(
            "gputune_power_limit_watts",
            "Power limit set on the GPU, as gputune's engine reads it back (in W).",
        ),
        |gpu, out| {
            let set = gpu.tuning.and_then(|t| t.in_force.power_limit_mw);
            out.one(set.map(Value::watts));
        },
    ),
    (
        gauge(
            "gputune_power_limit_enforced_watts",
            "Power limit the GPU enforces now (in W); a board limit may hold it below the one set.",
        ),
        |gpu, out| out.one(gpu.reading.and_then(|r| r.power_limit_mw).map(Value::watts)),
    ),
    (
        gauge(
            "gputune_power_limit_default_watts",
            "The GPU's default power limit (in W).",
        ),
        |gpu, out| {
            out.one(
                gpu.info
                    .constraints
                    .power_limit_default_mw
                    .map(Value::watts),
            )
        },
    ),
    (
        gauge(
            "gputune_power_limit_min_watts",
            "The lowest power limit the GPU accepts (in W).",
        ),
        |gpu, out| out.one(gpu.info.constraints.power_limit_min_mw.map(Value::watts)),
    ),
    (
        gauge(
            "gputune_power_limit_max_watts",
            "The highest power limit the GPU accepts (in W).",
        ),
        |gpu, out| out.one(gpu.info.constraints.power_limit_max_mw.map(Value::watts)),
    ),
    (
        gauge(
            "gputune_graphics_clock_mhz",
            "Graphics clock frequency (in MHz).",
        ),
        |gpu, out| out.one(read(gpu, |r| r.gpu_clock_mhz)),
    ),
    (
        gauge(
            "gputune_performance_state",
            "Performance state: 0 is P0 (fastest) ... 15 is P15.",
        ),
        |gpu, out| out.one(read(gpu, |r| r.performance_state)),
    ),
    (
        gauge(
            "gputune_fan_speed_percent",
            "Fan speed (in % of the fan's maximum), per fan.",
        ),
        |gpu, out| {
            for (index, fan) in fans(gpu) {
                out.labelled(vec![("fan", index)], fan.speed_pct.map(Value::from));
            }
        },
    ),
    (
        gauge("gputune_fan_speed_rpm", "Fan speed (in RPM), per fan."),
        |gpu, out| {
            for (index, fan) in fans(gpu) {
                out.labelled(vec![("fan", index)], fan.speed_rpm.map(Value::from));
            }
        },
    ),
    (
        gauge(
            "gputune_fan_manual_percent",
            "Speed set by hand on a fan (in %); absent while the driver's own curve drives it.",
        ),
        |gpu, out| {
            let modes = gpu.tuning.and_then(|t| t.in_force.fans.as_ref());
            for (index, mode) in modes.into_iter().flatten().enumerate() {
                let speed = match mode {
                    gputune_formats::card::FanMode::Manual { speed_pct } => {
                        Some(Value::from(*speed_pct))
                    }
                    gputune_formats::card::FanMode::Automatic => None,
                };
                out.labelled(vec![("fan", index.to_string())], speed);
            }
        },
    ),
    (
        gauge(
            "gputune_fan_curve_active",
            "1 while gputune's engine follows a fan curve on the GPU.",
        ),
        |gpu, out| out.one(gpu.tuning.map(|t| Value::flag(t.fan_curve.is_some()))),
    ),
    (
        gauge(
            "gputune_fan_safety_engaged",
            "1 while gputune has handed the fans back to the driver because the GPU neared its slowdown temperature.",
        ),
        |gpu, out| out.one(gpu.tuning.map(|t| Value::flag(t.fan_safety_engaged))),
    ),
    (
        gauge(
            "gputune_throttle_reason",
            "1 while a clock event (throttle) reason is active, else 0; one series per reason.",
        ),
        |gpu, out| {
            let Some(reasons) = gpu.reading.and_then(|r| r.throttle_reasons) else {
                return;
            };
            for reason in ThrottleReason::ALL {
                let active = Value::flag(reasons.contains(reason));
                out.labelled(vec![("reason", reason.name().to_string())], Some(active));
            }
        },
    ),
    (
        gauge(
            "gputune_clock_offset_mhz",
            "Clock offset in force (in MHz), per clock: graphics or memory.",
        ),
        |gpu, out| {
            let Some(tuning) = gpu.tuning else { return };
            let offsets = [
                ("graphics", tuning.in_force.gpu_clock_offset_mhz),
                ("memory", tuning.in_force.memory_clock_offset_mhz),
            ];

            for (clock, offset) in offsets {
                let value = offset.map(|mhz| Value::Signed(i64::from(mhz)));
                out.labelled(vec![("clock", clock.to_string())], value);
            }
        },
    ),
    (
        gauge(
            "gputune_clock_locked",
            "1 when gputune locked the clock, 0 when it is unlocked; absent when not known (NVML cannot read locks back).",
        ),
        |gpu, out| {
            for (clock, lock) in locks(gpu) {
                let value = match lock {
                    ClockLockInForce::Locked { .. } => Some(Value::flag(true)),
                    ClockLockInForce::Unlocked => Some(Value::flag(false)),
                    ClockLockInForce::Unknown => None,
                };
                out.labelled(vec![("clock", clock.to_string())], value);
            }
        },
    ),
    (
        gauge(
            "gputune_clock_lock_min_mhz",
            "Lower end of a clock lock gputune set (in MHz).",
        ),
        |gpu, out| lock_bound(gpu, out, |min_mhz, _| min_mhz),
    ),
    (
        gauge(
            "gputune_clock_lock_max_mhz",
            "Upper end of a clock lock gputune set (in MHz).",
        ),
        |gpu, out| lock_bound(gpu, out, |_, max_mhz| max_mhz),
    ),
    (
        gauge(
            "gputune_session_active",
            "1 while a gputune session (a trial, a run, a fan curve or a sweep) holds controls of the GPU; its changes are put back when it ends.",
        ),
        |gpu, out| out.one(gpu.tuning.map(|t| Value::flag(!t.holders.is_empty()))),
    ),
    (
        gauge(
            "gputune_session_info",
            "Each session holding controls of the GPU: its purpose, who holds it and the controls it holds (always 1).",
        ),
        |gpu, out| {
            for holder in holders(gpu) {
                let mut labels = holder_labels(holder);
                let controls: Vec<&str> =
                    holder.controls.iter().map(|hold| hold.as_str()).collect();
                labels.push(("controls", controls.join(",")));
                out.labelled(labels, Some(Value::Integer(1)));
            }
        },
    ),
    (
        gauge(
            "gputune_session_start_timestamp_seconds",
            "When each session holding controls of the GPU began (Unix time, in s).",
        ),
        |gpu, out| {
            for holder in holders(gpu) {
                out.labelled(holder_labels(holder), Some(Value::seconds(holder.since_ms)));
            }
        },
    ),
    (
        gauge(
            "gputune_session_energy_joules",
            "Energy the GPU used since each session holding its controls began (in J): a `gputune run`'s or a sweep's job, a trial.",
        ),
        |gpu, out| {
            let energy = gpu.reading.and_then(|r| r.energy_total_mj);
            for holder in holders(gpu) {
                let used = holder.energy_used_mj(energy);
                out.labelled(holder_labels(holder), used.map(Value::joules));
            }
        },
    ),
    (
        gauge(
            "gputune_job_energy_joules",
            "Energy the GPU used since the scheduler's job holding it began (in J): its energy counter now minus at the job's start; labelled hpc_job and hpc_user like every series of the GPU while the job holds it.",
        ),
        |gpu, out| {
            let Some(job) = gpu.job else { return };
            let energy = gpu.reading.and_then(|r| r.energy_total_mj);
            // The job's first session on the card (its later steps join that one).
            let first = holders(gpu)
                .filter(|holder| holder.job.as_ref().is_some_and(|held| same_job(held, job)))
                .min_by_key(|holder| holder.since_ms);
            out.one(
                first
                    .and_then(|holder| holder.energy_used_mj(energy))
                    .map(Value::joules),
            );
        },
    ),
    (
        gauge(
            "gputune_trial_end_timestamp_seconds",
            "When the trial running on the GPU reverts unless kept (Unix time, in s).",
        ),
        |gpu, out| {
            for holder in holders(gpu) {
                let ends = holder.trial_ends_at_ms.map(Value::seconds);
                out.labelled(holder_labels(holder), ends);
            }
        },
    ),
    (
        gauge(
            "gputune_last_change_timestamp_seconds",
            "When gputune last saw the GPU's settings change, by any program (Unix time, in s).",
        ),
        |gpu, out| {
            let change = gpu.tuning.and_then(|t| t.last_change.as_ref());
            out.one(change.map(|change| Value::seconds(change.at_ms)));
        },
    ),
];

pub(super) const EXPORTER_INFO: Family = gauge(
    "gputune_exporter_info",
    "The gputune serving these metrics: its version, backend and whether the daemon serves them (always 1).",
);

fn fans<'a>(gpu: &'a Gpu) -> impl Iterator<Item = (String, &'a gputune_formats::card::FanReading)> {
    let fans = gpu.reading.and_then(|r| r.fans.as_ref());
    fans.into_iter()
        .flatten()
        .enumerate()
        .map(|(index, fan)| (index.to_string(), fan))
}

fn locks(gpu: &Gpu) -> Vec<(&'static str, ClockLockInForce)> {
    gpu.tuning.map_or_else(Vec::new, |tuning| {
        vec![
            ("graphics", tuning.in_force.gpu_clock_lock),
            ("memory", tuning.in_force.memory_clock_lock),
        ]
    })
}

fn lock_bound(gpu: &Gpu, out: &mut Samples, bound: fn(u32, u32) -> u32) {
    for (clock, lock) in locks(gpu) {
        if let ClockLockInForce::Locked { min_mhz, max_mhz } = lock {
            let value = Value::from(bound(min_mhz, max_mhz));
            out.labelled(vec![("clock", clock.to_string())], Some(value));
        }
    }
}

/// The sessions holding controls of a GPU.
fn holders<'a>(gpu: &Gpu<'a>) -> impl Iterator<Item = &'a gputune_formats::tuning::Holder> {
    gpu.tuning
        .into_iter()
        .flat_map(|tuning| tuning.holders.iter())
}

/// The labels that tell one session's series from another's on the same GPU.
fn holder_labels(holder: &gputune_formats::tuning::Holder) -> Vec<(&'static str, String)> {
    vec![
        ("purpose", holder.purpose.as_str().to_string()),
        ("holder", holder.by.clone()),
    ]
}
