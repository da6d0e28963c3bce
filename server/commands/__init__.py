"""The terminal's own commands: ``demo``, the recovery tools' faces (``show``, ``output``,
``recall``, ``browse``), ``forget``, the grouped ``--help`` and the generated reference pages.

May import: the shared modules of ``server/``, ``index``, ``paging``, and ``mcp/`` (``--json``
prints the tools' own reply models). No other road.
"""
