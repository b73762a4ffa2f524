//! Deliberate bugs for the simulator's self-test: test support, not part
//! of the library's API. Only the `fault-injection` feature lets them be
//! switched on; without it every one stays off.

/// Bugs the simulator must catch: if it cannot see these, it proves nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedBugs {
    /// A grant that arrives after its caller left is not released.
    pub skip_late_grant_compensation: bool,
    /// Replies are not checked against the lease id they echo.
    pub skip_echo_check: bool,
    /// Requests are not bounded in time: a valid-until and an expiry a day
    /// ahead (as if the scripts checked neither), so a request held back
    /// past its caller's and its compensation's deadlines still takes a slot.
    pub skip_stale_check: bool,
    /// A cluster redirect (`MOVED`, `ASK`, `TRYAGAIN`) answering an acquire
    /// is read as a denial, as a client that takes any error for "no" would.
    pub redirect_as_denial: bool,
    /// A handshake that finds lease data lost does nothing about it (as
    /// `Recovery::Off`): held leases stay lost, new grants are not held.
    pub no_recovery: bool,
    /// Read by `inflight-tokio`'s tower layer, not by the core: the permit
    /// is given back as soon as the response head is ready (as tower's
    /// `ConcurrencyLimit` does), while the body may stream on.
    pub release_at_response_head: bool,
    /// Wake-ups are ignored: waiters learn of free slots only at their
    /// periodic check.
    pub skip_wake_up: bool,
    /// Read by the simulated Redis, not by the client: the fail-fast acquire
    /// script ignores the wait queue, so newcomers take slots owed to
    /// waiters (a script bug).
    pub acquire_ignores_queue: bool,
    /// Kept-alive leases are renewed only once their expiry has come (no
    /// margin for a failed attempt), so they are lost although Redis is up.
    pub keep_alive_without_margin: bool,
    /// A fail-fast grant of a limiter that asked for fencing tokens reaches
    /// its caller without its token.
    pub drop_fencing_token: bool,
    /// A switch to the primary the sentinels name treats it as a server
    /// never seen (the old primary's identity forgotten): its handshake
    /// finds no failover, so nothing is written back and nothing held.
    pub switch_forgets_identity: bool,
    /// The releases a recovery sends again are those confirmed within the
    /// recovery window of the recovery itself, not of the failed node's
    /// last release: one a failover lost is left if the client finds the
    /// new primary late (a stale sentinel, a handshake cut off).
    pub releases_aged_from_recovery: bool,
    /// A release refused by `TRYAGAIN` (its slot moving) spends one of its
    /// attempts, as a failure would, and a release to waiters tries its
    /// script again: a move that outlasts every attempt's backoff makes it
    /// give up, its slot taken until the lease's TTL.
    pub try_again_spends_attempts: bool,
    /// The count of one write's queue check is read as "none" unless every
    /// subject checked has a queue: a freed slot whose waiters are another
    /// replica's reaches them only at their periodic check.
    pub partial_queue_count_as_none: bool,
    /// A hand-over heard with under half its reservation left is delivered
    /// from the message as any other, not checked again: a permit may
    /// reach its caller with its reservation spent, and the slot taken by
    /// someone else before the confirming renewal finds it gone.
    pub trust_late_hand_overs: bool,
    /// Read by `inflight-tokio`'s waiting composite acquire, not by the
    /// core: a part lost while the next key is waited for (its reservation
    /// spent with the driver stalled) is handed out with the others, not
    /// given back and taken again.
    pub keep_lost_composite_parts: bool,
}
