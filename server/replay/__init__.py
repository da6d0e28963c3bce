"""``context-paging replay``: a recorded session's requests sent again through the window, with
what it saved, what it cost the cache and what stayed recoverable, as text, JSON, SVG or HTML.

May import: the shared modules of ``server/``, ``index`` and ``paging``. No other road.
"""
