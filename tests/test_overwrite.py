"""index/home/overwrite.py: small JSON files rewritten in place, never through a planted link."""

from __future__ import annotations

import json
import os

from context_paging.index.home.overwrite import overwrite
from context_paging.index.ledger import Ledger


def test_shorter_and_longer_values_read_back_as_json(tmp_path) -> None:
    path = tmp_path / "s.json"
    for value in ({"a": "x" * 500}, {"b": 1}, {"c": "y" * 50}, {"d": "z" * 20_000}, {}):
        overwrite(path, json.dumps(value).encode())
        assert json.loads(path.read_text()) == value
    assert path.stat().st_size < 4096 + 100  # a much shorter value cuts the padding off


def test_a_symlink_or_hard_link_is_replaced_not_written_through(tmp_path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"keep": true}')
    inside = tmp_path / "home"
    inside.mkdir()
    link = inside / "s.json"
    link.symlink_to(outside)
    overwrite(link, b'{"new": 1}')
    assert not link.is_symlink() and json.loads(link.read_text()) == {"new": 1}
    hard = inside / "h.json"
    os.link(outside, hard)
    overwrite(hard, b'{"new": 2}')
    assert json.loads(hard.read_text()) == {"new": 2}
    assert outside.read_text() == '{"keep": true}'


def test_state_round_trips_through_the_ledger(tmp_path) -> None:
    ledger = Ledger(tmp_path)
    ledger.save_state("s", {"settings": [None, None], "latest": {"mode": "paged"},
                            "usage_by_response": {"m1": [1, 2]}})
    ledger.save_state("s", {"settings": [None, None]})
    assert ledger.load_state("s") == {"settings": [None, None]}
    assert not list((tmp_path / "state").glob("*.tmp"))
