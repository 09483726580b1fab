//! The checked work on the real device: its buffers, and each batch's launches (the kernels'
//! parameters follow their declarations in kernels/stability.cu exactly).

use std::time::Instant;

use cudarc::driver::result;

use super::{
    CudaDevice, DeviceBuffer, GEMM_TILE, Kernel, MAX_GEMM_N, THREADS, VRAM_CHUNK_BYTES, Work,
    cuda_error, param,
};
use crate::stability::compute::{ComputeError, ComputeSetup, VramPattern};
use gputune_formats::reports::stability::{Checked, Prepared};

const GIB: f64 = (1u64 << 30) as f64;

/// Why `setup` cannot run, if it cannot.
fn setup_problem(setup: &ComputeSetup, fma_reference: &[u32]) -> Option<String> {
    let n = setup.gemm_n;
    if n == 0 || !n.is_multiple_of(GEMM_TILE) || n > MAX_GEMM_N {
        return Some(format!(
            "The GEMM's size must be a multiple of {GEMM_TILE} up to {MAX_GEMM_N}, not {n}."
        ));
    }
    if setup.fma_threads == 0 || setup.fma_seeds == 0 {
        return Some("The FMA chain needs at least one thread and one seed.".to_string());
    }
    if fma_reference.len() != setup.fma_seeds as usize {
        return Some(format!(
            "The FMA chain has {} seeds but {} reference values.",
            setup.fma_seeds,
            fma_reference.len()
        ));
    }
    None
}

impl CudaDevice {
    pub(super) fn prepare_work(
        &mut self,
        setup: &ComputeSetup,
        fma_reference: &[u32],
    ) -> Result<Prepared, ComputeError> {
        if let Some(problem) = setup_problem(setup, fma_reference) {
            return Err(ComputeError::Unavailable(problem));
        }
        self.make_current()?;
        self.free_all();
        let elements = setup.gemm_results();
        let gemm_bytes = elements * (2 + 2 + 4 + 4);
        let gemm_memory = |error: ComputeError| match error {
            ComputeError::OutOfMemory(_) => ComputeError::OutOfMemory(format!(
                "The GPU has not enough free memory for the check's {n}×{n} GEMM ({gib:.2} GiB): \
                 close the programs that use it and run the check again.",
                n = setup.gemm_n,
                gib = gemm_bytes as f64 / GIB
            )),
            other => other,
        };
        let a = self
            .allocate(elements * 2, "the GEMM's A")
            .map_err(gemm_memory)?;
        let b = self
            .allocate(elements * 2, "the GEMM's B")
            .map_err(gemm_memory)?;
        let c = self
            .allocate(elements * 4, "the GEMM's C")
            .map_err(gemm_memory)?;
        let c_ref = self
            .allocate(elements * 4, "the GEMM's reference C")
            .map_err(gemm_memory)?;
        let fma_bytes = 4 * u64::from(setup.fma_seeds);
        let fma_reference_buffer = self.allocate(fma_bytes, "the FMA chain's reference")?;
        let counter = self.allocate(8, "the wrong-result counter")?;
        // SAFETY: the buffer holds exactly fma_seeds u32 checksums (checked above).
        unsafe { result::memcpy_htod_sync(fma_reference_buffer.pointer, fma_reference) }
            .map_err(|error| cuda_error(error, "uploading the FMA chain's reference"))?;
        let vram = self.allocate_vram(setup)?;
        let vram_tested_bytes = vram.iter().map(|chunk| chunk.bytes).sum();
        let work = Work {
            setup: *setup,
            a,
            b,
            c,
            c_ref,
            fma_reference: fma_reference_buffer,
            counter,
            vram,
        };

        let mut a_pointer = a.pointer;
        let mut b_pointer = b.pointer;
        let mut count = elements as u32; // at most MAX_GEMM_N² < 2³²
        let blocks = self.stride_blocks(elements);
        self.launch(
            Kernel::GemmFill,
            (blocks, 1),
            &mut [
                param(&mut a_pointer),
                param(&mut b_pointer),
                param(&mut count),
            ],
        )?;
        self.launch_gemm(&work, c_ref)?;
        self.synchronize("computing the GEMM's reference result")?;
        self.work = Some(work);
        Ok(Prepared {
            device_name: self.name.clone(),
            runtime: self.runtime.clone(),
            vram_tested_bytes,
        })
    }

