"""What `probes score` prints for a reader: accuracy per phenomenon, and whether the tokenizer can read
the benchmark at all.

One overall number hides both what moved and whether it could: the demo tokenizer (512 pieces trained on
English) turns every Chinese character into three byte pieces it never saw in training, so ZhoBLiMP on it
gives 0.47 -- a number about the tokenizer, not about syntax. The coverage check counts, over every
sentence of the benchmark as the scorer encodes it, the share of unknown pieces (the tokenizer's unk id),
of byte-fallback pieces (`<0xNN>`), and -- when the model directory is a checkpoint of one of our runs whose
token store is at hand -- of pieces that never occur in the run's corpus, and warns above the thresholds.
"""
from __future__ import annotations

import re
from itertools import chain
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.scoring.primitive import correct

# Above these shares the benchmark's scores say little about the model (the reader is told why).
MAX_UNKNOWN = 0.01
MAX_BYTE_FALLBACK = 0.05
MAX_UNSEEN = 0.05
_BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def phenomenon_table(df: pd.DataFrame) -> str:
    """Pairs, paradigms and MLP / sum-LP accuracy per phenomenon, and the whole set last."""
    scored = df.assign(mlp=correct(df, "mlp").astype(float), sum=correct(df, "sum").astype(float))
    table = scored.groupby("phenomenon", sort=True).agg(pairs=("mlp", "size"), paradigms=("paradigm", "nunique"),
                                                        acc_mlp=("mlp", "mean"), acc_sum=("sum", "mean"))
    table.loc["(all)"] = [len(scored), scored["paradigm"].nunique(), scored["mlp"].mean(), scored["sum"].mean()]
    table[["pairs", "paradigms"]] = table[["pairs", "paradigms"]].astype(int)
    return table.to_string(float_format=lambda x: f"{x:.3f}")


def coverage(tokenizer, pairs, corpus_counts: Optional[np.ndarray] = None,
             scored: Optional[dict[str, list[int]]] = None) -> dict[str, float]:
    """Shares of the benchmark's pieces that are unknown, byte fallback, and (with the run's id counts)
    never seen in training; `pieces` is how many were counted. `scored`: the ids scoring read
    (primitive.pair_sentence_ids: start id first, then the sentence's), else the sentences are encoded
    here as scoring encodes them."""
    if scored is None:
        from probes.scoring.primitive import pair_sentence_ids

        scored = pair_sentence_ids(tokenizer, pairs)
    ids = np.fromiter(chain.from_iterable(scored[s][1:] for p in pairs for s in (p.good, p.bad)), dtype=np.int64)
    n = max(1, len(ids))
    byte_ids = {i for piece, i in tokenizer.get_vocab().items() if _BYTE_PIECE.match(piece)}
    out = {"pieces": float(len(ids)),
           "unknown": float(np.sum(ids == tokenizer.unk_token_id)) / n if tokenizer.unk_token_id is not None else 0.0,
           "byte_fallback": float(np.isin(ids, list(byte_ids)).sum()) / n if byte_ids else 0.0}
    if corpus_counts is not None:
        seen = np.zeros(max(len(corpus_counts), int(ids.max(initial=0)) + 1), dtype=bool)
        seen[: len(corpus_counts)] = corpus_counts > 0
        out["unseen"] = float((~seen[ids]).sum()) / n
    return out


def coverage_warning(name: str, cov: dict[str, float], store: Optional[Path] = None) -> Optional[str]:
    """One line when the tokenizer reads benchmark `name` badly, else None."""
    bad = []
    if cov["unknown"] > MAX_UNKNOWN:
        bad.append(f"{cov['unknown']:.0%} unknown pieces")
    if cov["byte_fallback"] > MAX_BYTE_FALLBACK:
        bad.append(f"{cov['byte_fallback']:.0%} byte-fallback pieces (<0xNN>)")
    if cov.get("unseen", 0.0) > MAX_UNSEEN:
        bad.append(f"{cov['unseen']:.0%} pieces never seen in the run's corpus ({store})")
    if not bad:
        return None
    return (f"warning: the tokenizer reads benchmark {name} badly: of its {int(cov['pieces']):,} pieces, "
            f"{', '.join(bad)}; its scores say more about the tokenizer than about syntax (train the tokenizer "
            f"on text in the benchmark's language)")


def run_token_counts(model_dir: Path, vocab_size: int) -> tuple[Optional[np.ndarray], Optional[Path]]:
    """Id counts of the run's token store when `model_dir` is <run>/checkpoints/step<N> of one of our runs
    and the store is in its cache; (None, None) otherwise (another model, a moved cache)."""
    model_dir = Path(model_dir)
    run_dir = model_dir.parent.parent
    if model_dir.parent.name != "checkpoints" or not (run_dir / "config.yaml").is_file():
        return None, None
    from probes.scoring.unigram import _run_store, token_counts

    try:
        store = _run_store(run_dir, model_dir, None)
        return token_counts(store, vocab_size), store
    except (OSError, ValueError):
        return None, None
