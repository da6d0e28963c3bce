"""Storage and reading: session files → history items → search, browse, load and pages; the
ledger of host conversations; and the window service that ``select_context`` and the proxy run.

- ``sources/``: one reader per agent's session format (Pi, Claude Code, Codex);
- ``search/``: the search engine (analysis, the on-disk index, the query language, replies);
- ``window/``: the window service (the ``select_context`` pipeline and its state);
- ``home/``: what the home holds beside the ledger (permissions, the proxy's tallies, forget);
- the modules here: the JSON Lines reader, the history model, the ledger, session discovery and
  the catalog, browsing and recall, stats, and ``service``, the recovery operations that compose
  the rest.

May import: ``paging`` only, never ``server`` or the MCP SDK (docs/architecture.md, "Who may
import whom").
"""
