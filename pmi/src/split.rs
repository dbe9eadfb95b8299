//! Storing values longer than the process manager accepts under several keys.
//!
//! Process managers cap values near 1 KiB (hydra and Slurm: 1024 bytes including the NUL), but
//! endpoint addresses of some libfabric providers are longer. Every value is therefore stored
//! with a one-character header under the caller's key:
//!
//! * `key` = `.<value>` when the value fits into one PMI value;
//! * `key` = `#<n>` and `key#0` .. `key#<n-1>` = consecutive pieces of the value otherwise.
//!
//! The header also makes empty values storable, which some servers reject.

/// Header character of a value stored in place.
const INLINE: char = '.';
/// Header character (and chunk-key separator) of a value split into pieces.
const SPLIT: char = '#';

/// How a value is laid out in the key-value space, as read back from its main key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The value itself.
    Inline(String),
    /// The number of chunk keys to fetch and concatenate.
    Split(usize),
}

/// The key holding piece `index` of the value stored under `key`.
pub(crate) fn chunk_key(key: &str, index: usize) -> String {
    format!("{key}{SPLIT}{index}")
}

/// The `(key, value)` pairs to put so that `value` can be read back from `key`, with no stored
/// value longer than `max_len` bytes. Chunks come first and the main key last, so a reader that
/// sees the header also sees every chunk it names.
///
/// `value` must be ASCII (the client checks), so cutting it at any byte offset is valid.
pub(crate) fn split(key: &str, value: &str, max_len: usize) -> Vec<(String, String)> {
    if value.len() < max_len {
        return vec![(key.to_owned(), format!("{INLINE}{value}"))];
    }
    let chunks: Vec<&str> = value
        .as_bytes()
        .chunks(max_len)
        .map(|piece| {
            std::str::from_utf8(piece)
                .expect("the value is ASCII, so every byte offset is a char boundary")
        })
        .collect();
    let mut puts: Vec<(String, String)> = chunks
        .iter()
        .enumerate()
        .map(|(i, piece)| (chunk_key(key, i), (*piece).to_owned()))
        .collect();
    puts.push((key.to_owned(), format!("{SPLIT}{}", chunks.len())));
    puts
}

/// The number of keys [`split`] uses beyond the main key, i.e. the highest chunk index plus one.
pub(crate) fn chunk_count(value_len: usize, max_len: usize) -> usize {
    if value_len < max_len {
        0
    } else {
        value_len.div_ceil(max_len)
    }
}

/// Decodes what [`split`] stored under the main key.
pub(crate) fn parse_header(stored: &str) -> Result<Stored, String> {
    if let Some(value) = stored.strip_prefix(INLINE) {
        return Ok(Stored::Inline(value.to_owned()));
    }
    match stored.strip_prefix(SPLIT).map(str::parse::<usize>) {
        Some(Ok(n)) if n > 0 => Ok(Stored::Split(n)),
        _ => Err(format!(
            "value {stored:?} was not stored by a gaspi PMI client (no '{INLINE}' or '{SPLIT}<n>' header)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back what `split` produced, the way the client does.
    fn reassemble(puts: &[(String, String)], key: &str) -> String {
        let lookup = |k: &str| {
            puts.iter()
                .find(|(pk, _)| pk == k)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        match parse_header(&lookup(key)).unwrap() {
            Stored::Inline(v) => v,
            Stored::Split(n) => (0..n).map(|i| lookup(&chunk_key(key, i))).collect(),
        }
    }

    #[test]
    fn short_values_stay_in_place() {
        let puts = split("addr", "abcd", 10);
        assert_eq!(puts, vec![("addr".to_owned(), ".abcd".to_owned())]);
        assert_eq!(reassemble(&puts, "addr"), "abcd");
        assert_eq!(chunk_count(4, 10), 0);
    }

    #[test]
    fn empty_value_round_trips() {
        let puts = split("k", "", 10);
        assert_eq!(puts[0].1, ".");
        assert_eq!(reassemble(&puts, "k"), "");
    }

    #[test]
    fn long_values_are_split_and_reassembled() {
        let value: String = (0..5000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let puts = split("ep", &value, 800);
        assert_eq!(puts.len(), 7 + 1);
        assert_eq!(chunk_count(value.len(), 800), 7);
        assert!(puts.iter().all(|(_, v)| v.len() <= 800));
        assert_eq!(puts.last().unwrap(), &("ep".to_owned(), "#7".to_owned()));
        assert_eq!(puts[0].0, "ep#0");
        assert_eq!(reassemble(&puts, "ep"), value);
    }

    #[test]
    fn value_of_exactly_max_len_is_split_because_the_header_needs_a_byte() {
        let value = "x".repeat(10);
        let puts = split("k", &value, 10);
        assert_eq!(puts.len(), 2);
        assert_eq!(reassemble(&puts, "k"), value);
        assert_eq!(chunk_count(10, 10), 1);
    }

    #[test]
    fn foreign_values_are_rejected() {
        assert!(parse_header("plain").is_err());
        assert!(parse_header("#").is_err());
        assert!(parse_header("#0").is_err());
        assert!(parse_header("#x").is_err());
        assert_eq!(parse_header("#3"), Ok(Stored::Split(3)));
    }
}
