//! The window's remembered state, as eframe keeps it: RON through `ron::ser::to_string` (what
//! `eframe::set_value` calls) and `ron::from_str` (`eframe::get_value`). Its names are the ones
//! the window has always written (`OneHour`, `Tune`): a state eframe cannot read is dropped
//! silently, so a renamed variant or field would lose every user's choices
//! (`crates/formats/src/window.rs`).

use gputune_formats::window::{
    DEFAULT_INTERVAL_MS, RememberedMonitor, RememberedWindow, Tab, TimeWindow,
};

use super::values::UUID;
use super::{formats_dir, golden};

/// A state as the window leaves it: a GPU's graphs open over the last hour, sampled every
/// 250 ms, on the Tune tab, default profiles applied on start.
fn realistic() -> RememberedWindow {
    RememberedWindow {
        selected_gpu_uuid: Some(UUID.to_string()),
        monitor: RememberedMonitor {
            window: TimeWindow::OneHour,
        },
        interval_ms: 250,
        tab: Tab::Tune,
        apply_default_profiles_on_start: true,
    }
}

/// Every tab and every time window once (a variant added fails to compile here: pin it too).
fn every_word() -> Vec<RememberedWindow> {
    let tabs = [Tab::Monitor, Tab::Tune, Tab::Profiles, Tab::Plan, Tab::Box];
    for tab in tabs {
        match tab {
            Tab::Monitor | Tab::Tune | Tab::Profiles | Tab::Plan | Tab::Box => {}
        }
    }
    for window in TimeWindow::ALL {
        match window {
            TimeWindow::OneMinute
            | TimeWindow::TenMinutes
            | TimeWindow::OneHour
            | TimeWindow::SixHours
            | TimeWindow::Day => {}
        }
    }
    TimeWindow::ALL
        .into_iter()
        .zip(tabs.into_iter().cycle())
        .map(|(window, tab)| RememberedWindow {
            monitor: RememberedMonitor { window },
            tab,
            ..RememberedWindow::default()
        })
        .collect()
}

fn to_ron(value: &RememberedWindow) -> String {
    match ron::ser::to_string(value) {
        Ok(text) => text,
        Err(error) => panic!("{value:?} does not serialize: {error}"),
    }
}

fn from_ron(text: &str) -> RememberedWindow {
    match ron::from_str(text) {
        Ok(value) => value,
        Err(error) => panic!("{text} does not read: {error}"),
    }
}

#[test]
fn the_window_state_writes_the_bytes_eframe_stores_and_reads_back() {
    let values: Vec<RememberedWindow> = std::iter::once(realistic())
        .chain(std::iter::once(RememberedWindow::default()))
        .chain(every_word())
        .collect();
    let text: String = values.iter().map(|value| to_ron(value) + "\n").collect();
    golden("window-state.ron", text.as_bytes());

    let path = formats_dir().join("window-state.ron");
    let stored = match std::fs::read_to_string(&path) {
        Ok(stored) => stored,
        Err(error) => panic!("{} could not be read: {error}", path.display()),
    };
    let read: Vec<RememberedWindow> = stored.lines().map(from_ron).collect();
    assert_eq!(read, values);
}

/// What the window before `gputune_formats::window` saved (its `RememberedState`, with
/// `MonitorView`'s `window` and `Tab`, `TimeWindow` as serde derived them), written by hand.
const SAVED_BY_THE_PREVIOUS_VERSION: &str = "(selected_gpu_uuid:Some(\"GPU-5a1e0c2d-0000-4000-8000-000000000001\"),monitor:(window:OneHour),interval_ms:500,tab:Tune,apply_default_profiles_on_start:true)";

#[test]
fn a_state_saved_by_the_previous_version_still_loads_and_is_written_the_same() {
    let expected = RememberedWindow {
        interval_ms: 500,
        ..realistic()
    };
    assert_eq!(from_ron(SAVED_BY_THE_PREVIOUS_VERSION), expected);
    assert_eq!(to_ron(&expected), SAVED_BY_THE_PREVIOUS_VERSION);
}

#[test]
fn a_missing_field_is_its_default_and_an_unknown_one_is_ignored() {
    assert_eq!(from_ron("()"), RememberedWindow::default());
    assert_eq!(RememberedWindow::default().interval_ms, DEFAULT_INTERVAL_MS);
    assert_eq!(
        from_ron("(monitor:(),tab:Plan)"),
        RememberedWindow {
            tab: Tab::Plan,
            ..RememberedWindow::default()
        }
    );
    assert_eq!(
        from_ron("(selected_gpu_uuid:None,monitor:(window:Day),interval_ms:1000)"),
        RememberedWindow {
            monitor: RememberedMonitor {
                window: TimeWindow::Day,
            },
            interval_ms: 1000,
            ..RememberedWindow::default()
        }
    );
    // A newer window's field is ignored, the rest kept.
    assert_eq!(
        from_ron("(tab:Profiles,graph_height:240,monitor:(window:SixHours,smoothing:true))"),
        RememberedWindow {
            monitor: RememberedMonitor {
                window: TimeWindow::SixHours,
            },
            tab: Tab::Profiles,
            ..RememberedWindow::default()
        }
    );
}
