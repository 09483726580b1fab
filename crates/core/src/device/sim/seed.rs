//! Deterministic hashes the simulator seeds its noise and each card's silicon with, so runs
//! repeat exactly and identical cards differ.

/// splitmix64: a well-mixed 64-bit hash of one number.
pub(crate) fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A per-card seed, so eight identical cards do not move in lockstep.
pub(crate) fn text_seed(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
    })
}
