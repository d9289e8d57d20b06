"""lm-eval's ``simple_evaluate`` on an ``HFLM`` wrapping the model we hold (no reload from disk), one row per
(task, sample). lm-eval conditions an empty context on our start token (train/start_token.py), so a task of
``probes lm-eval-tasks`` scores exactly what ``probes score`` scores."""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

INSTALL = "pip install -e .[lm-eval]"  # the optional extra of pyproject.toml


def require_lm_eval(key: str = "probes.lm_eval.tasks") -> None:
    """lm-eval importable, else a ValueError naming the key and the install command (one line)."""
    try:
        import lm_eval  # noqa: F401
        from lm_eval.models.huggingface import HFLM  # noqa: F401  (the hf extra)
    except ImportError as e:
        raise ValueError(f"{key} needs lm-eval, which is not installed ({e}); install it with "
                         f"`{INSTALL}`") from None


def task_manager(include_path: Optional[str]):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(include_path) if include_path else None)


def check_tasks(tasks: Sequence[str], include_path: Optional[str]):
    """The TaskManager, when every task is known to lm-eval (its own or one under include_path), else
    ValueError naming them. (Indexing lm-eval's own tasks takes seconds: callers keep it.)"""
    tm = task_manager(include_path)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    broken = _unparsable(include_path) if unknown and include_path else []
    if broken:  # lm-eval logs and skips a YAML it cannot parse: the cause, not "unknown task"
        raise ValueError(f"{broken[0]}; lm-eval skipped that file, so probes.lm_eval.tasks {unknown} are unknown: "
                         f"fix the YAML")
    if unknown:
        raise ValueError(f"probes.lm_eval.tasks: unknown lm-eval task(s) {unknown}"
                         + (f" (none under probes.lm_eval.include_path={include_path})" if include_path else
                            "; local task YAMLs need probes.lm_eval.include_path"))
    return tm


def _unparsable(include_path: str) -> list[str]:
    """'<file>: <parse error>' for every task YAML under include_path that YAML cannot parse (its tags, such
    as lm-eval's !function, are read as nothing: nothing is imported here)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    found = []
    for f in sorted(Path(include_path).rglob("*.yaml")):
        try:
            yaml.load(f.read_text(), Loader=Loader)
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            found.append(f"{f}: not valid YAML ({' '.join(str(e).split())})")
    return found


def _sample_rows(task: str, samples: list[dict]) -> list[dict]:
    rows = []
    for s in samples:
        resps = s.get("filtered_resps") or []
        # loglikelihood requests answer (ll, is_greedy) per choice; other output types keep their metric only
        lls = [float(r[0]) for r in resps if isinstance(r, (tuple, list)) and len(r) == 2]
        greedy = [bool(r[1]) for r in resps if isinstance(r, (tuple, list)) and len(r) == 2]
        doc = s.get("doc") or {}
        # our generated tasks carry paradigm and pair_id; another task's samples are its doc ids
        row = {"task": task, "doc_id": int(s["doc_id"]), "paradigm": str(doc.get("paradigm", task)),
               "pair_id": str(doc.get("pair_id", s["doc_id"])), "target": str(s.get("target")),
               "lls": lls, "is_greedy": greedy}
        for metric in s.get("metrics") or []:
            v = s.get(metric)
            row[metric] = float(v) if isinstance(v, (int, float, bool)) else math.nan
        rows.append(row)
    return rows


def run_tasks(model, tokenizer, tasks: Sequence[str], *, include_path: Optional[str] = None, manager=None,
              batch_size: int = 32, limit: Optional[int] = None, start_id: Optional[int] = None,
              max_length: Optional[int] = None) -> tuple[pd.DataFrame, dict]:
    """(per-sample rows, {task: {metric: value}}) of lm-eval's tasks on `model`. `start_id`: the token an empty
    context is conditioned on (our start token); `max_length`: the model's context (lm-eval cuts from the left)."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm-eval").setLevel(logging.WARNING)
    was_training = model.training
    model.eval()
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, prefix_token_id=start_id,
                  max_length=max_length)
        out = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager or task_manager(include_path),
                                      log_samples=True, limit=limit, bootstrap_iters=0,
                                      confirm_run_unsafe_code=False)
    finally:
        model.train(was_training)
    rows = []
    for task, samples in (out.get("samples") or {}).items():
        rows += _sample_rows(task, samples)
    summary = {}
    for task, res in (out.get("results") or {}).items():
        # lm-eval keys metrics "<metric>,<filter>": keep the number, drop stderr
        summary[task] = {k.split(",")[0]: float(v) for k, v in res.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool) and "_stderr" not in k
                         and k not in ("alias", "sample_len")}
    return pd.DataFrame(rows), summary
