//! NVML's C enum values under Rust constant names, so they can be matched on.

use nvml_wrapper_sys::bindings as nvml;

pub(crate) const CLOCK_GRAPHICS: nvml::nvmlClockType_t =
    nvml::nvmlClockType_enum_NVML_CLOCK_GRAPHICS;
pub(crate) const CLOCK_SM: nvml::nvmlClockType_t = nvml::nvmlClockType_enum_NVML_CLOCK_SM;
pub(crate) const CLOCK_MEMORY: nvml::nvmlClockType_t = nvml::nvmlClockType_enum_NVML_CLOCK_MEM;
pub(crate) const CLOCK_VIDEO: nvml::nvmlClockType_t = nvml::nvmlClockType_enum_NVML_CLOCK_VIDEO;

pub(crate) const TEMPERATURE_GPU: nvml::nvmlTemperatureSensors_t =
    nvml::nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU;

pub(crate) const THRESHOLD_SHUTDOWN: nvml::nvmlTemperatureThresholds_t =
    nvml::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SHUTDOWN;
pub(crate) const THRESHOLD_SLOWDOWN: nvml::nvmlTemperatureThresholds_t =
    nvml::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SLOWDOWN;
pub(crate) const THRESHOLD_GPU_MAX: nvml::nvmlTemperatureThresholds_t =
    nvml::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_GPU_MAX;
pub(crate) const THRESHOLD_ACOUSTIC_CURRENT: nvml::nvmlTemperatureThresholds_t =
    nvml::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR;
pub(crate) const THRESHOLD_COUNT: nvml::nvmlTemperatureThresholds_t =
    nvml::nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_COUNT;

pub(crate) const PCIE_UTIL_TX_BYTES: nvml::nvmlPcieUtilCounter_t =
    nvml::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES;
pub(crate) const PCIE_UTIL_RX_BYTES: nvml::nvmlPcieUtilCounter_t =
    nvml::nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES;

pub(crate) const P2P_CAPS_READ: nvml::nvmlGpuP2PCapsIndex_t =
    nvml::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_READ;
pub(crate) const P2P_CAPS_WRITE: nvml::nvmlGpuP2PCapsIndex_t =
    nvml::nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_WRITE;
