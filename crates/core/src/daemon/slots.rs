//! Who gets a connection slot. The daemon serves a bounded number of connections; a user who
//! opens many (a stuck script, a hostile local user) must not lock the others out, and users
//! who may only read must not starve the ones who may change settings. So: at most
//! [`MAX_CONNECTIONS`] in all, at most [`MAX_PER_USER`] for one user, and the last
//! [`KEPT_FOR_WRITERS`] only for peers who may write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most clients connected at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The most connections of one user (by the kernel's uid of the peer).
pub const MAX_PER_USER: usize = 16;
/// The most connections of root (and the daemon's own user): every GPU step of a Slurm job
/// holds one for its life from slurmstepd, which runs as root (a node of eight GPUs with a
/// batch step and an srun step per card holds 16), so root gets all but the writers' slots.
pub const MAX_PER_ROOT: usize = MAX_CONNECTIONS - KEPT_FOR_WRITERS;

/// The most connections one peer's user may hold.
pub fn max_per_user(is_root: bool) -> usize {
    if is_root { MAX_PER_ROOT } else { MAX_PER_USER }
}
/// Slots that only root (or the daemon's own user) takes.
pub const KEPT_FOR_ROOT: usize = 8;
/// Slots, besides root's, that peers who may only read never take.
pub const KEPT_FOR_WRITERS: usize = 16;
/// The most connections of peers who may only read, together.
pub const READER_SLOTS: usize = MAX_CONNECTIONS - KEPT_FOR_ROOT - KEPT_FOR_WRITERS;

/// Who asks for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applicant {
    /// `None` when the kernel gave no credentials (counted as one unknown user).
    pub uid: Option<u32>,
    pub user: Option<String>,
    pub may_write: bool,
    /// Root or the daemon's own user.
    pub is_root: bool,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    readers: usize,
    /// Connections of root (and the daemon's own user).
    root: usize,
    per_user: HashMap<Option<u32>, usize>,
}

/// The daemon's connection slots.
#[derive(Debug, Default)]
pub struct Slots {
    counts: Mutex<Counts>,
}

/// A slot taken; dropping it gives it back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    uid: Option<u32>,
    may_write: bool,
    is_root: bool,
}

impl Slots {
    pub fn new() -> Arc<Slots> {
        Arc::new(Slots::default())
    }

    /// A slot for `applicant`, or the sentence that tells it why not.
    pub fn take(self: &Arc<Self>, applicant: &Applicant) -> Result<Slot, String> {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if counts.total >= MAX_CONNECTIONS {
            return Err(format!(
                "The gputune daemon already serves {MAX_CONNECTIONS} connections, its most; close a gputune window or command you no longer need, or try again in a moment."
            ));
        }
        let mine = counts.per_user.get(&applicant.uid).copied().unwrap_or(0);
        let cap = max_per_user(applicant.is_root);
        if mine >= cap {
            let who = applicant
                .user
                .clone()
                .unwrap_or_else(|| match applicant.uid {
                    Some(uid) => format!("uid {uid}"),
                    None => "peers without credentials".to_string(),
                });
            return Err(format!(
                "The gputune daemon already serves {cap} connections of {who}, the most for one user; close some gputune windows or scripts of {who} and try again."
            ));
        }
        if !applicant.may_write && counts.readers >= READER_SLOTS {
            return Err(format!(
                "The gputune daemon keeps its last {} connections for users who may change settings, and every other one is taken; try again in a moment.",
                KEPT_FOR_WRITERS + KEPT_FOR_ROOT
            ));
        }
        if !applicant.is_root && counts.total - counts.root >= MAX_CONNECTIONS - KEPT_FOR_ROOT {
            return Err(format!(
                "The gputune daemon keeps its last {KEPT_FOR_ROOT} connections for root, and every other one is taken; close a gputune window or command you no longer need, or try again in a moment."
            ));
        }
        counts.total += 1;
        if !applicant.may_write {
            counts.readers += 1;
        }
        if applicant.is_root {
            counts.root += 1;
        }
        *counts.per_user.entry(applicant.uid).or_insert(0) += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            uid: applicant.uid,
            may_write: applicant.may_write,
            is_root: applicant.is_root,
        })
    }

    /// Connections served now.
    #[cfg(test)]
    pub fn taken(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .slots
            .counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if !self.may_write {
            counts.readers = counts.readers.saturating_sub(1);
        }
        if self.is_root {
            counts.root = counts.root.saturating_sub(1);
        }
        if let Some(count) = counts.per_user.get_mut(&self.uid) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.per_user.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applicant(uid: u32, may_write: bool) -> Applicant {
        Applicant {
            uid: Some(uid),
            user: Some(format!("user{uid}")),
            may_write,
            is_root: uid == 0,
        }
    }

    #[test]
    fn one_user_cannot_take_every_slot() {
        let slots = Slots::new();
        let held: Vec<Slot> = (0..MAX_PER_USER)
            .map(|_| slots.take(&applicant(1000, false)).unwrap())
            .collect();
        let refused = slots.take(&applicant(1000, false)).unwrap_err();
        assert!(refused.contains("16 connections of user1000"), "{refused}");
        assert!(slots.take(&applicant(1001, false)).is_ok(), "another user");
        drop(held);
        assert_eq!(slots.taken(), 0, "every slot given back");
    }

    #[test]
    fn readers_leave_slots_for_users_who_may_write_and_members_for_root() {
        let slots = Slots::new();
        let readers: Vec<Slot> = (0..READER_SLOTS)
            .map(|index| {
                let uid = 2000 + (index / MAX_PER_USER) as u32;
                slots.take(&applicant(uid, false)).unwrap()
            })
            .collect();
        let refused = slots.take(&applicant(3000, false)).unwrap_err();
        assert!(refused.contains("who may change settings"), "{refused}");
        // Members take the writers' slots, and not root's.
        let members: Vec<Slot> = (0..KEPT_FOR_WRITERS)
            .map(|index| {
                let uid = 4000 + (index / MAX_PER_USER) as u32;
                slots.take(&applicant(uid, true)).unwrap()
            })
            .collect();
        let refused = slots.take(&applicant(5000, true)).unwrap_err();
        assert!(refused.contains("for root"), "{refused}");
        let root: Vec<Slot> = (0..KEPT_FOR_ROOT)
            .map(|_| slots.take(&applicant(0, true)).unwrap())
            .collect();
        let full = slots.take(&applicant(0, true)).unwrap_err();
        assert!(full.contains("already serves 64 connections"), "{full}");
        drop(members);
        drop(readers);
        // Root may hold far more than another user (a node's Slurm steps), not every slot.
        let more_root: Vec<Slot> = (0..MAX_PER_ROOT - KEPT_FOR_ROOT)
            .map(|_| slots.take(&applicant(0, true)).unwrap())
            .collect();
        let refused = slots.take(&applicant(0, true)).unwrap_err();
        assert!(refused.contains("48 connections of user0"), "{refused}");
        assert!(
            slots.take(&applicant(4000, true)).is_ok(),
            "a member still gets one"
        );
        drop(more_root);
        drop(root);
        assert_eq!(slots.taken(), 0);
    }
}
