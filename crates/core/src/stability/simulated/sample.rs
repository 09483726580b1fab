//! The small, real work the simulated device does on the CPU: a 64³ GEMM, a few FMA chains and
//! a strip of "VRAM", with as many values corrupted as the margin model draws; and the seeded
//! random numbers it draws them with.

use crate::stability::VramPattern;
use crate::stability::reference::{self, gemm_input_bf16};

/// The sample GEMM is `GEMM_SAMPLE_N`³ (bf16 inputs, fp32 accumulated in a fixed order).
pub const GEMM_SAMPLE_N: usize = 64;
/// How many FMA chains the sample runs (the first seeds of the setup).
pub const FMA_SAMPLE_CHAINS: usize = 64;
/// How many VRAM words the sample writes and reads back (spread over the tested region).
pub const VRAM_SAMPLE_WORDS: usize = 1 << 16;

/// A seeded generator (splitmix64): the same card draws the same errors every run.
#[derive(Debug, Clone)]
pub struct Draws {
    state: u64,
}

impl Draws {
    pub fn seeded(text: &str) -> Draws {
        let seed = text.bytes().fold(0xCBF2_9CE4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
        });
        Draws { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A Poisson-distributed count of mean `mean` (how many results go wrong).
    pub fn poisson(&mut self, mean: f64) -> u64 {
        if mean.is_nan() || mean <= 0.0 {
            return 0;
        }
        if mean < 30.0 {
            // Knuth: multiply uniforms until the product falls below e^-mean.
            let limit = (-mean).exp();
            let (mut count, mut product) = (0u64, self.unit());
            while product > limit {
                count += 1;
                product *= self.unit();
            }
            return count;
        }
        // Large means: the normal approximation (Box-Muller) is close enough.
        let normal =
            (-2.0 * self.unit().ln()).sqrt() * (2.0 * std::f64::consts::PI * self.unit()).cos();
        (mean + mean.sqrt() * normal).round().max(0.0) as u64
    }

    /// `count` distinct positions below `length` (all of them when `count >= length`).
    pub fn positions(&mut self, count: u64, length: usize) -> Vec<usize> {
        let count = usize::try_from(count).unwrap_or(usize::MAX).min(length);
        let mut order: Vec<usize> = (0..length).collect();
        for slot in 0..count {
            let pick = slot + (self.next_u64() % (length - slot) as u64) as usize;
            order.swap(slot, pick);
        }
        order.truncate(count);
        order
    }

    /// A mask with one bit set: what a flipped bit does to a value.
    pub fn bit(&mut self) -> u32 {
        1 << (self.next_u64() % 32)
    }
}

/// The sample GEMM's inputs as f32 (bf16 values widen exactly), row-major.
pub fn gemm_sample_inputs() -> (Vec<f32>, Vec<f32>) {
    let count = (GEMM_SAMPLE_N * GEMM_SAMPLE_N) as u32;
    let widen = |matrix: u32| -> Vec<f32> {
        (0..count)
            .map(|index| f32::from_bits(u32::from(gemm_input_bf16(matrix, index)) << 16))
            .collect()
    };
    (widen(0), widen(1))
}

/// C = A · B, each element summed over k in order with fused multiply-adds.
pub fn gemm_sample(a: &[f32], b: &[f32]) -> Vec<f32> {
    let n = GEMM_SAMPLE_N;
    let mut c = vec![0f32; n * n];
    for row in 0..n {
        for column in 0..n {
            let mut sum = 0f32;
            for k in 0..n {
                sum = a[row * n + k].mul_add(b[k * n + column], sum);
            }
            c[row * n + column] = sum;
        }
    }
    c
}

/// The checksums of the first `chains` chains of `steps` steps.
pub fn fma_sample(chains: usize, steps: u32) -> Vec<u32> {
    (0..chains as u32)
        .map(|seed| reference::fma_chain(seed, steps))
        .collect()
}

/// Flips one bit of each word at `positions` (a chain with a wrong step has another checksum).
pub fn corrupt_words(values: &mut [u32], positions: &[usize], draws: &mut Draws) {
    for &position in positions {
        if let Some(value) = values.get_mut(position) {
            *value ^= draws.bit();
        }
    }
}

/// Flips one bit of each value at `positions`.
pub fn corrupt_floats(values: &mut [f32], positions: &[usize], draws: &mut Draws) {
    for &position in positions {
        if let Some(value) = values.get_mut(position) {
            *value = f32::from_bits(value.to_bits() ^ draws.bit());
        }
    }
}

/// Writes `pattern` to a strip of words spread over `total_words` of VRAM, flips a bit in the
/// words at `corrupt`, reads the strip back and counts the words that differ.
pub fn vram_sample(pattern: VramPattern, total_words: u64, corrupt: u64, draws: &mut Draws) -> u64 {
    let stride = (total_words / VRAM_SAMPLE_WORDS as u64).max(1);
    let index_of = |slot: usize| slot as u64 * stride;
    let mut strip: Vec<u32> = (0..VRAM_SAMPLE_WORDS)
        .map(|slot| pattern.word(index_of(slot)))
        .collect();
    for position in draws.positions(corrupt, strip.len()) {
        strip[position] ^= draws.bit();
    }
    strip
        .iter()
        .enumerate()
        .filter(|&(slot, &word)| word != pattern.word(index_of(slot)))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_counts_average_their_mean() {
        let mut draws = Draws::seeded("test");
        for mean in [0.5, 3.0, 200.0] {
            let total: u64 = (0..2000).map(|_| draws.poisson(mean)).sum();
            let average = total as f64 / 2000.0;
            assert!(
                (average - mean).abs() < mean * 0.1 + 0.1,
                "{mean}: {average}"
            );
        }
        assert_eq!(draws.poisson(0.0), 0);
    }

    #[test]
    fn positions_are_distinct_and_capped() {
        let mut draws = Draws::seeded("test");
        let mut picked = draws.positions(50, 64);
        picked.sort_unstable();
        picked.dedup();
        assert_eq!(picked.len(), 50);
        assert_eq!(draws.positions(500, 64).len(), 64);
    }

    #[test]
    fn the_sample_gemm_repeats_bit_for_bit() {
        let (a, b) = gemm_sample_inputs();
        let first = gemm_sample(&a, &b);
        assert_eq!(reference::count_wrong(&first, &gemm_sample(&a, &b)), 0);
        assert!(first.iter().any(|value| *value != 0.0));
    }
}
