//! What a reply that is not the answer asked for means: an error reply
//! (did the command run? should the connection go on?), or a reply of a
//! shape no script gives (the connection is not to be trusted).

use crate::event::ConnectionError;
use crate::resp::Frame;
use crate::server_error::ServerErrorKind;

/// What a Redis error reply tells us about the command it answers.
pub(super) enum ErrorClass {
    /// The script is not cached: resend it as `EVAL`.
    NoScript,
    /// The cluster sends it elsewhere (or later); it did not run.
    Redirect(Redirect),
    /// Refused before execution; the connection can go on.
    NotExecuted,
    /// Refused before execution, and this connection is of no further use
    /// (wrong role, wrong node, lost authentication).
    NotExecutedRetire,
    /// We cannot know whether the command ran.
    Unknown,
}

/// A reply that sends a command elsewhere, or later: it did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Redirect {
    /// `MOVED`: the slot lives on another primary for good.
    Moved,
    /// `ASK`: the slot is migrating; ask the other node, this once.
    Ask,
    /// `TRYAGAIN`: the subject's keys are split by a migration; soon.
    TryAgain,
    /// `READONLY` in a cluster: the node was demoted by a failover.
    ReadOnly,
}

/// What an error reply means, on its own. A standalone client reads a
/// redirect as a refusal (see [`error_class`]).
pub(super) fn classify(message: &str) -> ErrorClass {
    use ServerErrorKind as Kind;
    match ServerErrorKind::of(message) {
        Kind::NoScript => ErrorClass::NoScript,
        Kind::Moved => ErrorClass::Redirect(Redirect::Moved),
        Kind::Ask => ErrorClass::Redirect(Redirect::Ask),
        Kind::TryAgain => ErrorClass::Redirect(Redirect::TryAgain),
        Kind::ReadOnly => ErrorClass::Redirect(Redirect::ReadOnly),
        Kind::Busy
        | Kind::OutOfMemory
        | Kind::Loading
        | Kind::ClusterDown
        | Kind::MasterDown
        | Kind::Misconf
        | Kind::NoPerm
        | Kind::CrossSlot
        | Kind::ExecAbort => ErrorClass::NotExecuted,
        Kind::NoAuth | Kind::WrongPass => ErrorClass::NotExecutedRetire,
        Kind::Other => ErrorClass::Unknown,
    }
}

/// What an error reply means to a client of a cluster or, with
/// `cluster` false, of a standalone server, where a redirect is a refusal:
/// `READONLY` means a replica, of no use for writes (retire, and find the
/// primary again); `MOVED` and `ASK` cannot be followed (the handshake
/// refuses cluster nodes, so only a server that hid its mode says them) and
/// `TRYAGAIN` is not ours to wait for.
pub(super) fn error_class(message: &str, cluster: bool) -> ErrorClass {
    match classify(message) {
        ErrorClass::Redirect(Redirect::ReadOnly) if !cluster => ErrorClass::NotExecutedRetire,
        ErrorClass::Redirect(_) if !cluster => ErrorClass::NotExecuted,
        class => class,
    }
}

pub(super) fn describe(frame: &Frame) -> String {
    let mut text = format!("{frame:?}");
    text.truncate(120);
    text
}

/// A `{status, id}` reply whose status the script never gives.
pub(super) fn unexpected_status(what: &str, status: i64, lease_bytes: &bytes::Bytes) -> ConnectionError {
    let frame = Frame::Array(vec![Frame::Integer(status), Frame::BulkString(lease_bytes.clone())]);
    unexpected(what, &frame)
}

pub(super) fn unexpected(what: &str, frame: &Frame) -> ConnectionError {
    ConnectionError::UnexpectedReply(format!("{what}: {}", describe(frame)))
}
