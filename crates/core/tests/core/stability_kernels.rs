//! The stability check's kernels, without a GPU: the PTX that crates/core/src/stability/cuda.rs embeds is
//! exactly what Debian's clang-14 makes of crates/core/src/stability/kernels/stability.cu (with the flags
//! of tools/kernels/build-ptx.sh), NVIDIA's ptxas assembles it for sm_89 (Ada) and sm_90
//! (Hopper), and every kernel cuda.rs loads is in it.
//!
//! clang-14 comes from Debian and ptxas from PyPI's nvidia-cuda-nvcc-cu12: `bash .ci/setup
//! test` installs both, ptxas in a virtual environment at
//! `${XDG_CACHE_HOME:-$HOME/.cache}/gputune-tests/cuda-nvcc-venv`; `GPUTUNE_PTXAS` names another
//! ptxas and `CLANG` another clang. Without them these tests fail, saying how to get them.

use std::path::{Path, PathBuf};
use std::process::Command;

use gputune_core::stability::cuda::{KERNEL_NAMES, PTX};

/// Names the ptxas to run.
const PTXAS_ENV: &str = "GPUTUNE_PTXAS";

const SETUP: &str = "run `bash .ci/setup test` (it installs Debian's clang-14, and ptxas from \
                     PyPI's nvidia-cuda-nvcc-cu12 into ~/.cache/gputune-tests/cuda-nvcc-venv)";

fn repository() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn ptxas() -> PathBuf {
    if let Some(path) = std::env::var_os(PTXAS_ENV).filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "{PTXAS_ENV}={} is not a file",
            path.display()
        );
        return path;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    let installed = cache.map(|cache| cache.join("gputune-tests/cuda-nvcc-venv/bin/ptxas"));
    match installed.filter(|path| path.is_file()) {
        Some(path) => path,
        None => panic!("ptxas is not installed: {SETUP}, or set {PTXAS_ENV} to a ptxas."),
    }
}

/// The embedded PTX in a file, for ptxas.
fn ptx_file(folder: &Path) -> PathBuf {
    let path = folder.join("stability.ptx");
    std::fs::write(&path, PTX).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    path
}

#[test]
fn the_embedded_ptx_is_what_the_source_compiles_to() {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang-14".to_string());
    let found = Command::new(&clang).arg("--version").output();
    assert!(
        found.is_ok_and(|output| output.status.success()),
        "{clang} is not installed: {SETUP}."
    );
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let built = folder.path().join("built.ptx");
    let output = Command::new("bash")
        .arg(repository().join("tools/kernels/build-ptx.sh"))
        .arg(&built)
        .output()
        .unwrap_or_else(|error| panic!("bash: {error}"));
    assert!(
        output.status.success(),
        "build-ptx.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let built = std::fs::read_to_string(&built).unwrap_or_else(|error| panic!("{error}"));
    if built != PTX {
        let line = built
            .lines()
            .zip(PTX.lines())
            .position(|(new, old)| new != old)
            .map_or_else(
                || "their lengths".to_string(),
                |index| format!("line {}", index + 1),
            );
        panic!(
            "crates/core/src/stability/kernels/stability.ptx is not what stability.cu compiles to (they \
             differ at {line}): run `bash tools/kernels/build-ptx.sh` and commit the result."
        );
    }
}

/// What `ptxas -v` says of each kernel: registers, stack frame and shared memory (bytes).
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    registers: u32,
    stack_bytes: u32,
    shared_bytes: u32,
}

/// The number just before `unit` in `line` ("Used 48 registers" → 48 for "registers").
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let before = &line[..line.find(unit)?];
    before.split_whitespace().last()?.parse().ok()
}

fn assemble(arch: &str) -> Vec<(String, Usage)> {
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let input = ptx_file(folder.path());
    let output = Command::new(ptxas())
        .args([&format!("-arch={arch}"), "-v", "-o", "/dev/null"])
        .arg(&input)
        .output()
        .unwrap_or_else(|error| panic!("ptxas: {error}"));
    let said = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        output.status.success(),
        "ptxas -arch={arch} failed:\n{said}"
    );
    let mut kernels: Vec<(String, Usage)> = Vec::new();
    for line in said.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            kernels.push((name, Usage::default()));
        } else if let Some((_, usage)) = kernels.last_mut() {
            if let Some(bytes) = number_before(line, "bytes stack frame") {
                usage.stack_bytes = bytes;
            }
            if let Some(registers) = number_before(line, "registers") {
                usage.registers = registers;
                usage.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    eprintln!("ptxas -arch={arch}: {kernels:?}");
    kernels
}

#[test]
fn the_embedded_ptx_assembles_for_ada_and_hopper() {
    for arch in ["sm_89", "sm_90"] {
        let kernels = assemble(arch);
        let names: Vec<&str> = kernels.iter().map(|(name, _)| name.as_str()).collect();
        for name in KERNEL_NAMES {
            assert!(
                names.contains(&name),
                "{arch}: ptxas did not compile {name}: {names:?}"
            );
        }
        for (name, usage) in &kernels {
            // Nothing kept in local memory (the GEMM's accumulators once were, unrolled loops
            // keep them in registers).
            assert!(usage.stack_bytes <= 64, "{arch} {name}: {usage:?}");
            // Static shared memory stays under the 48 KiB a block gets without asking.
            assert!(usage.shared_bytes <= 48 << 10, "{arch} {name}: {usage:?}");
        }
        let gemm = kernels.iter().find(|(name, _)| name == "gemm_bf16");
        // Two GEMM blocks of 256 threads fit a multiprocessor's 64 Ki registers.
        assert!(
            gemm.is_some_and(|(_, usage)| (1..=128).contains(&usage.registers)),
            "{gemm:?}"
        );
    }
}

#[test]
fn every_kernel_the_device_loads_is_an_entry_of_the_ptx() {
    let entries: Vec<&str> = PTX
        .lines()
        .filter_map(|line| line.trim().strip_prefix(".visible .entry "))
        .filter_map(|rest| rest.split('(').next())
        .collect();
    for name in KERNEL_NAMES {
        assert!(
            entries.contains(&name),
            "{name} is not in the PTX: {entries:?}"
        );
    }
    assert_eq!(entries.len(), KERNEL_NAMES.len(), "{entries:?}");
    // The driver compiles it for the card: PTX for sm_80, the oldest with bf16 tensor cores.
    assert!(PTX.contains("\n.target sm_80\n"));
    assert!(PTX.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
}
