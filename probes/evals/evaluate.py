"""The one way a checkpoint is evaluated, and the ways the trainer reaches the probes.

``evaluate_checkpoint`` scores pairs (or syntax questions) with a model, writes the eval file with the
contract's metadata (probes.evals.files.eval_meta) and refreshes the run's reduced cache. The probe hook,
``score-run``/``watch``, ``probes score`` and the syntax-question scorer all call it, so dtype, bf16,
model_dir and "already done" mean one thing in every eval file.

The trainer imports nothing of probes but this package: ``probe_hooks`` builds the checkpoint hooks,
``grammar_documents`` gives the built-in grammar corpus and ``write_curves`` draws the end-of-run curves.
Each imports the heavy module it needs when called, never when the config schema is built.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from probes.evals.config import GrammarConfig, ProbesConfig
from probes.evals.files import eval_meta, eval_path, manifest_hash, pair_key, pair_set


@dataclass
class ScoreOptions:
    batch_size: int = 64
    device: Optional[str] = None  # None: the model's device (cuda if available when a CLI loads it)
    bf16: bool = False  # bfloat16 autocast: faster on GPUs, lps move by ~1e-2 nats
    trust_remote_code: bool = False
    progress: bool = False
    per_token: bool = False  # also the per-token sidecar <name>.tokens.parquet (probes/scoring/tokens.py)


@dataclass
class Evaluation:
    df: Any  # pandas.DataFrame: one row per pair (or item)
    path: Path
    meta: dict


def ids_fingerprint(tokenizer) -> str:
    """Short hash of what decides the scored ids: vocabulary, start id and the ids of a probe text.

    Recorded in every eval file as ``tokenizer``; score-run refuses a checkpoint whose tokenizer
    differs from the one a run's evals recorded. (train.tokenizer.pipeline_fingerprint hashes the
    tokenizer's pipeline for caches and resumes; this hashes the ids the scorer actually sees.) The
    probe text mixes scripts and full-width punctuation because normalisation (NFKC turning ``？``
    into ``?``) changes ids without changing the vocabulary.
    """
    import hashlib
    import json

    from probes.scoring.primitive import sentence_ids

    probe = "The cat ran, didn't it? 那个人会做什么？ Ｆｕｌｌ　ｗｉｄｔｈ 123"
    h = hashlib.sha256()
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    h.update(json.dumps(sentence_ids(tokenizer, [probe])).encode())
    return h.hexdigest()[:16]


def weights_dtype(model) -> Optional[str]:
    """The dtype the weights were held in ("float32", "bfloat16", ...); None without a model (rows
    scored elsewhere)."""
    param = None if model is None else next(iter(model.parameters()), None)
    return None if param is None else str(param.dtype).removeprefix("torch.")


def _score_pairs(model, tokenizer, pairs, opts: ScoreOptions):
    from probes.scoring.primitive import score_pairs

    return score_pairs(model, tokenizer, pairs, batch_size=opts.batch_size, device=opts.device,
                       progress=opts.progress, bf16=opts.bf16, per_token=opts.per_token)


def evaluate_checkpoint(model, tokenizer, pairs: list, *, name: str, step: int, tokens: int,
                        ckpt_dir: Optional[Path], run_dir: Optional[Path] = None, out: Optional[Path] = None,
                        opts: ScoreOptions = ScoreOptions(), fingerprint: Optional[str] = None,
                        score: Optional[Callable] = None, key: Callable = pair_key,
                        describe: Optional[Callable[[Any], dict]] = None, unigram=None,
                        cache: bool = True, **extra) -> Optional[Evaluation]:
    """Score `pairs` with `model` (the weights of `ckpt_dir`), write the eval file, refresh the cache.

    The file goes to ``out`` or else ``<run_dir>/evals/step<step>/<name>.parquet``; in a run directory
    the reduced cache of `name` is refreshed after it (``cache=False``: not a minimal-pair table).
    `score(model, tokenizer, pairs, opts)` returns the rows (default: probes.scoring.primitive.score_pairs), or
    None on a rank that does not write (then nothing is written and None is returned); `key` names
    what identifies one pair or item in the pair set; `describe(df)` adds metadata known only after
    scoring; `unigram` = (log unigram probabilities per id, source) adds ulp_good / ulp_bad; `extra`
    goes into the metadata as is. `fingerprint`: the tokenizer's ids_fingerprint when already known.
    """
    if out is None and run_dir is None:
        raise ValueError("evaluate_checkpoint needs run_dir (an eval file of a run) or out (a file)")
    path = Path(out) if out is not None else eval_path(run_dir, step, name)
    manifest = manifest_hash(ckpt_dir)  # before scoring: a damaged manifest fails in a moment, not after
    t0 = time.perf_counter()
    df = (score or _score_pairs)(model, tokenizer, pairs, opts)
    if df is None:
        return None
    meta = eval_meta(step=step, tokens=tokens, benchmark=name, model_dir=ckpt_dir,
                     tokenizer=fingerprint or ids_fingerprint(tokenizer), dtype=weights_dtype(model),
                     bf16=opts.bf16, manifest=manifest, n_pairs=len(df),
                     pair_set=pair_set(pairs, key), seconds=round(time.perf_counter() - t0, 3), **extra)
    if unigram is not None:
        from probes.scoring.unigram import add_unigram_columns

        df = add_unigram_columns(df, tokenizer, unigram[0])
        meta["unigram"] = unigram[1]
    report = getattr(pairs, "report", None)  # load_benchmark says where pairs came from
    if report is not None:
        meta["source"] = report.source
    if describe is not None:
        meta.update(describe(df))

    from probes.scoring.tokens import write_eval

    write_eval(df, path, meta)  # and the per-token sidecar when df has its columns
    if out is None and cache:
        from probes.analysis.evalset import refresh_cache

        refresh_cache(run_dir, name)  # so the report reads one small file, not every eval
    return Evaluation(df, path, meta)


# ---------------------------------------------------------------- what the trainer calls


def probe_hooks(cfg: ProbesConfig, tokenizer, run_dir: Path, *, final_step: Optional[int] = None,
                token_store: Optional[Path] = None, max_positions: Optional[int] = None) -> list:
    """The checkpoint hooks of `cfg` (train.hooks.Hook), built on every rank: the probe hook shards
    the pairs across ranks and rank 0 writes the files; the syntax-question hook when enabled.
    `token_store`: the run's token store directory, for the unigram columns (cfg.unigram)."""
    if not cfg.enabled:
        return []
    from probes.scoring.hook import ProbeHook

    unigram = None
    if cfg.unigram and token_store is not None:  # SLOR / MORCELA need the corpus's own unigram counts
        from probes.scoring.unigram import from_token_store

        unigram = (from_token_store(token_store, len(tokenizer)), f"token_store:{Path(token_store).name}")
    hooks = [ProbeHook(cfg, tokenizer, run_dir, final_step=final_step, unigram=unigram)]
    if cfg.syntax_qa.enabled:
        from probes.syntaxqa.hook import SyntaxQAHook

        hooks.append(SyntaxQAHook(cfg.syntax_qa, tokenizer, run_dir))
    if cfg.elagent.enabled:  # max_positions: the model's context, which long k-shot prompts must fit
        from probes.elagent.hook import ElagentHook

        hooks.append(ElagentHook(cfg.elagent, tokenizer, run_dir, max_positions))
    return hooks


def grammar_documents(cfg: GrammarConfig) -> list[str]:
    """The built-in grammar's training documents (probes.benchmarks.grammar), the corpus of ``data=grammar``."""
    from probes.benchmarks.grammar import corpus_documents

    return list(corpus_documents(cfg))


def write_curves(run_dir: Path) -> int:
    """``probes curves RUN --out RUN/curves``: the learning curves a run draws when it ends."""
    from probes.analysis.curves import main as curves_main

    return curves_main([str(run_dir), "--out", str(Path(run_dir) / "curves")])
