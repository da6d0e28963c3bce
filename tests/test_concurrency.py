"""Two server processes on one home: both index and search, nothing is lost."""

from __future__ import annotations

import os
import subprocess
import sys

from context_paging.index.discovery import iter_session_files
from context_paging.index.service import History

from tests.test_protocol import lay_out, write_config


def test_two_processes_indexing_one_home_at_once_lose_no_items(tmp_path):
    roots = lay_out(tmp_path)
    home = tmp_path / "home"
    write_config(home, roots)
    env = {**os.environ, "CONTEXT_PAGING_HOME": str(home)}
    command = [sys.executable, "-m", "context_paging", "index", "--all"]
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=240) for run in runs]
    for run, (_, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stderr
        assert "Traceback" not in stderr
    history = History(roots, home)
    try:
        for found in iter_session_files(roots):
            items = history.navigator(found.ref).raw
            assert len(history.store.documents(found.ref)) == len(items), found.ref
            assert history.ensure_indexed(found.ref) is None  # both runs left it complete
    finally:
        history.close()
