"""Data pipeline definitions (installed as lingvo_gshard.data)."""
