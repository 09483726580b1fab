//! `gputune hold-temp set|show|clear`: a temperature hold the daemon keeps on a card with no
//! client attached (and, with `--boot-default`, from its every start): the card stays at or
//! below `--max-c` while the daemon moves its power limit within `--power LOW..HIGH`. A command
//! of its own, not `fan …`: the hold moves the power limit, never the fans. The bounds are
//! read here against each card and checked again by the daemon; every write goes through the
//! engine (`tuning::engine::temperature_hold`).

use std::io::Write;

use anyhow::bail;

use crate::cli::connect::{
    TuningOptions, boot_defaults, choose_gpu, choose_gpus, command_label, connect_daemon_or,
    refusal, snapshot, unexpected,
};
use crate::service::client::{ConnectOptions, TuningClient, connect};
use crate::tuning::request::TuneRequest;
use crate::tuning::request::parse::parse_power_limit;
use gputune_formats::card::Constraints;
use gputune_formats::protocol::{Request, Response};
use gputune_formats::reports::temperature_holds::{
    ShownHold, TEMPERATURE_HOLD_REPORT_FORMAT, TemperatureHoldReport,
};
use gputune_formats::temperature_hold::TemperatureHold;
use gputune_formats::units::power_limit_range;

/// Said when a hold is to be kept and no daemon answers.
pub const NEEDS_DAEMON: &str = "Holding a temperature needs the gputune daemon, which is not running here: install it with `sudo gputune daemon install`.";

/// The bounds when `--power` is not given.
const DEFAULT_POWER: &str = "60%..100%";

/// `gputune hold-temp`.
#[derive(Debug, Clone, clap::Args)]
pub struct HoldTempArgs {
    #[command(subcommand)]
    pub command: HoldTempCommand,
}

/// What `gputune hold-temp` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HoldTempCommand {
    /// Have the daemon keep cards at or below a temperature by moving their power limit (it
    /// outlives this command and any window; it pauses while a trial, sweep, check or run
    /// holds the power limit).
    Set {
        /// The temperature to stay at or below, in whole °C, e.g. 80.
        #[arg(long = "max-c", value_name = "C")]
        max_c: String,
        /// The power limit's bounds LOW..HIGH, in watts or % of the default, e.g. 60%..100%
        /// or 270W..450W; inside the card's own range.
        #[arg(long, value_name = "LOW..HIGH", default_value = DEFAULT_POWER)]
        power: String,
        /// The GPUs: an index or a UUID, several (0,3), or all. Needed when there are several.
        #[arg(long, value_name = "UUID|INDEX|LIST|all")]
        gpu: Option<String>,
        /// Also store it in the card's boot default: the daemon keeps it from every start.
        #[arg(long)]
        boot_default: bool,
    },
    /// Show each card's hold (or one card's), where it is, and the one in its boot default.
    Show {
        /// Only this GPU: an index or a UUID.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
        /// Print JSON: {"format_version": 1, "daemon": bool, "gpus": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Stop holding: the power limit goes back to what it was before the hold.
    Clear {
        /// The GPUs: an index or a UUID, several (0,3), or all. Needed when there are several.
        #[arg(long, value_name = "UUID|INDEX|LIST|all")]
        gpu: Option<String>,
        /// Also take the hold out of the card's boot default.
        #[arg(long)]
        boot_default: bool,
    },
}

/// Runs `gputune hold-temp ...`.
pub fn run_command(args: &HoldTempArgs, options: &TuningOptions) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &args.command {
        HoldTempCommand::Set {
            max_c,
            power,
            gpu,
            boot_default,
        } => {
            let max_temperature_c = parse_max_c(max_c)?;
            let bounds = parse_bounds(power)?;
            let mut client = connect_daemon_or(options, NEEDS_DAEMON)?;
            set(
                &mut client,
                max_temperature_c,
                &bounds,
                gpu.as_deref(),
                *boot_default,
                &mut out,
            )
        }
        HoldTempCommand::Clear { gpu, boot_default } => {
            let mut client = connect_daemon_or(options, NEEDS_DAEMON)?;
            clear(&mut client, gpu.as_deref(), *boot_default, &mut out)
        }
        HoldTempCommand::Show { gpu, json } => {
            let mut client = connect(&ConnectOptions {
                backend: options.backend.clone(),
                socket: options.socket.clone(),
                folders: options.folders.clone(),
                label: command_label(),
            })?;
            show(&mut client, gpu.as_deref(), *json, &mut out)
        }
    }
}

