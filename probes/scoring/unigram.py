"""Unigram-normalised acceptability, SLOR and MORCELA (docs/scoring.md), as the ZhoBLiMP authors compute them
(src/metrics.py); ties are wrong. Unigram tables: the run's token store counts (an unseen id gets 1/N), or the
authors' {id: probability} tables (an absent id gets their floor, 1/3e9)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import pandas as pd

MORCELA_BETA = 0.5
MORCELA_GAMMA = 10.0
AUTHORS_FLOOR = 1 / 3e9  # src/dataset.py preprocess_unigram: eps = 1 / 3e9
COLUMNS = ("ulp_good", "ulp_bad")


def from_counts(counts: np.ndarray, vocab_size: int) -> np.ndarray:
    """Natural-log unigram probabilities for ids 0..vocab_size-1 from id counts; unseen ids get 1/N."""
    c = np.zeros(vocab_size, dtype=np.float64)
    c[: min(len(counts), vocab_size)] = counts[:vocab_size]
    n = float(c.sum())
    if n <= 0:
        raise ValueError("cannot build a unigram table from an empty token store")
    return np.log(np.where(c > 0, c, 1.0) / n)


def token_counts(store_dir: Union[str, Path], vocab_size: int) -> np.ndarray:
    """How often each id occurs in a token store's tokens.bin (counted in chunks: no full copy)."""
    store_dir = Path(store_dir)
    meta = json.loads((store_dir / "meta.json").read_text())
    tokens = np.memmap(store_dir / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r")
    counts = np.zeros(max(vocab_size, int(meta.get("vocab_size", 0))), dtype=np.int64)
    for a in range(0, len(tokens), 1 << 24):
        chunk = np.asarray(tokens[a:a + (1 << 24)], dtype=np.int64)
        counts += np.bincount(chunk, minlength=len(counts))[: len(counts)]
    return counts


def from_json(path: Union[str, Path], vocab_size: int) -> np.ndarray:
    """Log unigram probabilities from an authors'-style {id: probability} JSON file."""
    path = Path(path)
    try:
        table = {int(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: expected a JSON object {{token id: probability}}: {e}") from None
    if bad := [k for k, v in table.items() if not 0 < v <= 1]:
        raise ValueError(f"{path}: id {bad[0]} has probability {table[bad[0]]}, not in (0, 1]")
    p = np.full(vocab_size, AUTHORS_FLOOR)
    ids = np.fromiter((k for k in table if 0 <= k < vocab_size), dtype=np.int64)
    p[ids] = [table[k] for k in ids]
    return np.log(p)


def add_unigram_columns(df: pd.DataFrame, tokenizer, log_uni: np.ndarray) -> pd.DataFrame:
    """``df`` (per-pair rows with good, bad, ntok_good, ntok_bad) plus ulp_good / ulp_bad of the tokens ``lp_*``
    scores; their count must equal ntok_*, else the eval file was scored with another tokenizer."""
    texts = list(dict.fromkeys([*df["good"], *df["bad"]]))
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    top = max((max(x) for x in ids if len(x)), default=-1)
    if top >= len(log_uni):
        raise ValueError(f"token id {top} is outside the unigram table ({len(log_uni)} ids): another tokenizer")
    sums = {t: (float(log_uni[x].sum()), len(x)) for t, x in zip(texts, map(np.asarray, ids))}
    out = df.copy()
    for side in ("good", "bad"):
        got = [sums[t] for t in df[side]]
        n = np.array([g[1] for g in got])
        if len(n) and not np.array_equal(n, df[f"ntok_{side}"].to_numpy()):
            k = int(np.flatnonzero(n != df[f"ntok_{side}"].to_numpy())[0])
            raise ValueError(f"pair {df['pair_id'].iloc[k]!r}: the tokenizer gives {n[k]} tokens for the {side} "
                             f"sentence, the eval file {df[f'ntok_{side}'].iloc[k]}: scored with another tokenizer")
        out[f"ulp_{side}"] = [g[0] for g in got]
    return out


def score(df: pd.DataFrame, side: str, metric: str, beta: float = MORCELA_BETA,
          gamma: float = MORCELA_GAMMA) -> pd.Series:
    """One sentence score per row: metric "slor" or "morcela" (columns lp_, ulp_, ntok_ of ``side``)."""
    lp, ulp, n = df[f"lp_{side}"], df[f"ulp_{side}"], df[f"ntok_{side}"]
    if metric == "slor":
        return (lp - ulp) / n
    if metric == "morcela":
        return (lp - beta * ulp + gamma) / n
    raise ValueError(f"unknown unigram metric {metric!r}; expected 'slor' or 'morcela'")


def correct(df: pd.DataFrame, metric: str, **params) -> pd.Series:
    """Per-pair correctness under SLOR / MORCELA, strict (a tie is wrong); NaN-free rows required."""
    if missing := [c for c in COLUMNS if c not in df.columns]:
        raise ValueError(f"no {', '.join(missing)} columns: add them with python -m probes unigram RUN_DIR")
    return score(df, "good", metric, **params) > score(df, "bad", metric, **params)


def add_to_run(run_dir: Union[str, Path], table: Optional[Union[str, Path]] = None,
               cache_dir: Optional[Union[str, Path]] = None) -> list[Path]:
    """Add ulp_good / ulp_bad to every eval file of a run (rewritten atomically, meta + "unigram"), from ``table``
    (an authors'-style JSON), else the run's own token store (its data.cache_dir, its checkpoints' tokenizer)."""
    from train.files import list_checkpoints
    from probes.scoring.store import read_pairs, write_pairs
    from train.tokenizer import load_tokenizer

    run_dir = Path(run_dir)
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise FileNotFoundError(f"{run_dir}: no checkpoints (the tokenizer is read from one)")
    tok = load_tokenizer(ckpts[-1][1])
    vocab = len(tok)
    if table is not None:
        log_uni, source = from_json(table, vocab), f"json:{Path(table).name}"
    else:
        store = _run_store(run_dir, ckpts[-1][1], cache_dir)
        log_uni, source = from_counts(token_counts(store, vocab), vocab), f"token_store:{store.name}"
    done = []
    for path in sorted((run_dir / "evals").glob("step*/*.parquet")):
        df, meta = read_pairs(path)
        if not {"good", "bad", "ntok_good", "ntok_bad"} <= set(df.columns):
            continue  # not a minimal-pair file (e.g. syntax questions)
        write_pairs(add_unigram_columns(df, tok, log_uni), path, {**meta, "unigram": source})
        done.append(path)
    return done


def _run_store(run_dir: Path, ckpt: Path, cache_dir) -> Path:
    """The token store the run trained on: cache_dir/stores/<fp>, fp from its corpus and tokenizer."""
    from omegaconf import OmegaConf

    from train.tokenizer import pipeline_fingerprint

    cfg = OmegaConf.load(run_dir / "config.yaml")
    root = Path(cache_dir or cfg.data.cache_dir).expanduser() / "stores"
    fp_tok = pipeline_fingerprint(ckpt)
    found = [meta.parent for meta in sorted(root.glob("*/meta.json"))
             if json.loads(meta.read_text()).get("tokenizer_fingerprint") == fp_tok]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"{len(found)} token stores under {root} share the tokenizer of {ckpt} (one per corpus): "
                         f"{', '.join(f.name for f in found)}; pass --table or a --cache-dir holding one")
    raise FileNotFoundError(f"no token store under {root} was built with the tokenizer of {ckpt} "
                            f"(pass --cache-dir, or --table FILE for an authors' unigram JSON)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probes unigram",
                                description="Add unigram log-prob columns (ulp_good, ulp_bad) to a run's eval files.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--table", help="an {id: probability} JSON (e.g. zhoblimp/unigram/chinese-llama.json); "
                                   "default: the run's own token store")
    p.add_argument("--cache-dir", help="where the run's token store lives (default: its data.cache_dir)")
    a = p.parse_args(argv)
    for run in a.run_dirs:
        try:
            files = add_to_run(run, a.table, a.cache_dir)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"{run}: ulp columns in {len(files)} eval file(s)")
    return 0
