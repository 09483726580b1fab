//! "Apply as administrator": the GUI stays unprivileged and runs only the narrow
//! `gputune apply ...` subcommand through pkexec, with arguments built here from settings that
//! already passed the gate (the subcommand validates them again). No shell is involved.

use std::path::Path;
use std::process::Command;

use crate::device::Setting;

/// The `gputune apply` arguments that write `settings` to the GPU with this UUID.
/// Fan settings for single fans are not expressible per fan on the CLI: all fans get the speed.
pub fn apply_arguments(gpu_uuid: &str, settings: &[Setting]) -> Vec<String> {
    let mut arguments = vec![
        "apply".to_string(),
        "--gpu".to_string(),
        gpu_uuid.to_string(),
    ];
    let mut fan_done = false;
    for setting in settings {
        match *setting {
            Setting::PowerLimit { power_limit_mw } => {
                arguments.extend([
                    "--power-limit".to_string(),
                    format!("{}W", power_limit_mw / 1000),
                ]);
            }
            Setting::LockGpuClocks { min_mhz, max_mhz } => {
                arguments.extend([
                    "--lock-gpu-clocks".to_string(),
                    format!("{min_mhz},{max_mhz}"),
                ]);
            }
            Setting::ResetGpuClocks => arguments.push("--reset-gpu-clocks".to_string()),
            Setting::LockMemoryClocks { min_mhz, max_mhz } => {
                arguments.extend([
                    "--lock-mem-clocks".to_string(),
                    format!("{min_mhz},{max_mhz}"),
                ]);
            }
            Setting::ResetMemoryClocks => arguments.push("--reset-mem-clocks".to_string()),
            Setting::GpuClockOffset { offset_mhz } => {
                arguments.extend(["--gpu-clock-offset".to_string(), offset_mhz.to_string()]);
            }
            Setting::MemoryClockOffset { offset_mhz } => {
                arguments.extend(["--mem-clock-offset".to_string(), offset_mhz.to_string()]);
            }
            Setting::FanSpeed { speed_pct, .. } if !fan_done => {
                arguments.extend(["--fan-speed".to_string(), speed_pct.to_string()]);
                fan_done = true;
            }
            Setting::FanAutomatic { .. } if !fan_done => {
                arguments.extend(["--fan-speed".to_string(), "auto".to_string()]);
                fan_done = true;
            }
            Setting::FanSpeed { .. } | Setting::FanAutomatic { .. } => {}
        }
    }
    arguments
}

/// The pkexec command that runs `gputune_executable apply ...` as administrator.
pub fn pkexec_command(gputune_executable: &Path, gpu_uuid: &str, settings: &[Setting]) -> Command {
    let mut command = Command::new("pkexec");
    command
        .arg(gputune_executable)
        .args(apply_arguments(gpu_uuid, settings));
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_the_apply_subcommand_flags() {
        let arguments = apply_arguments(
            "GPU-1234",
            &[
                Setting::PowerLimit {
                    power_limit_mw: 315_000,
                },
                Setting::LockGpuClocks {
                    min_mhz: 210,
                    max_mhz: 2_520,
                },
                Setting::GpuClockOffset { offset_mhz: -45 },
                Setting::FanSpeed {
                    fan_index: 0,
                    speed_pct: 60,
                },
                Setting::FanSpeed {
                    fan_index: 1,
                    speed_pct: 60,
                },
            ],
        );
        assert_eq!(
            arguments,
            [
                "apply",
                "--gpu",
                "GPU-1234",
                "--power-limit",
                "315W",
                "--lock-gpu-clocks",
                "210,2520",
                "--gpu-clock-offset",
                "-45",
                "--fan-speed",
                "60"
            ]
        );
        let command = pkexec_command(
            Path::new("/usr/bin/gputune"),
            "GPU-1234",
            &[Setting::ResetGpuClocks],
        );
        assert_eq!(command.get_program(), "pkexec");
        let passed: Vec<_> = command.get_args().collect();
        assert_eq!(
            passed,
            [
                "/usr/bin/gputune",
                "apply",
                "--gpu",
                "GPU-1234",
                "--reset-gpu-clocks"
            ]
        );
    }
}
