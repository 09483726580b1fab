//! Talking to GPUs: the `Backend` trait that the real NVIDIA backend (`nvml`) and the
//! simulator (`sim`) implement. The types every other room uses (identity, readings,
//! constraints, settings, errors) are formats, defined in `formats::card`; their methods are
//! here.

pub mod gate;
pub mod nvml;
pub mod process;
pub mod procfs;
pub mod sim;
pub mod worker;
mod xid;

use std::path::PathBuf;

use gputune_formats::card::GpuProcess;
pub use xid::{UNKNOWN_XID, XID_TABLE, XidClass, XidMeaning, XidResponse};

use gate::ValidatedSetting;
use gputune_formats::card::{
    BackendKind, Constraints, CriticalEvent, DeviceError, FanMode, GpuIdentity, OffsetRangeMhz,
    PstateOffset, PstateOffsetRange, Telemetry,
};
use gputune_formats::reports::links::{P2pAccess, PcieLink, Topology};

/// The P-states compute work runs in: P0, and P2, where GeForce cards run CUDA (they leave P0
/// to graphics). An offset for compute is written to each of them the card offers offsets in.
pub const COMPUTE_PSTATES: [u32; 2] = [0, 2];

/// The compute P-states among `ranges` whose offset can be changed, in order (P0, then P2).
pub fn adjustable_compute_pstates(ranges: &[PstateOffsetRange]) -> Vec<u32> {
    COMPUTE_PSTATES
        .into_iter()
        .filter(|pstate| {
            ranges
                .iter()
                .any(|range| range.pstate == *pstate && range.range().has_room())
        })
        .collect()
}

/// The range a compute offset may take: what every adjustable compute P-state accepts (their
/// overlap); P0's range when none is adjustable (the card reports it, with no room).
pub fn compute_offset_range(ranges: &[PstateOffsetRange]) -> Option<OffsetRangeMhz> {
    let adjustable = adjustable_compute_pstates(ranges);
    let of = |pstate: u32| ranges.iter().find(|range| range.pstate == pstate);
    if adjustable.is_empty() {
        return of(0).map(PstateOffsetRange::range);
    }
    let chosen: Vec<OffsetRangeMhz> = adjustable
        .iter()
        .filter_map(|pstate| of(*pstate).map(PstateOffsetRange::range))
        .collect();
    let min_mhz = chosen.iter().map(|range| range.min_mhz).max()?;
    let max_mhz = chosen.iter().map(|range| range.max_mhz).min()?;
    Some(OffsetRangeMhz {
        min_mhz,
        max_mhz: max_mhz.max(min_mhz),
    })
}

/// The offset compute runs at, of each P-state's: P2's where the card reports one (GeForce
/// cards run CUDA in P2), else P0's.
pub fn compute_offset_mhz(offsets: &[PstateOffset]) -> Option<i32> {
    let of = |pstate: u32| {
        offsets
            .iter()
            .find(|offset| offset.pstate == pstate)
            .map(|offset| offset.offset_mhz)
    };
    of(2).or_else(|| of(0))
}

