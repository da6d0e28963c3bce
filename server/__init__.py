"""The applications over the index and the window, one sub-package per road a user comes by.

- ``mcp/``: the MCP server (``serve``): the tool table, stdio transport, sampling;
- ``proxy/``: the model-API proxy (``proxy``, ``run``, ``doctor``): wire formats, conversations,
  who may connect;
- ``setup/``: pointing agents and MCP clients at this project, and undoing it;
- ``replay/``: a recorded session sent again through the window, as a report;
- ``commands/``: the terminal commands (demo, recovery tools, forget, help, generated docs).

The modules directly in this folder are what every road shares: the settings (``config``,
``settings_help``), the process's one History (``histories``, ``warmup``), the tokenizer
(``tokens``), error wording (``errors``), spare-time work (``idle``), the collector (``heap``),
the proxy's fixed addresses (``endpoints``), the progress line (``progress``), the limits of
every number a command or tool takes (``bounds``), tables fitted to the terminal (``table``),
the per-request chart of the live view and the replay report (``chart``), and the entry point
``cli``, which builds the parser and hands each command to its road (``statusline``, which
Claude Code runs often, is answered before the parser is built).

Imports (docs/architecture.md, "Who may import whom"): a shared module imports no road; a road
imports the shared modules, ``index`` and ``paging``, and of the other roads only those its
package docstring names; only ``cli`` imports every road; only ``mcp/`` imports the MCP SDK.
"""
