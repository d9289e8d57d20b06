"""Exposure (probes/exposure/run.py): how often each probed pair's sentences and critical n-grams occurred in
the tokens a run trained on by each checkpoint, written as RUN_DIR/exposure/<benchmark>.parquet (kind "exposure",
never under evals/, so the eval readers do not meet it). docs/probing.md."""

from probes.families import Family

KIND = "exposure"

FAMILY = Family(kind=KIND, commands=(("exposure", "probes.exposure.run:main",
                                      "count each pair's verbatim and critical n-gram exposure in the stream a run "
                                      "trained on, per checkpoint -> RUN_DIR/exposure/<benchmark>.parquet, and n-gram "
                                      "baselines on the same tokens -> <benchmark>.ngram.parquet"),))