/// "P0, P2": P-state numbers for people.
pub fn describe_pstates(pstates: &[u32]) -> String {
    pstates
        .iter()
        .map(|pstate| format!("P{pstate}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The settings of a card that NVML can read back. Clock locks cannot be read through NVML:
/// the tuning engine keeps its own record of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentSettings {
    /// The power limit set (not the enforced one, which a board limit may lower).
    pub power_limit_mw: Option<u32>,
    /// The GPU clock offset compute runs at (`compute_offset_mhz` of the P-states below; P0's
    /// when the driver does not say per P-state).
    pub gpu_clock_offset_mhz: Option<i32>,
    pub memory_clock_offset_mhz: Option<i32>,
    /// Each fan's mode; `None` when the card has no fans or does not report who drives them.
    pub fans: Option<Vec<FanMode>>,
    /// Every P-state's GPU clock offset the card reports; empty when it does not say per
    /// P-state.
    pub gpu_clock_offsets: Vec<PstateOffset>,
    pub memory_clock_offsets: Vec<PstateOffset>,
}

/// Opens another handle to the same GPUs, for another thread (see `device::worker`).
pub type Reopener = std::sync::Arc<dyn Fn() -> Result<Box<dyn Backend>, DeviceError> + Send + Sync>;

/// A source of GPUs: the real driver or the simulator. Each handle is used by one thread at a
/// time; `reopener` makes another for another thread (docs/architecture.md, Threads).
pub trait Backend: Send {
    fn kind(&self) -> BackendKind;
    fn gpu_count(&mut self) -> Result<u32, DeviceError>;
    fn identity(&mut self, index: u32) -> Result<GpuIdentity, DeviceError>;
    fn constraints(&mut self, index: u32) -> Result<Constraints, DeviceError>;
    fn telemetry(&mut self, index: u32) -> Result<Telemetry, DeviceError>;
    /// The settings NVML can read back; `None` for what the card does not report.
    fn current_settings(&mut self, index: u32) -> Result<CurrentSettings, DeviceError>;
    /// The power limit the card enforces now (one cheap read, unlike a whole snapshot).
    fn enforced_power_limit(&mut self, index: u32) -> Result<Option<u32>, DeviceError> {
        Ok(self.telemetry(index)?.power_limit_mw)
    }
    /// The processes using GPU `index`, most VRAM first, with their users and commands;
    /// `None` when the card does not list them.
    fn processes(&mut self, index: u32) -> Result<Option<Vec<GpuProcess>>, DeviceError>;
    /// Writes one setting. Only `device::gate` can make a `ValidatedSetting`.
    fn apply(&mut self, index: u32, setting: &ValidatedSetting) -> Result<(), DeviceError>;
    /// How to open another handle to the same GPUs (the same simulated machine, the same
    /// NVML library), so a second thread can sample or revert while this one is busy.
    fn reopener(&self) -> Reopener;
    /// How GPUs `a` and `b` reach each other (NVML's common ancestor); `None` where the backend
    /// cannot tell.
    fn topology(&mut self, a: u32, b: u32) -> Result<Option<Topology>, DeviceError> {
        let _ = (a, b);
        Ok(None)
    }
    /// Whether the driver lets `a` read and write `b`'s memory directly (NVML's P2P status);
    /// `None` where the backend cannot tell.
    fn p2p_access(&mut self, a: u32, b: u32) -> Result<Option<P2pAccess>, DeviceError> {
        let _ = (a, b);
        Ok(None)
    }
    /// GPU `index`'s PCIe link read now (a reading's may be a second old, from before a load
    /// began).
    fn pcie_link(&mut self, index: u32) -> Result<PcieLinkNow, DeviceError> {
        Ok(PcieLinkNow::of(&self.telemetry(index)?))
    }
    /// Copies run on GPU `index` for about `duration_ms`. A real card sees its own traffic (its
    /// link trains up by itself); the simulated one is told, and trains its link up likewise.
    fn copies_running(&mut self, index: u32, duration_ms: u64) -> Result<(), DeviceError> {
        let _ = (index, duration_ms);
        Ok(())
    }
    /// Starts listening for critical errors (Xids) on every GPU that reports them. A simulated
    /// card raises Xid 13 when it goes busy past its silicon's hard limit.
    fn watch_critical_events(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
    /// Waits at most `timeout_ms` for the next critical error; `None` when none came.
    fn next_critical_event(
        &mut self,
        timeout_ms: u32,
    ) -> Result<Option<CriticalEvent>, DeviceError> {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(timeout_ms)));
        Ok(None)
    }
}

/// A card's PCIe link as read now: the link it runs and the most it can train to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcieLinkNow {
    pub current: Option<PcieLink>,
    pub max: Option<PcieLink>,
}

impl PcieLinkNow {
    /// The link a reading holds.
    pub fn of(telemetry: &Telemetry) -> PcieLinkNow {
        let link = |generation: Option<u32>, width: Option<u32>| {
            Some(PcieLink {
                generation: generation?,
                width: width?,
            })
        };
        PcieLinkNow {
            current: link(telemetry.pcie_link_gen, telemetry.pcie_link_width),
            max: link(telemetry.pcie_link_gen_max, telemetry.pcie_link_width_max),
        }
    }
}

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    /// NVML when it loads and finds a GPU, else the simulator.
    #[default]
    Auto,
    Nvml,
    Sim,
}

/// How to open a backend: the user's choice and where to find the pieces.
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    pub choice: BackendChoice,
    /// Path of libnvidia-ml; the system's default search when `None`.
    pub nvml_library_path: Option<PathBuf>,
    pub sim: sim::SimOptions,
}

