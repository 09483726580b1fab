//! What the real device's CUDA errors mean for a check, and how it finds its card: the pure
//! parts of `cuda.rs`, tested without a GPU.

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::CUresult;

use crate::stability::compute::ComputeError;

/// What `CudaDevice::open` says where the driver's library is missing.
pub const NO_DRIVER: &str = "No CUDA driver (libcuda.so.1) on this machine: the stability check \
                             and the copy test need the NVIDIA driver; install it and run them \
                             again.";

/// The 16 bytes of an NVML UUID ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), the same as
/// CUDA's `cuDeviceGetUuid` gives for that card. `None` for anything else (a MIG instance's
/// "MIG-…" UUID included: the check runs on a whole GPU).
pub fn parse_gpu_uuid(text: &str) -> Option<[u8; 16]> {
    let hex = text.trim().strip_prefix("GPU-")?;
    let groups: Vec<&str> = hex.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|group| group.len()).collect();
    if lengths != [8, 4, 4, 4, 12] || !hex.chars().all(|c| c == '-' || c.is_ascii_hexdigit()) {
        return None;
    }
    let digits: String = groups.concat();
    let mut bytes = [0u8; 16];
    for (index, byte) in bytes.iter_mut().enumerate() {
        let pair = digits.get(index * 2..index * 2 + 2)?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

/// CUDA's UUID bytes (C chars) as bytes.
pub fn cuda_uuid_bytes(bytes: &[std::ffi::c_char; 16]) -> [u8; 16] {
    bytes.map(|byte| byte as u8)
}

/// Why CUDA does not list the card NVML named: CUDA_VISIBLE_DEVICES may hide it.
pub fn not_visible_message(gpu_uuid: &str, cuda_devices: i32, visible: Option<&str>) -> String {
    let seen = match cuda_devices {
        1 => "1 GPU".to_string(),
        count => format!("{count} GPUs"),
    };
    match visible {
        Some(list) => format!(
            "CUDA does not see {gpu_uuid} (it sees {seen}; CUDA_VISIBLE_DEVICES={list} hides the \
             others): add this card to CUDA_VISIBLE_DEVICES, or unset it, and run the check again."
        ),
        None => format!(
            "CUDA does not see {gpu_uuid} (it sees {seen}) although the driver lists it: check the \
             card with nvidia-smi (a card in a MIG mode or a failed state has no CUDA device)."
        ),
    }
}

/// What a CUDA error while `doing` something means: the card failing at the work is
/// instability ([`ComputeError::Fault`]); memory is [`ComputeError::OutOfMemory`]; the rest is
/// a driver or setup problem that says what to do ([`ComputeError::Unavailable`]).
pub fn cuda_error(error: DriverError, doing: &str) -> ComputeError {
    use CUresult::*;
    let name = format!("{:?}", error.0);
    match error.0 {
        CUDA_ERROR_LAUNCH_FAILED
        | CUDA_ERROR_ILLEGAL_ADDRESS
        | CUDA_ERROR_ILLEGAL_INSTRUCTION
        | CUDA_ERROR_MISALIGNED_ADDRESS
        | CUDA_ERROR_INVALID_ADDRESS_SPACE
        | CUDA_ERROR_INVALID_PC
        | CUDA_ERROR_HARDWARE_STACK_ERROR
        | CUDA_ERROR_ECC_UNCORRECTABLE
        | CUDA_ERROR_NVLINK_UNCORRECTABLE
        | CUDA_ERROR_LAUNCH_TIMEOUT
        | CUDA_ERROR_ASSERT
        | CUDA_ERROR_UNKNOWN => ComputeError::Fault(format!(
            "The GPU failed while {doing} ({name}): it does not compute reliably at this setting."
        )),
        CUDA_ERROR_OUT_OF_MEMORY => ComputeError::OutOfMemory(format!(
            "The GPU ran out of memory while {doing} ({name}): close other programs that use it, \
             or leave more memory free, and run the check again."
        )),
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE => ComputeError::Unavailable(format!(
            "CUDA sees no usable GPU ({name}): check that the NVIDIA driver is loaded (nvidia-smi) \
             and that CUDA_VISIBLE_DEVICES does not hide the card."
        )),
        CUDA_ERROR_NOT_INITIALIZED
        | CUDA_ERROR_DEINITIALIZED
        | CUDA_ERROR_STUB_LIBRARY
        | CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | CUDA_ERROR_SYSTEM_NOT_READY
        | CUDA_ERROR_OPERATING_SYSTEM => ComputeError::Unavailable(format!(
            "The NVIDIA driver could not start CUDA ({name}): its kernel module and libcuda must \
             be the same version (reboot after a driver update); then run the check again."
        )),
        CUDA_ERROR_INVALID_PTX
        | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUDA_ERROR_INVALID_IMAGE
        | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        | CUDA_ERROR_JIT_COMPILATION_DISABLED => ComputeError::Unavailable(format!(
            "The driver could not load the check's kernels ({name}): they need a driver for \
             CUDA 11.0 or newer and a card of compute capability 8.0 or newer; update the driver."
        )),
        CUDA_ERROR_DEVICE_UNAVAILABLE
        | CUDA_ERROR_CONTEXT_ALREADY_IN_USE
        | CUDA_ERROR_NOT_PERMITTED => ComputeError::Unavailable(format!(
            "The GPU does not take work from this process ({name}): its compute mode may be \
                 exclusive or prohibited (nvidia-smi -q shows it); free the card and run the check again."
        )),
        _ => ComputeError::Unavailable(format!(
            "CUDA failed while {doing} ({name}); nothing was checked: run the check again, and \
             report it if it repeats."
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_uuids_parse_to_cudas_sixteen_bytes() {
        let bytes = parse_gpu_uuid("GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
        assert_eq!(
            bytes,
            Some([
                0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7,
                0xe8, 0xf9
            ])
        );
        // Upper-case hex is the same card; CUDA's C chars compare as bytes.
        assert_eq!(
            parse_gpu_uuid("GPU-0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9"),
            bytes
        );
        let cuda: [std::ffi::c_char; 16] = bytes.unwrap_or_default().map(|byte| byte as _);
        assert_eq!(Some(cuda_uuid_bytes(&cuda)), bytes);
    }

    #[test]
    fn anything_but_a_whole_gpus_uuid_is_refused() {
        for text in [
            "",
            "GPU-",
            "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
            "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
            "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f",
            "GPU-0a1b2c3d4e5f-6071-8293-a4b5c6d7e8f9",
            "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8fg",
            "GPU-+a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9",
        ] {
            assert_eq!(parse_gpu_uuid(text), None, "{text:?}");
        }
    }

    #[test]
    fn cuda_errors_are_sorted_into_faults_memory_and_setup_problems() {
        let fault = cuda_error(
            DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
            "running the GEMM",
        );
        assert!(
            matches!(&fault, ComputeError::Fault(message)
                if message.contains("running the GEMM") && message.contains("CUDA_ERROR_ILLEGAL_ADDRESS")),
            "{fault:?}"
        );
        for code in [
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        ] {
            assert!(matches!(
                cuda_error(DriverError(code), "x"),
                ComputeError::Fault(_)
            ));
        }
        assert!(matches!(
            cuda_error(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY), "x"),
            ComputeError::OutOfMemory(_)
        ));
        let ptx = cuda_error(
            DriverError(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION),
            "x",
        );
        assert!(
            matches!(&ptx, ComputeError::Unavailable(message) if message.contains("update the driver")),
            "{ptx:?}"
        );
        assert!(matches!(
            cuda_error(DriverError(CUresult::CUDA_ERROR_NO_DEVICE), "x"),
            ComputeError::Unavailable(_)
        ));
    }

    #[test]
    fn a_card_cuda_does_not_see_names_the_variable_that_hides_it() {
        let uuid = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
        let hidden = not_visible_message(uuid, 1, Some("0"));
        assert!(
            hidden.contains(uuid) && hidden.contains("CUDA_VISIBLE_DEVICES=0"),
            "{hidden}"
        );
        assert!(hidden.contains("it sees 1 GPU;"), "{hidden}");
        let unexplained = not_visible_message(uuid, 2, None);
        assert!(unexplained.contains("it sees 2 GPUs") && unexplained.contains("nvidia-smi"));
        assert!(
            !unexplained.contains("CUDA_VISIBLE_DEVICES"),
            "{unexplained}"
        );
    }
}
