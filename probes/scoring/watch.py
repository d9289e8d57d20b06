"""Probing a run's whole checkpoints after the fact (``score-run``) or while it trains (``watch``), into the files
the in-loop probe hook writes; writes are atomic, so a killed process restarts where it stopped."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from probes.evals.files import eval_done, eval_file_meta, eval_path, pair_set
from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint, ids_fingerprint
from train.files import (IncompleteCheckpointError, list_checkpoints, manifest_hash, read_trainer_state, verify_checkpoint)
from probes.benchmarks.pairs import Pair
from train.errors import InputFileError, reading


def whole_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, dir) of every whole checkpoint of a run, by step; an incomplete one under a final name is logged."""
    out = []
    for step, child in list_checkpoints(run_dir):
        try:
            verify_checkpoint(child)
        except IncompleteCheckpointError as e:
            logging.getLogger(__name__).warning("skipped: %s", e)
            continue
        out.append((step, child))
    return out


def check_vocabulary(ckpt_dir: Path, tokenizer, model) -> None:
    """A tokenizer with ids beyond the embedding would index past it (an IndexError deep in torch)."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise InputFileError(f"{ckpt_dir}: the tokenizer has {len(tokenizer)} ids but the model's embedding "
                             f"only {rows} rows: the tokenizer files do not belong to this model")


def check_fingerprint(run_dir: Path, step: int, ckpt_dir: Path, fingerprint: str) -> None:
    """A checkpoint whose tokenizer is not the one the run's eval files recorded (ids_fingerprint; this step's
    files first) would be scored with ids the model never saw: refused."""
    evals = Path(run_dir) / "evals"
    this_step = sorted((evals / f"step{step}").glob("*.parquet"))
    for f in this_step + sorted(p for p in evals.glob("step*/*.parquet") if p not in this_step):
        try:
            recorded = eval_file_meta(f).get("tokenizer")
        except ValueError:  # an unreadable eval file is rescored; it records nothing
            continue
        if recorded and recorded != fingerprint:
            raise InputFileError(f"{ckpt_dir}: its tokenizer (fingerprint {fingerprint}) is not the one this run "
                                 f"was probed with ({recorded}, recorded in {f}): a checkpoint or tokenizer from "
                                 f"another run?")
        if recorded:
            return


def run_finished(run_dir: Path) -> bool:
    """True when a whole checkpoint has ``step == total_steps`` in its trainer_state.json."""
    states = (read_trainer_state(ckpt) for _step, ckpt in reversed(whole_checkpoints(run_dir)))
    return any("total_steps" in s and s.get("step") == s["total_steps"] for s in states)


def pending(run_dir: Path, benchmarks: dict[str, list[Pair]],
            per_token: bool = False) -> list[tuple[int, Path, list[str]]]:
    """(step, checkpoint, benchmark names still to score) for every whole checkpoint with work;
    with ``per_token`` an eval file without its per-token sidecar is work too."""
    sets = {name: pair_set(pairs) for name, pairs in benchmarks.items()}
    out = []
    for step, ckpt in whole_checkpoints(run_dir):
        manifest = manifest_hash(ckpt)
        todo = [name for name in benchmarks if not eval_done(eval_path(run_dir, step, name), sets[name], manifest,
                                                                per_token)]
        if todo:
            out.append((step, ckpt, todo))
    return out


def score_checkpoint(ckpt_dir: Path, run_dir: Path, step: int, benchmarks: dict[str, list[Pair]],
                     opts: ScoreOptions, say: Callable[[str], None] = print,
                     probe_tasks: Sequence[tuple] = ()) -> list[Path]:
    """Score ``benchmarks`` and ``probe_tasks`` ((a family's probe, its tasks)) on one checkpoint with the model
    and tokenizer saved in it; the eval files written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from probes.scoring.hook import summary_metrics
    from train.weights import load_causal_lm

    state = read_trainer_state(ckpt_dir)
    device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    # the ids scored must be the ones the model was trained on: the checkpoint's own tokenizer
    with reading(ckpt_dir, "the checkpoint's tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(ckpt_dir, trust_remote_code=opts.trust_remote_code)
    with reading(ckpt_dir, "the checkpoint's model (config.json, model.safetensors)",
                 "a truncated or damaged checkpoint: delete it, or rerun training to rewrite it"):
        model = load_causal_lm(ckpt_dir, AutoModelForCausalLM, trust_remote_code=opts.trust_remote_code)
    check_vocabulary(ckpt_dir, tokenizer, model)
    fingerprint = ids_fingerprint(tokenizer)
    check_fingerprint(run_dir, step, ckpt_dir, fingerprint)
    model.to(device)
    opts = replace(opts, device=device)
    written = []
    for name, pairs in benchmarks.items():
        ev = evaluate_checkpoint(model, tokenizer, pairs, name=name, step=step, tokens=int(state.get("tokens", -1)),
                                 ckpt_dir=ckpt_dir, run_dir=run_dir, opts=opts, fingerprint=fingerprint)
        acc = summary_metrics(ev.df, name)[f"probe/{name}/acc_mlp"]
        say(f"step{step} {name}: {len(ev.df)} pairs acc_mlp={acc:.4f} -> {ev.path}")
        written.append(ev.path)
    for probe, tasks in probe_tasks:
        for key, value in probe.evaluate(model, tokenizer, ckpt_dir, step, int(state.get("tokens", -1)),
                                         tasks=list(tasks), fingerprint=fingerprint).items():
            say(f"step{step} {key.removeprefix('probe/')}={value:.4f}")
        written += [eval_path(run_dir, step, probe.file_name(t)) for t in tasks]
    return written


def other_samples(run_dir: Path, work: list[tuple[int, Path, list[str]]], benchmarks: dict[str, list[Pair]]) -> list[str]:
    """The eval files among `work` that hold another pair sample (another --max-pairs-per-paradigm, the in-loop
    sample) on the same checkpoint: what scoring would replace, not redo."""
    out = []
    for step, ckpt, todo in work:
        manifest = manifest_hash(ckpt)
        for name in todo:
            path = eval_path(run_dir, step, name)
            try:
                meta = eval_file_meta(path) if path.is_file() else {}
            except ValueError:  # damaged: rescored, as ever
                continue
            if meta.get("manifest") == manifest and meta.get("pair_set") not in (None, pair_set(benchmarks[name])):
                out.append(f"{path} ({meta.get('n_pairs')} pairs; asked for {len(benchmarks[name]):,})")
    return out


def score_run(run_dir: Path, benchmarks: dict[str, list[Pair]], opts: ScoreOptions,
              say: Callable[[str], None] = print, probes: Sequence = (), replace_samples: bool = False) -> list[Path]:
    """Score every whole checkpoint of a run on every benchmark and family probe's task not yet done; the files
    written. Files of another pair sample are replaced only with ``replace_samples``, else named (ValueError)."""
    from train.neox_ckpt import sync_run

    sync_run(run_dir, say=say)  # a gpt-neox save directory: new global_step<N> -> checkpoints/step<N>
    todo_list = pending(run_dir, benchmarks, opts.per_token)
    if other := ([] if replace_samples else other_samples(run_dir, todo_list, benchmarks)):
        raise ValueError(f"{other[0]}{f' and {len(other) - 1} more eval files' if len(other) > 1 else ''} hold "
                         f"another pair sample scored on the same checkpoint (the run's in-loop results?); "
                         f"--replace scores over them (the run's curves/ are redrawn), or give the "
                         f"--max-pairs-per-paradigm they were scored with")
    work = {step: (ckpt, todo, []) for step, ckpt, todo in todo_list}
    for probe in probes:
        for step, ckpt in whole_checkpoints(run_dir):
            if tasks := probe.todo(step, manifest_hash(ckpt)):
                work.setdefault(step, (ckpt, [], []))[2].append((probe, tasks))
    written = []
    for step, (ckpt, todo, tasks) in sorted(work.items()):
        written += score_checkpoint(ckpt, run_dir, step, {n: benchmarks[n] for n in todo}, opts, say, probe_tasks=tasks)
    return written


def watch(run_dir: Path, benchmarks: dict[str, list[Pair]], opts: ScoreOptions, *,
          poll_s: float = 60.0, timeout_s: Optional[float] = None,
          say: Callable[[str], None] = print, probes: Sequence = (), replace_samples: bool = False) -> bool:
    """Score checkpoints as they become whole until the run has finished (True) or ``timeout_s`` passed (False)."""
    if poll_s <= 0:
        raise ValueError(f"poll interval must be > 0 seconds, got {poll_s}")
    start = time.monotonic()
    while True:
        # checked before scoring: a last checkpoint that appears during this pass is scored by
        # the next pass before the loop ends
        finished = run_finished(run_dir)
        try:
            score_run(run_dir, benchmarks, opts, say, probes=probes, replace_samples=replace_samples)
        except OSError as e:  # e.g. a rerun replacing a checkpoint while it was read: try again
            say(f"warning: {e}; trying again in {poll_s:g}s")
            finished = False
        if finished:
            say(f"{run_dir}: run finished; every checkpoint is scored")
            return True
        left = None if timeout_s is None else timeout_s - (time.monotonic() - start)
        if left is not None and left <= 0:
            say(f"{run_dir}: timeout after {timeout_s:g}s; the run has not finished")
            return False
        time.sleep(poll_s if left is None else min(poll_s, left))