/// `--max-c 80` as whole degrees (the daemon checks the range against the card).
pub fn parse_max_c(text: &str) -> anyhow::Result<u32> {
    let trimmed = text.trim().trim_end_matches("°C").trim_end_matches('C');
    let value = trimmed
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && value.fract() == 0.0 && *value >= 0.0);
    match value {
        // Whole and at most a few hundred: the range check follows at the daemon.
        Some(value) if value <= 1_000.0 => Ok(value as u32),
        Some(_) => bail!(
            "--max-c {} is no card's temperature: give whole degrees, e.g. --max-c 80.",
            crate::text::printable(text)
        ),
        None => bail!(
            "--max-c {} is not a whole number of degrees: give e.g. --max-c 80.",
            crate::text::printable(text)
        ),
    }
}

/// `--power 60%..100%` as its two ends, each read as `apply --power-limit` reads one.
pub fn parse_bounds(text: &str) -> anyhow::Result<[crate::tuning::request::PowerLimitRequest; 2]> {
    let Some((low, high)) = text.split_once("..") else {
        bail!(
            "--power {} is not LOW..HIGH: give e.g. --power 60%..100% or --power 270W..450W.",
            crate::text::printable(text)
        );
    };
    Ok([
        parse_power_limit("--power", low)?,
        parse_power_limit("--power", high)?,
    ])
}

/// The hold for a card with `constraints`: the bounds in milliwatts.
fn hold_for(
    max_temperature_c: u32,
    bounds: &[crate::tuning::request::PowerLimitRequest; 2],
    constraints: &Constraints,
) -> anyhow::Result<TemperatureHold> {
    let [low, high] = bounds;
    Ok(TemperatureHold {
        max_temperature_c,
        min_power_limit_mw: TuneRequest::power_limit_mw(*low, constraints)?,
        max_power_limit_mw: TuneRequest::power_limit_mw(*high, constraints)?,
    })
}

/// `hold-temp set`.
pub fn set(
    client: &mut TuningClient,
    max_temperature_c: u32,
    bounds: &[crate::tuning::request::PowerLimitRequest; 2],
    gpu: Option<&str>,
    boot_default: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let snapshot = snapshot(client)?;
    for index in choose_gpus(&snapshot, gpu, None)? {
        let info = &snapshot.gpus[index as usize];
        let hold = hold_for(max_temperature_c, bounds, &info.constraints)?;
        send(client, &info.identity.uuid, Some(hold), boot_default)?;
        let bounds = power_limit_range(
            hold.min_power_limit_mw,
            hold.max_power_limit_mw,
            info.constraints.power_limit_default_mw,
        );
        writeln!(
            out,
            "GPU {index}: the gputune daemon holds it at or below {max_temperature_c} °C with a power limit of {bounds}{}; `gputune hold-temp clear --gpu {index}` puts the limit back.",
            if boot_default {
                ", from every start too (boot default)"
            } else {
                " until it stops"
            }
        )?;
    }
    Ok(())
}

fn send(
    client: &mut TuningClient,
    uuid: &str,
    hold: Option<TemperatureHold>,
    boot_default: bool,
) -> anyhow::Result<()> {
    let request = Request::SetTemperatureHold {
        gpu_uuid: uuid.to_string(),
        hold,
        boot_default,
    };
    match client.request(request).map_err(refusal)? {
        Response::Done => Ok(()),
        other => Err(unexpected(&other)),
    }
}

