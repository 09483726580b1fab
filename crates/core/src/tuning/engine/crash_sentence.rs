//! The one sentence a crash (an Xid) is told in, to every client and in the card's
//! `last_critical`: what the card reported and at which offset, what went back, which sessions
//! ended, and what was kept ("GPU 0 reported Xid 13 (…) at +300 MHz: the GPU clock offset and
//! lock were put back; fans kept (the fan curve goes on).").

use super::Engine;
use crate::device::XidMeaning;
use crate::device::XidResponse;
use crate::tuning::in_force::Control;
use gputune_formats::card::{CriticalEvent, Setting};
use gputune_formats::tuning::{Hold, SettingsInForce};
use gputune_formats::tuning::{SessionId, SettingLeft};

impl Engine {
    /// The one sentence every client is told: "GPU 0 reported Xid 13 (…) at +300 MHz: the GPU
    /// clock offset and lock were put back; fans kept."
    pub(super) fn crash_sentence(
        &self,
        index: u32,
        event: &CriticalEvent,
        before: &SettingsInForce,
        written: &[(Option<SessionId>, Setting)],
        left: &[(Option<SessionId>, SettingLeft)],
        ending: &[SessionId],
    ) -> String {
        let mut offsets = Vec::new();
        if let Some(offset) = before.gpu_clock_offset_mhz.filter(|offset| *offset != 0) {
            offsets.push(format!("{offset:+} MHz"));
        }
        if let Some(offset) = before.memory_clock_offset_mhz.filter(|offset| *offset != 0) {
            offsets.push(format!("memory {offset:+} MHz"));
        }
        let at = if offsets.is_empty() {
            String::new()
        } else {
            format!(" at {}", offsets.join(", "))
        };
        let mut said = format!(
            "GPU {index} reported Xid {} ({}){at}: ",
            event.xid,
            event.meaning()
        );
        // As a user names them: every P-state's offset is the one offset.
        let held: Vec<Hold> = written
            .iter()
            .map(|(_, setting)| Control::of(setting).hold())
            .collect();
        if !held.is_empty() {
            let phrase = clocks_phrase(&held);
            let verb = if phrase.contains(" and ") {
                "were"
            } else {
                "was"
            };
            said.push_str(&format!("{phrase} {verb} put back"));
        } else if event.response() == XidResponse::NothingBack {
            said.push_str("not a tuning's doing, so nothing was put back");
        } else if left.is_empty() && event.response() == XidResponse::MemoryClockBack {
            said.push_str("no memory clock offset or lock is set, so nothing was put back");
        } else if left.is_empty() {
            said.push_str("no clock offset or lock is set, so nothing was put back");
        } else {
            said.push_str("nothing could be put back yet");
        }
        if !left.is_empty() {
            let what: Vec<String> = left
                .iter()
                .map(|(_, left)| format!("{}: {}", left.setting.describe(), left.reason))
                .collect();
            said.push_str(&format!(
                " (not yet: {}; tried again every {} s)",
                what.join("; "),
                super::UNRESTORED_RETRY.as_secs()
            ));
        }
        let ended: Vec<String> = ending
            .iter()
            .filter_map(|id| self.holder_of(*id, index))
            .map(|holder| holder.purpose.describe_by(&holder.by))
            .collect();
        if !ended.is_empty() {
            let rest = ending.iter().any(|id| self.changed_more(*id));
            said.push_str(&format!(
                "; ended {}{}",
                ended.join(" and "),
                if rest {
                    ", putting back what else it changed"
                } else {
                    ""
                }
            ));
        }
        let fans_go_back = ending.iter().any(|id| self.drives_fans(*id, index));
        let mut kept = Vec::new();
        let constraints = &self.gpu(index).info.constraints;
        if constraints.fan_count > 0 && !fans_go_back {
            kept.push(if self.gpu(index).fans.curve.is_some() {
                "fans kept (the fan curve goes on)".to_string()
            } else {
                "fans kept".to_string()
            });
        }
        let limit_goes_back = ending.iter().any(|id| {
            self.sessions
                .get(id)
                .and_then(|session| session.gpus.get(&index))
                .is_some_and(|part| part.held.contains(&Hold::PowerLimit))
        });
        if let Some(limit_mw) = before.power_limit_mw
            && Some(limit_mw) != constraints.power_limit_default_mw
            && !limit_goes_back
        {
            kept.push(format!(
                "power limit {} kept",
                gputune_formats::units::watts_exact(limit_mw)
            ));
        }
        if !kept.is_empty() {
            said.push_str(&format!("; {}", kept.join(", ")));
        }
        said.push('.');
        said
    }
}

/// "the GPU clock offset and lock", "the memory clock offset": what went back, for people.
fn clocks_phrase(held: &[Hold]) -> String {
    let clock =
        |name: &str, offset: Hold, lock: Hold| match (held.contains(&offset), held.contains(&lock))
        {
            (true, true) => Some(format!("the {name} clock offset and lock")),
            (true, false) => Some(format!("the {name} clock offset")),
            (false, true) => Some(format!("the {name} clock lock")),
            (false, false) => None,
        };
    [
        clock("GPU", Hold::GpuClockOffset, Hold::GpuClockLock),
        clock("memory", Hold::MemoryClockOffset, Hold::MemoryClockLock),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", and ")
}
