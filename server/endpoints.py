"""The proxy's fixed addresses: where it forwards by default, and the path it answers itself.

Kept apart from server/proxy/app.py so the commands that only name them (the proxy's arguments,
``doctor``, ``install-proxy``) start without loading the HTTP stack.
"""

DEFAULT_ANTHROPIC = "https://api.anthropic.com"
DEFAULT_OPENAI = "https://api.openai.com"
DEFAULT_GEMINI = "https://generativelanguage.googleapis.com"
HEALTH_PATH = "/_context-paging/health"
