"""The window as pure functions over values: message formats, token estimates, budget and
target, selection, the cut, calibration, notices and distillation (``distill/``).

May import: nothing of this project outside ``paging``, no file I/O and no MCP SDK
(docs/architecture.md, "Who may import whom").
"""
