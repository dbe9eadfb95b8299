//! Deterministic data and digests shared by the examples and the tests that judge them. An
//! example's data module (`plan.rs`, `pattern.rs`, ...) uses it as `crate::data`, so an
//! example and a test that include such a module with `#[path]` include this file beside it,
//! once, whatever the number of those modules.

/// Fills `buf` with a splitmix64 stream seeded by `seed`.
pub fn fill(seed: u64, buf: &mut [u8]) {
    let mut state = seed ^ 0x5eed_b00c_0dd5_eed5;
    for chunk in buf.chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let bytes = mix64(state).to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// splitmix64's finaliser: a bijection of `u64` whose output bits all depend on every input bit.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 64-bit digest over a sequence of buffers, their lengths included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325)
    }
}

/// The digest of buffers, added in order.
impl<B: AsRef<[u8]>> FromIterator<B> for Digest {
    fn from_iter<I: IntoIterator<Item = B>>(bufs: I) -> Digest {
        let mut digest = Digest::default();
        for buf in bufs {
            digest.add(buf.as_ref());
        }
        digest
    }
}

impl Digest {
    pub fn add(&mut self, bytes: &[u8]) {
        self.mix(bytes.len() as u64);
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(0x0000_0100_0000_01b3);
        self.0 ^= self.0 >> 29;
    }

    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}
