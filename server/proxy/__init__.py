"""The model-API proxy: agents that cannot call ``select_context`` send their requests here and
the provider gets the window. The wire formats, conversation keys, resent-request detection, who
may connect, recovery in band (``inband.py`` offers and runs the recovery tools, ``answer.py``
merges the provider's replies into one), the Gemini API's turns (``gemini.py``), the live view
(``view.py``: a read-only page and its JSON), and the ``proxy``, ``run``, ``view`` and
``doctor`` commands.

May import: the shared modules of ``server/``, ``index``, ``paging``, and ``setup/`` (``run``
and ``install-proxy`` set the agents up). Never the MCP SDK.
"""
