"""The home is private to its owner: directories 0700, files 0600 (docs/security.md).

The ledger keeps message text as the agent sent it, keys people paste into a prompt included, so
no other local user may read it. Files the project writes itself are created 0600; the CLI sets
the process's umask (:func:`restrict_umask`) so files libraries write (the search index's
segments) are too; and a home made before that, or copied in, is tightened once when a command
opens it (:func:`secure_home`), file by file, contents untouched.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("context_paging")

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077
user_umask: int | None = None  # the umask the process started with, for the agents it starts


def restrict_umask() -> None:
    """Files and folders this process creates from now on are its owner's alone."""
    global user_umask
    previous = os.umask(UMASK)
    if user_umask is None:
        user_umask = previous


def private_directory(path: Path) -> None:
    """``path`` (and missing parents) as a directory only its owner can enter."""
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)


def secure_home(home: Path) -> int:
    """Tighten an existing home to 0700 folders and 0600 files; the number of modes changed.

    A home that is already 0700 was tightened before (or made private) and is not walked again,
    so this costs one ``stat`` on every later start. Links inside it are never followed.
    """
    try:
        home = home.resolve()  # a home that is a link to a folder: that folder
        info = home.lstat()
    except OSError:
        return 0  # not made yet: it is created private
    if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) == DIRECTORY_MODE:
        return 0
    changed = 0
    for folder, directories, files in os.walk(home):
        for name in files:
            changed += _tighten(Path(folder) / name, FILE_MODE)
        for name in directories:
            changed += _tighten(Path(folder) / name, DIRECTORY_MODE)
    changed += _tighten(home, DIRECTORY_MODE)
    if changed:
        log.warning("made %s private to its owner (%d files and folders were readable by "
                    "others)", home, changed)
    return changed


def _tighten(path: Path, mode: int) -> int:
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode) or stat.S_IMODE(info.st_mode) & ~mode == 0:
            return 0
        os.chmod(path, stat.S_IMODE(info.st_mode) & mode)  # checked above: not a link
    except OSError:
        return 0
    return 1
