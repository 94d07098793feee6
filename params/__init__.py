"""Registered experiments (installed as lingvo_gshard.params)."""
