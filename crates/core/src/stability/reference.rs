//! The exact results the CPU computes for the checked work, with the same IEEE operations the
//! kernels use: the FMA chains' checksums, and the GEMM's input values.
//!
//! A chain is the logistic map `x ← 3.9 · (x − x²)`, computed as `t = fma(−x, x, x)` then
//! `x = t · 3.9` (`fma.rn.f32`, `mul.rn.f32`), bounded in (0, 1) so it never overflows.
//! `f32::mul_add` is the same correctly rounded operation as `fma.rn.f32`. Its end value alone
//! would forget faults: a low bit flipped in one step is often rounded away by the next, and
//! chains of different seeds merge. So every step's result is folded into an FNV-1a checksum
//! (`h ← (h ^ bits(x)) · 16777619`, wrapping): one wrong result in any step changes the
//! checksum for good (xor and an odd multiplier are both one-to-one), and the checksum is what
//! is compared.

/// The map's parameter: chaotic for 3.57 < r < 4.
pub const LOGISTIC_R: f32 = 3.9;

/// The chain's start for `seed`: a value in [0.1, 0.9) spread by a hash.
pub fn fma_chain_start(seed: u32) -> f32 {
    let hashed = hash32(seed);
    // 23 bits of the hash: exact in f32.
    0.1 + 0.8 * ((hashed >> 9) as f32 / (1u32 << 23) as f32)
}

/// FNV-1a's 32-bit offset basis and prime.
pub const CHECKSUM_START: u32 = 0x811C_9DC5;
pub const CHECKSUM_PRIME: u32 = 0x0100_0193;

/// One step of the chain: the next value.
pub fn fma_chain_step(x: f32) -> f32 {
    (-x).mul_add(x, x) * LOGISTIC_R
}

/// `checksum` with the step result `x` folded in.
pub fn fold(checksum: u32, x: f32) -> u32 {
    (checksum ^ x.to_bits()).wrapping_mul(CHECKSUM_PRIME)
}

/// The checksum of the chain that starts from `seed`, over its `steps` results.
pub fn fma_chain(seed: u32, steps: u32) -> u32 {
    let mut x = fma_chain_start(seed);
    let mut checksum = CHECKSUM_START;
    for _ in 0..steps {
        x = fma_chain_step(x);
        checksum = fold(checksum, x);
    }
    checksum
}

/// The checksums for seeds `0..seeds`, what [`super::ComputeDevice::prepare`] uploads.
pub fn fma_chain_reference(seeds: u32, steps: u32) -> Vec<u32> {
    (0..seeds).map(|seed| fma_chain(seed, steps)).collect()
}

/// How many of `results` differ from `expected`; extra or missing values count as wrong.
pub fn count_wrong_words(expected: &[u32], results: &[u32]) -> u64 {
    let differing = expected
        .iter()
        .zip(results)
        .filter(|(want, got)| want != got)
        .count();
    (differing + expected.len().abs_diff(results.len())) as u64
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
        assert_eq!(fma_chain_step(x).to_bits(), (0.975f32).to_bits());
        assert_eq!(fma_chain(0, 0), CHECKSUM_START);
        let one_step = fold(CHECKSUM_START, fma_chain_step(fma_chain_start(0)));
        assert_eq!(fma_chain(0, 1), one_step);
    }

    #[test]
    fn the_chain_is_pinned_to_known_checksums() {
        // Pinned so a change to the formula (which the kernel must follow) is seen at once.
        let ends: Vec<u32> = (0..4).map(|seed| fma_chain(seed, 4096)).collect();
        assert_eq!(ends, KNOWN_CHECKSUMS);
    }

    /// fma_chain(seed, 4096) for seeds 0..4, as computed when the formula was fixed.
    const KNOWN_CHECKSUMS: [u32; 4] = [0x3e59_8b78, 0xef3f_16ae, 0x0e0d_ff60, 0x578a_3074];

    #[test]
    fn one_wrong_step_result_anywhere_changes_the_checksum() {
        let steps = 4096;
        for seed in 0..256 {
            for (wrong_step, bit) in [(0, 0), (100, 3), (2000, 22), (steps - 1, 31)] {
                let mut x = fma_chain_start(seed);
                let mut checksum = CHECKSUM_START;
                for step in 0..steps {
                    x = fma_chain_step(x);
                    if step == wrong_step {
                        x = f32::from_bits(x.to_bits() ^ (1 << bit));
                    }
                    checksum = fold(checksum, x);
                }
                assert_ne!(
                    checksum,
                    fma_chain(seed, steps),
                    "seed {seed}, step {wrong_step}"
                );
            }
        }
        for seed in 0..64 {
            let mut x = fma_chain_start(seed);
            for _ in 0..steps {
                x = fma_chain_step(x);
                assert!(x > 0.0 && x < 1.0, "seed {seed}: {x}");
            }
        }
    }

    #[test]
    fn wrong_values_are_counted_exactly() {
        let expected = fma_chain_reference(100, 64);
        let mut results = expected.clone();
        assert_eq!(count_wrong_words(&expected, &results), 0);
        results[3] ^= 1;
        results[99] ^= 0x8000_0000;
        assert_eq!(count_wrong_words(&expected, &results), 2);
        // One wrong among the first 90, and 10 missing.
        assert_eq!(count_wrong_words(&expected, &results[..90]), 1 + 10);
        let floats = [1.0f32, 2.0, 3.0];
        assert_eq!(count_wrong(&floats, &[1.0, f32::NAN, -3.0]), 2);
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
