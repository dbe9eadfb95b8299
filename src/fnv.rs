//! FNV-1a, the 64-bit hash of identities that every rank must compute alike (rendezvous and
//! team keys, a host's identity): stable across processes and builds, unlike std's hasher.

/// FNV-1a of `bytes`.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a of `words`, each as its little-endian bytes.
pub(crate) fn fnv1a_words(words: impl IntoIterator<Item = u64>) -> u64 {
    fnv1a(words.into_iter().flat_map(u64::to_le_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_order_matter() {
        // The FNV-1a test vectors: the empty input and "a".
        assert_eq!(fnv1a([]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a_words([1, 2, 3]), fnv1a_words([1, 2, 4]));
        assert_ne!(fnv1a_words([1, 2]), fnv1a_words([2, 1]));
        assert_eq!(fnv1a_words([7]), fnv1a(7u64.to_le_bytes()));
    }
}
