"""The eval contract, at the bottom of probes/: ``config`` (BenchmarkConfig, plain typed data) and ``files`` (eval
paths, metadata, the pair set, eval_done); it imports nothing of probes/ and only the ground of train/."""