/// An opened backend, and why the simulator stands in for NVML when it does.
pub struct OpenedBackend {
    pub backend: Box<dyn Backend>,
    /// Set when `auto` fell back to the simulator: the NVML error, for the banner and log.
    pub fallback_reason: Option<String>,
}

/// Opens the backend the user asked for. `auto` falls back to the simulator when NVML fails to
/// load or finds no GPU, and says why in `fallback_reason`.
pub fn open_backend(options: &BackendOptions) -> Result<OpenedBackend, DeviceError> {
    let open_sim = || -> Box<dyn Backend> { Box::new(sim::SimBackend::new(&options.sim)) };
    match options.choice {
        BackendChoice::Sim => Ok(OpenedBackend {
            backend: open_sim(),
            fallback_reason: None,
        }),
        BackendChoice::Nvml => Ok(OpenedBackend {
            backend: Box::new(nvml::NvmlBackend::open(
                options.nvml_library_path.as_deref(),
            )?),
            fallback_reason: None,
        }),
        BackendChoice::Auto => {
            match nvml::NvmlBackend::open(options.nvml_library_path.as_deref()) {
                Ok(backend) => Ok(OpenedBackend {
                    backend: Box::new(backend),
                    fallback_reason: None,
                }),
                Err(error) => {
                    tracing::warn!("NVML unavailable, using the simulated GPU: {error}");
                    Ok(OpenedBackend {
                        backend: open_sim(),
                        fallback_reason: Some(error.to_string()),
                    })
                }
            }
        }
    }
}

/// Finds a GPU by index ("0") or UUID (full, or a unique prefix of at least 8 characters).
pub fn resolve_gpu(backend: &mut dyn Backend, query: &str) -> Result<u32, DeviceError> {
    let count = backend.gpu_count()?;
    let uuids = (0..count)
        .map(|index| backend.identity(index).map(|identity| identity.uuid))
        .collect::<Result<Vec<_>, _>>()?;
    resolve_among(&uuids, query)
}

/// Finds a GPU among `uuids` (in index order) by index or UUID (full, or a unique prefix of
/// at least 8 characters).
pub fn resolve_among(uuids: &[String], query: &str) -> Result<u32, DeviceError> {
    let query = query.trim();
    let not_found = || DeviceError::GpuNotFound {
        query: crate::text::printable(query),
    };
    if let Ok(index) = query.parse::<u32>() {
        return if (index as usize) < uuids.len() {
            Ok(index)
        } else {
            Err(not_found())
        };
    }
    let wanted = query.to_ascii_lowercase();
    let matches: Vec<u32> = uuids
        .iter()
        .enumerate()
        .filter(|(_, uuid)| {
            let uuid = uuid.to_ascii_lowercase();
            uuid == wanted || (wanted.len() >= 8 && uuid.starts_with(&wanted))
        })
        .map(|(index, _)| index as u32)
        .collect();
    match matches.as_slice() {
        [index] => Ok(*index),
        _ => Err(not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(gpu: Option<(i32, i32)>, memory: Option<(i32, i32)>) -> Constraints {
        let range = |(min_mhz, max_mhz)| OffsetRangeMhz { min_mhz, max_mhz };
        Constraints {
            gpu_clock_offset_range: gpu.map(range),
            memory_clock_offset_range: memory.map(range),
            ..Constraints::default()
        }
    }

    #[test]
    fn an_offset_range_with_no_room_is_not_adjustable() {
        // What an H200 with driver 580 answers: supported, from 0 to 0 MHz.
        let h200 = offsets(Some((0, 0)), Some((0, 0)));
        assert!(!h200.clock_offsets_supported());
        assert_eq!(h200.adjustable_gpu_clock_offset_range(), None);
        assert_eq!(h200.adjustable_memory_clock_offset_range(), None);
        let rtx4090 = offsets(Some((-1000, 1000)), Some((-2000, 3000)));
        assert!(rtx4090.clock_offsets_supported());
        assert_eq!(
            rtx4090.adjustable_gpu_clock_offset_range(),
            rtx4090.gpu_clock_offset_range
        );
        let memory_only = offsets(Some((0, 0)), Some((-2000, 3000)));
        assert!(memory_only.clock_offsets_supported());
        assert_eq!(memory_only.adjustable_gpu_clock_offset_range(), None);
        assert!(!offsets(None, None).clock_offsets_supported());
    }
}
