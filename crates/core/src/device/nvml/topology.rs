//! How two cards reach each other (nvmlDeviceGetTopologyCommonAncestor), what the driver says
//! of P2P between them (nvmlDeviceGetP2PStatus, for reads and for writes), and a card's PCIe
//! link read at once (the readings' is read at most once a second, `slow.rs`, and may predate
//! the load the copy test puts on the link).

use nvml_wrapper::enum_wrappers::device::{
    P2pCapabilitiesIndex, P2pStatus as NvmlP2pStatus, TopologyLevel,
};

use super::NvmlBackend;
use super::errors::optional;
use crate::device::PcieLinkNow;
use gputune_formats::card::DeviceError;
use gputune_formats::reports::links::{P2pAccess, P2pStatus, PcieLink, Topology};

/// NVML's topology level in gputune's words.
pub(super) fn topology_of(level: TopologyLevel) -> Topology {
    match level {
        TopologyLevel::Internal => Topology::Internal,
        TopologyLevel::Single => Topology::SingleSwitch,
        TopologyLevel::Multiple => Topology::MultipleSwitches,
        TopologyLevel::HostBridge => Topology::HostBridge,
        TopologyLevel::Node => Topology::NumaNode,
        TopologyLevel::System => Topology::System,
    }
}

/// NVML's P2P status in gputune's words.
pub(super) fn p2p_status_of(status: NvmlP2pStatus) -> P2pStatus {
    match status {
        NvmlP2pStatus::Ok => P2pStatus::Ok,
        NvmlP2pStatus::ChipsetNotSupported => P2pStatus::ChipsetNotSupported,
        NvmlP2pStatus::GpuNotSupported => P2pStatus::GpuNotSupported,
        NvmlP2pStatus::IohTopologyNotSupported => P2pStatus::TopologyNotSupported,
        NvmlP2pStatus::DisabledByRegkey => P2pStatus::DisabledByRegkey,
        NvmlP2pStatus::NotSupported => P2pStatus::NotSupported,
        NvmlP2pStatus::Unknown => P2pStatus::Unknown,
    }
}

impl NvmlBackend {
    pub(super) fn read_topology(
        &mut self,
        a: u32,
        b: u32,
    ) -> Result<Option<Topology>, DeviceError> {
        let (first, second) = (self.handle(a)?, self.handle(b)?);
        let level = self
            .device_at(first)
            .topology_common_ancestor(self.device_at(second));
        Ok(optional(level, "topology", a)?.map(topology_of))
    }

    pub(super) fn read_p2p_access(
        &mut self,
        a: u32,
        b: u32,
    ) -> Result<Option<P2pAccess>, DeviceError> {
        let (first, second) = (self.handle(a)?, self.handle(b)?);
        let (from, to) = (self.device_at(first), self.device_at(second));
        let read = optional(
            from.p2p_status(&to, P2pCapabilitiesIndex::Read),
            "P2P read status",
            a,
        )?;
        let write = optional(
            from.p2p_status(&to, P2pCapabilitiesIndex::Write),
            "P2P write status",
            a,
        )?;
        Ok(match (read, write) {
            (Some(read), Some(write)) => Some(P2pAccess {
                read: p2p_status_of(read),
                write: p2p_status_of(write),
            }),
            _ => None,
        })
    }

    pub(super) fn read_pcie_link(&mut self, index: u32) -> Result<PcieLinkNow, DeviceError> {
        let handle = self.handle(index)?;
        let device = self.device_at(handle);
        let link = |generation: Option<u32>, width: Option<u32>| {
            Some(PcieLink {
                generation: generation?,
                width: width?,
            })
        };
        Ok(PcieLinkNow {
            current: link(
                optional(device.current_pcie_link_gen(), "PCIe generation", index)?,
                optional(device.current_pcie_link_width(), "PCIe width", index)?,
            ),
            max: link(
                optional(device.max_pcie_link_gen(), "PCIe generation", index)?,
                optional(device.max_pcie_link_width(), "PCIe width", index)?,
            ),
        })
    }
}
