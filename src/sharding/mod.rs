//! Sharding: how `ha.mode: sharded` splits objects between replicas, and how the API server
//! is asked to send each replica only its share (Kubernetes' server-side sharded list and
//! watch, KEP-5866).
//!
//! An object is placed by the 64-bit FNV-1a hash of one of its fields
//! (`object.metadata.uid` or `object.metadata.namespace`); a replica owns half-open ranges
//! `[start, end)` of that hash space. The [`selector`] module reads and writes the wire form
//! of a `shardSelector` (`shardRange(object.metadata.uid, '0x…', '0x…')`, joined by `||`),
//! which both the simulator and the informers use; [`members`] finds the live replicas
//! through one Lease each and computes this replica's range; [`tenure`] is this replica's
//! hold on it, which the handlers check before each plugin call.
//!
//! Why contiguous ranges from the sorted member list rather than a hash ring: with N
//! replicas every one owns exactly 1/N of the space, one `shardRange` per replica is all
//! the server is asked for, and every replica computes the same split from the same list
//! without talking to the others. A membership change moves more objects than a ring would,
//! which the hand-over (lost objects released silently, gained ones delivered as `added`, or
//! with `state_dir` compared with the records the replica kept of them) makes safe.

pub mod members;
pub mod selector;
pub mod tenure;

pub use members::{Assignment, Membership, ShardStatus};
pub use selector::{HashRange, ShardField, ShardSelector};
pub use tenure::Tenure;

/// The 64-bit FNV-1a hash of `bytes`, as the API server computes it for `shardRange`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The range replica `index` of `count` owns: the hash space cut into `count` contiguous
/// ranges of equal size (the last one up to 2^64). `None` when `index` is not below `count`.
pub fn split(count: usize, index: usize) -> Option<HashRange> {
    if index >= count {
        return None;
    }
    let space: u128 = 1 << 64;
    let count = count as u128;
    let index = index as u128;
    Some(HashRange {
        start: (space * index / count) as u64,
        end: space * (index + 1) / count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn split_covers_the_whole_space_without_overlap() {
        for count in 1..=7 {
            let ranges: Vec<HashRange> = (0..count).map(|i| split(count, i).unwrap()).collect();
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[count - 1].end, 1 << 64);
            for pair in ranges.windows(2) {
                assert_eq!(u128::from(pair[1].start), pair[0].end);
            }
        }
        assert_eq!(split(3, 3), None);
        let half = split(2, 1).unwrap();
        assert_eq!(half.start, 0x8000_0000_0000_0000);
    }
}
