"""`python -m probes compare A B --out DIR`: two runs, two checkpoints or two folders of seed runs (docs/public_suites.md,
"Paired comparisons": the two questions, `--unit recipe` (the seed as the unit, Welch's t) and `--unit item` (the
pair as the unit, seeds reduced to its share right), and why counting pairs, or pairs x seeds, as trials misleads)."""
from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats
from scipy.stats import false_discovery_control

from probes.analysis.evalfile import MLP, SUM, read_eval_file, strings
from probes.analysis.evalset import _read_run_info, _refuse_copies, _refuse_other_pairs
from probes.analysis.outputs import check_owned_output, staged_output, write_csv, write_text
from probes.evals.files import EvalInputError, eval_kind, file_pair_set
from probes.families import families
from train.errors import UserError
from train.files import step_dirs

COLUMNS = ["benchmark", "level", "phenomenon", "paradigm", "unit", "n", "b", "c", "acc_a", "acc_b",
           "p", "ci_lo", "ci_hi", "q_bh"]
# what each unit tests, said in compare.json and the printed text
QUESTIONS = {"recipe": "do the recipes (configurations) differ? seeds are the units, the pairs nested (every seed "
                       "scored the same pairs): the difference of the seed-mean accuracies on these pairs",
             "item": "do these trained models differ on these pairs? the pair is the unit, each side's seeds "
                     "reduced to its share right; says nothing of other seeds of the same recipes"}
LEVELS = ("paradigm", "phenomenon", "overall")
N_FLIPS = 100  # items in flips.csv
_STEP = re.compile(r"^(.*):(?:step)?(\d+)$")


@dataclass
class Side:
    """One side of a comparison: one run, or several seeds of one configuration."""
    spec: str  # as the user gave it
    runs: list[Path]
    step: Optional[int] = None  # None: each run's last scored checkpoint
    seeds: list[Optional[int]] = field(default_factory=list)


def parse_side(spec: str) -> Side:
    """RUN, RUN:STEP (also RUN:step<N>), or a folder whose subfolders are runs (seeds)."""
    path, step = spec, None
    m = _STEP.match(spec)
    if m and not Path(spec).exists():
        path, step = m.group(1), int(m.group(2))
    d = Path(path)
    if not d.is_dir():
        raise EvalInputError(f"{spec}: no such run directory")
    if (d / "evals").is_dir():
        runs = [d]
    else:
        runs = sorted(s for s in d.iterdir() if (s / "evals").is_dir())
        if not runs:
            raise EvalInputError(f"{spec}: neither a run directory (no evals/) nor a folder of run directories")
    return Side(spec, runs, step, [_read_run_info(r).seed for r in runs])


def _step_of(run: Path, step: Optional[int], spec: str) -> int:
    steps = step_dirs(run / "evals")
    if not steps:
        raise EvalInputError(f"{spec}: {run} has no evals/step<N> directories")
    if step is None:
        return max(steps)
    if step not in steps:
        raise EvalInputError(f"{spec}: {run} has no evals/step{step} (scored steps: "
                             f"{', '.join(map(str, sorted(steps)[:12]))}{' …' if len(steps) > 12 else ''})")
    return step


def _decisions(run: Path, step: int, metric: str, skipped: dict[str, set]
               ) -> dict[str, tuple[pd.DataFrame, str, int, Optional[str]]]:
    """{benchmark: (frame of paradigm, phenomenon, pair_id, ok[, margin]; convention; tokens; pair_set)} at one
    checkpoint, from every file whose probe family gives per-item decisions (probes/families.py); the others'
    names go to `skipped` under their kind. margin (good - bad under the metric) where the family gives one."""
    decide = {f.kind: f.load("decisions") for f in families() if f.decisions}
    out = {}
    for f in sorted((run / "evals" / f"step{step}").glob("*.parquet")):
        if f.name.startswith(".") or ".tmp" in f.name or f.name.endswith(".tokens.parquet"):
            continue
        kind = eval_kind(f)
        if kind not in decide:
            skipped.setdefault(kind, set()).add(f.stem)
            continue
        df, convention, tokens = decide[kind](f, metric)
        if df.duplicated(["paradigm", "pair_id"]).any():
            raise EvalInputError(f"{f}: a (paradigm, pair_id) occurs twice; pairs cannot be matched")
        out[f.stem] = (df if "margin" in df else df.assign(margin=np.nan), convention, tokens, file_pair_set(f))
    return out


