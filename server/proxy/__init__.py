"""The model-API proxy: agents that cannot call ``select_context`` send their requests here and
the provider gets the window. The wire formats, conversation keys, resent-request detection, who
may connect, the live view (``view.py``: a read-only page and its JSON), and the ``proxy``,
``run``, ``view`` and ``doctor`` commands.

May import: the shared modules of ``server/``, ``index``, ``paging``, and ``setup/`` (``run``
and ``install-proxy`` set the agents up). Never the MCP SDK.
"""
