"""Who has an embedded store open, so that ``restore`` never replaces a file that a process is writing.

A process that replaced the database file under a running writer would lose every write that
process makes afterwards: its SQLite connection keeps writing to the old, unlinked file and reports
success. So:

- every open store (``SQLiteStore``) holds a shared ``flock`` on ``<database>.lock``, beside the real
  database file (symbolic links resolved), from before it opens the database until after it closes it;
- ``restore`` takes that lock exclusively without waiting, and refuses while anyone holds it; a store
  opened during a restore waits for it to end (``OPEN_WAIT_S``), then opens the restored file;
- a process that does not take the lock (an older lightmem, the ``sqlite3`` shell) is found through
  SQLite's own lock: every connection to a WAL database holds a shared lock on byte 128 of its
  ``-shm`` file (the "DMS" lock of https://www.sqlite.org/walformat.html) for as long as it is open;
- both of those live beside the *name* a process opened, so a database file with more than one name
  (a hard link in another folder: same device and inode, ``st_nlink > 1``) would let a process open it
  unseen, and write its own ``-wal`` beside that other name (two such processes corrupt the file).
  The check is by the file's identity: a store whose file has other names is neither opened
  (``hold_shared``) nor restored over (``hold_exclusive``) nor backed up (``one_name``), with a
  ``LinkedStoreError`` that says how to find the other names. A symbolic link is one name: it is
  resolved, and its file's lock is the one taken.

The lock is advisory and Linux/POSIX only: where ``fcntl`` is missing, or the lock file cannot be
made (a read-only folder), stores open without it and ``restore`` relies on the SQLite check.
"""
from __future__ import annotations

import errno
import logging
import os
import time
import weakref
from pathlib import Path

from lightmem.errors import StoreError

try:
    import fcntl
except ImportError:  # not a POSIX system: no advisory locks
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

OPEN_WAIT_S = 60.0  # how long opening a store waits for a restore of it to finish
_SHM_DMS_BYTE = 128  # SQLite's "dead man switch" lock byte in the -shm file


class StoreInUseError(StoreError):
    """Another process has the store open (or is restoring it): the operation would lose its writes."""


class LinkedStoreError(StoreError):
    """The store's database file has other names (hard links): a process using one is invisible to the others."""


def lock_path(db: Path) -> Path:
    """The lock file of the database ``db``: ``<real database file>.lock`` (symbolic links resolved)."""
    real = Path(db).resolve()
    return real.with_name(real.name + ".lock")


class OpenLock:
    """A held lock on a store's lock file; ``release`` (or garbage collection) lets it go.

    Releasing closes the file rather than unlocking it: a process forked while holding the lock
    shares it, and keeps it until it closes its own copy.
    """

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd
        self._closer = weakref.finalize(self, _close, fd) if fd is not None else None

    @property
    def held(self) -> bool:
        """Whether a lock is actually held (False where locking is not available)."""
        return self._fd is not None

    def release(self) -> None:
        if self._closer is not None:
            self._closer()
        self._fd = None

    def __enter__(self) -> "OpenLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _open_lock_file(path: Path) -> int | None:
    """A descriptor of the lock file (made when missing), or None when it cannot be had."""
    if fcntl is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        try:
            return os.open(path, os.O_RDONLY)  # flock works on a descriptor opened read-only
        except OSError as exc:
            log.debug("no lock file at %s (%s): the store is opened without it", path, exc)
            return None


def hold_shared(db: Path, label: str, wait_s: float = OPEN_WAIT_S) -> OpenLock:
    """Take the shared lock of an open store; wait (at most ``wait_s``) while a restore holds it.

    Raises:
        StoreInUseError: a restore still holds the store after ``wait_s`` seconds.
        LinkedStoreError: the database file has other names (hard links): see ``one_name``.
    """
    path = lock_path(db)
    fd = _open_lock_file(path)
    if fd is None:
        one_name(db, label, "open")
        return OpenLock(path, None)
    deadline, pause, told = time.monotonic() + wait_s, 0.01, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                log.debug("cannot lock %s (%s): the store is opened without the lock", path, exc)
                one_name(db, label, "open")
                return OpenLock(path, None)
        else:
            held = OpenLock(path, fd)
            try:  # checked under the lock: a restore that replaced the file meanwhile left it one name
                one_name(db, label, "open")
            except BaseException:
                held.release()
                raise
            return held
        if time.monotonic() >= deadline:
            who = holders(path)
            os.close(fd)
            raise StoreInUseError(
                f"the lightmem store at {label} is being restored by another process{_listed(who)}; waited "
                f"{wait_s:g} s for it. Open the store again once `lightmem restore` has finished.")
        if not told:
            log.info("waiting for a restore of the lightmem store at %s to finish", label)
            told = True
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def hold_exclusive(db: Path, label: str, backup: str = "BACKUP") -> OpenLock:
    """Take the store's lock exclusively, for a restore: no process may have the store open.

    Raises:
        StoreInUseError: a process has the store open: it holds the lock, or an SQLite connection to
            the database (nothing is changed; the message names the processes where it can).
        LinkedStoreError: the database file has other names (hard links), through which a process may
            have it open unseen (``--force`` does not override it).
    """
    path = lock_path(db)
    fd = _open_lock_file(path)
    held = OpenLock(path, fd)
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            held.release()
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreError(f"cannot lock {path} to restore the store at {label}: {exc}") from exc
            raise StoreInUseError(_in_use(label, backup, holders(path))) from None
    real = Path(db).resolve()
    users = sqlite_users(real)
    if users is not None:
        held.release()
        raise StoreInUseError(_in_use(label, backup, users, sqlite_only=True))
    try:
        one_name(db, label, "restore", backup)
    except BaseException:
        held.release()
        raise
    return held