    /// The memory test's region: the free memory less the headroom (at most vram_max_bytes),
    /// in chunks. Where a chunk cannot be had (another process took memory meanwhile), the
    /// region ends there.
    fn allocate_vram(&mut self, setup: &ComputeSetup) -> Result<Vec<DeviceBuffer>, ComputeError> {
        let (free_bytes, _total_bytes) =
            result::mem_get_info().map_err(|error| cuda_error(error, "reading free memory"))?;
        let mut wanted = (free_bytes as u64).saturating_sub(setup.vram_headroom_bytes);
        if let Some(most) = setup.vram_max_bytes {
            wanted = wanted.min(most);
        }
        wanted -= wanted % 16; // the kernels move 16-byte vectors
        let mut chunks = Vec::new();
        let mut allocated = 0;
        while allocated < wanted {
            let bytes = VRAM_CHUNK_BYTES.min(wanted - allocated);
            match self.allocate(bytes, "the memory test's region") {
                Ok(chunk) => chunks.push(chunk),
                Err(ComputeError::OutOfMemory(_)) => break,
                Err(other) => return Err(other),
            }
            allocated += bytes;
        }
        Ok(chunks)
    }

    fn launch_gemm(&self, work: &Work, into: DeviceBuffer) -> Result<(), ComputeError> {
        let mut a_pointer = work.a.pointer;
        let mut b_pointer = work.b.pointer;
        let mut c_pointer = into.pointer;
        let mut n = work.setup.gemm_n;
        let tiles = n / GEMM_TILE;
        self.launch(
            Kernel::GemmBf16,
            (tiles, tiles),
            &mut [
                param(&mut a_pointer),
                param(&mut b_pointer),
                param(&mut c_pointer),
                param(&mut n),
            ],
        )
    }

    pub(super) fn run_gemm(&mut self, passes: u32) -> Result<Checked, ComputeError> {
        let work = self.work()?;
        self.make_current()?;
        self.zero_counter(work.counter)?;
        let elements = work.setup.gemm_results();
        let mut vectors = elements / 4;
        let blocks = self.stride_blocks(vectors);
        let started = Instant::now();
        for _ in 0..passes {
            self.launch_gemm(&work, work.c)?;
            let mut c_pointer = work.c.pointer;
            let mut c_ref_pointer = work.c_ref.pointer;
            let mut counter_pointer = work.counter.pointer;
            self.launch(
                Kernel::CompareF32,
                (blocks, 1),
                &mut [
                    param(&mut c_pointer),
                    param(&mut c_ref_pointer),
                    param(&mut vectors),
                    param(&mut counter_pointer),
                ],
            )?;
        }
        self.synchronize("running the GEMM")?;
        let elapsed_s = started.elapsed().as_secs_f64();
        Ok(Checked {
            results: u64::from(passes) * elements,
            wrong: self.read_counter(work.counter)?,
            flop: f64::from(passes) * work.setup.gemm_flop(),
            bytes: 0,
            elapsed_s,
        })
    }

    pub(super) fn run_fma(&mut self) -> Result<Checked, ComputeError> {
        let work = self.work()?;
        self.make_current()?;
        self.zero_counter(work.counter)?;
        let setup = work.setup;
        let mut reference_pointer = work.fma_reference.pointer;
        let (mut threads, mut steps, mut seeds) =
            (setup.fma_threads, setup.fma_steps, setup.fma_seeds);
        let mut counter_pointer = work.counter.pointer;
        let blocks = setup.fma_threads.div_ceil(THREADS);
        let started = Instant::now();
        self.launch(
            Kernel::FmaChain,
            (blocks, 1),
            &mut [
                param(&mut reference_pointer),
                param(&mut threads),
                param(&mut steps),
                param(&mut seeds),
                param(&mut counter_pointer),
            ],
        )?;
        self.synchronize("running the FMA chain")?;
        let elapsed_s = started.elapsed().as_secs_f64();
        Ok(Checked {
            results: u64::from(setup.fma_threads),
            wrong: self.read_counter(work.counter)?,
            flop: setup.fma_flop(),
            bytes: 0,
            elapsed_s,
        })
    }

