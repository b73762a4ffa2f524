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
        let tokens: Option<Vec<u64>> = answers
            .iter()
            .map(|answer| match answer {
                PartAnswer::Own(AcquireAnswer::Granted(token)) => Some(*token),
                _ => None,
            })
            .collect();
        let request = bundle.call().request;
        let waiting = self.callers.contains(request);
        let granted = answers
            .iter()
            .filter(|answer| matches!(answer, PartAnswer::Own(AcquireAnswer::Granted(_))))
            .count();
        let effect = match tokens {
            Some(tokens) if self.config.replica_acks.is_some() => {
                self.conn.unreplicated.push(Unconfirmed::All(bundle, tokens));
                return Ok(());
            }
            Some(tokens) if waiting => Effect::GrantAll(bundle, tokens),
            Some(_) => {
                compensate(self.fx, Op::AcquireAll(bundle), Ran::Answered);
                return Ok(());
            }
            // Some granted and some not: the script never answers so.
            None if granted > 0 => {
                let error = ConnectionError::UnexpectedReply("ACQUIRE_ALL granted part of its subjects".into());
                ambiguous(self.fx, Op::AcquireAll(bundle), &error);
                return Err(error);
            }
            None => {
                let full = answers
                    .iter()
                    .position(|answer| *answer == PartAnswer::Own(AcquireAnswer::Exceeded));
                let other = answers.iter().find_map(|answer| match answer {
                    PartAnswer::Own(AcquireAnswer::Tombstoned) => Some(Unavailable::Refused),
                    PartAnswer::Own(AcquireAnswer::Stale) => Some(Unavailable::Stale),
                    PartAnswer::Own(AcquireAnswer::Recovering) => Some(Unavailable::Recovering),
                    _ => None,
                });
                match (full, other) {
                    (Some(full), _) => {
                        let outcome = Event::Acquired(request, Outcome::ExceededAt(full));
                        Effect::Deliver(request, outcome)
                    }
                    (None, Some(reason)) => {
                        if reason == Unavailable::Recovering {
                            self.out.stats.recovering += 1;
                        }
                        Effect::Fail(request, reason)
                    }
                    // Every part withheld, none refused: not an answer.
                    (None, None) => {
                        let error = ConnectionError::UnexpectedReply("ACQUIRE_ALL refused without a reason".into());
                        ambiguous(self.fx, Op::AcquireAll(bundle), &error);
                        return Err(error);
                    }
                }
            }
        };
        self.fx.push(effect);
        Ok(())
    }
}
