//! `gputune fan curve set|show|clear`: a fan curve the daemon keeps on a card with no client
//! attached (and, with `--boot`, from its every start), until it is cleared. The curve is
//! checked here (`FanCurve::new`) and again by the daemon; every write goes through the engine.

use std::io::Write;

use anyhow::bail;
use gputune_formats::reports::fan_curves::{FAN_CURVE_REPORT_FORMAT, FanCurveReport, ShownGpu};

use crate::cli::connect::{
    TuningOptions, boot_defaults, choose_gpu, command_label, connect_daemon_or, refusal, snapshot,
    unexpected,
};
use crate::service::client::{ConnectOptions, TuningClient, connect};
use gputune_formats::fan_curve::{CurvePoint, FanCurve};
use gputune_formats::protocol::{Request, Response};
use gputune_formats::tuning::Hold;
use gputune_formats::tuning::SessionPurpose;

/// Said when a curve is to be kept and no daemon answers.
pub const NEEDS_DAEMON: &str = "Keeping a fan curve needs the gputune daemon, which is not running here: install it with `sudo gputune daemon install` (the window, or `gputune run --profile NAME -- COMMAND`, follows a curve only while it runs).";

/// `gputune fan`.
#[derive(Debug, Clone, clap::Args)]
pub struct FanArgs {
    #[command(subcommand)]
    pub command: FanCommand,
}

/// What `gputune fan` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum FanCommand {
    /// A fan curve the gputune daemon keeps on a card until it is cleared.
    Curve {
        #[command(subcommand)]
        command: CurveCommand,
    },
}

/// What `gputune fan curve` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CurveCommand {
    /// Have the daemon keep a curve on a card (it outlives this command and any window).
    Set {
        /// A point TEMPERATURE:SPEED in °C and %, e.g. 70:60; at least two, rising.
        #[arg(long = "point", value_name = "C:PCT", required = true)]
        points: Vec<String>,
        /// Degrees the card must cool before the fans slow down again (0 to 10).
        #[arg(long, value_name = "C", default_value_t = 3.0)]
        hysteresis_c: f64,
        /// The GPU: an index or a UUID. Needed when there are several GPUs.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
        /// Also store it as the card's boot default: the daemon keeps it from every start.
        #[arg(long)]
        boot: bool,
    },
    /// Show the curve kept on each card (or one) and the one in its boot default.
    Show {
        /// Only this GPU: an index or a UUID.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
        /// Print JSON: {"daemon": bool, "gpus": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Stop keeping a card's curve: its fans go back to what they were (the driver's).
    Clear {
        /// The GPU: an index or a UUID. Needed when there are several GPUs.
        #[arg(long, value_name = "UUID|INDEX")]
        gpu: Option<String>,
        /// Also take the curve out of the card's boot default.
        #[arg(long)]
        boot: bool,
    },
}

/// Runs `gputune fan ...`.
pub fn run_command(args: &FanArgs, options: &TuningOptions) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let FanCommand::Curve { command } = &args.command;
    match command {
        CurveCommand::Set {
            points,
            hysteresis_c,
            gpu,
            boot,
        } => {
            let curve = parse_curve(points, *hysteresis_c)?;
            let mut client = connect_daemon_or(options, NEEDS_DAEMON)?;
            set(&mut client, curve, gpu.as_deref(), *boot, &mut out)
        }
        CurveCommand::Clear { gpu, boot } => {
            let mut client = connect_daemon_or(options, NEEDS_DAEMON)?;
            clear(&mut client, gpu.as_deref(), *boot, &mut out)
        }
        CurveCommand::Show { gpu, json } => {
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

/// `--point 40:30 --point 85:100` as a checked curve.
pub fn parse_curve(points: &[String], hysteresis_c: f64) -> anyhow::Result<FanCurve> {
    let mut parsed = Vec::new();
    for text in points {
        let Some(point) = parse_point(text) else {
            bail!(
                "--point {} is not TEMPERATURE:SPEED: write e.g. --point 70:60 for 60 % at 70 °C.",
                crate::text::printable(text)
            );
        };
        parsed.push(point);
    }
    if !(0.0..=10.0).contains(&hysteresis_c) {
        bail!("--hysteresis-c {hysteresis_c} is outside 0-10 °C: give e.g. --hysteresis-c 3.");
    }
    Ok(FanCurve::new(parsed, hysteresis_c)?)
}

fn parse_point(text: &str) -> Option<CurvePoint> {
    let (temperature, speed) = text.split_once(':')?;
    let temperature = temperature
        .trim()
        .trim_end_matches("°C")
        .trim_end_matches('C');
    let speed = speed.trim().trim_end_matches('%');
    let temperature_c: f64 = temperature.trim().parse().ok()?;
    let speed_pct: f64 = speed.trim().parse().ok()?;
    (temperature_c.is_finite() && speed_pct.is_finite()).then_some(CurvePoint {
        temperature_c,
        speed_pct,
    })
}

/// "40 °C → 30 %, 85 °C → 100 % (3 °C hysteresis)".
pub fn describe_curve(curve: &FanCurve) -> String {
    let points: Vec<String> = curve
        .points()
        .iter()
        .map(|point| {
            format!(
                "{} °C → {} %",
                trim(point.temperature_c),
                trim(point.speed_pct)
            )
        })
        .collect();
    format!(
        "{} ({} °C hysteresis)",
        points.join(", "),
        trim(curve.hysteresis_c)
    )
}

fn trim(value: f64) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0}")
    } else {
        format!("{rounded:.1}")
    }
}

