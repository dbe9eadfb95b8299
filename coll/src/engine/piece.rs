//! Collectives larger than a lane, run as pieces.
//!
//! A collective whose staging exceeds the team's lane runs as several collectives, one per
//! *piece*: piece `k` moves bytes `[k·c, (k+1)·c)` of every block (a [`Cut`]), so each
//! piece's schedule is the algorithm's schedule for blocks of at most `c` bytes, and its
//! staging fits a lane. Each piece's schedule addresses the caller's buffers as if they held
//! only the piece's bytes, blocks packed one after the other (its *view*); a [`Blocks`] map
//! takes a span of the view to the byte ranges of the caller's buffer. Pieces run on the
//! lanes one after the other like any collectives, so a long collective is pipelined
//! through the lanes.

/// Bytes `[at, at + len)` of every block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    pub(crate) at: u64,
    pub(crate) len: u64,
}

impl Cut {
    /// The whole of blocks of up to `len` bytes.
    pub(crate) fn whole(len: u64) -> Cut {
        Cut { at: 0, len }
    }

    /// The bytes of a block of `block` bytes that the cut takes.
    pub(crate) fn of(&self, block: u64) -> u64 {
        block.saturating_sub(self.at).min(self.len)
    }

    /// The cuts of `c` bytes that cover blocks of up to `largest` bytes, in order.
    pub(crate) fn all(largest: u64, c: u64) -> impl Iterator<Item = Cut> {
        let c = c.max(1);
        (0..largest.div_ceil(c)).map(move |k| Cut {
            at: k * c,
            len: c.min(largest - k * c),
        })
    }
}

/// Where a piece's view of a caller's buffer lies in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocks {
    /// Per block that the cut takes bytes of: its start in the view, its start in the
    /// buffer, and its length; ascending.
    parts: Vec<(u64, u64, u64)>,
}

impl Blocks {
    /// The map of `cut` over a buffer of `blocks` (their sizes, packed in order).
    pub(crate) fn new(blocks: &[u64], cut: Cut) -> Blocks {
        let mut parts = Vec::new();
        let (mut view, mut real) = (0, 0);
        for &block in blocks {
            let len = cut.of(block);
            if len > 0 {
                parts.push((view, real + cut.at, len));
            }
            view += len;
            real += block;
        }
        Blocks { parts }
    }

    /// The byte ranges of the buffer, as `(start, len)` in order, that hold the view's
    /// `len` bytes from `at`. A span beyond the view ends where the view does (the caller's
    /// range check then reports it).
    pub(crate) fn ranges(&self, at: u64, len: u64) -> Vec<(u64, u64)> {
        let end = at + len;
        let first = self.parts.partition_point(|&(v, _, l)| v + l <= at);
        let mut out = Vec::new();
        for &(view, real, part) in &self.parts[first..] {
            if view >= end {
                break;
            }
            let from = at.max(view);
            let to = end.min(view + part);
            out.push((real + (from - view), to - from));
        }
        if out.iter().map(|&(_, l)| l).sum::<u64>() < len {
            // Past the view: leave the rest where it would be if the last block went on,
            // so that a bad span fails the range check instead of vanishing.
            let done: u64 = out.iter().map(|&(_, l)| l).sum();
            let last = self.parts.last().map_or(0, |&(_, r, l)| r + l);
            out.push((last, len - done));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view of `buf` under `blocks`/`cut`, built byte by byte.
    fn view(buf: &[u8], blocks: &[u64], cut: Cut) -> Vec<u8> {
        let mut out = Vec::new();
        let mut start = 0;
        for &b in blocks {
            let from = start + cut.at.min(b);
            out.extend_from_slice(&buf[from as usize..(from + cut.of(b)) as usize]);
            start += b;
        }
        out
    }

    #[test]
    fn every_span_of_the_view_maps_to_its_bytes() {
        let blocks = [5u64, 0, 9, 3, 12];
        let total: u64 = blocks.iter().sum();
        let buf: Vec<u8> = (0..total as u8).collect();
        for c in 1..=12 {
            for cut in Cut::all(12, c) {
                let want = view(&buf, &blocks, cut);
                let map = Blocks::new(&blocks, cut);
                for at in 0..=want.len() {
                    for len in 0..=want.len() - at {
                        let got: Vec<u8> = map
                            .ranges(at as u64, len as u64)
                            .into_iter()
                            .flat_map(|(s, l)| buf[s as usize..(s + l) as usize].to_vec())
                            .collect();
                        assert_eq!(got, want[at..at + len], "cut {cut:?} span {at}+{len}");
                    }
                }
            }
        }
    }

    #[test]
    fn cuts_cover_every_byte_once() {
        for largest in 0..20 {
            for c in 1..=21 {
                let cuts: Vec<Cut> = Cut::all(largest, c).collect();
                let covered: u64 = cuts.iter().map(|c| c.len).sum();
                assert_eq!(covered, largest);
                assert!(cuts.windows(2).all(|w| w[0].at + w[0].len == w[1].at));
            }
        }
    }

    #[test]
    fn a_span_past_the_view_keeps_its_length() {
        let map = Blocks::new(&[4, 4], Cut { at: 0, len: 2 });
        let ranges = map.ranges(3, 3);
        assert_eq!(ranges.iter().map(|&(_, l)| l).sum::<u64>(), 3);
    }
}
