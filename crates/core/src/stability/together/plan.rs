//! What a box check checks, made from the service's snapshot the same way for the CLI and the
//! window: the listed cards, each with its tuning state and the programs computing on it.

use super::BoxPlan;
use crate::stability::busy::OtherWork;
use gputune_formats::card::GpuProcess;
use gputune_formats::protocol::Snapshot;

impl BoxPlan {
    /// The plan for the cards `indices` of `snapshot` (`processes`: each card's, by index, as
    /// the service's first readings listed them; `force`: check beside other programs), for
    /// `duration_s` (shared by the steps), at `clock_cap_mhz` when one is to be proven. A
    /// rerun of a failing step at lower caps follows a failure while the machine is up.
    pub fn of(
        snapshot: &Snapshot,
        indices: &[u32],
        processes: &[Option<Vec<GpuProcess>>],
        force: bool,
        duration_s: f64,
        clock_cap_mhz: Option<u32>,
    ) -> Result<BoxPlan, String> {
        let mut plan = BoxPlan {
            gpus: Vec::new(),
            tunings: Vec::new(),
            other_work: Vec::new(),
            duration_s,
            clock_cap_mhz,
            find_cap: true,
        };
        for index in indices {
            let (Some(gpu), Some(tuning)) = (
                snapshot.gpus.get(*index as usize),
                snapshot.tunings.get(*index as usize),
            ) else {
                return Err(format!(
                    "GPU {index} is not among the service's cards; the box check did not start."
                ));
            };
            plan.gpus.push(gpu.clone());
            plan.tunings.push(tuning.clone());
            plan.other_work.push(OtherWork {
                processes: processes.get(*index as usize).cloned().flatten(),
                force,
                force_hint: ", or check beside them with --force".to_string(),
            });
        }
        Ok(plan)
    }
}
