//! The exact results the CPU computes for the checked work, with the same IEEE operations the
//! kernels use: the FMA chain's end values, and the GEMM's input values.
//!
//! The chain is the logistic map `x ← 3.9 · (x − x²)`, computed as `t = fma(−x, x, x)` then
//! `x = t · 3.9` (`fma.rn.f32`, `mul.rn.f32`): chaotic, so a single flipped bit anywhere in a
//! chain changes its end value instead of being forgotten, and bounded in (0, 1), so it never
//! overflows. `f32::mul_add` is the same correctly rounded operation as `fma.rn.f32`.

/// The map's parameter: chaotic for 3.57 < r < 4.
pub const LOGISTIC_R: f32 = 3.9;

/// The chain's start for `seed`: a value in [0.1, 0.9) spread by a hash.
pub fn fma_chain_start(seed: u32) -> f32 {
    let hashed = hash32(seed);
    // 23 bits of the hash: exact in f32.
    0.1 + 0.8 * ((hashed >> 9) as f32 / (1u32 << 23) as f32)
}

/// The end value of the chain that starts from `seed` after `steps` steps.
pub fn fma_chain(seed: u32, steps: u32) -> f32 {
    let mut x = fma_chain_start(seed);
    for _ in 0..steps {
        let t = (-x).mul_add(x, x);
        x = t * LOGISTIC_R;
    }
    x
}

/// The end values for seeds `0..seeds`, what [`super::ComputeDevice::prepare`] uploads.
pub fn fma_chain_reference(seeds: u32, steps: u32) -> Vec<f32> {
    (0..seeds).map(|seed| fma_chain(seed, steps)).collect()
}

/// How many of `results` differ from `expected` bit for bit (a NaN is always wrong, even
/// against a NaN); extra or missing values count as wrong.
pub fn count_wrong(expected: &[f32], results: &[f32]) -> u64 {
    let differing = expected
        .iter()
        .zip(results)
        .filter(|(want, got)| want.to_bits() != got.to_bits() || got.is_nan())
        .count();
    (differing + expected.len().abs_diff(results.len())) as u64
}

/// A 32-bit integer hash (the "lowbias32" mix): the kernels use the same to fill the GEMM's
/// inputs and to start their chains.
pub fn hash32(value: u32) -> u32 {
    let mut x = value;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The GEMM's input element `index` of matrix `matrix` (0 for A, 1 for B), as bf16 bits: a
/// value in [-1, 1) with 8 significant bits. The kernel `gemm_fill` computes the same.
pub fn gemm_input_bf16(matrix: u32, index: u32) -> u16 {
    let hashed = hash32(index ^ matrix.wrapping_mul(0x9E37_79B9));
    // 8 bits of the hash → a multiple of 1/128 in [-1, 1): exact in bf16.
    let value = ((hashed >> 24) as i32 - 128) as f32 / 128.0;
    (value.to_bits() >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_matches_values_worked_out_by_hand() {
        // One step from 0.5: t = fma(-0.5, 0.5, 0.5) = 0.25 exactly; x = 0.25 × 3.9 rounded.
        let x = 0.5f32;
        let t = (-x).mul_add(x, x);
        assert_eq!(t, 0.25);
        assert_eq!((t * LOGISTIC_R).to_bits(), (0.975f32).to_bits());
        assert_eq!(fma_chain(0, 0), fma_chain_start(0));
    }

    #[test]
    fn the_chain_is_pinned_to_known_end_values() {
        // Pinned so a change to the formula (which the kernel must follow) is seen at once.
        let ends: Vec<u32> = (0..4).map(|seed| fma_chain(seed, 4096).to_bits()).collect();
        assert_eq!(ends, KNOWN_ENDS);
    }

    /// fma_chain(seed, 4096) for seeds 0..4, as computed when the formula was fixed.
    const KNOWN_ENDS: [u32; 4] = [0x3f51_eb6e, 0x3f12_1b54, 0x3e18_61f1, 0x3f57_758d];

    #[test]
    fn the_chain_stays_in_the_unit_interval_and_remembers_a_flipped_bit() {
        for seed in 0..64 {
            let end = fma_chain(seed, 4096);
            assert!(end > 0.0 && end < 1.0, "seed {seed}: {end}");
        }
        // Flip the lowest bit of the start: the end differs.
        let start = fma_chain_start(7);
        let mut x = f32::from_bits(start.to_bits() ^ 1);
        for _ in 0..4096 {
            x = (-x).mul_add(x, x) * LOGISTIC_R;
        }
        assert_ne!(x.to_bits(), fma_chain(7, 4096).to_bits());
    }

    #[test]
    fn wrong_values_are_counted_exactly() {
        let expected = fma_chain_reference(100, 64);
        let mut results = expected.clone();
        assert_eq!(count_wrong(&expected, &results), 0);
        results[3] = f32::from_bits(results[3].to_bits() ^ 1);
        results[50] = f32::NAN;
        results[99] = -results[99];
        assert_eq!(count_wrong(&expected, &results), 3);
        // Two wrong among the first 90, and 10 missing.
        assert_eq!(count_wrong(&expected, &results[..90]), 2 + 10);
    }

    #[test]
    fn gemm_inputs_are_exact_bf16_values_in_range() {
        for index in 0..1000 {
            for matrix in 0..2 {
                let bits = gemm_input_bf16(matrix, index);
                let value = f32::from_bits(u32::from(bits) << 16);
                assert!((-1.0..1.0).contains(&value));
                assert_eq!((value * 128.0).fract(), 0.0);
            }
        }
    }
}