    /// Writes the pattern over every chunk, then reads every chunk back: each word sits in
    /// memory for the whole pass before it is checked.
    pub(super) fn run_vram(&mut self, pattern: VramPattern) -> Result<Checked, ComputeError> {
        let work = self.work()?;
        self.make_current()?;
        self.zero_counter(work.counter)?;
        let (kind, code_param) = pattern.code();
        let started = Instant::now();
        for check in [false, true] {
            let mut first_word = 0u64;
            for chunk in &work.vram {
                let mut pointer = chunk.pointer;
                let mut vectors = chunk.bytes / 16;
                let mut first = first_word;
                let (mut kind, mut code_param) = (kind, code_param);
                let mut counter_pointer = work.counter.pointer;
                let blocks = self.stride_blocks(vectors);
                let mut params = vec![
                    param(&mut pointer),
                    param(&mut vectors),
                    param(&mut first),
                    param(&mut kind),
                    param(&mut code_param),
                ];
                let kernel = if check {
                    params.push(param(&mut counter_pointer));
                    Kernel::VramCheck
                } else {
                    Kernel::VramFill
                };
                self.launch(kernel, (blocks, 1), &mut params)?;
                first_word += chunk.bytes / 4;
            }
        }
        self.synchronize("testing VRAM")?;
        let elapsed_s = started.elapsed().as_secs_f64();
        let tested_bytes: u64 = work.vram.iter().map(|chunk| chunk.bytes).sum();
        Ok(Checked {
            results: tested_bytes / 4,
            wrong: self.read_counter(work.counter)?,
            flop: 0.0,
            bytes: 2 * tested_bytes, // written, then read back
            elapsed_s,
        })
    }
}

/// For tests on a real GPU (crates/core/tests/core/stability_cuda.rs): the reference GEMM's values, and a
/// wrong value put into it.
impl CudaDevice {
    /// Row `row` of the first GEMM pass's result (C = A·B).
    pub fn gemm_reference_row(&mut self, row: u32) -> Result<Vec<f32>, ComputeError> {
        super::guarded("reading the GEMM's result", || {
            let work = self.work()?;
            let n = work.setup.gemm_n;
            if row >= n {
                return Err(ComputeError::Unavailable(format!(
                    "The GEMM has no row {row}."
                )));
            }
            self.make_current()?;
            let mut values = vec![0f32; n as usize];
            let offset = u64::from(row) * u64::from(n) * 4;
            // SAFETY: the row lies inside C_ref (row < n).
            unsafe { result::memcpy_dtoh_sync(&mut values, work.c_ref.pointer + offset) }
                .map_err(|error| cuda_error(error, "reading the GEMM's result"))?;
            Ok(values)
        })
    }

    /// Flips the lowest bit of element `index` of the reference result: each later GEMM pass
    /// counts that element wrong once.
    pub fn corrupt_gemm_reference(&mut self, index: u64) -> Result<(), ComputeError> {
        super::guarded("changing the GEMM's result", || {
            let work = self.work()?;
            if index >= work.setup.gemm_results() {
                return Err(ComputeError::Unavailable(format!(
                    "The GEMM has no element {index}."
                )));
            }
            self.make_current()?;
            let pointer = work.c_ref.pointer + index * 4;
            let mut value = [0u32; 1];
            // SAFETY: one element inside C_ref.
            unsafe { result::memcpy_dtoh_sync(&mut value, pointer) }
                .map_err(|error| cuda_error(error, "reading the GEMM's result"))?;
            value[0] ^= 1;
            // SAFETY: as above.
            unsafe { result::memcpy_htod_sync(pointer, &value) }
                .map_err(|error| cuda_error(error, "changing the GEMM's result"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setups_the_kernels_cannot_run_are_refused_with_a_reason() {
        let standard = ComputeSetup::standard();
        let reference = vec![0u32; standard.fma_seeds as usize];
        assert_eq!(setup_problem(&standard, &reference), None);
        let odd = ComputeSetup {
            gemm_n: 1000,
            ..standard
        };
        assert!(setup_problem(&odd, &reference).is_some_and(|problem| problem.contains("1000")));
        let no_seeds = ComputeSetup {
            fma_seeds: 0,
            ..standard
        };
        assert!(setup_problem(&no_seeds, &[]).is_some());
        let short = setup_problem(&standard, &reference[1..]);
        assert!(short.is_some_and(|problem| problem.contains("4095 reference values")));
    }
}
