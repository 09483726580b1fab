//! A job's cards, named the way Slurm names them: `SLURM_STEP_GPUS` (an srun step) or
//! `SLURM_JOB_GPUS` (the batch step) list the numbers of the device files gres.conf's `File=`
//! gave the job (`/dev/nvidia3` → 3), which are the cards' NVML minor numbers — not NVML's
//! index order, and not `CUDA_VISIBLE_DEVICES`, which Slurm renumbers from 0 when it
//! constrains devices. So each number is matched to the card whose `minor_number` it is, and
//! the daemon is asked by UUID.

use gputune_formats::tuning::GpuInfo;

/// The most cards one step may name (no node has more; a longer list is not Slurm's).
const MAX_CARDS: usize = 64;

/// The device numbers in Slurm's list ("0,2,3"; Slurm writes no ranges here). An empty
/// list, or Slurm's "NoDevFiles", is no card.
pub fn parse_slurm_gpus(text: &str) -> Result<Vec<u32>, String> {
    let text = text.trim();
    if text.is_empty() || text == "NoDevFiles" {
        return Ok(Vec::new());
    }
    let mut minors = Vec::new();
    for part in text.split(',') {
        let minor = part.trim().parse::<u32>().map_err(|_| {
            format!(
                "gputune: Slurm's GPU list \"{}\" is not device numbers: is gres.conf's File= /dev/nvidiaN for each GPU?",
                gputune_core::text::printable(text)
            )
        })?;
        if !minors.contains(&minor) {
            minors.push(minor);
        }
        if minors.len() > MAX_CARDS {
            return Err(format!(
                "gputune: Slurm's GPU list names more than {MAX_CARDS} cards."
            ));
        }
    }
    Ok(minors)
}

/// The cards with these device numbers, in the list's order, or the sentence naming the
/// number no card has.
pub fn cards_of<'a>(minors: &[u32], gpus: &'a [GpuInfo]) -> Result<Vec<&'a GpuInfo>, String> {
    minors
        .iter()
        .map(|&minor| {
            gpus.iter()
                .find(|gpu| gpu.identity.minor_number == Some(minor))
                .ok_or_else(|| {
                    let known: Vec<String> = gpus
                        .iter()
                        .filter_map(|gpu| gpu.identity.minor_number)
                        .map(|minor| format!("/dev/nvidia{minor}"))
                        .collect();
                    format!(
                        "gputune: Slurm gave this job /dev/nvidia{minor}, but the node's driver lists no such GPU (it has {}): check gres.conf's File= lines.",
                        if known.is_empty() { "none with a device number".to_string() } else { known.join(", ") }
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputune_formats::card::{Constraints, GpuIdentity};

    fn card(index: u32, minor: u32) -> GpuInfo {
        GpuInfo {
            identity: GpuIdentity {
                index,
                uuid: format!("GPU-{index}"),
                name: "NVIDIA GeForce RTX 4090".into(),
                pci_bus_id: String::new(),
                memory_total_bytes: 0,
                driver_version: None,
                nvml_version: None,
                architecture: None,
                minor_number: Some(minor),
            },
            constraints: Constraints::default(),
        }
    }

    #[test]
    fn slurm_numbers_are_device_files_not_nvml_indices() {
        // NVML enumerates by PCI bus; the device files were numbered otherwise.
        let gpus = vec![card(0, 2), card(1, 0), card(2, 3), card(3, 1)];
        let minors = parse_slurm_gpus("0,3").unwrap_or_else(|e| panic!("{e}"));
        let cards = cards_of(&minors, &gpus).unwrap_or_else(|e| panic!("{e}"));
        let uuids: Vec<&str> = cards.iter().map(|gpu| gpu.identity.uuid.as_str()).collect();
        assert_eq!(uuids, ["GPU-1", "GPU-2"]);
        let said = cards_of(&[7], &gpus).expect_err("no /dev/nvidia7");
        assert!(
            said.contains("/dev/nvidia7") && said.contains("/dev/nvidia2"),
            "{said}"
        );
    }

    #[test]
    fn slurms_list_is_read_strictly() {
        assert_eq!(parse_slurm_gpus(""), Ok(vec![]));
        assert_eq!(parse_slurm_gpus("NoDevFiles"), Ok(vec![]));
        assert_eq!(parse_slurm_gpus("1,1,2"), Ok(vec![1, 2]));
        assert!(parse_slurm_gpus("0-3").is_err());
        assert!(parse_slurm_gpus("gpu0").is_err());
        let many: Vec<String> = (0..100).map(|n| n.to_string()).collect();
        assert!(parse_slurm_gpus(&many.join(",")).is_err());
    }
}
