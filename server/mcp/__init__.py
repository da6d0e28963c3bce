"""The MCP server: ``serve``'s tools as plain functions over ``index.service.History``, the one
table that registers them, the stdio transport and the sampling judge.

May import: the shared modules of ``server/``, ``index``, ``paging`` and the MCP SDK (the only
package that does). No other road.
"""
