"""Synthetic learning curves and run directories with known answers (planted U's), for tests and benchmarks.
Each pair has a latent difficulty that persists across checkpoints, which makes the paired bootstrap meaningful."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from probes.evals.files import CONVENTION, META_KEY, REGIONS
from train.files import TRAINER_STATE  # planted files read like real ones


def sigmoid_curve(x: np.ndarray, start: float, top: float, mid: float, slope: float) -> np.ndarray:
    """start + (top - start) * logistic(slope * (x - mid)) on x = log10 tokens."""
    return start + (top - start) / (1.0 + np.exp(-slope * (np.asarray(x, dtype=float) - mid)))


def planted_dip(x: np.ndarray, depth: float, center: float, width: float) -> np.ndarray:
    """A Gaussian dip of `depth` at log10 tokens `center` (standard deviation `width` decades)."""
    return depth * np.exp(-0.5 * ((np.asarray(x, dtype=float) - center) / width) ** 2)


def log_spaced_steps(n: int, last: int) -> np.ndarray:
    """step 0 plus n-1 distinct log-spaced steps ending at `last` (ZhoBLiMP-style schedule)."""
    steps = np.unique(np.round(np.logspace(0, np.log10(last), 4 * n)).astype(np.int64))
    pick = np.unique(np.round(np.linspace(0, len(steps) - 1, n - 1)).astype(int))
    return np.concatenate([[0], steps[pick]])


def sample_correct(p: np.ndarray, n_pairs: int, rng: np.random.Generator, jitter: float = 0.15) -> np.ndarray:
    """(n_steps, n_pairs) bool: pair i is right at step s iff its latent difficulty (+ jitter) < p[s]."""
    latent = rng.random(n_pairs)
    noisy = latent[None, :] + jitter * rng.standard_normal((len(p), n_pairs))
    # The jittered latents of each step are ranked and the k easiest pairs are right, with k drawn
    # Binomial(n, p): the accuracy has the sampling noise of n pairs while pair identities persist.
    ranks = np.argsort(np.argsort(noisy, axis=1), axis=1)
    k = rng.binomial(n_pairs, np.clip(p, 0, 1))
    return ranks < k[:, None]



def sample_persistent(p: np.ndarray, n_pairs: int, n_seeds: int, rng: np.random.Generator, shock: float = 0.0,
                      shared: float = 0.0, jitter: float = 0.3, c: np.ndarray | None = None) -> np.ndarray:
    """(n_seeds, n_steps, n_pairs) bool: the same pairs at every checkpoint and in every seed, with no
    independent binomial draw anywhere. Pair i is right at step t of seed s iff z_i < g_t + c_st + e_sti:
    z_i ~ N(0, 1) its difficulty, fixed for the run and the same in every seed; c_st ~ N(0, shock^2) a
    shock to the whole paradigm at that checkpoint (its pairs share a template and flip together),
    correlated `shared` across seeds (data they share); e_sti ~ N(0, jitter^2) the pair's own wobble.
    g_t = Phi^-1(p_t) sqrt(1 + shock^2 + jitter^2) makes p_t the expected accuracy. c, (n_seeds, n_steps) of
    variance shock^2: the shocks to use (e.g. partly common to the paradigms of a phenomenon)."""
    from scipy.stats import norm

    z = rng.standard_normal(n_pairs)
    if c is None:
        c = shock * (np.sqrt(shared) * rng.standard_normal(len(p))
                     + np.sqrt(1 - shared) * rng.standard_normal((n_seeds, len(p))))
    g = norm.ppf(np.clip(p, 1e-6, 1 - 1e-6)) * np.sqrt(1 + shock ** 2 + jitter ** 2)
    e = jitter * rng.standard_normal((n_seeds, len(p), n_pairs))
    return z < (g[:, None] + c[:, :, None] + e)

@dataclass
class RunSpec:
    model: str = "pythia-14m"
    budget: Optional[int] = None
    seed: int = 1
    tokens_per_step: int = 2048 * 1024
    steps: list[int] = field(default_factory=list)
    benchmark: str = "synthetic"


def write_run(run_dir: str | Path, spec: RunSpec, curves: np.ndarray, paradigms: Sequence[str],
              phenomena: Sequence[str], n_pairs: int, rng: np.random.Generator,
              suffix_share: Optional[np.ndarray] = None, correct: Optional[np.ndarray] = None) -> Path:
    """Write a run directory whose paradigm p has true accuracy curves[:, p] at spec.steps.
    correct (n_steps, n_paradigms x n_pairs), optional: the outcomes to write instead of sampling them.

    suffix_share (n_steps, n_paradigms), optional: the part of each pair's delta that sits in the
    suffix region (the rest is in the critical region; the shared prefix has delta 0).
    """
    run_dir = Path(run_dir)
    steps = np.asarray(spec.steps, dtype=np.int64)
    n_steps, n_par = curves.shape
    if n_steps != len(steps) or n_par != len(paradigms):
        raise ValueError(f"curves shape {curves.shape} != ({len(steps)} steps, {len(paradigms)} paradigms)")
    run_dir.mkdir(parents=True, exist_ok=True)
    budget = "null" if spec.budget is None else str(spec.budget)
    (run_dir / "config.yaml").write_text(
        f"experiment: synthetic\nseed: {spec.seed}\nmodel:\n  name: {spec.model}\n"
        f"data:\n  budget_tokens: {budget}\n  seed: 0\n")
    n_rows = n_par * n_pairs
    if correct is None:
        correct = np.concatenate([sample_correct(curves[:, p], n_pairs, rng) for p in range(n_par)], axis=1)
    ntok_good = rng.integers(5, 16, n_rows)
    ntok_bad = ntok_good + rng.integers(0, 2, n_rows)
    paradigm_col = pa.array(np.repeat(np.asarray(paradigms, dtype=object), n_pairs), pa.string())
    phen_col = pa.array(np.repeat(np.asarray(phenomena, dtype=object), n_pairs), pa.string())
    ids = pa.array(np.tile(np.arange(n_pairs), n_par).astype(str), pa.string())
    sentences = pa.array(np.full(n_rows, "…", dtype=object), pa.string())
    for i, step in enumerate(steps):
        margin = 0.05 + rng.exponential(0.3, n_rows)  # mean log-prob gap per token
        m_bad = -3.0 - rng.random(n_rows)
        m_good = np.where(correct[i], m_bad + margin, m_bad - margin)
        lp_good, lp_bad = m_good * ntok_good, m_bad * ntok_bad
        d = lp_good - lp_bad
        share = 0.3 if suffix_share is None else np.repeat(suffix_share[i], n_pairs)
        cols = {
            "benchmark": pa.array(np.full(n_rows, spec.benchmark, dtype=object), pa.string()),
            "paradigm": paradigm_col, "phenomenon": phen_col, "pair_id": ids,
            "good": sentences, "bad": sentences,
            "lp_good": lp_good, "lp_bad": lp_bad, "ntok_good": ntok_good, "ntok_bad": ntok_bad,
        }
        base = -2.0 * np.ones(n_rows)
        # critical gets (1 - share) of the delta, suffix the rest; prefix none (shared tokens)
        region_lp = {"prefix": (base, base), "critical": (base + (1 - share) * d, base),
                     "suffix": (base + share * d, base)}
        for r in REGIONS:
            g, b = region_lp[r]
            cols[f"lp_good_{r}"], cols[f"lp_bad_{r}"] = g, b
            cols[f"ntok_good_{r}"] = cols[f"ntok_bad_{r}"] = np.ones(n_rows, dtype=np.int64)
        table = pa.table(cols)
        meta = {"step": int(step), "tokens": int(step) * spec.tokens_per_step,
                "benchmark": spec.benchmark, "convention": CONVENTION}
        table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
        out = run_dir / "evals" / f"step{step}"
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out / f"{spec.benchmark}.parquet")
        ck = run_dir / "checkpoints" / f"step{step}"
        ck.mkdir(parents=True, exist_ok=True)
        (ck / TRAINER_STATE).write_text(json.dumps({"step": int(step), "tokens": meta["tokens"]}))
    return run_dir
