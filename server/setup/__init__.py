"""Set-up: the MCP entry for each client (``install-config``), the agents' settings for the proxy
(``install-proxy``, ``uninstall-proxy``), the originals kept to undo both, ``doctor``'s checks and
the user service that starts the proxy at log-in.

May import: the shared modules of ``server/`` and ``index``. No other road: set-up only edits
files, so it loads neither the proxy's HTTP stack nor the MCP SDK.
"""
