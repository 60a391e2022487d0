//! Descriptors a forked child gives up: [`ForkReleased`].
//!
//! A child made by `fork(2)` without `exec` (a server's worker, Python's `multiprocessing`)
//! inherits every descriptor, close-on-exec or not. For a listening socket that means the child
//! keeps the socket's name bound after its parent closed its own descriptor: nobody accepts
//! there, and the parent cannot bind the name again until the child exits. A `pthread_atfork`
//! child hook swaps each registered descriptor for an unbound socket as the child starts, so the
//! number stays valid for whatever owns it there, and names nothing.
//!
//! The registry is a fixed table guarded by a spin lock that the fork's prepare hook takes: a
//! descriptor is either registered and open, or unregistered and closed, in every child, because
//! [`ForkReleased`]'s drop clears the slot and closes the descriptor under the same lock.

use std::ops::Deref;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::ffi::os::{register_fork_hooks, replace_descriptor, unbound_socket};

/// How many descriptors can be registered at once: a process serves its statistics on two
/// sockets, and a few more spare.
pub const FORK_RELEASED_SLOTS: usize = 16;

/// Held while the table changes, and by a fork from its prepare hook to the end of the fork.
static LOCK: AtomicBool = AtomicBool::new(false);
/// Registered descriptors (-1: a free slot).
static HELD: [AtomicI32; FORK_RELEASED_SLOTS] = [const { AtomicI32::new(-1) }; FORK_RELEASED_SLOTS];
/// For each registered descriptor, the unbound socket a child puts in its place.
static SPARE: [AtomicI32; FORK_RELEASED_SLOTS] =
    [const { AtomicI32::new(-1) }; FORK_RELEASED_SLOTS];

fn lock() {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

extern "C" fn before_fork() {
    lock();
}

extern "C" fn after_fork_in_parent() {
    unlock();
}

/// Runs in the child before `fork` returns there, so only async-signal-safe calls: `dup3`.
/// The table is emptied in the child: what it names there is released already, and the child
/// may close those numbers and reuse them for files a later fork must not touch.
extern "C" fn after_fork_in_child() {
    for (held, spare) in HELD.iter().zip(&SPARE) {
        let (fd, spare) = (
            held.swap(-1, Ordering::Relaxed),
            spare.swap(-1, Ordering::Relaxed),
        );
        if fd < 0 || spare < 0 {
            continue;
        }
        // Both numbers are open in the child: the table and the descriptor table were copied
        // together under the lock.
        replace_descriptor(spare, fd);
    }
    unlock();
}

/// Whether the fork hooks are registered (once per process; the C library may refuse, out of
/// memory).
fn hooks_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    // The child's hook makes only async-signal-safe calls.
    *REGISTERED
        .get_or_init(|| register_fork_hooks(before_fork, after_fork_in_parent, after_fork_in_child))
}

/// `value`, whose descriptor a child made by `fork(2)` gives up as it starts: there, its number
/// names an unbound Unix socket instead (an `accept` on it fails; dropping the value closes only
/// that). For a listening socket whose name only this process may answer (see the module's
/// docs). Dropped, it closes the descriptor in a way no concurrent fork can half see.
#[derive(Debug)]
pub struct ForkReleased<T: AsRawFd> {
    /// Closed (dropped) under the table's lock: after `drop` has taken it and cleared the slot,
    /// before `_unlock` lets it go.
    value: T,
    /// The table slot and the stand-in it names; `None` when the table was full or the hooks
    /// could not be registered (children then keep the descriptor).
    slot: Option<(usize, OwnedFd)>,
    /// The process whose table holds the slot: a forked child's copy of this value has none
    /// (the child's table was emptied as it started, and the slot may be another's there now).
    pid: u32,
    /// Dropped last of the fields: gives back the table's lock that `drop` takes.
    _unlock: Unlock,
}

/// Gives back the table's lock when dropped.
#[derive(Debug)]
struct Unlock;

impl Drop for Unlock {
    fn drop(&mut self) {
        unlock();
    }
}

impl<T: AsRawFd> ForkReleased<T> {
    /// Register `value`'s descriptor; see [`ForkReleased::released_in_children`] for whether it
    /// took.
    pub fn new(value: T) -> ForkReleased<T> {
        let slot = if hooks_registered() {
            unbound_socket().and_then(|spare| register(value.as_raw_fd(), spare))
        } else {
            None
        };
        ForkReleased {
            value,
            slot,
            pid: std::process::id(),
            _unlock: Unlock,
        }
    }

