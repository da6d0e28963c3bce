"""What the index's postings are made of: whole tokens, parts and pairs, digit parts.

    python -m bench.term_mix [--items=2000]

This measures whether leaving pure-digit parts out of the index (line numbers, version pieces:
the ``7`` of ``parser_12.py:7``, the ``29`` of ``0.7.29``) would win back indexing speed. Whoosh's
writing cost grows with the postings (term, item) it writes, so this counts them per class, for
``bench/corpus.py``'s generated outputs (what ``bench/index_bench.py`` indexes) and for every tool
output of the recorded fixtures:

* ``whole``: a token as it stands;
* ``digit part``: a part that is only digits, and ``pair with a digit part`` (``py:7``);
* ``other part/pair``: every other part or pair.
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter

from context_paging.index.search.analysis import term_counts, tokens

from bench.corpus import output_text
from bench.search_bench import fixture_outputs
from bench.search_eval import FIXTURES

_SEPARATORS = re.compile(r"[./:-]+")


def kind(term: str, whole: set[str]) -> str:
    if term in whole:
        return "whole"
    if term.isdigit():
        return "digit part"
    if any(word.isdigit() for word in _SEPARATORS.split(term)):
        return "pair with a digit part"
    return "other part/pair"


def report(label: str, texts: list[str]) -> None:
    postings: Counter = Counter()
    distinct: dict[str, set[str]] = {}
    for text in texts:
        whole = set(tokens(text))
        for term in term_counts(text):
            k = kind(term, whole)
            postings[k] += 1
            distinct.setdefault(k, set()).add(term)
    total = sum(postings.values())
    print(f"{label}: {total:,} postings")
    for k in ("whole", "other part/pair", "digit part", "pair with a digit part"):
        terms = len(distinct.get(k, ()))
        print(f"  {k:<24}{postings[k] / total:8.1%} of postings  {terms:>8,} terms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(7)
    report(f"bench/corpus.py outputs ({args.items} x 40 lines)",
           [output_text(rng, n, 40) for n in range(args.items)])
    if FIXTURES.exists():
        report("fixture tool outputs", fixture_outputs(FIXTURES))


if __name__ == "__main__":
    main()
