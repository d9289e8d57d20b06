"""Scoring checkpoints: the per-token log-prob primitive, the per-pair store, the in-loop probe hook,
score-run/watch over run directories, per-token sidecars and unigram frequencies."""
