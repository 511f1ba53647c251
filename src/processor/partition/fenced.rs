//! After a partition's transactional producer was fenced while the
//! partition is still assigned here: released if the group moves it within
//! the grace, otherwise started over (see the module comment of
//! [`super`]).

use crate::engine::entity::Entity;
use std::time::Duration;

use tracing::{error, info, warn};

use super::task::{Command, PartitionTask};
use crate::engine::breaker::Breaker;
use crate::engine::partition_state::PartitionState;
use crate::observe::errors::Stage;
use crate::observe::Phase;
use crate::processor::error::ProcessError;
use crate::processor::transaction::TxnError;

/// How many times within [`FENCE_WINDOW`] a task starts over after a fence
/// before it stops the process instead (two members fencing each other).
const MAX_FENCES: usize = 3;
const FENCE_WINDOW: Duration = Duration::from_secs(600);

impl<E: Entity> PartitionTask<E> {
    /// After the partition's producer was fenced: the unwritten work is
    /// dropped (the order cache goes back to the store's written state). A
    /// revoke that comes within the grace (the session timeout: the time
    /// the group takes to move a partition from a member it presumed dead)
    /// releases the partition (`None`). Otherwise the partition is still
    /// this member's, and whoever fenced it was a zombie: the task starts
    /// over from the checkpoint (`Some`), which fences the zombie in turn
    /// and restores what it wrote.
    pub(super) async fn after_fence(
        mut self,
        cause: TxnError,
    ) -> Result<Option<Self>, ProcessError> {
        let partition = self.partition;
        let written = self.state.written();
        self.state = PartitionState::starting_over(self.state.store().clone(), written);
        self.status.seed(written.as_ref());
        self.breaker = Breaker::new(self.settings.breaker);
        // A call this task gave up (it did not return in time) fenced no
        // one and was fenced by no one: nothing to wait for but a drain
        // already queued. Another producer's fence may be a member the
        // group is moving the partition to: the grace lets it.
        let stalled = matches!(cause, TxnError::Stalled { .. });
        let grace = if stalled {
            Duration::ZERO
        } else {
            self.settings.session_timeout
        };
        if stalled {
            warn!(
                partition,
                error = %cause,
                written = ?written.map(|c| c.next_offset),
                "a transactional call did not return; the partition's unwritten work is dropped, and it starts over \
                 from its checkpoint with a new producer (which fences the stuck one)"
            );
        } else {
            warn!(
                partition,
                error = %cause,
                written = ?written.map(|c| c.next_offset),
                grace_ms = grace.as_millis() as u64,
                "partition fenced; its unwritten work is dropped, and it starts over from its checkpoint unless the \
                 group moves it within the grace"
            );
        }
        self.enter(Phase::Restoring);
        tokio::select! {
            biased;
            command = self.rx.recv() => {
                let reply = command.map(|Command::Drain { reply, .. }| reply);
                info!(partition, "partition released after its producer was fenced");
                self.reply(reply);
                return Ok(None);
            }
            _ = tokio::time::sleep(grace) => {}
        }
        let now = std::time::Instant::now();
        self.fences
            .retain(|at| now.duration_since(*at) < FENCE_WINDOW);
        if !stalled {
            // Fences by another producer only: a call that keeps stalling
            // is reported as it stalls, not taken for a second deployment.
            self.fences.push(now);
        }
        if self.fences.len() > MAX_FENCES {
            error!(
                partition,
                fences = self.fences.len(),
                "partition fenced again and again while assigned here"
            );
            return Err(ProcessError::Partition {
                partition,
                stage: Stage::Transaction,
                message: format!(
                    "its transactional producer was fenced {} times in {} s while the partition stayed assigned \
                     here (another process with the same group and transactional ids keeps taking it: check for a \
                     second deployment with this group id); last: {cause}",
                    self.fences.len(),
                    FENCE_WINDOW.as_secs()
                ),
            });
        }
        // Where to read from again: the written checkpoint, or where this
        // task began on a partition it had never written.
        self.rewind = written.map(|c| c.next_offset).or(self.first_offset);
        self.assigned_at = None;
        info!(partition, rewind = ?self.rewind, "partition still assigned here after its producer was fenced; starting it over");
        Ok(Some(self))
    }
}
