//! Who is on the other end of a connection: the kernel's word for it (`SO_PEERCRED`), not the
//! client's, and whether that user may change settings.

use std::os::unix::net::UnixStream;

use nix::sys::socket::{getsockopt, sockopt};
use nix::unistd::{Gid, Group, Uid, User};

/// A peer as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub user: Option<String>,
    /// Root, the daemon's own user, or a member of the daemon's group.
    pub may_write: bool,
    /// Root or the daemon's own user (who get slots no one else takes).
    pub is_root: bool,
}

/// Reads the peer's credentials; `None` when the kernel does not give them (then the peer may
/// read but not write).
pub fn peer_of(stream: &UnixStream, group: &str) -> Option<Peer> {
    let credentials = getsockopt(stream, sockopt::PeerCredentials).ok()?;
    let uid = credentials.uid();
    let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
    let is_root = uid == 0 || uid == nix::unistd::geteuid().as_raw();
    let may_write = is_root || user.as_ref().is_some_and(|user| is_member(user, group));
    Some(Peer {
        pid: u32::try_from(credentials.pid()).unwrap_or(0),
        uid,
        user: user.map(|user| user.name),
        may_write,
        is_root,
    })
}

/// Whether `user` belongs to `group` (as its primary group or a supplementary one).
fn is_member(user: &User, group: &str) -> bool {
    let Some(group) = Group::from_name(group).ok().flatten() else {
        return false;
    };
    if user.gid == group.gid {
        return true;
    }
    let Ok(name) = std::ffi::CString::new(user.name.as_bytes()) else {
        return false;
    };
    nix::unistd::getgrouplist(&name, user.gid)
        .is_ok_and(|groups: Vec<Gid>| groups.contains(&group.gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_in_this_process_is_this_user_and_may_write() {
        let (left, _right) = UnixStream::pair().unwrap();
        let peer = peer_of(&left, "no-such-group-here").unwrap();
        assert_eq!(peer.pid, std::process::id());
        assert_eq!(peer.uid, nix::unistd::geteuid().as_raw());
        assert!(peer.may_write, "the daemon's own user may write");
    }
}