def pair_decisions(path: Path, metric: str) -> tuple[pd.DataFrame, str, int]:
    """A minimal-pair eval file's decisions: each pair right or wrong under `metric` (the family's `decisions`),
    and its margin, good - bad under the metric (MLP: per token)."""
    r = read_eval_file(path, -1, path.parent)  # its step: not used here
    (lpg, lpb), (ng, nb) = r.lps["total"], r.counts
    return (pd.DataFrame({"paradigm": strings(r.paradigm), "phenomenon": strings(r.phenomenon),
                          "pair_id": strings(r.pair_id), "ok": (r.bits & (MLP if metric == "mlp" else SUM)) > 0,
                          "margin": lpg / ng - lpb / nb if metric == "mlp" else lpg - lpb}),
            r.convention, r.tokens)


def paired_stats(a: np.ndarray, b: np.ndarray, n_boot: int = 2000,
                 rng: Optional[np.random.Generator] = None, level: float = 0.95) -> dict:
    """The item unit: n, b, c, acc_a, acc_b, p, ci_lo, ci_hi of two 0/1 outcome matrices (seeds, items). An item's
    difference of seed shares takes one of at most 2S + 1 values, so a bootstrap resample of items is one
    multinomial draw over them: exact, O(S) memory whatever n. p and interval from the same draws (a sign test's p
    beside a bootstrap interval of the mean said p = 0.00048 with 0 inside the interval): p = 2 x the share of draws
    on the far side of 0, the interval their order statistics, so p < 1 - level exactly when 0 is outside it."""
    a, bb = (np.atleast_2d(np.asarray(x, dtype=bool)) for x in (a, b))
    if a.shape != bb.shape:
        raise ValueError(f"outcome matrices differ in shape: {a.shape} vs {bb.shape}")
    rng = rng or np.random.default_rng(0)
    S, n = a.shape
    d = bb.sum(axis=0).astype(np.int64) - a.sum(axis=0)  # S x the per-item difference, in integers
    p, lo, hi = 1.0, np.nan, np.nan
    if n:
        values, counts = np.unique(d, return_counts=True)
        draws = rng.multinomial(n, counts / counts.sum(), size=n_boot)  # (n_boot, values)
        boot = np.sort(draws @ values / (n * S))
        k = math.ceil((1 - level) / 2 * n_boot)  # the k-th draw from each end
        lo, hi = boot[k - 1], boot[n_boot - k]
        p = min(1.0, 2 * min((boot <= 0).sum(), (boot >= 0).sum()) / n_boot)
    return {"n": n, "b": int((d < 0).sum()), "c": int((d > 0).sum()), "acc_a": a.mean() if n else np.nan,
            "acc_b": bb.mean() if n else np.nan, "p": float(p), "ci_lo": float(lo), "ci_hi": float(hi)}


def seed_stats(a: np.ndarray, b: np.ndarray, paired: bool = False, level: float = 0.95) -> dict:
    """The recipe unit: the same columns from two 0/1 matrices (seeds, items) of other sizes, each seed's accuracy on
    the items one observation: Welch's t of B's mean minus A's (paired t where both sides are the same runs, at two
    checkpoints), p and interval from the one t distribution. b, c as for the item unit (shares of seeds)."""
    xa, xb = (np.atleast_2d(np.asarray(x, dtype=float)).mean(axis=1) for x in (a, b))
    if paired:
        se2, df = np.var(xb - xa, ddof=1) / len(xa), len(xa) - 1
    else:  # Welch-Satterthwaite
        va, vb = np.var(xa, ddof=1) / len(xa), np.var(xb, ddof=1) / len(xb)
        se2 = va + vb
        df = se2 ** 2 / (va ** 2 / (len(xa) - 1) + vb ** 2 / (len(xb) - 1)) if se2 > 0 else 1
    diff, se = xb.mean() - xa.mean(), math.sqrt(se2)
    p, half = (2 * stats.t.sf(abs(diff) / se, df), stats.t.ppf((1 + level) / 2, df) * se) if se > 0 \
        else (float(diff == 0), 0.0)  # every seed alike on each side
    d = np.atleast_2d(b).mean(axis=0) - np.atleast_2d(a).mean(axis=0)
    return {"n": d.size, "b": int((d < 0).sum()), "c": int((d > 0).sum()), "acc_a": xa.mean(), "acc_b": xb.mean(),
            "p": float(p), "ci_lo": diff - half, "ci_hi": diff + half}


