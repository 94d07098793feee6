"""Campaigns: runs of many experiments, e.g. one bilingual baseline per language of a corpus."""
