//! The simulated compute device: its results go wrong past the simulated card's silicon margin
//! and never at stock, injected faults are counted exactly, and it reports the modeled
//! throughput of the full-size work.

use std::time::{Duration, Instant};

use gputune_core::device::Backend;
use gputune_core::device::sim::{LoadPattern, SimBackend, SimOptions, SimScenario};
use gputune_core::stability::reference::fma_chain_reference;
use gputune_core::stability::simulated::{INJECTED_FAULT, SimFaults, SimulatedDevice};
use gputune_core::stability::{
    CardConditions, ComputeDevice, ComputeError, ComputeSetup, VramPattern,
};

/// The standard work with 64 MiB of VRAM, so a memory batch takes milliseconds.
fn setup() -> ComputeSetup {
    ComputeSetup {
        vram_max_bytes: Some(64 << 20),
        fma_seeds: 64,
        ..ComputeSetup::standard()
    }
}

fn device(scenario: SimScenario, gpu: u32) -> SimulatedDevice {
    let mut backend = SimBackend::new(&SimOptions {
        scenario,
        load: LoadPattern::Idle,
    });
    let identity = backend
        .identity(gpu)
        .unwrap_or_else(|error| panic!("{error}"));
    let mut device =
        SimulatedDevice::for_gpu(&identity).expect("a simulated card gets the simulated device");
    let setup = setup();
    let reference = fma_chain_reference(setup.fma_seeds, setup.fma_steps);
    let prepared = device
        .prepare(&setup, &reference)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(prepared.device_name, identity.name);
    assert_eq!(prepared.vram_tested_bytes, 64 << 20);
    device
}

fn at(offset_mhz: i32, clock_mhz: u32, temperature_c: u32) -> CardConditions {
    CardConditions {
        graphics_clock_mhz: Some(clock_mhz),
        gpu_clock_offset_mhz: Some(offset_mhz),
        locked_max_mhz: Some(clock_mhz),
        temperature_c: Some(temperature_c),
        memory_clock_offset_mhz: Some(0),
    }
}

