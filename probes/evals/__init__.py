"""The eval contract: one light package that everything writing or reading evaluations goes through.

* ``config``   -- the typed configs (ProbesConfig, BenchmarkConfig, SyntaxQAConfig, GrammarConfig)
* ``files``    -- names and files: eval_path and the step-directory rule, the one atomic writer, the
                  one trainer_state reader, manifests and manifest_hash, eval-file metadata and
                  eval_done ("already done": same convention, same pair set, same checkpoint manifest)
* ``evaluate`` -- evaluate_checkpoint (score, write, refresh the reduced cache), and what the trainer
                  calls: probe_hooks, grammar_documents, write_curves

Importing it loads no torch, pandas, pyarrow or probe module beyond the syntax-question records, so
train/ imports it (and nothing else of probes) and the config schema stays cheap. Dependencies run one
way: train/ -> probes.evals; probes/ -> train/ and probes.evals; probes.evals -> neither at import time
(its functions import the scorer, store and hooks when called). tests/test_evals.py checks that.
"""
from probes.evals.config import BenchmarkConfig, GrammarConfig, ProbesConfig, SyntaxQAConfig
from probes.evals.evaluate import (Evaluation, ScoreOptions, evaluate_checkpoint, grammar_documents,
                                   ids_fingerprint, probe_hooks, weights_dtype, write_curves)
from probes.evals.files import (ALL_SUFFIX, CONVENTION, MANIFEST, META_KEY, REGIONS, REQUIRED_FILES, STEP_DIR,
                                TRAINER_STATE, CorruptCheckpointError, EvalInputError, IncompleteCheckpointError,
                                atomic_open, checkpoint_dir, eval_done, eval_meta, eval_path, fsync_dir,
                                fsync_tree, list_checkpoints, manifest_hash, pair_key, pair_set, read_manifest,
                                read_meta, read_trainer_state, step_dirs, verify_checkpoint, versions,
                                write_json_atomic, write_text_atomic)

__all__ = [
    "ALL_SUFFIX", "CONVENTION", "MANIFEST", "META_KEY", "REGIONS", "REQUIRED_FILES", "STEP_DIR", "TRAINER_STATE",
    "BenchmarkConfig", "CorruptCheckpointError", "EvalInputError", "Evaluation", "GrammarConfig",
    "IncompleteCheckpointError", "ProbesConfig", "ScoreOptions", "SyntaxQAConfig", "atomic_open",
    "checkpoint_dir", "eval_done", "eval_meta", "eval_path", "evaluate_checkpoint", "fsync_dir", "fsync_tree",
    "grammar_documents", "ids_fingerprint", "list_checkpoints", "manifest_hash", "pair_key", "pair_set",
    "probe_hooks", "read_manifest", "read_meta", "read_trainer_state", "step_dirs", "verify_checkpoint",
    "versions", "weights_dtype", "write_curves", "write_json_atomic", "write_text_atomic",
]
