//! How the simulated cards reach each other, and what the driver says of P2P between them.
//!
//! The 8-GPU box is two CPU sockets with two PCIe switches each: cards 0-1, 2-3, 4-5 and 6-7
//! share a switch (nvidia-smi's PIX), 0-3 and 4-7 a socket (NODE), and the two halves meet
//! across the sockets (SYS). The stock driver gives GeForce cards no P2P (nvidia-smi topo -p2p
//! shows CNS, "chipset not supported"); a patched one (tinygrad's open kernel modules) enables
//! it between cards of one socket, not across the sockets (TNS). docs/simulator.md, "Links".

use super::SimScenario;
use super::physics::SimError;
use gputune_formats::reports::links::{P2pAccess, P2pStatus, Topology};

/// Which driver the simulated box runs, as far as P2P goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum P2pDriver {
    /// NVIDIA's driver: no P2P on GeForce cards.
    #[default]
    Stock,
    /// A driver patched to enable P2P on GeForce cards.
    Patched,
}

impl P2pDriver {
    /// Parses `FAKE_NVML_P2P`'s values: `stock`, `enabled`.
    pub fn from_name(name: &str) -> Option<P2pDriver> {
        match name.trim() {
            "stock" => Some(P2pDriver::Stock),
            "enabled" | "patched" => Some(P2pDriver::Patched),
            _ => None,
        }
    }
}

/// Cards under one PCIe switch, and under one CPU socket, in the 8-GPU box.
const CARDS_PER_SWITCH: u32 = 2;
const CARDS_PER_SOCKET: u32 = 4;

/// How simulated cards `a` and `b` of a `gpu_count`-card machine reach each other. A card with
/// itself, or one the machine lacks, is refused as NVML refuses it.
pub fn sim_topology(
    scenario: SimScenario,
    gpu_count: u32,
    a: u32,
    b: u32,
) -> Result<Topology, SimError> {
    if a == b || a >= gpu_count || b >= gpu_count {
        return Err(SimError::InvalidArgument);
    }
    Ok(match scenario {
        SimScenario::EightRtx4090 if a / CARDS_PER_SWITCH == b / CARDS_PER_SWITCH => {
            Topology::SingleSwitch
        }
        SimScenario::EightRtx4090 if a / CARDS_PER_SOCKET == b / CARDS_PER_SOCKET => {
            Topology::NumaNode
        }
        _ => Topology::System,
    })
}

/// The driver's P2P status between `a` and `b`, for reads and writes alike.
pub fn sim_p2p_access(
    scenario: SimScenario,
    gpu_count: u32,
    a: u32,
    b: u32,
    driver: P2pDriver,
) -> Result<P2pAccess, SimError> {
    let topology = sim_topology(scenario, gpu_count, a, b)?;
    let status = match (scenario, driver) {
        (SimScenario::DatacenterFanless, _) => P2pStatus::Ok,
        (_, P2pDriver::Stock) => P2pStatus::ChipsetNotSupported,
        (_, P2pDriver::Patched) if topology == Topology::System => P2pStatus::TopologyNotSupported,
        (_, P2pDriver::Patched) => P2pStatus::Ok,
    };
    Ok(P2pAccess {
        read: status,
        write: status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eight_card_box_is_two_sockets_of_two_switches() {
        let of = |a, b| sim_topology(SimScenario::EightRtx4090, 8, a, b);
        assert_eq!(of(0, 1), Ok(Topology::SingleSwitch));
        assert_eq!(of(6, 7), Ok(Topology::SingleSwitch));
        assert_eq!(of(1, 2), Ok(Topology::NumaNode));
        assert_eq!(of(4, 7), Ok(Topology::NumaNode));
        assert_eq!(of(3, 4), Ok(Topology::System));
        assert_eq!(of(0, 7), Ok(Topology::System));
        assert_eq!(of(2, 2), Err(SimError::InvalidArgument));
        assert_eq!(of(0, 8), Err(SimError::InvalidArgument));
    }

    #[test]
    fn the_stock_driver_gives_geforce_cards_no_p2p_and_a_patched_one_does_within_a_socket() {
        let access = |a, b, driver| sim_p2p_access(SimScenario::EightRtx4090, 8, a, b, driver);
        let stock = access(0, 1, P2pDriver::Stock);
        assert_eq!(stock.clone().map(P2pAccess::enabled), Ok(false));
        assert_eq!(
            stock.map(|access| access.read),
            Ok(P2pStatus::ChipsetNotSupported)
        );
        assert_eq!(
            access(0, 3, P2pDriver::Patched).map(P2pAccess::enabled),
            Ok(true)
        );
        assert_eq!(
            access(0, 4, P2pDriver::Patched).map(|access| access.write),
            Ok(P2pStatus::TopologyNotSupported)
        );
        assert_eq!(P2pDriver::from_name("enabled"), Some(P2pDriver::Patched));
        assert_eq!(P2pDriver::from_name("on"), None);
    }
}