fn ok<T>(result: Result<T, ComputeError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn at_stock_no_result_is_ever_wrong() {
    let mut device = device(SimScenario::EightRtx4090, 1);
    let mut checked = 0;
    for (clock_mhz, temperature_c) in [(2790, 88), (2520, 70), (1395, 40), (3105, 95)] {
        device.observe(at(0, clock_mhz, temperature_c));
        for _ in 0..20 {
            let gemm = ok(device.gemm(2));
            let fma = ok(device.fma());
            let vram = ok(device.vram(VramPattern::WalkingOnes { shift: 3 }));
            assert_eq!((gemm.wrong, fma.wrong, vram.wrong), (0, 0, 0));
            checked += gemm.results + fma.results + vram.results;
        }
    }
    assert!(checked > 1_000_000_000, "{checked} results checked");
}

#[test]
fn past_the_margin_results_go_wrong_and_more_so_further_past() {
    let mut device = device(SimScenario::Rtx4090, 0);
    let margin = device.margin();
    let edge_mhz = margin.stable_offset_mhz(2520, 60.0) as i32;
    // Whole 15 MHz bins at or just below the margin: nothing wrong.
    device.observe(at(edge_mhz / 15 * 15, 2520, 60));
    let below: u64 = (0..10).map(|_| ok(device.gemm(10)).wrong).sum();
    assert_eq!(below, 0);
    // One bin past it: a second of GEMM (1,200 passes) finds it.
    device.observe(at((edge_mhz / 15 + 1) * 15, 2520, 60));
    let just_past = ok(device.gemm(1_200));
    assert!(just_past.wrong > 0, "{just_past:?}");
    // Far past it, most of the sample is wrong, and the FMA chains too.
    device.observe(at(edge_mhz + 60, 2520, 60));
    let far_past = ok(device.gemm(10));
    assert!(far_past.wrong > just_past.wrong, "{far_past:?}");
    assert!(ok(device.fma()).wrong > 0);
    // Heat takes margin: at or below the margin when cool, past it at 85 °C.
    device.observe(at(edge_mhz / 15 * 15, 2520, 85));
    assert!(ok(device.gemm(1_200)).wrong > 0);
}

#[test]
fn vram_errs_past_the_memory_margin_only() {
    let mut device = device(SimScenario::Rtx4090, 0);
    let memory_edge = device.margin().memory_offset_mhz as i32;
    let mut conditions = at(0, 2520, 60);
    conditions.memory_clock_offset_mhz = Some(memory_edge);
    device.observe(conditions);
    assert_eq!(ok(device.vram(VramPattern::Alt55)).wrong, 0);
    conditions.memory_clock_offset_mhz = Some(memory_edge + 300);
    device.observe(conditions);
    assert!(ok(device.vram(VramPattern::Alt55)).wrong > 0);
}

#[test]
fn injected_wrong_values_are_counted_exactly() {
    let mut device = device(SimScenario::Rtx4090, 0);
    device.observe(at(0, 2520, 70));
    let faults: SimFaults = device.faults();
    faults.wrong_gemm_values(3);
    faults.wrong_fma_values(2);
    faults.wrong_vram_words(5);
    assert_eq!(ok(device.gemm(4)).wrong, 3);
    assert_eq!(ok(device.fma()).wrong, 2);
    assert_eq!(
        ok(device.vram(VramPattern::OwnAddress { seed: 9 })).wrong,
        5
    );
    // Each injection counts once.
    assert_eq!(ok(device.gemm(4)).wrong, 0);
    assert_eq!(ok(device.fma()).wrong, 0);
    assert_eq!(ok(device.vram(VramPattern::Zeros)).wrong, 0);
}

#[test]
fn an_injected_fault_fails_the_next_call_only() {
    let mut device = device(SimScenario::Rtx4090, 0);
    device.faults().fail_next_call();
    assert_eq!(
        device.gemm(1),
        Err(ComputeError::Fault(INJECTED_FAULT.to_string()))
    );
    assert_eq!(ok(device.gemm(1)).wrong, 0);
}

#[test]
fn a_hang_blocks_the_call_until_released() {
    let mut device = device(SimScenario::Rtx4090, 0);
    let faults = device.faults();
    faults.hang_next_call();
    let worker = std::thread::spawn(move || device.fma().map(|checked| checked.wrong));
    let waiting_since = Instant::now();
    while !faults.is_hanging() {
        assert!(
            waiting_since.elapsed() < Duration::from_secs(30),
            "the call never began"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(!worker.is_finished(), "a hung call does not return");
    faults.release();
    assert_eq!(worker.join().ok(), Some(Ok(0)));
}

#[test]
fn it_reports_the_modeled_throughput_and_takes_that_long() {
    let setup = setup();
    for (scenario, gemm_tflops, vram_gb_per_s, clock_mhz) in [
        (SimScenario::Rtx4090, 165.0, 1000.0, 2520),
        (SimScenario::DatacenterFanless, 700.0, 3000.0, 1980),
    ] {
        let mut device = device(scenario, 0);
        device.observe(at(0, clock_mhz, 60));
        let started = Instant::now();
        let gemm = ok(device.gemm(100));
        assert!(started.elapsed().as_secs_f64() >= gemm.elapsed_s * 0.99);
        assert_eq!(gemm.results, 100 * 4096 * 4096);
        let tflops = gemm.flop / gemm.elapsed_s / 1e12;
        assert!((tflops - gemm_tflops).abs() < 0.01, "{tflops}");
        let vram = ok(device.vram(VramPattern::Ones));
        assert_eq!(vram.bytes, 2 * (64 << 20));
        assert_eq!(vram.results, (64 << 20) / 4);
        let gb_per_s = vram.bytes as f64 / vram.elapsed_s / 1e9;
        assert!((gb_per_s - vram_gb_per_s).abs() < 0.01, "{gb_per_s}");
        let fma = ok(device.fma());
        assert_eq!(fma.flop, setup.fma_flop());
        // Half the clock, half the speed.
        device.observe(at(0, clock_mhz / 2, 60));
        let slower = ok(device.gemm(100));
        assert!((slower.elapsed_s / gemm.elapsed_s - 2.0).abs() < 0.01);
    }
}

#[test]
fn only_the_simulators_cards_get_the_simulated_device() {
    let mut backend = SimBackend::new(&SimOptions {
        scenario: SimScenario::EightRtx4090,
        load: LoadPattern::Idle,
    });
    for gpu in 0..8 {
        let identity = backend
            .identity(gpu)
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(SimulatedDevice::for_gpu(&identity).is_some());
    }
    let mut real = backend
        .identity(0)
        .unwrap_or_else(|error| panic!("{error}"));
    real.uuid = "GPU-12345678-1234-1234-1234-123456789abc".to_string();
    assert!(SimulatedDevice::for_gpu(&real).is_none());
}

#[test]
fn work_before_prepare_or_with_a_wrong_reference_is_refused() {
    let mut backend = SimBackend::new(&SimOptions::default());
    let identity = backend
        .identity(0)
        .unwrap_or_else(|error| panic!("{error}"));
    let mut device = SimulatedDevice::for_gpu(&identity).expect("a simulated card");
    assert!(matches!(device.gemm(1), Err(ComputeError::Unavailable(_))));
    let refused = device.prepare(&setup(), &[0u32; 3]);
    assert!(
        matches!(&refused, Err(ComputeError::Unavailable(message)) if message.contains("3 values")),
        "{refused:?}"
    );
}