/// `hold-temp clear`.
pub fn clear(
    client: &mut TuningClient,
    gpu: Option<&str>,
    boot_default: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let snapshot = snapshot(client)?;
    for index in choose_gpus(&snapshot, gpu, None)? {
        let tuning = snapshot.tunings.get(index as usize);
        let put_back = tuning
            .and_then(|tuning| tuning.temperature_hold.as_ref())
            .and_then(|status| status.put_back_mw);
        send(
            client,
            &snapshot.gpus[index as usize].identity.uuid,
            None,
            boot_default,
        )?;
        writeln!(
            out,
            "GPU {index}: the daemon holds no temperature now{}{}.",
            put_back
                .map(|mw| format!(
                    "; its power limit goes back to {}",
                    gputune_formats::units::watts_exact(mw)
                ))
                .unwrap_or_default(),
            if boot_default {
                ", and none at boot"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// `hold-temp show`.
pub fn show(
    client: &mut TuningClient,
    gpu: Option<&str>,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let snapshot = snapshot(client)?;
    let only = match gpu {
        Some(query) => Some(choose_gpu(&snapshot.gpus, Some(query), None)?),
        None => None,
    };
    let boot = boot_defaults(client)?;
    let report = TemperatureHoldReport {
        format_version: TEMPERATURE_HOLD_REPORT_FORMAT,
        daemon: client.is_daemon(),
        gpus: snapshot
            .tunings
            .iter()
            .filter(|tuning| only.is_none_or(|index| index == tuning.gpu_index))
            .map(|tuning| ShownHold {
                index: tuning.gpu_index,
                uuid: tuning.gpu_uuid.clone(),
                hold: tuning.temperature_hold.clone(),
                boot_hold: boot
                    .iter()
                    .find(|default| default.gpu_uuid.eq_ignore_ascii_case(&tuning.gpu_uuid))
                    .and_then(|default| default.temperature_hold),
            })
            .collect(),
    };
    if json {
        crate::text::write_json_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    if !report.daemon {
        writeln!(
            out,
            "No gputune daemon runs here, so no temperature is held: install it with `sudo gputune daemon install`."
        )?;
    }
    for shown in &report.gpus {
        match &shown.hold {
            Some(status) => writeln!(
                out,
                "GPU {}: held {}, set by {}: {}{}",
                shown.index,
                status.hold.describe(),
                crate::text::printable(&status.set_by),
                crate::text::printable(&status.state.describe()),
                status
                    .put_back_mw
                    .map(|mw| format!(
                        "; cleared, the limit goes back to {}",
                        gputune_formats::units::watts_exact(mw)
                    ))
                    .unwrap_or_default()
            )?,
            None => writeln!(out, "GPU {}: no temperature hold", shown.index)?,
        }
        if let Some(hold) = &shown.boot_hold {
            writeln!(
                out,
                "GPU {}: at every daemon start: {}",
                shown.index,
                hold.describe()
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temperatures_and_bounds_are_read_and_bad_ones_say_how() {
        assert_eq!(parse_max_c("80").unwrap(), 80);
        assert_eq!(parse_max_c("80°C").unwrap(), 80);
        for bad in ["NaN", "inf", "-5", "80.5", "hot"] {
            let error = parse_max_c(bad).unwrap_err().to_string();
            assert!(error.contains("--max-c"), "{bad}: {error}");
        }
        assert!(
            parse_max_c("5000")
                .unwrap_err()
                .to_string()
                .contains("no card's")
        );
        let constraints = Constraints {
            power_limit_min_mw: Some(150_000),
            power_limit_max_mw: Some(600_000),
            power_limit_default_mw: Some(450_000),
            ..Constraints::default()
        };
        let hold = hold_for(80, &parse_bounds("60%..100%").unwrap(), &constraints).unwrap();
        assert_eq!(
            (hold.min_power_limit_mw, hold.max_power_limit_mw),
            (270_000, 450_000)
        );
        let hold = hold_for(80, &parse_bounds("300W..400W").unwrap(), &constraints).unwrap();
        assert_eq!(
            (hold.min_power_limit_mw, hold.max_power_limit_mw),
            (300_000, 400_000)
        );
        assert!(
            parse_bounds("60%-100%")
                .unwrap_err()
                .to_string()
                .contains("LOW..HIGH")
        );
        assert!(
            parse_bounds("NaN..100%")
                .unwrap_err()
                .to_string()
                .contains("--power")
        );
    }
}