/// `fan curve set`.
pub fn set(
    client: &mut TuningClient,
    curve: FanCurve,
    gpu: Option<&str>,
    boot: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let described = describe_curve(&curve);
    let index = send_curve(client, gpu, Some(curve), boot)?;
    writeln!(
        out,
        "GPU {index}: the gputune daemon keeps the fan curve {described}{}; `gputune fan curve clear --gpu {index}` hands the fans back.",
        if boot {
            ", from every start too (boot default)"
        } else {
            " until it stops"
        }
    )?;
    Ok(())
}

/// Asks the daemon to keep `curve` (or none) on the GPU `gpu` names; returns its index.
fn send_curve(
    client: &mut TuningClient,
    gpu: Option<&str>,
    curve: Option<FanCurve>,
    boot: bool,
) -> anyhow::Result<u32> {
    let gpus = snapshot(client)?.gpus;
    let index = choose_gpu(&gpus, gpu, None)?;
    let request = Request::SetFanCurve {
        gpu_uuid: gpus[index as usize].identity.uuid.clone(),
        curve,
        boot_default: boot,
    };
    match client.request(request).map_err(refusal)? {
        Response::Done => Ok(index),
        other => Err(unexpected(&other)),
    }
}

/// `fan curve clear`.
pub fn clear(
    client: &mut TuningClient,
    gpu: Option<&str>,
    boot: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let index = send_curve(client, gpu, None, boot)?;
    writeln!(
        out,
        "GPU {index}: the daemon keeps no fan curve now; the fans are back as they were before it{}.",
        if boot { ", and none at boot" } else { "" }
    )?;
    Ok(())
}

/// `fan curve show`.
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
    let mut shown = FanCurveReport {
        format_version: FAN_CURVE_REPORT_FORMAT,
        daemon: client.is_daemon(),
        gpus: Vec::new(),
    };
    for tuning in &snapshot.tunings {
        if only.is_some_and(|index| index != tuning.gpu_index) {
            continue;
        }
        let holder = tuning
            .holders
            .iter()
            .find(|holder| holder.controls.contains(&Hold::Fans));
        let kept = holder.is_some_and(|holder| holder.purpose == SessionPurpose::KeptFanCurve);
        shown.gpus.push(ShownGpu {
            index: tuning.gpu_index,
            uuid: tuning.gpu_uuid.clone(),
            curve: tuning.fan_curve.clone(),
            kept: kept && tuning.fan_curve.is_some(),
            by: holder
                .filter(|_| tuning.fan_curve.is_some())
                .map(|holder| holder.by.clone()),
            boot_curve: boot
                .iter()
                .find(|default| default.gpu_uuid.eq_ignore_ascii_case(&tuning.gpu_uuid))
                .and_then(|default| default.fan_curve.clone()),
            safety_net_engaged: tuning.fan_safety_engaged,
            last_critical: tuning.last_critical.clone(),
        });
    }
    if json {
        crate::text::write_json_pretty(&mut *out, &shown)?;
        writeln!(out)?;
        return Ok(());
    }
    if !shown.daemon {
        writeln!(
            out,
            "No gputune daemon runs here, so no fan curve is kept: install it with `sudo gputune daemon install`."
        )?;
    }
    for gpu in &shown.gpus {
        let now = match (&gpu.curve, gpu.kept, &gpu.by) {
            (Some(curve), true, by) => format!(
                "kept by the daemon{}: {}",
                by.as_deref()
                    .map(|by| format!(", set by {}", crate::text::printable(by)))
                    .unwrap_or_default(),
                describe_curve(curve)
            ),
            (Some(curve), false, by) => format!(
                "followed by {} while it runs: {}",
                by.as_deref()
                    .map(crate::text::printable)
                    .unwrap_or_else(|| "a client".to_string()),
                describe_curve(curve)
            ),
            (None, _, _) => "no fan curve (the fans are the driver's or set by hand)".to_string(),
        };
        writeln!(out, "GPU {}: {now}", gpu.index)?;
        if gpu.safety_net_engaged {
            writeln!(
                out,
                "GPU {}: the safety net has handed the fans to the driver until the card cools.",
                gpu.index
            )?;
        }
        if let Some(critical) = &gpu.last_critical {
            writeln!(
                out,
                "GPU {}: last crash {}: {}",
                gpu.index,
                gputune_formats::units::local_time(critical.at_ms, "%-d %b %H:%M:%S"),
                critical.sentence
            )?;
        }
        if let Some(curve) = &gpu.boot_curve {
            writeln!(
                out,
                "GPU {}: at every daemon start: {}",
                gpu.index,
                describe_curve(curve)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_read_with_or_without_units_and_bad_ones_say_how() {
        let curve =
            parse_curve(&["40:30".into(), "70°C:60%".into(), "85:100".into()], 3.0).unwrap();
        assert_eq!(curve.points().len(), 3);
        assert_eq!(curve.points()[1].temperature_c, 70.0);
        let error = parse_curve(&["40-30".into(), "85:100".into()], 3.0)
            .unwrap_err()
            .to_string();
        assert!(error.contains("TEMPERATURE:SPEED"), "{error}");
        let error = parse_curve(&["40:30".into(), "85:40".into()], 3.0)
            .unwrap_err()
            .to_string();
        assert!(error.contains("at least 70 %"), "{error}");
        let error = parse_curve(&["40:30".into(), "85:100".into()], 20.0)
            .unwrap_err()
            .to_string();
        assert!(error.contains("0-10"), "{error}");
        assert_eq!(
            describe_curve(&curve),
            "40 °C → 30 %, 70 °C → 60 %, 85 °C → 100 % (3 °C hysteresis)"
        );
    }
}
