//! The topology between cards, their P2P status and their PCIe link, read through the real NVML
//! path (nvml-wrapper, a real dlopen) from the fake libnvidia-ml's 8-GPU box: two sockets of
//! two PCIe switches, the stock driver (no P2P on GeForce cards).

use crate::common::FakeMachine;
use gputune_core::device::Backend;
use gputune_core::device::nvml::NvmlBackend;
use gputune_formats::reports::links::{P2pStatus, PcieLink, Topology};

fn open(machine: &FakeMachine) -> NvmlBackend {
    match NvmlBackend::open(Some(&machine.library)) {
        Ok(backend) => backend,
        Err(error) => panic!("the fake library opens: {error}"),
    }
}

#[test]
fn the_eight_card_box_reads_as_two_sockets_of_two_switches_without_p2p() {
    let machine = FakeMachine::new("8x-rtx4090", "");
    let mut backend = open(&machine);
    let topology = |backend: &mut NvmlBackend, a, b| {
        backend
            .topology(a, b)
            .unwrap_or_else(|error| panic!("{a}-{b}: {error}"))
    };
    assert_eq!(topology(&mut backend, 0, 1), Some(Topology::SingleSwitch));
    assert_eq!(topology(&mut backend, 5, 4), Some(Topology::SingleSwitch));
    assert_eq!(topology(&mut backend, 1, 2), Some(Topology::NumaNode));
    assert_eq!(topology(&mut backend, 3, 4), Some(Topology::System));
    // A card with itself is no pair: NVML's INVALID_ARGUMENT, a reading it cannot give.
    assert_eq!(topology(&mut backend, 2, 2), None);

    let access = backend
        .p2p_access(0, 1)
        .unwrap_or_else(|error| panic!("{error}"))
        .unwrap_or_else(|| panic!("the fake reports P2P"));
    assert_eq!(access.read, P2pStatus::ChipsetNotSupported);
    assert_eq!(access.write, P2pStatus::ChipsetNotSupported);
    assert!(!access.enabled());

    // The link read at once: a training card runs at its best.
    let link = backend
        .pcie_link(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let full = PcieLink {
        generation: 4,
        width: 16,
    };
    assert_eq!(link.max, Some(full));
    assert_eq!(link.current.map(|link| link.generation), Some(4));
}

#[test]
fn an_idle_card_reads_at_gen_1() {
    let machine = FakeMachine::with_load("8x-rtx4090", "", "idle");
    let mut backend = open(&machine);
    let link = backend
        .pcie_link(2)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(link.current.map(|link| link.generation), Some(1));
    assert_eq!(link.max.map(|link| link.generation), Some(4));
}
