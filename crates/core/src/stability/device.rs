//! Which device checks a card: the simulated one for the simulator's and the fake library's
//! cards (known by their UUIDs), CUDA for every real one.

use super::compute::{ComputeDevice, ComputeError};
use super::cuda::CudaDevice;
use super::simulated::SimulatedDevice;
use gputune_formats::card::GpuIdentity;

/// The device that runs the check on `identity`'s card.
pub fn open_for(identity: &GpuIdentity) -> Result<Box<dyn ComputeDevice>, ComputeError> {
    match SimulatedDevice::for_gpu(identity) {
        Some(simulated) => Ok(Box::new(simulated)),
        None => Ok(Box::new(CudaDevice::open(&identity.uuid)?)),
    }
}
