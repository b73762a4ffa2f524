//! Error replies from Redis, sorted by what a program can do about them.

use std::fmt;

/// The kind of an error reply: the code Redis puts first (`MOVED`, `OOM`…).
/// A program branches on this; the message is for people.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerErrorKind {
    /// `MOVED`: the key's slot lives on another cluster node.
    Moved,
    /// `ASK`: the key's slot is migrating; ask the other node this once.
    Ask,
    /// `TRYAGAIN`: a multi-key command during a slot migration.
    TryAgain,
    /// `CLUSTERDOWN`: the cluster cannot serve the slot.
    ClusterDown,
    /// `CROSSSLOT`: keys of one command in different slots.
    CrossSlot,
    /// `READONLY`: the node is a replica.
    ReadOnly,
    /// `MASTERDOWN`: a replica lost its primary and serves no stale data.
    MasterDown,
    /// `NOAUTH`: the connection is not authenticated.
    NoAuth,
    /// `WRONGPASS`: the credentials were refused.
    WrongPass,
    /// `NOPERM`: the ACL user may not run this command or touch this key.
    NoPerm,
    /// `BUSY`: a script runs too long and blocks the server.
    Busy,
    /// `OOM`: the server is out of memory (`maxmemory`).
    OutOfMemory,
    /// `LOADING`: the server is loading its data set.
    Loading,
    /// `MISCONF`: writes stopped after a failed save.
    Misconf,
    /// `NOSCRIPT`: the script is not in the server's cache.
    NoScript,
    /// `EXECABORT`: a transaction was discarded.
    ExecAbort,
    /// `ERR` or any other code: the command may or may not have run.
    Other,
}

impl ServerErrorKind {
    /// The kind of the error reply `message` (its first word).
    pub fn of(message: &str) -> Self {
        match message.split(' ').next().unwrap_or("") {
            "MOVED" => Self::Moved,
            "ASK" => Self::Ask,
            "TRYAGAIN" => Self::TryAgain,
            "CLUSTERDOWN" => Self::ClusterDown,
            "CROSSSLOT" => Self::CrossSlot,
            "READONLY" => Self::ReadOnly,
            "MASTERDOWN" => Self::MasterDown,
            "NOAUTH" => Self::NoAuth,
            "WRONGPASS" => Self::WrongPass,
            "NOPERM" => Self::NoPerm,
            "BUSY" => Self::Busy,
            "OOM" => Self::OutOfMemory,
            "LOADING" => Self::Loading,
            "MISCONF" => Self::Misconf,
            "NOSCRIPT" => Self::NoScript,
            "EXECABORT" => Self::ExecAbort,
            _ => Self::Other,
        }
    }
}

/// An error reply from Redis: its [`ServerErrorKind`] and its message as
/// Redis wrote it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerError {
    kind: ServerErrorKind,
    message: String,
}

impl ServerError {
    /// The error reply `message` (without the leading `-`), classified.
    pub fn new(message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            kind: ServerErrorKind::of(&message),
            message,
        }
    }

    /// What kind of refusal it is: branch on this.
    pub fn kind(&self) -> ServerErrorKind {
        self.kind
    }

    /// The message exactly as Redis wrote it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Debug for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({:?})", self.kind, self.message)
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_word_decides_the_kind_and_the_message_is_kept() {
        let moved = ServerError::new("MOVED 3999 127.0.0.1:6381");
        assert_eq!(moved.kind(), ServerErrorKind::Moved);
        assert_eq!(moved.to_string(), "MOVED 3999 127.0.0.1:6381");
        assert_eq!(
            ServerError::new("OOM command not allowed").kind(),
            ServerErrorKind::OutOfMemory
        );
        assert_eq!(
            ServerError::new("READONLY You can't write").kind(),
            ServerErrorKind::ReadOnly
        );
        assert_eq!(ServerError::new("ERR unknown command").kind(), ServerErrorKind::Other);
        assert_eq!(ServerError::new("").kind(), ServerErrorKind::Other);
        // A code must be the whole first word.
        assert_eq!(ServerError::new("MOVEDX 1 h:1").kind(), ServerErrorKind::Other);
    }
}
