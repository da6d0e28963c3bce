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
from collections.abc import Callable
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

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count
