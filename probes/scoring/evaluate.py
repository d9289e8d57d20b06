"""The one way a checkpoint is evaluated: ``evaluate_checkpoint`` scores pairs (or a family's items), writes the
eval file with the contract's metadata (probes.evals.files.eval_meta) and refreshes the run's reduced cache, so
dtype, bf16, model_dir and "already done" mean one thing in every eval file, whoever wrote it."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from probes.evals.files import MINIMAL_PAIRS, eval_done, eval_meta, eval_path, pair_key, pair_set
from train.files import checkpoint_dir, manifest_hash


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
    """Short hash of what decides the scored ids (vocabulary, start id, the ids of a probe text), recorded in every
    eval file as ``tokenizer``. The probe text mixes scripts and full-width punctuation because normalisation
    (NFKC turning ``？`` into ``?``) changes ids without changing the vocabulary."""
    import hashlib
    import json

    from probes.scoring.primitive import sentence_ids

    probe = "The cat ran, didn't it? 那个人会做什么？ Ｆｕｌｌ　ｗｉｄｔｈ 123"
    h = hashlib.sha256()
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode())
    h.update(json.dumps(sentence_ids(tokenizer, [probe])).encode())
    return h.hexdigest()[:16]


def weights_dtype(model) -> Optional[str]:
    """The dtype the weights were held in ("float32", ...); None without a model (rows scored elsewhere)."""
    param = None if model is None else next(iter(model.parameters()), None)
    return None if param is None else str(param.dtype).removeprefix("torch.")


def evaluate_checkpoint(model, tokenizer, pairs: list, *, name: str, step: int, tokens: int,
                        ckpt_dir: Optional[Path], run_dir: Optional[Path] = None, out: Optional[Path] = None,
                        opts: ScoreOptions = ScoreOptions(), fingerprint: Optional[str] = None,
                        score: Optional[Callable] = None, key: Callable = pair_key,
                        describe: Optional[Callable[[Any], dict]] = None, kind: str = MINIMAL_PAIRS,
                        ids: Optional[dict] = None, **extra) -> Optional[Evaluation]:
    """Score `pairs` with `model` (the weights of `ckpt_dir`) into ``out``, else the run's eval file of `name`.
    `score(model, tokenizer, pairs, opts)`: the rows (default score_pairs), None on a rank that does not write;
    `key`: what identifies a pair or item in the pair set; `describe(df)`: metadata known only after scoring;
    `extra`: more metadata; `fingerprint`, `ids`: ids_fingerprint and pair_sentence_ids when already known."""
    if out is None and run_dir is None:
        raise ValueError("evaluate_checkpoint needs run_dir (an eval file of a run) or out (a file)")
    path = Path(out) if out is not None else eval_path(run_dir, step, name)
    manifest = manifest_hash(ckpt_dir)  # before scoring: a damaged manifest fails in a moment, not after
    t0 = time.perf_counter()
    if score is None:
        from probes.scoring.primitive import score_pairs

        df = score_pairs(model, tokenizer, pairs, batch_size=opts.batch_size, device=opts.device,
                         progress=opts.progress, bf16=opts.bf16, per_token=opts.per_token, ids=ids)
    else:
        df = score(model, tokenizer, pairs, opts)
    if df is None:
        return None
    meta = eval_meta(step=step, tokens=tokens, benchmark=name, model_dir=ckpt_dir,
                     tokenizer=fingerprint or ids_fingerprint(tokenizer), dtype=weights_dtype(model),
                     bf16=opts.bf16, manifest=manifest, n_pairs=len(df),
                     pair_set=pair_set(pairs, key), seconds=round(time.perf_counter() - t0, 3), kind=kind, **extra)
    report = getattr(pairs, "report", None)  # load_benchmark says where pairs came from
    if report is not None:
        meta["source"] = report.source
        if report.authors_convention:  # the benchmark authors' decision rule, shown beside ours
            meta["authors_convention"] = report.authors_convention
    if describe is not None:
        meta.update(describe(df))
    from probes.scoring.tokens import write_eval

    write_eval(df, path, meta)  # and the per-token sidecar when df has its columns
    if out is None and kind == MINIMAL_PAIRS:
        from probes.analysis.evalset import refresh_cache

        refresh_cache(run_dir, name)  # so the report reads one small file, not every eval
    return Evaluation(df, path, meta)


class ItemsHook:
    """A family's checkpoint hook over items built once per run (syntax questions, ELAGENT): rank 0 scores them
    into evals/step<N>/<benchmark>.parquet unless done there. A subclass sets benchmark, items, pair_set, run_dir
    and gives `evaluate(model, step, tokens, ckpt_dir)` (an Evaluation) and `summarize(df)`."""
    benchmark: str
    pair_set: str
    run_dir: Path

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        import math

        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized() and torch_dist.get_rank() != 0:
            return {}  # rank 0 scores: a few hundred items, next to thousands of minimal pairs
        if eval_done(eval_path(self.run_dir, step, self.benchmark), self.pair_set, manifest_hash(ckpt_dir)):
            return {}
        was_training = model.training
        model.eval()
        try:
            ev = self.evaluate(model, step, tokens, ckpt_dir)
        finally:
            model.train(was_training)
        return {f"probe/{self.benchmark}/{k}": v for k, v in self.summarize(ev.df).items()
                if not math.isnan(v) and not k.endswith("n_items")}

    def missing(self, step: int) -> bool:
        return not eval_done(eval_path(self.run_dir, step, self.benchmark), self.pair_set,
                             manifest_hash(checkpoint_dir(self.run_dir, step)))

    def close(self) -> None:
        pass
