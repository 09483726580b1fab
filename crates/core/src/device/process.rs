//! The processes that use a GPU: what NVML lists (pid, kind of context, VRAM), and who they are
//! (user and command, from /proc; see `procfs`).

use gputune_formats::card::{GpuProcess, ProcessKind};

/// The longest command line kept, in characters; longer ones end in "…".
pub const MAX_COMMAND_CHARS: usize = 240;

/// One entry of an NVML process list, before /proc is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedProcess {
    pub pid: u32,
    pub kind: ProcessKind,
    pub used_memory_bytes: Option<u64>,
}

/// Merges the compute and graphics lists: a pid in both is one process of both kinds (with the
/// larger VRAM figure; the driver gives the same one in both). Sorted by VRAM, largest first,
/// then by pid.
pub fn merge_lists(lists: impl IntoIterator<Item = ListedProcess>) -> Vec<ListedProcess> {
    let mut merged: Vec<ListedProcess> = Vec::new();
    for listed in lists {
        match merged.iter_mut().find(|known| known.pid == listed.pid) {
            Some(known) => {
                known.kind = known.kind.with(listed.kind);
                known.used_memory_bytes = match (known.used_memory_bytes, listed.used_memory_bytes)
                {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            None => merged.push(listed),
        }
    }
    merged.sort_by(|a, b| {
        b.used_memory_bytes
            .cmp(&a.used_memory_bytes)
            .then(a.pid.cmp(&b.pid))
    });
    merged
}

/// The process that holds the most VRAM (the list is sorted that way), if any.
pub fn top_process(processes: &[GpuProcess]) -> Option<&GpuProcess> {
    processes.first()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(pid: u32, kind: ProcessKind, mib: Option<u64>) -> ListedProcess {
        ListedProcess {
            pid,
            kind,
            used_memory_bytes: mib.map(|mib| mib << 20),
        }
    }

    #[test]
    fn a_pid_in_both_lists_is_one_process_of_both_kinds() {
        let merged = merge_lists([
            listed(10, ProcessKind::Compute, Some(100)),
            listed(20, ProcessKind::Compute, Some(900)),
            listed(10, ProcessKind::Graphics, Some(120)),
            listed(30, ProcessKind::Graphics, None),
        ]);
        assert_eq!(
            merged,
            vec![
                listed(20, ProcessKind::Compute, Some(900)),
                listed(10, ProcessKind::ComputeAndGraphics, Some(120)),
                listed(30, ProcessKind::Graphics, None),
            ]
        );
    }

    #[test]
    fn missing_text_reads_as_exited_or_unknown() {
        let mut process = GpuProcess {
            pid: 1,
            kind: ProcessKind::Compute,
            used_memory_bytes: None,
            user: None,
            command: None,
            exited: true,
            ancestor_pids: Vec::new(),
        };
        assert_eq!(process.command_text(), "(exited)");
        assert_eq!(process.user_text(), "?");
        process.exited = false;
        assert_eq!(process.command_text(), "(unknown)");
        assert_eq!(ProcessKind::ComputeAndGraphics.short(), "C+G");
    }
}