def stat_table(outcomes: dict[str, tuple], unit: str = "recipe", paired: bool = False, n_boot: int = 2000,
               rng: Optional[np.random.Generator] = None) -> tuple[pd.DataFrame, dict]:
    """COLUMNS per benchmark x paradigm, x phenomenon and overall of {benchmark: (A's outcomes (seeds, pairs), B's,
    paradigm and phenomenon of each pair)}, q_bh within each level, and the BH families (what compare writes, and
    what bench/bench_compare.py measures)."""
    rng = rng or np.random.default_rng(0)
    rows = []
    for bench, (ok_a, ok_b, par, phen) in outcomes.items():
        for level, names in (("paradigm", par), ("phenomenon", phen), ("overall", np.full(len(par), ""))):
            for name in sorted(set(names)):
                sel = names == name
                row = {"benchmark": bench, "level": level, "phenomenon": phen[sel][0] if level == "paradigm" else name,
                       "paradigm": name if level == "paradigm" else "", "unit": unit}
                row.update(paired_stats(ok_a[:, sel], ok_b[:, sel], n_boot, rng) if unit == "item"
                           else seed_stats(ok_a[:, sel], ok_b[:, sel], paired))
                rows.append(row)
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "q_bh"])
    table["q_bh"] = np.nan
    families = {}
    for level in LEVELS:  # each level its own family: a phenomenon row repeats its paradigms' pairs
        at = (table.level == level).to_numpy()
        if at.any():
            table.loc[at, "q_bh"] = false_discovery_control(table.loc[at, "p"].to_numpy(), method="bh")
            families[level] = {"rows": int(at.sum()), "benchmarks": sorted(set(table.benchmark[at]))}
    return table[COLUMNS], families


@dataclass
class Comparison:
    table: pd.DataFrame  # COLUMNS
    meta: dict  # what was compared: runs, steps, tokens, seeds, metric, unit and question, BH families
    notes: list[str]
    flips: pd.DataFrame = field(default_factory=pd.DataFrame)  # the items that flipped most (flips.csv)


