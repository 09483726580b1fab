//! Whether a card is free for a check or a scan, asked before anything is measured: another
//! check or scan on it (named from the engine's holders), or other programs computing on it
//! (named with pid, user, command and VRAM). A check beside a training job measures the two
//! together: its memory test reads back only what is left, and a verdict would be about both.

use gputune_formats::card::{GpuProcess, ProcessKind};
use gputune_formats::tuning::{GpuTuning, Holder, SessionPurpose};

/// What else runs on the card, as the service last listed it, and whether to go on anyway.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OtherWork {
    /// The card's processes (`None`: the driver did not list them).
    pub processes: Option<Vec<GpuProcess>>,
    /// Check anyway beside other programs' compute work (`--force`); the verdict says so.
    pub force: bool,
    /// How to go on anyway, for the refusal (", or run it beside them with --force").
    pub force_hint: String,
}

impl OtherWork {
    /// The other programs computing on the card: every compute process but this one.
    pub fn computing(&self) -> Vec<&GpuProcess> {
        let own_pid = std::process::id();
        self.processes
            .iter()
            .flatten()
            .filter(|process| process.kind != ProcessKind::Graphics && process.pid != own_pid)
            .filter(|process| !process.exited)
            .collect()
    }

    /// Refuses a check or scan of GPU `index` (`what`: "check", "scan") when the card is busy.
    /// Ok: the programs it runs beside (only when forced).
    pub fn refusal(
        &self,
        index: u32,
        tuning: &GpuTuning,
        what: &str,
    ) -> Result<Vec<GpuProcess>, String> {
        if let Some(holder) = checking_holder(tuning) {
            return Err(format!(
                "GPU {index} is busy: {}{}; wait for it to end, or stop it there. The {what} did not start; nothing was measured.",
                holder
                    .purpose
                    .describe_by(&crate::text::printable(&holder.by)),
                since(holder)
            ));
        }
        let computing = self.computing();
        if computing.is_empty() {
            return Ok(Vec::new());
        }
        if self.force {
            return Ok(computing.into_iter().cloned().collect());
        }
        Err(format!(
            "GPU {index} is busy: {} {} on it ({}). A {what} beside them measures both together and takes memory they may need. Stop them first{}. The {what} did not start; nothing was measured.",
            computing.len(),
            if computing.len() == 1 {
                "other program computes"
            } else {
                "other programs compute"
            },
            describe_processes(&computing),
            self.force_hint
        ))
    }
}

/// The session of another check or scan on the card, if one runs.
pub fn checking_holder(tuning: &GpuTuning) -> Option<&Holder> {
    tuning.holders.iter().find(|holder| {
        matches!(
            holder.purpose,
            SessionPurpose::Stability | SessionPurpose::Scan | SessionPurpose::BoxCheck
        )
    })
}

/// "pid 4242 (alice) python train.py, 20480 MiB; pid 77 (bob) …".
pub fn describe_processes(processes: &[&GpuProcess]) -> String {
    processes
        .iter()
        .map(|process| {
            let memory = process.used_memory_bytes.map_or_else(
                || "VRAM not reported".to_string(),
                |bytes| format!("{} MiB", bytes >> 20),
            );
            format!(
                "pid {} ({}) {}, {memory}",
                process.pid,
                crate::text::printable(process.user_text()),
                crate::text::printable(process.command_text())
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// " since 14:02:11", when the holder says when it began.
fn since(holder: &Holder) -> String {
    if holder.since_ms == 0 {
        return String::new();
    }
    format!(
        " since {}",
        gputune_formats::units::local_time(holder.since_ms, "%H:%M:%S")
    )
}
