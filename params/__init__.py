"""Registered experiments (installed as lingvo_gshard.params).

Every module that registers experiments is listed here, so `registry.LoadAll()` finds them all and a reader
can too.
"""
EXPERIMENT_MODULES = (
    'gshard_paper',
    'm4_tiny',
    'bilingual',
)
