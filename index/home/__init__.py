"""What the home holds beside the ledger and the search index, and how it is kept: permissions
(``private``: directories 0700, files 0600), small JSON files rewritten in place
(``overwrite``), what the proxy leaves for other processes (``proxied``: tallies, the request
series, the live view's token) and deleting a conversation's traces (``forget``).

May import: the index's shared modules (the ledger, the JSON Lines reader) and ``paging``;
never ``index/search/``, ``index/window/`` or ``server``.
"""
