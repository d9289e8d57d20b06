"""Everything that reads checkpoints: benchmarks, scoring, per-pair store, curves."""
