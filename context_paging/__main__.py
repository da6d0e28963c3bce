"""``python -m context_paging``: the same command line as the ``context-paging`` script."""

from context_paging.server.cli import main

raise SystemExit(main())
