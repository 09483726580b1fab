//! The real CUDA device on a real GPU: the kernels' results are what the CPU says (the FMA
//! chain bit for bit, the VRAM patterns word for word, the GEMM's values within fp32
//! rounding), the GEMM repeats to the bit, and a wrong value is counted exactly. It changes
//! no setting of the card (compute only).
//!
//! Ignored where there is no GPU; on a machine with one:
//!   GPUTUNE_CUDA_GPU=GPU-… cargo test -p gputune-core --release --test core stability_cuda -- --ignored --nocapture
//! (without GPUTUNE_CUDA_GPU it takes nvidia-smi's first GPU). It prints the GEMM's TFLOP/s
//! and the memory test's GiB/s at the standard setup.

use std::process::Command;

use gputune_core::stability::cuda::CudaDevice;
use gputune_core::stability::reference::{fma_chain_reference, gemm_input_bf16};
use gputune_core::stability::{ComputeDevice, ComputeSetup, VramPattern};

fn gpu_uuid() -> String {
    if let Ok(uuid) = std::env::var("GPUTUNE_CUDA_GPU") {
        return uuid;
    }
    let output = Command::new("nvidia-smi")
        .args(["--query-gpu=uuid", "--format=csv,noheader"])
        .output()
        .unwrap_or_else(|error| panic!("nvidia-smi: {error}; set GPUTUNE_CUDA_GPU=GPU-…"));
    let listed = String::from_utf8_lossy(&output.stdout).to_string();
    match listed.lines().next() {
        Some(uuid) => uuid.trim().to_string(),
        None => panic!("nvidia-smi lists no GPU; set GPUTUNE_CUDA_GPU=GPU-…"),
    }
}

fn bf16(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p gputune-core --test core stability_cuda -- --ignored"]
fn the_kernels_compute_what_the_cpu_says_on_a_real_gpu() {
    let mut device = CudaDevice::open(&gpu_uuid()).unwrap_or_else(|error| panic!("{error}"));
    let setup = ComputeSetup {
        gemm_n: 1024,
        fma_threads: 1 << 16,
        vram_max_bytes: Some(1 << 30),
        ..ComputeSetup::standard()
    };
    let reference = fma_chain_reference(setup.fma_seeds, setup.fma_steps);
    let prepared = device
        .prepare(&setup, &reference)
        .unwrap_or_else(|error| panic!("{error}"));
    eprintln!("{prepared:?}");
    assert_eq!(prepared.vram_tested_bytes, 1 << 30);

    // The GEMM: C[i][j] = Σ_k A[i][k]·B[k][j], B stored by column (j·n + k).
    let n = setup.gemm_n;
    for row in [0, 517, n - 1] {
        let values = device
            .gemm_reference_row(row)
            .unwrap_or_else(|error| panic!("{error}"));
        for column in [0, 1, 8, 300, n - 1] {
            let want: f64 = (0..n)
                .map(|k| {
                    bf16(gemm_input_bf16(0, row * n + k)) * bf16(gemm_input_bf16(1, column * n + k))
                })
                .sum();
            let got = f64::from(values[column as usize]);
            assert!(
                (got - want).abs() <= 1e-3 * want.abs().max(1.0),
                "C[{row}][{column}]: {got} ≠ {want}"
            );
        }
    }
    let gemm = device.gemm(5).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        (gemm.results, gemm.wrong),
        (5 * u64::from(n) * u64::from(n), 0),
        "{gemm:?}"
    );

    // A wrong value is counted once a pass.
    device
        .corrupt_gemm_reference(12345)
        .unwrap_or_else(|error| panic!("{error}"));
    let gemm = device.gemm(3).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(gemm.wrong, 3, "{gemm:?}");

    let fma = device.fma().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!((fma.results, fma.wrong), (1 << 16, 0), "{fma:?}");

    for pass in 0..2 {
        for pattern in VramPattern::for_pass(pass) {
            let vram = device
                .vram(pattern)
                .unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(
                (vram.results, vram.wrong),
                ((1 << 30) / 4, 0),
                "{pattern:?}: {vram:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p gputune-core --release --test core stability_cuda -- --ignored"]
fn the_standard_load_reports_its_rates_on_a_real_gpu() {
    let mut device = CudaDevice::open(&gpu_uuid()).unwrap_or_else(|error| panic!("{error}"));
    let setup = ComputeSetup::standard();
    let reference = fma_chain_reference(setup.fma_seeds, setup.fma_steps);
    let prepared = device
        .prepare(&setup, &reference)
        .unwrap_or_else(|error| panic!("{error}"));
    let _warm_up = device.gemm(5);
    let gemm = device.gemm(100).unwrap_or_else(|error| panic!("{error}"));
    let fma = device.fma().unwrap_or_else(|error| panic!("{error}"));
    let vram = device.vram(VramPattern::OwnAddress { seed: 7 });
    let vram = vram.unwrap_or_else(|error| panic!("{error}"));
    eprintln!(
        "{} ({}): GEMM {:.1} TFLOP/s, FMA chain {:.1} TFLOP/s, VRAM {:.1} GiB tested at {:.0} GiB/s \
         (written + read)",
        prepared.device_name,
        prepared.runtime,
        gemm.flop / gemm.elapsed_s / 1e12,
        fma.flop / fma.elapsed_s / 1e12,
        prepared.vram_tested_bytes as f64 / f64::from(1u32 << 30),
        vram.bytes as f64 / vram.elapsed_s / f64::from(1u32 << 30),
    );
    assert_eq!((gemm.wrong, fma.wrong, vram.wrong), (0, 0, 0));
}
