//! The real CUDA device against stand-in driver libraries (a libcuda.so.1 built here with the C
//! compiler): a driver that sees no GPU, one that lacks a function cudarc calls (cudarc panics
//! there; the device must not), and one whose only card is not the one asked for. Each case
//! runs this test binary again with LD_LIBRARY_PATH naming the stand-in, since a process loads
//! libcuda once.

use std::path::Path;
use std::process::Command;

use gputune_core::stability::ComputeError;
use gputune_core::stability::cuda::CudaDevice;

/// Set in the child run: which case it checks.
const CASE_ENV: &str = "GPUTUNE_CUDA_STUB_CASE";
const ASKED: &str = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";

/// The stand-in driver: CUDA_ERROR_NO_DEVICE (100) from cuInit where STUB_NO_DEVICE is set,
/// otherwise one card whose UUID is all 0x11, and no cuDeviceGetUuid where NO_UUID is defined.
const STUB: &str = r#"
#include <stdlib.h>
#include <string.h>
int cuInit(unsigned flags) { (void)flags; return getenv("STUB_NO_DEVICE") ? 100 : 0; }
int cuDeviceGetCount(int *count) { *count = 1; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
#ifndef NO_UUID
int cuDeviceGetUuid(char *uuid, int device) { (void)device; memset(uuid, 0x11, 16); return 0; }
#endif
"#;

fn build_stub(folder: &Path, defines: &[&str]) {
    let source = folder.join("stub.c");
    std::fs::write(&source, STUB).unwrap_or_else(|error| panic!("{error}"));
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(folder.join("libcuda.so.1"))
        .args(defines)
        .arg(&source)
        .output()
        .unwrap_or_else(|error| {
            panic!("cc (a C compiler; `bash .ci/setup test` installs gcc): {error}")
        });
    assert!(
        output.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // cudarc tries libcuda.so first.
    std::os::unix::fs::symlink("libcuda.so.1", folder.join("libcuda.so"))
        .unwrap_or_else(|error| panic!("{error}"));
}

/// Runs `case` in a child of this binary against the stand-in; returns what it printed.
fn run_case(case: &str, defines: &[&str], environment: &[(&str, &str)]) -> String {
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    build_stub(folder.path(), defines);
    let binary = std::env::current_exe().unwrap_or_else(|error| panic!("{error}"));
    let mut command = Command::new(binary);
    command
        .args(["--exact", "child_case", "--ignored", "--nocapture"])
        .env(CASE_ENV, case)
        .env("LD_LIBRARY_PATH", folder.path())
        .env_remove("CUDA_VISIBLE_DEVICES");
    for (name, value) in environment {
        command.env(name, value);
    }
    let output = command.output().unwrap_or_else(|error| panic!("{error}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "case {case} failed:\n{printed}");
    assert!(
        printed.contains("1 passed"),
        "case {case} did not run:\n{printed}"
    );
    printed
}

/// The child: opens the device and checks the error its case expects.
#[test]
#[ignore = "run by the tests below, in a child process with a stand-in libcuda"]
fn child_case() {
    let case = std::env::var(CASE_ENV).unwrap_or_else(|_| panic!("{CASE_ENV} names no case"));
    let error = CudaDevice::open(ASKED).err();
    let Some(ComputeError::Unavailable(message)) = error else {
        panic!("{case}: expected Unavailable, got {error:?}");
    };
    let expected: &[&str] = match case.as_str() {
        "no_device" => &["CUDA_ERROR_NO_DEVICE", "nvidia-smi"],
        "missing_function" => &["The CUDA driver library failed while opening the GPU"],
        "other_card" => &[ASKED, "it sees 1 GPU)", "nvidia-smi"],
        "hidden_card" => &[ASKED, "CUDA_VISIBLE_DEVICES=3"],
        other => panic!("no case {other}"),
    };
    for words in expected {
        assert!(
            message.contains(words),
            "{case}: {message:?} lacks {words:?}"
        );
    }
}

#[test]
fn a_driver_that_sees_no_gpu_says_so() {
    run_case("no_device", &[], &[("STUB_NO_DEVICE", "1")]);
}

#[test]
fn a_driver_without_a_function_the_check_calls_is_an_error_not_a_panic() {
    run_case("missing_function", &["-DNO_UUID"], &[]);
}

#[test]
fn a_card_cuda_does_not_list_is_named_with_what_hides_it() {
    run_case("other_card", &[], &[]);
    run_case("hidden_card", &[], &[("CUDA_VISIBLE_DEVICES", "3")]);
}
