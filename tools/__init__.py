"""Command-line tools (installed as lingvo_gshard.tools)."""