def compare(a: str | Side, b: str | Side, metric: str = "mlp", n_boot: int = 2000, seed: int = 0,
            unit: str = "recipe") -> Comparison:
    """Comparison of side B against side A (each a spec string or a Side) by `unit` (QUESTIONS): "recipe" needs two
    or more seeds a side, and with fewer the item unit is tested, said in meta and notes. Raises EvalInputError."""
    if metric not in ("mlp", "sum") or unit not in QUESTIONS:
        raise ValueError(f"metric must be 'mlp' or 'sum' and unit one of {list(QUESTIONS)}, got {metric!r}, {unit!r}")
    a, b = (parse_side(s) if isinstance(s, str) else s for s in (a, b))
    notes: list[str] = []
    meta: dict = {"metric": metric, "unit": unit, "asked": unit, "a": [], "b": []}
    if unit == "recipe" and min(len(a.runs), len(b.runs)) < 2:
        meta["unit"] = unit = "item"
        notes.append(f"one seed on a side ({len(a.runs)} vs {len(b.runs)} runs): the recipes cannot be compared (no "
                     "spread between seeds to test against); tested instead: these trained models, the pair as the unit")
    same = [r.resolve() for r in a.runs] == [r.resolve() for r in b.runs]  # the same runs at two checkpoints
    if unit == "recipe" or len(a.runs) == len(b.runs) == 1:
        runs_a, runs_b = a.runs, b.runs
    else:  # seed groups: paired by seed
        for s in (a, b):
            if None in s.seeds or len(set(s.seeds)) != len(s.seeds):
                raise EvalInputError(f"{s.spec}: a seed group needs a distinct config.yaml 'seed' in every run "
                                     f"(found {s.seeds})")
        common = sorted(set(a.seeds) & set(b.seeds))
        if not common:
            raise EvalInputError(f"{a.spec} (seeds {sorted(a.seeds)}) and {b.spec} (seeds {sorted(b.seeds)}) "
                                 f"share no seed; compare single runs instead")
        runs_a, runs_b = ([dict(zip(s.seeds, s.runs))[k] for k in common] for s in (a, b))
        for side, runs in ((a, runs_a), (b, runs_b)):
            left = [str(r) for r in side.runs if r not in runs]
            if left:
                notes.append(f"{side.spec}: run(s) {', '.join(left)} have no seed on the other side; left out")
    steps_a, steps_b = ([_step_of(r, s.step, s.spec) for r in runs] for s, runs in ((a, runs_a), (b, runs_b)))
    for ra, sa in zip(runs_a, steps_a):  # a run on both sides at one checkpoint compares nothing
        for rb, sb in zip(runs_b, steps_b):
            if sa == sb and ra.resolve() == rb.resolve():
                raise EvalInputError(f"{ra} and {rb} are one run at the same checkpoint (step {sa}): a run against "
                                     "itself; compare two checkpoints (RUN:STEP) or two runs")
    # copies, by config hash and by content, within and across the sides (the same run at two steps is no copy)
    _refuse_copies([_read_run_info(r) for r in {r.resolve(): r for r in runs_a + runs_b}.values()])
    meta.update(paired=unit == "recipe" and same, question=QUESTIONS[unit], test={
        "item": f"bootstrap of the mean per-pair difference, pairs resampled ({n_boot} draws, seed {seed}); p and "
                "interval from the same draws",
        "recipe": ("paired t over the runs (the same runs at two checkpoints)" if same else "Welch's t") +
                  " on each seed's accuracy; p and interval from the same t"}[unit], n_boot=n_boot, bootstrap_seed=seed)
    conventions: dict[str, str] = {}
    skipped: dict[str, set] = {}  # kind -> names of the files whose family gives no decisions to pair
    dec: dict[str, list] = {"a": [], "b": []}  # per side, per run: {benchmark: (frame, ...)}
    sets: dict[str, list] = {}  # benchmark -> [(file, pair set)] of every run on both sides
    for key, runs, steps in (("a", runs_a, steps_a), ("b", runs_b, steps_b)):
        for run, step in zip(runs, steps):
            d = _decisions(run, step, metric, skipped)
            toks = sorted({t for _, _, t, _ in d.values()})
            meta[key].append({"run": str(run), "step": step, "tokens": toks[0] if len(toks) == 1 else toks,
                              "seed": _read_run_info(run).seed})
            for bench, (_, conv, _, fp) in d.items():
                conventions.setdefault(conv, f"{run}/evals/step{step}/{bench}.parquet")
                sets.setdefault(bench, []).append((f"{run}/evals/step{step}/{bench}.parquet", fp))
            dec[key].append(d)
    if len(conventions) > 1:
        raise EvalInputError("refusing to compare scores of different conventions: " +
                             "; ".join(f"{c!r} (e.g. {f})" for c, f in sorted(conventions.items())))
    for files in sets.values():
        _refuse_other_pairs(files, "pair by pair")
    every = dec["a"] + dec["b"]
    both = set.intersection(*(set(d) for d in every))
    notes += [f"{bench}: not scored by every run ({', '.join(f for f, _ in sets[bench])} only); not compared"
              for bench in sorted(set(sets) - both)]
    notes += [f"skipped {kind} file(s) {', '.join(sorted(names))}: their probe family gives no per-item decisions "
              f"to pair" for kind, names in sorted(skipped.items())]
    outcomes, flips = {}, []
    for bench in sorted(both):  # one pair set (refused otherwise): every run scored the same pairs
        frames = [d[bench][0].set_index(["paradigm", "pair_id"]) for d in every]
        keys = functools.reduce(pd.Index.intersection, (f.index for f in frames)).sort_values()
        ok, mar = ([f.loc[keys, c].to_numpy() for f in frames] for c in ("ok", "margin"))
        ok_a, ok_b = np.stack(ok[:len(runs_a)]), np.stack(ok[len(runs_a):])
        par, phen = keys.get_level_values("paradigm").to_numpy(), frames[0].loc[keys, "phenomenon"].to_numpy()
        outcomes[bench] = (ok_a, ok_b, par, phen)
        f = pd.DataFrame({"benchmark": bench, "phenomenon": phen, "paradigm": par,
                          "pair_id": keys.get_level_values("pair_id"), "right_a": ok_a.mean(0), "right_b": ok_b.mean(0),
                          "margin_a": np.mean(mar[:len(runs_a)], 0), "margin_b": np.mean(mar[len(runs_a):], 0)})
        flips.append(f[f.right_a != f.right_b].assign(margin_change=lambda d: d.margin_b - d.margin_a))
    table, meta["bh_families"] = stat_table(outcomes, unit, meta["paired"], n_boot, np.random.default_rng(seed))
    meta["convention"] = next(iter(conventions), None)
    flips = pd.concat(flips, ignore_index=True) if flips else pd.DataFrame()
    if len(flips):
        flips = flips.loc[flips.margin_change.abs().sort_values(ascending=False, kind="stable").index[:N_FLIPS]]
    return Comparison(table, meta, notes, flips.reset_index(drop=True))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m probes compare",
        description="Comparison of B against A on the pairs both scored, per benchmark x paradigm, x phenomenon and "
                    "overall: accuracies, b / c (pairs where A / B is ahead), p, a 95 % interval of acc_b - acc_a "
                    "from the same method, Benjamini-Hochberg q within each level. --unit says which question.")
    p.add_argument("a", metavar="A", help="RUN_DIR (its last scored checkpoint), RUN_DIR:STEP, or a folder of "
                                          "seed runs (optionally :STEP)")
    p.add_argument("b", metavar="B", help="the same forms as A")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="writes DIR/compare.csv, DIR/compare.json and DIR/flips.csv")
    p.add_argument("--unit", choices=tuple(QUESTIONS), default="recipe",
                   help="recipe (default): do the configurations differ? the seed as the unit, Welch's t (two or more "
                        "seeds a side; with one, the item unit is tested and the output says so); item: do these "
                        "trained models differ on these pairs? the pair as the unit, bootstrap over pairs")
    p.add_argument("--metric", choices=("mlp", "sum"), default="mlp",
                   help="per-pair decision: mean log-prob per token (default) or summed log-prob")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap generator")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    owned = (("compare.csv", "compare.json", "flips.csv", ".compare-files"), ".compare-files")  # outputs.py's rule
    try:
        if args.n_boot < 1:
            raise EvalInputError(f"--n-boot must be >= 1, got {args.n_boot}")
        check_owned_output(args.out, *owned)
        res = compare(args.a, args.b, args.metric, args.n_boot, args.seed, args.unit)
        if res.table.empty:
            raise EvalInputError(f"{args.a} and {args.b} share no scored pair")
        with staged_output(args.out, *owned) as stage:
            write_csv(stage / "compare.csv", res.table)
            write_text(stage / "compare.json", json.dumps({**res.meta, "notes": res.notes}, indent=1) + "\n")
            write_csv(stage / "flips.csv", res.flips)
    except (EvalInputError, UserError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for n in res.notes:
        print(f"warning: {n}", file=sys.stderr)
    t, m = res.table, res.meta
    print(f"unit: {m['unit']}" + (f" (asked: {m['asked']})" if m["asked"] != m["unit"] else "") +
          f" - {m['question']}; test: {m['test']}")
    seeds = f"{len(m['a'])} vs {len(m['b'])} seed(s)"
    sig = t[(t.level == "paradigm") & (t.q_bh < 0.05)]
    for r in t[t.level == "overall"].itertuples():
        print(f"{r.benchmark} overall: {r.acc_a:.3f} -> {r.acc_b:.3f} over {r.n} pairs, {seeds}, difference 95 % "
              f"interval [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}], p = {r.p:.3g}")
    print(f"{len(t)} rows ({(t.level == 'paradigm').sum()} paradigms); {len(sig)} paradigm(s) differ at q < 0.05 "
          f"({(sig.acc_b > sig.acc_a).sum()} better in B, {(sig.acc_b < sig.acc_a).sum()} worse) -> "
          f"{args.out / 'compare.csv'}")
    return 0
