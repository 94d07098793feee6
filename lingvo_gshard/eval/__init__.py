"""Evaluation: decoding test sets and scoring them with sacrebleu, the dev evaler job, held-out test sets."""