    /// Whether forked children give the descriptor up (false: the table was full, the C
    /// library refused the fork hooks, or this is a forked child's copy, released already).
    pub fn released_in_children(&self) -> bool {
        self.slot.is_some() && self.pid == std::process::id()
    }
}

fn register(fd: RawFd, spare: OwnedFd) -> Option<(usize, OwnedFd)> {
    lock();
    let free = HELD
        .iter()
        .position(|held| held.load(Ordering::Relaxed) < 0);
    if let Some(i) = free {
        SPARE[i].store(spare.as_raw_fd(), Ordering::Relaxed);
        HELD[i].store(fd, Ordering::Relaxed);
    }
    unlock();
    free.map(|i| (i, spare))
}

impl<T: AsRawFd> Deref for ForkReleased<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: AsRawFd> Drop for ForkReleased<T> {
    fn drop(&mut self) {
        lock();
        if let Some((i, _)) = &self.slot {
            if self.pid == std::process::id() {
                HELD[*i].store(-1, Ordering::Relaxed);
                SPARE[*i].store(-1, Ordering::Relaxed);
            }
        }
        // The fields drop next, in order: `value` (its descriptor closes), the stand-in, and last
        // `_unlock`, which gives the lock back.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::os::{fork_reporting, kill_child as kill};
    use std::io::Read;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    /// The tests fork and fill the table: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn name(tag: &str) -> SocketAddr {
        let name = format!("hipfile-hip-fork-test-{tag}-{}", std::process::id());
        SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    }

    /// Fork a child that reports, in two bytes on a pipe, whether `fd` is bound to an address in
    /// it and whether its table is empty, then waits to be killed; the child's pid and the
    /// parent's end of the pipe.
    fn fork_reporting_binding(fd: RawFd) -> (libc::pid_t, std::fs::File) {
        fork_reporting(fd, || {
            HELD.iter().all(|held| held.load(Ordering::Relaxed) < 0)
        })
    }

    #[test]
    fn a_forked_child_gives_a_released_listener_up_and_its_parent_can_bind_the_name_again() {
        let _serial = serial();
        let address = name("released");
        let listener = ForkReleased::new(UnixListener::bind_addr(&address).unwrap());
        assert!(listener.released_in_children());
        let (child, mut answer) = fork_reporting_binding(listener.as_raw_fd());
        let mut byte = [9u8; 2];
        let read = answer.read_exact(&mut byte);
        // The child still lives; the parent still listens on the name and is reached there.
        let reached = UnixStream::connect_addr(&address);
        drop(listener);
        let again = UnixListener::bind_addr(&address);
        kill(child);
        read.unwrap();
        assert_eq!(
            byte[0], 0,
            "in the child the number names an unbound socket"
        );
        assert_eq!(
            byte[1], 1,
            "the child's table is empty: a number it reuses is never touched by its own forks"
        );
        assert!(reached.is_ok(), "{reached:?}");
        assert!(again.is_ok(), "the name is free once the parent closed it");
    }

    #[test]
    fn a_forked_child_keeps_a_plain_listener_and_its_name() {
        let _serial = serial();
        // The behaviour the wrapper exists for, shown on a listener without it.
        let address = name("plain");
        let listener = UnixListener::bind_addr(&address).unwrap();
        let (child, mut answer) = fork_reporting_binding(listener.as_raw_fd());
        let mut byte = [9u8; 2];
        let read = answer.read_exact(&mut byte);
        drop(listener);
        let again = UnixListener::bind_addr(&address);
        kill(child);
        read.unwrap();
        assert_eq!(byte[0], 1, "the child holds the bound socket");
        assert_eq!(
            again.unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse,
            "the child keeps the name after the parent closed it"
        );
    }

    #[test]
    fn slots_are_given_back_on_drop() {
        let _serial = serial();
        let taken: Vec<_> = (0..FORK_RELEASED_SLOTS)
            .map(|_| ForkReleased::new(unbound_socket().unwrap()))
            .collect();
        assert!(taken.iter().all(|t| t.released_in_children()));
        let one_more = ForkReleased::new(unbound_socket().unwrap());
        assert!(!one_more.released_in_children());
        drop(taken);
        drop(one_more);
        assert!(ForkReleased::new(unbound_socket().unwrap()).released_in_children());
    }
}