def one_name(db: Path, label: str, action: str, backup: str = "BACKUP") -> None:
    """Raise ``LinkedStoreError`` when the database file ``db`` (symbolic links followed) has more than one
    name: hard links, found by the file's identity (``st_nlink`` of its device and inode), not by its path.

    ``action``: what is refused, ``open``, ``restore`` or ``back up`` (it words the message). A missing
    file has no other names.
    """
    real = Path(db).resolve()
    try:
        st = os.stat(real)
    except OSError:
        return
    if st.st_nlink <= 1:
        return
    others = st.st_nlink - 1
    plural = "s" if others > 1 else ""
    where = f"its file {real} (device {st.st_dev}, inode {st.st_ino}) has {others} other name{plural} (hard link{plural})"
    find = f"`find {_mount_of(real)} -xdev -samefile {real}` lists them"
    why = ("lightmem's lock and SQLite's -wal and -shm files live beside the name a process opens, so a "
           "process using another name is invisible here")
    if action == "restore":
        raise LinkedStoreError(
            f"cannot restore the lightmem store at {label}: {where}. {why}, and replacing the file would lose "
            f"every write such a process makes afterwards, although each would look successful. Stop what uses "
            f"the other names and remove them ({find}; a symbolic link is fine), then run `lightmem restore "
            f"{backup} --store {label} --force` again. Nothing was changed.")
    consequence = ("two processes opening it through different names would corrupt it, and `lightmem restore` "
                   "could not tell it is in use") if action == "open" else "a copy would miss their recent writes"
    raise LinkedStoreError(
        f"cannot {action} the lightmem store at {label}: {where}. {why}: {consequence}. Keep one name: remove "
        f"the others ({find}; a symbolic link is fine), then try again.")


def _mount_of(path: Path) -> Path:
    """The mount point of the filesystem holding ``path`` (where ``find -xdev`` looks for its other names)."""
    p = path.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def sqlite_users(db: Path) -> list[str] | None:
    """The processes with an SQLite connection open on the WAL database ``db`` ([] when they cannot be
    named), or None when there are none (or it cannot be told)."""
    shm = Path(f"{db}-shm")
    if fcntl is None or not shm.exists():
        return None  # no -shm: no connection has the database open in WAL mode
    try:
        fd = os.open(shm, os.O_RDWR)
    except OSError:
        return None
    try:
        try:
            # A write lock on the byte every open connection holds a read lock on: refused while any is open.
            # (A POSIX lock: our own process's connections never conflict with it, and restore runs with none.)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE, os.SEEK_SET)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return holders(shm)
            return None
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE, os.SEEK_SET)
        return None
    finally:
        os.close(fd)


def holders(path: Path) -> list[str]:
    """The processes holding a lock on ``path``, as ``pid N (command line)`` (Linux ``/proc/locks``; [] elsewhere)."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids: list[int] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":  # "->": a waiter, not a holder
            continue
        try:
            pid, (major, minor, inode) = int(fields[4]), fields[5].split(":")
            same = int(inode) == st.st_ino and (int(major, 16), int(minor, 16)) == (os.major(st.st_dev), os.minor(st.st_dev))
        except ValueError:
            continue
        if same and pid > 0 and pid not in pids:
            pids.append(pid)
    return [_describe_pid(pid) for pid in pids]


def _describe_pid(pid: int) -> str:
    if pid == os.getpid():
        return f"pid {pid} (this process)"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    cmd = " ".join(cmd.split())
    cmd = cmd if len(cmd) <= 100 else cmd[:97] + "..."
    return f"pid {pid} ({cmd})" if cmd else f"pid {pid}"


def _listed(who: list[str]) -> str:
    return f" ({', '.join(who)})" if who else ""


def _in_use(label: str, backup: str, who: list[str], sqlite_only: bool = False) -> str:
    how = (" with an SQLite connection (a process that does not take lightmem's lock: an older lightmem, the "
           "sqlite3 shell, another program)") if sqlite_only else ""
    return (f"cannot restore the lightmem store at {label}: another process has it open{how}{_listed(who)}. "
            f"Replacing the file now would lose every write that process makes afterwards, although each would "
            f"look successful. Stop it (a server: stop it, restore, start it again), then run "
            f"`lightmem restore {backup} --store {label} --force` again. Nothing was changed.")
