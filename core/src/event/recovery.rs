//! What a handshake found about lost lease data, and what writing back
//! one held lease came to.

/// Why lease data on a server may be gone, as a handshake found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataLoss {
    /// Our lease-data marker is missing or was written anew: the server
    /// restarted without its data, or was flushed.
    Emptied,
    /// Another run of the server (new `run_id`) with our marker intact: it
    /// restarted from a snapshot, and writes since the last save may be gone.
    Restarted,
    /// A new replication id: a replica was promoted (or the server rejoined
    /// replication), and writes it had not received are gone.
    FailedOver,
}

/// What writing back one held lease after a data loss found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reassertion {
    /// The lease was still there.
    Survived,
    /// It was gone and is written back.
    Restored,
    /// It was gone and is written back, and its subject now holds more
    /// leases than its limit: others were granted while it was missing. An
    /// over-admission, detected; it lasts until enough holders let go.
    OverLimit,
    /// It could not be written back (no answer in time, a refusal, or it
    /// ran too late to act): it may be missing.
    Unconfirmed,
    /// Its holder had given it back by the time the write-back ran (a
    /// tombstone said so): nothing was written.
    GivenBack,
}
