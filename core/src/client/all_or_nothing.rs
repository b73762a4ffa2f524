//! What the reply to one caller's all-or-nothing acquire (`ACQUIRE_ALL`)
//! means: every part granted, or none, and which subject was full.

use super::answers::{self, AcquireAnswer, Misread, PartAnswer};
use super::connection::Unconfirmed;
use super::effect::{ambiguous, compensate, Effect};
use super::replies::Reader;
use super::request::{Bundle, Op, Ran};
use crate::event::{ConnectionError, Event, Outcome, Unavailable};
use crate::resp::Frame;

impl Reader<'_> {
    /// `ACQUIRE_ALL`'s reply: every part granted, or none. The caller is
    /// told of a full subject first (which one, so it can say so), else of
    /// the first part's reason for not taking anything.
    pub(super) fn bundle(&mut self, bundle: Bundle, frame: Frame) -> Result<(), ConnectionError> {
        let read = answers::bundle(bundle.parts(), frame, !self.bugs.skip_echo_check);
        let answers =
            match read.map(|(answers, reclaimed)| (answers.into_iter().collect::<Result<Vec<_>, _>>(), reclaimed)) {
                Ok((Ok(answers), reclaimed)) => {
                    self.out.stats.reclaimed += reclaimed;
                    answers
                }
                Err(Misread::Refused(message)) => return self.refused(Op::AcquireAll(bundle), message),
                Ok((Err(error), _)) | Err(Misread::Garbled(error)) => {
                    ambiguous(self.fx, Op::AcquireAll(bundle), &error);
                    return Err(error);
                }
            };
        let granted = |answer: &PartAnswer| match answer {
            PartAnswer::Own(AcquireAnswer::Granted(token)) => Some(*token),
            _ => None,
        };
        let request = bundle.call().request;
        let effect = match answers.iter().map(granted).collect::<Option<Vec<u64>>>() {
            Some(tokens) if self.config.replica_acks.is_some() => {
                self.conn.unreplicated.push(Unconfirmed::All(bundle, tokens));
                return Ok(());
            }
            Some(tokens) if self.callers.contains(request) => Effect::GrantAll(bundle, tokens),
            Some(_) => {
                compensate(self.fx, Op::AcquireAll(bundle), Ran::Answered);
                return Ok(());
            }
            None => match refusal(&answers) {
                Some(Refusal::Full(at)) => Effect::Deliver(request, Event::Acquired(request, Outcome::ExceededAt(at))),
                Some(Refusal::Unavailable(reason)) => {
                    if reason == Unavailable::Recovering {
                        self.out.stats.recovering += 1;
                    }
                    Effect::Fail(request, reason)
                }
                // Some granted and some not, or every part withheld and
                // none refused: the script never answers so.
                None => {
                    let error =
                        ConnectionError::UnexpectedReply("ACQUIRE_ALL: neither all granted nor one refused".into());
                    ambiguous(self.fx, Op::AcquireAll(bundle), &error);
                    return Err(error);
                }
            },
        };
        self.fx.push(effect);
        Ok(())
    }
}

/// Why an `ACQUIRE_ALL` took nothing, as its caller is told.
enum Refusal {
    /// This part's subject was full (told first: the caller can say which).
    Full(usize),
    /// The first other reason a part refused.
    Unavailable(Unavailable),
}

/// The refusal in `answers`, if they are one: no part granted, and one
/// part refused for a reason of its own.
fn refusal(answers: &[PartAnswer]) -> Option<Refusal> {
    if answers
        .iter()
        .any(|answer| matches!(answer, PartAnswer::Own(AcquireAnswer::Granted(_))))
    {
        return None;
    }
    if let Some(at) = answers
        .iter()
        .position(|answer| *answer == PartAnswer::Own(AcquireAnswer::Exceeded))
    {
        return Some(Refusal::Full(at));
    }
    answers.iter().find_map(|answer| match answer {
        PartAnswer::Own(AcquireAnswer::Tombstoned) => Some(Refusal::Unavailable(Unavailable::Refused)),
        PartAnswer::Own(AcquireAnswer::Stale) => Some(Refusal::Unavailable(Unavailable::Stale)),
        PartAnswer::Own(AcquireAnswer::Recovering) => Some(Refusal::Unavailable(Unavailable::Recovering)),
        _ => None,
    })
}
