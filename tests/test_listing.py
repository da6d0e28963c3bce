"""Listing reads only what changed, and index --all reads files in worker processes."""

from __future__ import annotations

from context_paging.index import catalog as catalog_module
from context_paging.index.catalog import Catalog
from context_paging.index.service import History
from context_paging.server.cli import main

from tests.test_search_compound import home, roots, write_pi_session  # noqa: F401  (fixtures)


def sessions(root, count):
    paths = []
    for n in range(count):
        path = root / "--work-app--" / f"2026-01-0{n + 1}T00-00-00-000Z_t{n}.jsonl"
        write_pi_session(path, [(f"c{n}", f"output number {n} mentions marker{n}.example.com")])
        paths.append(path)
    return paths


def counting(monkeypatch):
    reads = []
    real = Catalog.summary

    def summary(self, found):
        reads.append(found.path.name)
        return real(self, found)

    monkeypatch.setattr(Catalog, "summary", summary)
    monkeypatch.setattr(catalog_module, "PARALLEL_FROM", 10_000)  # in-process, so it is counted
    return reads


def test_a_second_listing_reads_only_the_file_that_changed(tmp_path, monkeypatch):
    paths = sessions(tmp_path / "pi", 3)
    cache = tmp_path / "home" / "catalog.json"
    reads = counting(monkeypatch)
    first = Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()
    assert sorted(reads) == sorted(p.name for p in paths)
    reads.clear()
    again = Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()
    assert reads == [] and again == first
    with open(paths[1], "a", encoding="utf-8") as out:
        out.write(paths[1].read_text().splitlines()[1].replace('"u0"', '"u9"') + "\n")
    grown = Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()
    assert reads == [paths[1].name]
    assert sorted(s.ref for s in grown) == sorted(s.ref for s in first)
    paths[0].unlink()
    reads.clear()
    assert len(Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()) == 2 and reads == []


def test_a_damaged_catalog_cache_is_rebuilt(tmp_path):
    sessions(tmp_path / "pi", 2)
    cache = tmp_path / "catalog.json"
    cache.write_text("{not json")
    listed = Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()
    assert len(listed) == 2 and '"version"' in cache.read_text()


def test_many_uncached_files_are_listed_the_same_by_worker_processes(tmp_path, monkeypatch):
    sessions(tmp_path / "pi", 5)
    alone = Catalog({"pi": tmp_path / "pi"}).summaries()
    monkeypatch.setattr(catalog_module, "PARALLEL_FROM", 2)
    assert Catalog({"pi": tmp_path / "pi"}, cache=tmp_path / "c.json").summaries() == alone


def test_index_all_reads_in_workers_and_indexes_every_session(tmp_path):
    sessions(tmp_path / "pi", 4)
    history = History({"pi": tmp_path / "pi"}, tmp_path / "home")
    assert history.index_all() == 4
    assert sorted(history.store.indexed_sessions()) == [f"pi:t{n}" for n in range(4)]
    for n in range(4):
        hits = history.search(f"marker{n}.example.com", scope="all").references
        assert [h["session"] for h in hits] == [f"pi:t{n}"]
    assert history.index_all() == 0
    history.close()


def test_index_all_shows_progress_on_stderr(home, capsys):  # noqa: F811
    assert main(["--home", str(home), "index", "--all"]) == 0
    captured = capsys.readouterr()
    assert "session(s) added or updated" in captured.out
    assert "index up to date" in captured.err
