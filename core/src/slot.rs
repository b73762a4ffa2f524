//! Redis Cluster key slots: which of the 16384 slots a key lives in.
//!
//! Redis hashes the key's hash tag (the text between the first `{` and the
//! next `}`, when not empty), or else the whole key, with CRC16-XMODEM and
//! keeps the low 14 bits. Every key of one subject shares its hash tag, so a
//! subject lives in exactly one slot, on exactly one primary.

/// Slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The Redis Cluster hash tag of a key: the bytes between the first `{` and the
/// first `}` after it, when that section is non-empty.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

/// The cluster slot of `key`, as Redis computes it (`CLUSTER KEYSLOT`).
pub fn slot_of(key: &[u8]) -> u16 {
    crc16_xmodem(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// CRC16 with polynomial 0x1021, initial value 0, no reflection: the one
/// Redis Cluster uses. Hash tags are short, so bit by bit is fast enough and
/// needs no table.
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_specification() {
        // The check value the Redis Cluster specification gives.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_redis() {
        // Values printed by `CLUSTER KEYSLOT` on redis-server 7.0.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // An empty tag hashes the whole key.
        assert_eq!(slot_of(b"foo{}{bar}"), crc16_xmodem(b"foo{}{bar}") % SLOTS);
    }
}
