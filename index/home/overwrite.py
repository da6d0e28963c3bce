"""Small JSON files rewritten on every request, without a rename.

``os.replace`` over an existing file costs about 2 ms here, every time: ext4 (``auto_da_alloc``)
starts writing the new file's data out before the rename commits. The per-session state and the
proxy's tallies are rewritten on every ``select_context`` call, so that was a fixed cost on the
hot path. :func:`overwrite` instead writes the new text over the old in
place, under an exclusive ``flock``, in one ``pwrite`` from offset 0, padded with spaces to the
old length (JSON allows trailing whitespace), so a process killed at any point leaves either the
old or the new value, never a mix; a reader that must not see a write in progress takes a
shared ``flock`` (``Ledger.load_state`` does). A shorter value leaves the file long; it is cut
to size once the padding would be more than the value (a kill between that write and the cut
leaves only extra spaces).

What the rename gave and this does not: after a power loss (nothing here is fsynced, as before)
a rewritten file may be torn. The readers already treat a damaged file as absent (the state's
cut point starts over; the ledger, which holds the messages, is fsynced on its own).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from context_paging.index.home.private import FILE_MODE


def overwrite(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` (see the module docstring). Never writes
    through a link planted at ``path``: a symlink or a second hard link to the file is
    replaced by a new file, by a rename, as before."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        _replace(path, data)  # a symlink where the file belongs
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        info = os.fstat(fd)
        if info.st_nlink > 1 or not stat.S_ISREG(info.st_mode):
            _replace(path, data)  # the same bytes may be another file's: never write into it
            return
        size = info.st_size
        padded = data + b" " * (size - len(data)) if size > len(data) else data
        written = os.pwrite(fd, padded, 0)
        while written < len(padded):  # a short write (rare for a regular file): finish it
            written += os.pwrite(fd, padded[written:], written)
        if size > 2 * len(data) + 4096:
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)  # closing releases the lock


def read_whole(path: Path | str) -> bytes:
    """``path``'s content, never a write in progress: read under a shared ``flock`` (the lock
    :func:`overwrite` takes exclusively). Raises what opening or reading raises."""
    with open(path, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        return handle.read()  # closing releases the lock


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 FILE_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)
