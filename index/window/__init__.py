"""The window service: ``select_context`` as named steps (record, distill, estimate, calibrate,
select, render, remember), the per-session state between calls, what is new in a request,
when distillation's edits land, and who may run a call now.

May import: ``paging`` and the index's shared modules (ledger, history, model, stats). Never
``index/search/`` or ``index/service.py``, which composes both.
"""
