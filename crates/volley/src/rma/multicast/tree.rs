//! The k-ary tree a multicast travels along: positions in the requester's rank list, the
//! root at position 0, the children of position `p` at `k·p + 1 ..= k·p + k`.

use std::ops::Range;

/// The positions of `pos`'s children in a tree of arity `arity` over `n` positions.
pub fn children(pos: usize, arity: usize, n: usize) -> Range<usize> {
    let first = pos.saturating_mul(arity).saturating_add(1).min(n);
    let end = first.saturating_add(arity).min(n);
    first..end
}

/// The number of levels of the tree (1 for a lone root, 0 for no positions).
pub fn depth(n: usize, arity: usize) -> usize {
    let (mut levels, mut last) = (0, 0usize);
    if n == 0 {
        return 0;
    }
    // The last position of each level is the last child of the previous level's last one.
    loop {
        levels += 1;
        if last + 1 >= n {
            return levels;
        }
        last = last.saturating_mul(arity).saturating_add(arity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every position but the root has exactly one parent, and walking up ends at the root.
    #[test]
    fn every_position_is_reached_once() {
        for n in 1..40 {
            for k in 1..6 {
                let mut seen = vec![0u32; n];
                seen[0] += 1;
                for p in 0..n {
                    for c in children(p, k, n) {
                        assert!(c > p);
                        seen[c] += 1;
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "n={n} k={k}: {seen:?}");
            }
        }
    }

    #[test]
    fn depths() {
        assert_eq!(depth(0, 2), 0);
        assert_eq!(depth(1, 2), 1);
        assert_eq!(depth(2, 2), 2);
        assert_eq!(depth(3, 2), 2);
        assert_eq!(depth(4, 2), 3);
        assert_eq!(depth(7, 2), 3);
        assert_eq!(depth(8, 2), 4);
        assert_eq!(depth(5, 1), 5);
        assert_eq!(depth(7, 6), 2);
        assert_eq!(depth(8, 6), 3);
        // Against a walk of the tree.
        for n in 1..60 {
            for k in 1..5 {
                let mut level = vec![0usize; n];
                for p in 0..n {
                    for c in children(p, k, n) {
                        level[c] = level[p] + 1;
                    }
                }
                assert_eq!(depth(n, k), level.iter().max().unwrap() + 1, "n={n} k={k}");
            }
        }
    }
}
