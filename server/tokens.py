"""The offline tokenizer: tiktoken's cl100k_base, loaded from the copy shipped in server/data.

tiktoken downloads its BPE files on first use; this server never does. The shipped file is
checked against the SHA-256 that tiktoken itself expects for cl100k_base before it is used. If
the file is missing or damaged, estimates fall back to characters/4 with one warning.
cl100k_base is OpenAI's encoding; for other providers it is an estimate, and usage reported by
the host (calibration) corrects the difference.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

log = logging.getLogger("context_paging")

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                  "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


@functools.cache
def text_counter() -> Callable[[str], int] | None:
    """``len(encode(text))`` with cl100k_base, or None (with one warning) when unavailable."""
    try:
        import tiktoken

        data_dir = resources.files("context_paging.server") / "data"
        data = (data_dir / "cl100k_base.tiktoken").read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != CL100K_SHA256:
            raise ValueError(f"cl100k_base.tiktoken has hash {digest[:12]}…, not the expected one")
        ranks = {
            base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in data.splitlines() if line)
        }
        encoding = tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN,
                                     mergeable_ranks=ranks, special_tokens=CL100K_SPECIAL)
    except Exception as exc:  # any failure means the documented fallback, never a crash
        log.warning("tiktoken encoding unavailable (%s); estimating tokens as characters/4", exc)
        return None

    def encode(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    def count(text: str) -> int:
        # A long text is counted in two halves at once: tiktoken releases the GIL while it
        # encodes, and the halves meet where cl100k's pre-tokenizer always cuts (split_point),
        # so the sum is the whole text's count exactly.
        cut = split_point(text) if len(text) >= SPLIT_CHARS else None
        pool = _pool() if cut is not None else None
        if pool is None:
            return encode(text)
        try:
            first = pool.submit(encode, text[:cut])
        except RuntimeError:  # the interpreter is shutting down
            return encode(text)
        return encode(text[cut:]) + first.result()

    count.whole = encode  # type: ignore[attr-defined] # the unsplit count, for tests and benches
    return count


SPLIT_CHARS = 16_384  # shorter texts are counted in one piece (a thread hand-off costs ~50 µs)
_NEWLINE_LETTER = re.compile("\n[A-Za-z]")


def split_point(text: str) -> int | None:
    """A position near the middle of ``text`` where cl100k_base's pre-tokenizer always starts a
    new piece, whatever comes before or after: just after a newline that an ASCII letter
    follows. No piece can run across it (a letter piece never starts with a newline; the
    punctuation and whitespace pieces that take newlines end at one; ``\\s+(?!\\S)`` cannot end
    before a letter), the pattern has no look-behind, and the text before it ends in the same
    whitespace piece with or without what follows. So encoding the two sides apart gives the
    same pieces, hence the same tokens. The first such newline from the middle on (else from
    the start); None when there is none."""
    found = _NEWLINE_LETTER.search(text, len(text) // 2) or _NEWLINE_LETTER.search(text)
    return None if found is None else found.start() + 1


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """One helper thread for the other half of long texts; made on first use."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="token-count"))
        return _POOL[0]
