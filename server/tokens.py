"""The offline tokenizer: tiktoken's cl100k_base, loaded from the copy shipped in server/data.

tiktoken downloads its BPE files on first use; this server never does. The shipped file is
checked against the SHA-256 that tiktoken itself expects for cl100k_base before it is used. If
the file is missing or damaged, estimates fall back to characters/4 with one warning.
cl100k_base is OpenAI's encoding; for other providers it is an estimate, and usage reported by
the host (calibration) corrects the difference.

A large text (a new tool output of tens of kilobytes) is counted in two pieces on two threads:
tiktoken's ``encode_ordinary`` releases the GIL while it encodes (pyo3 ``py.detach`` in its
``src/py.rs``), so the halves run in parallel on a machine with two cores. See
:func:`split_point` for why the two counts add up to the whole one.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from context_paging.index.window.estimate import cores, spare_core

log = logging.getLogger("context_paging")

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
# The longest token of the shipped file, in bytes (so in characters too: a character is at
# least a byte). The file is checked against CL100K_SHA256, so this cannot change under us.
CL100K_LONGEST = 128
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


@functools.cache
def text_counter() -> Callable[[str], int] | None:
    """``len(encode(text))`` with cl100k_base, or None (with one warning) when unavailable."""
    encoding = cl100k()
    if encoding is None:
        return None

    def whole(text: str) -> int:
        if len(text) > PIECE_CHARS:  # the token list of a 10 MB text alone is 100 MB
            return sum(len(encoding.encode_ordinary(piece)) for piece in pieces(text))
        return len(encoding.encode_ordinary(text))

    counter: Any = whole if cores() < 2 else functools.partial(_count_split, whole, _helper())
    # A text is at least len(text) / this many tokens, and at least ``piece_floor(text)``: the
    # window bounds the history it need not count exactly with these (index/window/estimate.py).
    counter.max_token_chars = CL100K_LONGEST
    counter.text_floor = piece_floor
    return counter


@functools.cache
def cl100k() -> Any:
    """The shipped cl100k_base ``tiktoken.Encoding``, or None (with one warning)."""
    try:
        import tiktoken

        data_dir = resources.files("context_paging.server") / "data"
        data = (data_dir / "cl100k_base.tiktoken").read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != CL100K_SHA256:
            raise ValueError(f"cl100k_base.tiktoken has hash {digest[:12]}…, not the expected one")
        # "token rank" per line; split once and decoded in C, not line by line in Python
        # (the ranks are most of the load: a fifth less this way).
        parts = data.split()
        if len(parts) % 2:
            raise ValueError("cl100k_base.tiktoken has a line without its rank")
        ranks = dict(zip(map(binascii.a2b_base64, parts[0::2]), map(int, parts[1::2]),
                         strict=True))
        return tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN,
                                 mergeable_ranks=ranks, special_tokens=CL100K_SPECIAL)
    except Exception as exc:  # any failure means the documented fallback, never a crash
        log.warning("tiktoken encoding unavailable (%s); estimating tokens as characters/4", exc)
        return None


# ASCII bytes by the classes of CL100K_PATTERN: letters (``\p{L}``) to ``a``, digits (``\p{N}``)
# to ``0``, the rest but ``\s`` (tab, line feed, vertical tab, form feed, carriage return,
# space) to ``.``; a table keeps one class and makes every other byte a space.
_CLASS = [("a" if chr(b).isalpha() else "0" if chr(b).isdigit()
           else " " if chr(b) in "\t\n\x0b\x0c\r " else ".") for b in range(128)]
_LETTERS, _DIGITS, _MARKS = (bytes(ord(c) if c == kind else 32 for c in _CLASS + [" "] * 128)
                             for kind in "a0.")


def piece_floor(text: str) -> int:
    r"""A lower bound of ``len(encode_ordinary(text))`` for cl100k_base, in a few passes in C
    (a tenth of the count's time on a 50 KB tool output, two thirds of its count there).

    The count is the sum over the pieces CL100K_PATTERN cuts the text into, each piece at least
    one token (see :func:`split_point`). For an ASCII text, count pieces that no two of the
    following can share:

    * a run of letters: a piece holding a letter holds one run of letters and no digit (the
      letter alternative ``[^\r\n\p{L}\p{N}]?+\p{L}++`` and the contractions ``'s`` … take
      contiguous letters after at most one other character), so each run is in a piece of
      its own, at least;
    * a run of ``n`` digits: digits are only ever in ``\p{N}{1,3}+`` pieces, at most three
      to a piece and nothing else in it: ``ceil(n / 3)`` pieces;
    * a run of two or more other characters that are not whitespace: only a character just
      before a letter can go into a letter's piece, so the run's first character is in a piece
      of `` [^\s\p{L}\p{N}]++`` (with at most a space before and line breaks after), which
      holds characters of this run only, no letter and no digit.

    A text with other characters counts its stretches of ASCII so, less two for each: only a
    stretch's first and last run can share a piece with what lies around it (a letter run can
    go on in a letter that is not ASCII, say). The stretches are counted together, their
    characters told apart by the same tables (each byte of a character that is not ASCII
    separates), so a text of many short stretches costs no more than another.
    tests/test_tokens_split.py checks the bound against the count on many texts."""
    if text.isascii():
        return _ascii_floor(text.encode("ascii"))
    data = text.encode("utf-8", "surrogatepass")
    others = data.translate(_OTHERS)
    stretches = others.count(b" u") + others.startswith(b"u") + 1  # at most
    return max(0, _ascii_floor(data) - 2 * stretches)


# The bytes of characters that are not ASCII to ``u``, every other byte a space.
_OTHERS = bytes([32] * 128 + [ord("u")] * 128)


def _ascii_floor(data: bytes) -> int:
    letters = data.translate(_LETTERS)
    # A run of letters starts at the text's start or after a space ("a" never follows "a"
    # in a match of " a", so the non-overlapping count finds every start).
    runs = letters.count(b" a") + letters.startswith(b"a")
    runs += sum((n + 2) // 3 for n in map(len, data.translate(_DIGITS).split()))
    marks = data.translate(_MARKS).split()
    return runs + len(marks) - marks.count(b".")


# Below this many characters a text is counted in one piece: handing half of it to the other
# thread costs tens of microseconds, counting 16,000 characters about a millisecond.
SPLIT_CHARS = 16_000

# A piece boundary of CL100K_PATTERN: a line feed followed by an ASCII letter or digit.
_BOUNDARY = re.compile(r"\n(?=[A-Za-z0-9])")


def split_point(text: str) -> int | None:
    r"""A position ``p`` in the middle half of ``text`` where counting ``text[:p]`` and
    ``text[p:]`` apart gives the count of ``text``, or None.

    tiktoken cuts the text into pieces with CL100K_PATTERN (one ``find_iter`` pass, the pieces
    tiling the text) and encodes each piece on its own, so the count is the sum over pieces.
    The halves' pieces are the whole's when ``p`` is a piece boundary that neither side's
    matching can see across. Here ``text[p - 1]`` is a line feed and ``text[p]`` an ASCII letter
    or digit:

    * no alternative of the pattern matches a line feed followed by a letter or digit (letters
      take an optional lead character that is not a line break; digits, contractions and
      punctuation runs take no line feed before them; the whitespace alternatives take no
      letter or digit), so a piece always ends at ``p`` in the whole text;
    * the piece holding ``text[p - 1]`` is the same in ``text[:p]``: it lies in a run of
      whitespace ending at ``p`` (or is a punctuation run with its line breaks, ``[\r\n]*+``,
      which stops at ``p`` either way). In the whole text ``\s++$`` fails there (no end of
      text) and ``\s*[\r\n]`` takes the run up to the line feed; in ``text[:p]`` ``\s++$``
      takes the same run. Every earlier piece looks at most one character past its own end;
    * the pattern has no look-behind and no ``^``, and ``$`` is the end of the text, which
      both sides share, so ``text[p:]`` is cut from ``p`` exactly as the whole text is.

    tests/test_tokens_split.py checks the sum against the whole count at every such point of
    many texts, the recorded sessions' tool outputs among them."""
    middle = len(text) // 2
    found = _BOUNDARY.search(text, middle) or _BOUNDARY.search(text, len(text) // 4)
    if found is None:
        return None
    point = found.end()
    return point if len(text) // 4 <= point <= 3 * len(text) // 4 else None


# A text longer than this is counted piece by piece, each piece cut at a split point (so the sum
# is the whole count): tiktoken's list of a text's tokens takes about ten bytes per character.
PIECE_CHARS = 1 << 20


def pieces(text: str, most: int = PIECE_CHARS) -> list[str]:
    """``text`` cut at :func:`split_point` positions until each piece is at most ``most``
    characters, or has no split point: counted apart, the pieces give the whole count."""
    if len(text) <= most:
        return [text]
    point = split_point(text)
    if point is None:
        return [text]
    return pieces(text[:point], most) + pieces(text[point:], most)


def _count_split(whole: Callable[[str], int], helper: ThreadPoolExecutor, text: str) -> int:
    """``whole(text)``; a large text in two pieces, the second on the helper thread, when a
    core is likely free for it."""
    # Only when the load leaves a core free (index.window.estimate.spare_core): on a 2-core
    # machine under a load of 3 a split 52 KB count took 1.1-1.2x the whole count's time.
    # A text over PIECE_CHARS is counted piece by piece on this thread: two halves counted at
    # once would hold two token lists and two half copies, past the memory bound of a count.
    point = (split_point(text) if SPLIT_CHARS <= len(text) <= PIECE_CHARS and spare_core()
             else None)
    if point is None:
        return whole(text)
    try:
        later = helper.submit(whole, text[point:])
    except RuntimeError:  # the interpreter is shutting down
        return whole(text)
    return whole(text[:point]) + later.result()


@functools.cache
def _helper() -> ThreadPoolExecutor:
    """The one helper thread (counts from several threads queue there; it never waits on a
    count itself, so they cannot deadlock)."""
    return ThreadPoolExecutor(1, thread_name_prefix="context-paging-count")
