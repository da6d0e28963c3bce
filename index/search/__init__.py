"""The search engine: analysis, the on-disk Whoosh index (store, writer), the in-memory scan of
one session, the query language, and a search's reply and notes.

May import: ``paging`` and the index's shared modules (history, model, navigator, jsonl). Never
``index/window/`` or ``index/service.py``, which composes both.
"""
