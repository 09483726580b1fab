//! For measuring and showing the daemon's history, not a test (built by `cargo test`, never
//! run by it):
//!
//! ```text
//! history_tool fill --dir STATE/history --hours 48 --uuid GPU-... [--uuid ...]
//! history_tool load --socket PATH
//! ```
//!
//! `fill` writes `--hours` of one-sample-a-second history ending now for each GPU, as the
//! daemon would have kept it for an overnight training run that slowed down at 3 am (the
//! card got hot and throttled) until another program lowered the power limit at 03:40; stop
//! the daemon first. `load` opens the window's link to a daemon and prints how long reading
//! every GPU's history took (docs/benchmarks.md).

use std::time::{Duration, Instant};

use gputune_core::link::{Link, LinkEvent};
use gputune_core::service::client::{SocketChoice, TuningOptions};
use gputune_core::telemetry::history::Metric;
use gputune_core::telemetry::history::MetricRow;
use gputune_core::telemetry::store::{HistoryOptions, HistoryStore};
use gputune_formats::history::HistoryRow;
use gputune_formats::tuning::ChangeNote;

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let result = match arguments.first().map(String::as_str) {
        Some("fill") => fill(&arguments[1..]),
        Some("load") => load(&arguments[1..]),
        _ => Err(
            "usage: history_tool fill --dir DIR --hours H --uuid UUID... | load --socket PATH"
                .to_string(),
        ),
    };
    if let Err(message) = result {
        eprintln!("history_tool: {message}");
        std::process::exit(2);
    }
}

/// The values after `--name`.
fn values<'a>(arguments: &'a [String], name: &str) -> Vec<&'a str> {
    arguments
        .windows(2)
        .filter(|pair| pair[0] == name)
        .map(|pair| pair[1].as_str())
        .collect()
}

fn fill(arguments: &[String]) -> Result<(), String> {
    let dir = values(arguments, "--dir")
        .first()
        .copied()
        .ok_or("--dir is needed")?;
    let hours: u32 = values(arguments, "--hours")
        .first()
        .map_or(Ok(48), |text| text.parse())
        .map_err(|error| format!("--hours: {error}"))?;
    let uuids = values(arguments, "--uuid");
    if uuids.is_empty() {
        return Err("at least one --uuid is needed".to_string());
    }
    let mut store = HistoryStore::open(HistoryOptions {
        dir: dir.into(),
        keep_hours: hours,
    })
    .map_err(|error| error.to_string())?;
    let now_s = gputune_core::clock::wall_clock_ms() / 1000;
    let first_s = now_s - u64::from(hours) * 3_600;
    let started = Instant::now();
    for (gpu, uuid) in uuids.iter().enumerate() {
        for second in first_s..now_s {
            let local = local_seconds_of_day(second);
            let row = overnight_row(second, local, gpu as u32);
            store.record(uuid, &row);
            // Each night another program lowers the power limit at 03:40, and it goes back up
            // at 09:00 (local time).
            let change = match local {
                LIMITED_FROM_S => Some("the power limit changed from 450 W to 360 W"),
                LIMITED_UNTIL_S => Some("the power limit changed from 360 W to 450 W"),
                _ => None,
            };
            if let Some(what) = change {
                store.note_change(
                    uuid,
                    &ChangeNote {
                        at_ms: second * 1000,
                        by: "another program".to_string(),
                        what: what.to_string(),
                    },
                );
            }
        }
    }
    eprintln!(
        "{} GPU(s) × {hours} h written in {:.1} s",
        uuids.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn local_seconds_of_day(unix_s: u64) -> u64 {
    use chrono::{Local, TimeZone, Timelike};
    Local
        .timestamp_opt(unix_s as i64, 0)
        .single()
        .map_or(0, |time| u64::from(time.num_seconds_from_midnight()))
}

/// When the card starts running hot, when the power limit drops, when it goes back up (local
/// seconds of the day).
const HOT_FROM_S: u64 = 3 * 3_600;
const LIMITED_FROM_S: u64 = 3 * 3_600 + 40 * 60;
const LIMITED_UNTIL_S: u64 = 9 * 3_600;

/// A training card overnight: busy all the time; from 03:00 it runs hot and its clocks sag
/// (thermal slowdown) until the power limit drops at 03:40 and it cools.
fn overnight_row(second: u64, local_s: u64, gpu: u32) -> HistoryRow {
    let wobble = ((second * 7 + u64::from(gpu) * 13) % 17) as u32;
    let hot = (HOT_FROM_S..LIMITED_FROM_S).contains(&local_s);
    let limited = (LIMITED_FROM_S..LIMITED_UNTIL_S).contains(&local_s);
    let (power_w, limit_w, temp_c, clock_mhz, throttle) = if hot {
        (405 + wobble, 450, 86 + wobble % 3, 2280 + wobble * 5, 0x60)
    } else if limited {
        (
            352 + wobble / 2,
            360,
            71 + wobble % 2,
            2550 + wobble * 3,
            0x04,
        )
    } else {
        (428 + wobble, 450, 74 + wobble % 3, 2640 + wobble * 3, 0x04)
    };
    let mut row = HistoryRow::gap(second * 1000 + 250);
    let mut set = |metric: Metric, value: u32| row.values[metric as usize] = Some(value);
    set(Metric::PowerDrawW, power_w * 10);
    set(Metric::PowerLimitW, limit_w * 10);
    set(Metric::TemperatureC, temp_c);
    set(Metric::FanSpeedPct, if hot { 100 } else { 62 });
    set(Metric::GpuClockMhz, clock_mhz);
    set(Metric::SmClockMhz, clock_mhz);
    set(Metric::MemoryClockMhz, 10_501);
    set(Metric::UtilizationGpuPct, 97 + wobble % 3);
    set(Metric::UtilizationMemoryPct, 41 + wobble % 5);
    set(Metric::MemoryUsedGib, 21_870);
    set(Metric::PcieLinkGen, 4);
    set(Metric::PcieLinkWidth, 16);
    set(Metric::PcieLinkGenMax, 4);
    set(Metric::PcieLinkWidthMax, 16);
    set(Metric::PerformanceState, 2);
    row.throttle_bits = Some(throttle);
    row
}

fn load(arguments: &[String]) -> Result<(), String> {
    let socket = values(arguments, "--socket")
        .first()
        .copied()
        .ok_or("--socket is needed")?;
    let options = TuningOptions {
        backend: gputune_core::device::BackendOptions::default(),
        socket: SocketChoice::Path(socket.into()),
        // The daemon's history only: no engine in this process, no profiles.
        folders: gputune_core::folders::Folders::default(),
    };
    let started = Instant::now();
    let link = Link::spawn(options, 1_000, || {}).map_err(|error| error.to_string())?;
    let mut gpus = None;
    let mut loaded = 0;
    let mut rows = 0;
    let mut connected_after = None;
    while gpus.is_none_or(|count| loaded < count) {
        if started.elapsed() > Duration::from_secs(600) {
            return Err("the history did not arrive within 10 minutes".to_string());
        }
        for event in link.drain_events() {
            match event {
                LinkEvent::Connected { gpus: list, .. } => {
                    gpus = Some(list.len());
                    connected_after = Some(started.elapsed());
                }
                LinkEvent::History { rows: got, .. } => {
                    loaded += 1;
                    rows += got.len();
                }
                LinkEvent::Failed(message) => return Err(message),
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "connected after {:.3} s; {loaded} GPU(s), {rows} samples of history read after {:.2} s",
        connected_after.map_or(0.0, |after| after.as_secs_f64()),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
