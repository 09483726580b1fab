//! What a GPU is: UUID, name, PCI address, memory size, architecture.

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::{
    NVML_DEVICE_ARCH_ADA, NVML_DEVICE_ARCH_AMPERE, NVML_DEVICE_ARCH_BLACKWELL,
    NVML_DEVICE_ARCH_HOPPER, NVML_DEVICE_ARCH_KEPLER, NVML_DEVICE_ARCH_MAXWELL,
    NVML_DEVICE_ARCH_PASCAL, NVML_DEVICE_ARCH_TURING, NVML_DEVICE_ARCH_UNKNOWN,
    NVML_DEVICE_ARCH_VOLTA, nvmlDevice_t, nvmlDeviceArchitecture_t, nvmlMemory_t, nvmlMemory_v2_t,
    nvmlPciInfo_t, nvmlReturn_t,
};

use crate::call::{Ptr, api_call, get_from_gpu, on_gpu, on_state, write_c_string};
use crate::codes::{ARGUMENT_VERSION_MISMATCH, struct_version};

/// NVML: the GPU's UUID ("GPU-...").
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let text = on_gpu(faults, device, |gpu| Ok(gpu.uuid.clone()))?;
        // SAFETY: NVML's contract: `uuid` holds `length` bytes.
        unsafe { write_c_string(uuid, length, &text) }
    })
}

/// NVML: the number of the GPU's device file (`/dev/nvidiaN`): its index, or what
/// `FAKE_NVML_MINORS` says for it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor_number: *mut c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let out = Ptr::new(minor_number)?;
        let index = on_state(faults, device, |_, index| Ok(index))?;
        let minor = minor_of(index)?;
        // SAFETY: NVML's contract: `minor_number` is null or valid for a write.
        unsafe { out.write(minor) };
        Ok(())
    })
}

/// GPU `index`'s device-file number from `FAKE_NVML_MINORS`, else `index`.
fn minor_of(index: u32) -> Result<u32, crate::codes::Code> {
    let Ok(list) = std::env::var(crate::MINORS_ENV) else {
        return Ok(index);
    };
    let minors: Result<Vec<u32>, _> = list
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| part.trim().parse::<u32>())
        .collect();
    match minors {
        Ok(minors) => Ok(minors.get(index as usize).copied().unwrap_or(index)),
        Err(_) => Err(crate::codes::INVALID_ARGUMENT),
    }
}

/// NVML: the product name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    api_call(|faults| {
        let text = on_gpu(faults, device, |gpu| Ok(gpu.spec.name.clone()))?;
        // SAFETY: NVML's contract: `name` holds `length` bytes.
        unsafe { write_c_string(name, length, &text) }
    })
}

/// NVML: the PCI address and ids.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `pci` is null or valid for a write.
    unsafe {
        get_from_gpu(device, pci, |_, gpu| {
            Ok(pci_info(&gpu.pci_bus_id, &gpu.spec.name))
        })
    }
}

/// NVML: memory size and use, in bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    api_call(|faults| {
        let memory = Ptr::new(memory)?;
        // SAFETY: NVML's contract: `memory` is valid for reads and writes.
        let version = unsafe { memory.read() }.version;
        if version != struct_version::<nvmlMemory_v2_t>(2) {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = on_gpu(faults, device, |gpu| {
            Ok((gpu.spec.memory_total_bytes, gpu.reading.memory_used_bytes))
        })?;
        let used = used.min(total);
        // SAFETY: as above.
        unsafe {
            memory.write(nvmlMemory_v2_t {
                version,
                total,
                reserved: 0,
                free: total - used,
                used,
            });
        }
        Ok(())
    })
}

/// NVML: memory size and use, in bytes, in the first layout (no version, no reserved).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: the pointer is null or valid for a write.
    unsafe {
        get_from_gpu(device, memory, |_, gpu| {
            let total = gpu.spec.memory_total_bytes;
            let used = gpu.reading.memory_used_bytes.min(total);
            Ok(nvmlMemory_t {
                total,
                free: total - used,
                used,
            })
        })
    }
}

/// NVML: the chip generation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    arch: *mut nvmlDeviceArchitecture_t,
) -> nvmlReturn_t {
    // SAFETY: NVML's contract: `arch` is null or valid for a write.
    unsafe {
        get_from_gpu(device, arch, |_, gpu| {
            Ok(architecture_code(&gpu.spec.architecture))
        })
    }
}

/// NVML's number for a generation's name ("Ada" -> 8).
fn architecture_code(name: &str) -> nvmlDeviceArchitecture_t {
    match name.to_ascii_lowercase().as_str() {
        "kepler" => NVML_DEVICE_ARCH_KEPLER,
        "maxwell" => NVML_DEVICE_ARCH_MAXWELL,
        "pascal" => NVML_DEVICE_ARCH_PASCAL,
        "volta" => NVML_DEVICE_ARCH_VOLTA,
        "turing" => NVML_DEVICE_ARCH_TURING,
        "ampere" => NVML_DEVICE_ARCH_AMPERE,
        "ada" => NVML_DEVICE_ARCH_ADA,
        "hopper" => NVML_DEVICE_ARCH_HOPPER,
        "blackwell" => NVML_DEVICE_ARCH_BLACKWELL,
        _ => NVML_DEVICE_ARCH_UNKNOWN,
    }
}

/// The PCI info NVML gives for a bus id written "DDDDDDDD:BB:DD.F".
fn pci_info(bus_id: &str, name: &str) -> nvmlPciInfo_t {
    let mut fields = bus_id
        .split([':', '.'])
        .map(|field| u32::from_str_radix(field, 16).unwrap_or(0));
    let domain = fields.next().unwrap_or(0);
    let bus = fields.next().unwrap_or(0);
    let device = fields.next().unwrap_or(0);
    // Device id in the high half, NVIDIA's vendor id (0x10DE) in the low half, as NVML packs it.
    let chip = if name.contains("4090") {
        0x2684
    } else if name.contains("H100") {
        0x2330
    } else {
        0
    };
    nvmlPciInfo_t {
        busIdLegacy: c_chars(&format!("{domain:04X}:{bus:02X}:{device:02X}.0")),
        domain,
        bus,
        device,
        pciDeviceId: (chip << 16) | 0x10DE,
        pciSubSystemId: 0,
        busId: c_chars(bus_id),
    }
}

/// `text` as a NUL-terminated C string in a fixed buffer, cut short if it does not fit.
fn c_chars<const N: usize>(text: &str) -> [c_char; N] {
    let mut buffer = [0; N];
    for (slot, byte) in buffer
        .iter_mut()
        .zip(text.bytes().take(N.saturating_sub(1)))
    {
        *slot = byte as c_char;
    }
    buffer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_info_parses_the_bus_id() {
        let info = pci_info("00000000:A1:00.0", "NVIDIA GeForce RTX 4090");
        assert_eq!((info.domain, info.bus, info.device), (0, 0xA1, 0));
        assert_eq!(info.pciDeviceId, 0x2684_10DE);
        let bus_id: Vec<u8> = info
            .busId
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(bus_id, b"00000000:A1:00.0");
        let legacy: Vec<u8> = info
            .busIdLegacy
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(legacy, b"0000:A1:00.0");
    }

    #[test]
    fn long_strings_are_cut_and_terminated() {
        let buffer: [c_char; 4] = c_chars("abcdef");
        assert_eq!(buffer, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }
}
