"""What a run is about to do, printed before its first step, and the recipes too short to mean anything
(docs/training.md): a budget of 5,000 tokens with the default 1,024-sequence batch trains 0 steps and its
curves look like results. The warnings come once from the config alone (before the corpus is read) and again
from the real step count."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

from train.optim import warmup_steps
from train.schedule import checkpoint_steps
from train.sequences import HELDOUT_MAX_FRACTION

MIN_STEPS = 100
MIN_WARMUP = 20
PYTHIA_LOG_STEPS = 512  # the last power of two of Pythia's schedule (train/schedule.py)


def recipe_warnings(cfg, total_steps: int, seq_len: int) -> list[str]:
    """One line per reason the run is too short to mean anything, each naming the keys that set it."""
    warnings = []
    tokens_per_step = cfg.optim.global_batch * seq_len
    budget = cfg.data.budget_tokens
    if total_steps < MIN_STEPS:
        where = (f"data.budget_tokens={budget:,}" if budget is not None else "the whole corpus (data.budget_tokens=null)")
        warnings.append(
            f"only {total_steps} optimizer step{'s' if total_steps != 1 else ''}: {where} / (optim.global_batch="
            f"{cfg.optim.global_batch} sequences x data.seq_len={seq_len} tokens = {tokens_per_step:,} tokens per "
            f"step); curves from fewer than {MIN_STEPS} steps are a toy. Raise data.budget_tokens or lower "
            f"optim.global_batch (e.g. experiment=demo_text's 16 x 256)")
    warm = warmup_steps(cfg.optim, total_steps)
    if 0 < warm < MIN_WARMUP or (warm == 0 and cfg.optim.warmup_steps is None and cfg.optim.warmup_ratio > 0):
        key = (f"optim.warmup_steps={cfg.optim.warmup_steps}" if cfg.optim.warmup_steps is not None
               else f"optim.warmup_ratio={cfg.optim.warmup_ratio} of {total_steps} steps")
        warnings.append(f"warm-up of {warm} update{'s' if warm != 1 else ''} ({key}): fewer than {MIN_WARMUP}, "
                        f"so the peak lr is reached almost at once; raise optim.warmup_ratio or set "
                        f"optim.warmup_steps, or train more steps")
    have = len(checkpoint_steps(cfg.schedule, total_steps, tokens_per_step))
    # checkpoints the schedule's keys ask for, step 0 and the last included (log: n_log from step 1); Pythia's: None
    end = total_steps * tokens_per_step if cfg.schedule.unit == "tokens" else total_steps
    points = {p for p in cfg.schedule.points if p <= end} | {0, end}
    promised = {"log": cfg.schedule.n_log + 1, "custom": len(points)}.get(cfg.schedule.kind)
    # log-spaced points always merge a little near step 1 (47 points over 143,000 steps give 46
    # checkpoints); a fifth lost means the run is too short for the schedule
    if promised is not None and have < (0.8 * promised if cfg.schedule.kind == "log" else promised):
        key = (f"schedule.n_log={cfg.schedule.n_log}" if cfg.schedule.kind == "log"
               else f"schedule.points ({promised} positions with step 0 and the end)")
        warnings.append(f"{have} checkpoints where {key} asks for {promised}: {total_steps} steps cannot hold "
                        f"them (points fall on the same step or beyond the end); lower {key.split('=')[0].split(' ')[0]} "
                        f"or train more steps")
    if cfg.schedule.kind == "pythia" and total_steps < PYTHIA_LOG_STEPS:
        warnings.append(f"schedule=pythia's checkpoints 1, 2, 4 ... {PYTHIA_LOG_STEPS} need {PYTHIA_LOG_STEPS} steps; "
                        f"this run has {total_steps} ({have} checkpoints): use schedule=log (schedule.n_log) "
                        f"for a short run")
    return warnings


def planned_steps_of(cfg) -> Optional[int]:
    """Optimizer steps from the budget alone, or None without a budget: SequenceStream's count where the
    corpus is large enough (a view of ceil(budget/epochs) tokens + 1 label token, windows overlapping by one)."""
    if cfg.data.budget_tokens is None:
        return None
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    view = math.ceil(cfg.data.budget_tokens / cfg.data.epochs)
    return view // seq_len * cfg.data.epochs // cfg.optim.global_batch


def warn_early(cfg) -> Optional[int]:
    """Prints the warnings that follow from the config alone (a set budget); returns their step count."""
    steps = planned_steps_of(cfg)
    if steps is None:
        return None
    for line in recipe_warnings(cfg, steps, cfg.data.seq_len or cfg.model.max_position_embeddings):
        print(f"warning: {line}", file=sys.stderr, flush=True)
    return steps


def _si(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:g}"


def startup_summary(cfg, *, run_dir: Path, params: int, tokenizer, tokenizer_dir: Path, total_steps: int,
                    seq_len: int, save_steps, hooks, start_step: int = 0, heldout: tuple[int, int] = (0, 0)) -> str:
    """The lines printed before the first step (rank 0)."""
    tokens_per_step = cfg.optim.global_batch * seq_len
    warm = warmup_steps(cfg.optim, total_steps)
    # a hook that probes says what (describe()); others (the end-of-run curves) are not probes
    probes = [d for d in (getattr(h, "describe", lambda: None)() for h in hooks) if d]
    steps = sorted(save_steps)
    shown = ", ".join(map(str, steps)) if len(steps) <= 8 else \
        f"{', '.join(map(str, steps[:4]))} ... {', '.join(map(str, steps[-2:]))}"
    lines = [
        f"run directory: {run_dir}",
        f"model: {cfg.model.name}, {params:,} parameters ({_si(params)}; {cfg.model.num_hidden_layers} layers, "
        f"hidden {cfg.model.hidden_size})",
        f"tokenizer: {cfg.tokenizer.kind}, {len(tokenizer):,} ids ({tokenizer_dir})",
        f"steps: {total_steps:,} x {tokens_per_step:,} tokens (optim.global_batch={cfg.optim.global_batch} x "
        f"seq_len {seq_len}) = {_si(total_steps * tokens_per_step)} tokens"
        + (f"; resuming at step {start_step:,}" if start_step else ""),
        f"warm-up: {warm:,} update{'s' if warm != 1 else ''}, then {cfg.optim.decay} decay of lr {cfg.optim.lr:g}",
        f"checkpoints: {len(steps)} (schedule={cfg.schedule.kind}: {shown})",
        f"probes at every checkpoint: {'; '.join(probes) if probes else 'none (probes=none)'}",
    ]
    n_tok, n_docs = heldout
    # a forward pass costs about a third of a training step's forward and backward per token
    share = 100 * n_tok * len(steps) / (3 * max(total_steps * tokens_per_step, 1))
    lines.append(f"held-out loss at every checkpoint: {n_tok:,} tokens of {n_docs:,} documents never trained on "
                 f"(data.heldout_tokens={cfg.data.heldout_tokens:,}), {len(steps)} forward passes over them, "
                 f"~{f'{share:.2g}' if share < 10 else f'{share:,.0f}'} % of training's compute"
                 + ("; lower data.heldout_tokens to spend less" if share > 50 else "") if n_tok > 1 else
                 "held-out loss: off (data.heldout_tokens=0)" if not cfg.data.heldout_tokens else
                 f"held-out loss: off: the split takes whole documents from the end of the order, at most "
                 f"{HELDOUT_MAX_FRACTION:.0%} of the corpus, and its last document is longer "
                 f"(data.heldout_tokens={cfg.data.heldout_tokens:,})")
    return "\n".join(lines)
