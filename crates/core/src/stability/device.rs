//! Which device checks a card: the simulated one for the simulator's and the fake library's
//! cards (known by their UUIDs), CUDA for every real one; a box check's simulated cards share
//! the simulated box's power supply.

use std::sync::Arc;

use super::compute::{ComputeDevice, ComputeError};
use super::cuda::CudaDevice;
use super::simulated::SimulatedDevice;
use crate::device::sim::SimScenario;
use crate::device::sim::supply::{SupplyModel, SupplyWatch};
use gputune_formats::card::GpuIdentity;

/// The device that runs the check on `identity`'s card.
pub fn open_for(identity: &GpuIdentity) -> Result<Box<dyn ComputeDevice>, ComputeError> {
    match SimulatedDevice::for_gpu(identity) {
        Some(simulated) => Ok(Box::new(simulated)),
        None => Ok(Box::new(CudaDevice::open(&identity.uuid)?)),
    }
}

/// The devices of a box check of `identities`' cards, in that order. Simulated RTX 4090s, more
/// than one, share the simulated 8-GPU box's power supply (`device::sim::supply`), which their
/// bursts begun together can trip.
pub fn open_for_box(
    identities: &[GpuIdentity],
) -> Result<Vec<Box<dyn ComputeDevice>>, ComputeError> {
    let simulated: Vec<Option<SimulatedDevice>> =
        identities.iter().map(SimulatedDevice::for_gpu).collect();
    let supply = (simulated.len() > 1 && simulated.iter().all(Option::is_some))
        .then(|| SupplyModel::of(SimScenario::EightRtx4090))
        .flatten()
        .map(|model| Arc::new(SupplyWatch::new(model, identities.len())));
    let mut devices: Vec<Box<dyn ComputeDevice>> = Vec::new();
    for (card, (identity, device)) in identities.iter().zip(simulated).enumerate() {
        devices.push(match (device, &supply) {
            (Some(device), Some(supply)) => Box::new(device.with_supply(Arc::clone(supply), card)),
            (Some(device), None) => Box::new(device),
            (None, _) => Box::new(CudaDevice::open(&identity.uuid)?),
        });
    }
    Ok(devices)
}
