"""`python -m probes compare A B --out DIR`: paired statistics of two runs or two checkpoints (docs/public_suites.md,
"Paired comparisons"). The pair is the unit, seeds reduced to its share right: counting pairs x seeds as trials
made a copied seed look like evidence (McNemar p 0.031 -> 0.00049)."""
from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from scipy.stats import binomtest, false_discovery_control

from probes.analysis.evalfile import MLP, SUM, read_eval_file, strings
from probes.analysis.evalset import _read_run_info, _refuse_copies
from probes.evals.files import EvalInputError, eval_file_meta, eval_kind
from probes.families import families
from train.files import step_dirs

COLUMNS = ["benchmark", "level", "phenomenon", "paradigm", "n", "b", "c", "acc_a", "acc_b",
           "p_sign", "ci_lo", "ci_hi", "q_bh"]
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
        out[f.stem] = (df if "margin" in df else df.assign(margin=np.nan), convention, tokens,
                       eval_file_meta(f).get("pair_set"))
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
    """n, b, c, acc_a, acc_b, p_sign, ci_lo, ci_hi of two 0/1 outcome matrices (seeds, items). An item's
    difference of seed shares takes one of at most 2S + 1 values, so a bootstrap resample of items is one
    multinomial draw over them: exact, O(S) memory whatever n."""
    a = np.atleast_2d(np.asarray(a, dtype=bool))
    bb = np.atleast_2d(np.asarray(b, dtype=bool))
    if a.shape != bb.shape:
        raise ValueError(f"outcome matrices differ in shape: {a.shape} vs {bb.shape}")
    rng = rng or np.random.default_rng(0)
    n, S = a.shape[1], a.shape[0]
    ra, rb = a.mean(axis=0), bb.mean(axis=0)  # share of seeds right per item, each side
    d = bb.sum(axis=0).astype(np.int64) - a.sum(axis=0)  # S x the per-item difference, in integers
    n_b, n_c = int((d < 0).sum()), int((d > 0).sum())
    p = binomtest(n_c, n_b + n_c, 0.5).pvalue if n_b + n_c else 1.0
    lo = hi = np.nan
    if n:
        values, counts = np.unique(d, return_counts=True)
        draws = rng.multinomial(n, counts / counts.sum(), size=n_boot)  # (n_boot, values)
        boot = draws @ values / (n * S)
        lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return {"n": n, "b": n_b, "c": n_c, "acc_a": ra.mean() if n else np.nan, "acc_b": rb.mean() if n else np.nan,
            "p_sign": float(p), "ci_lo": float(lo), "ci_hi": float(hi)}


@dataclass
class Comparison:
    table: pd.DataFrame  # COLUMNS
    meta: dict  # what was compared: runs, steps, tokens, seeds, metric, BH families
    notes: list[str]
    flips: pd.DataFrame = field(default_factory=pd.DataFrame)  # the items that flipped most (flips.csv)


def compare(a: str | Side, b: str | Side, metric: str = "mlp", n_boot: int = 2000, seed: int = 0) -> Comparison:
    """Paired comparison of side B against side A (each a spec string or a Side). Raises EvalInputError."""
    if metric not in ("mlp", "sum"):
        raise ValueError(f"metric must be 'mlp' or 'sum', got {metric!r}")
    a, b = (parse_side(s) if isinstance(s, str) else s for s in (a, b))
    notes: list[str] = []
    for side in (a, b):  # one run twice on a side would count as a second seed
        _refuse_copies([_read_run_info(r) for r in side.runs])
    run_pairs = [(a.runs[0], b.runs[0])] if len(a.runs) == 1 and len(b.runs) == 1 else []
    if not run_pairs:  # seed groups: paired by seed
        for s in (a, b):
            if None in s.seeds or len(set(s.seeds)) != len(s.seeds):
                raise EvalInputError(f"{s.spec}: a seed group needs a distinct config.yaml 'seed' in every run "
                                     f"(found {s.seeds})")
        common = sorted(set(a.seeds) & set(b.seeds))
        if not common:
            raise EvalInputError(f"{a.spec} (seeds {sorted(a.seeds)}) and {b.spec} (seeds {sorted(b.seeds)}) "
                                 f"share no seed; compare single runs instead")
        run_pairs = [(dict(zip(a.seeds, a.runs))[s], dict(zip(b.seeds, b.runs))[s]) for s in common]
    # as the report refuses copies: a run against itself (or its copy) at one checkpoint compares nothing
    for ra, rb in run_pairs:
        same = ra.resolve() == rb.resolve()
        ia, ib = _read_run_info(ra), _read_run_info(rb)
        sa, sb = _step_of(ra, a.step, a.spec), _step_of(rb, b.step, b.spec)
        if sa == sb and (same or (ia.identity is not None and ia.identity == ib.identity)):
            raise EvalInputError(f"{ra} and {rb} are " + ("one run" if same else f"the same run (config hash "
                                 f"{ia.identity[:12]}…)") + f" at the same checkpoint (step {sa}): a run "
                                 "against itself; compare two checkpoints (RUN:STEP) or two runs")
    for side, runs in ((a, [p[0] for p in run_pairs]), (b, [p[1] for p in run_pairs])):
        left = [str(r) for r in side.runs if r not in runs]
        if left:
            notes.append(f"{side.spec}: run(s) {', '.join(left)} have no seed on the other side; left out")
    meta: dict = {"metric": metric, "n_boot": n_boot, "bootstrap_seed": seed, "unit": "item (pair); seeds "
                  "reduced to each item's share right before testing", "test": "exact sign test on the per-item "
                  "differences (McNemar's exact test with one seed)", "a": [], "b": []}
    per_pair = []  # for each seed pair: {benchmark: merged frame}
    conventions: dict[str, str] = {}
    skipped: dict[str, set] = {}  # kind -> names of the files whose family gives no decisions to pair
    for ra, rb in run_pairs:
        sides = []
        for key, side, run in (("a", a, ra), ("b", b, rb)):
            step = _step_of(run, side.step, side.spec)
            dec = _decisions(run, step, metric, skipped)
            toks = sorted({t for _, _, t, _ in dec.values()})
            meta[key].append({"run": str(run), "step": step, "tokens": toks[0] if len(toks) == 1 else toks,
                              "seed": _read_run_info(run).seed})
            for bench, (_, conv, _, _) in dec.items():
                conventions.setdefault(conv, f"{run}/evals/step{step}/{bench}.parquet")
            sides.append((dec, run, step))
        (da, _, sa), (db, _, sb) = sides
        merged = {}
        for bench in sorted(set(da) & set(db)):
            (fa, _, _, pa), (fb, _, _, pb) = da[bench], db[bench]
            if pa and pb and pa != pb:
                raise EvalInputError(f"{ra}/evals/step{sa}/{bench}.parquet (pair_set {pa}) and "
                                     f"{rb}/evals/step{sb}/{bench}.parquet (pair_set {pb}) hold different pairs "
                                     "under the same names: not comparable pair by pair; score both on one pair set")
            m = fa.merge(fb[["paradigm", "pair_id", "ok", "margin"]], on=["paradigm", "pair_id"], suffixes=("_a", "_b"))
            if len(m) < max(len(fa), len(fb)):
                notes.append(f"{bench}: {ra} has {len(fa)} pairs and {rb} {len(fb)}; the {len(m)} in both are compared")
            merged[bench] = m
        for bench in sorted(set(da) ^ set(db)):
            notes.append(f"{bench}: scored on one side only ({ra} vs {rb}); not compared")
        per_pair.append(merged)
    if len(conventions) > 1:
        raise EvalInputError("refusing to compare scores of different conventions: " +
                             "; ".join(f"{c!r} (e.g. {f})" for c, f in sorted(conventions.items())))
    notes += [f"skipped {kind} file(s) {', '.join(sorted(names))}: their probe family gives no per-item decisions "
              f"to pair" for kind, names in sorted(skipped.items())]
    rng = np.random.default_rng(seed)
    rows, flips = [], []
    for bench in sorted(set.intersection(*(set(m) for m in per_pair))):
        # a pair enters when every seed pair scored it, so a bootstrap column is one pair in all seeds
        frames = [m[bench].set_index(["paradigm", "pair_id"]) for m in per_pair]
        keys = functools.reduce(pd.Index.intersection, (f.index for f in frames)).sort_values()
        ok_a, ok_b, mar_a, mar_b = (np.stack([f.loc[keys, c].to_numpy() for f in frames])
                                    for c in ("ok_a", "ok_b", "margin_a", "margin_b"))
        par = keys.get_level_values("paradigm").to_numpy()
        phen = frames[0].loc[keys, "phenomenon"].to_numpy()
        for level, names in (("paradigm", par), ("phenomenon", phen), ("overall", np.full(len(par), ""))):
            for name in sorted(set(names)):
                sel = names == name
                row = {"benchmark": bench, "level": level,
                       "phenomenon": phen[sel][0] if level == "paradigm" else name,
                       "paradigm": name if level == "paradigm" else ""}
                row.update(paired_stats(ok_a[:, sel], ok_b[:, sel], n_boot, rng))
                rows.append(row)
        f = pd.DataFrame({"benchmark": bench, "phenomenon": phen, "paradigm": par,
                          "pair_id": keys.get_level_values("pair_id"), "right_a": ok_a.mean(0), "right_b": ok_b.mean(0),
                          "margin_a": mar_a.mean(0), "margin_b": mar_b.mean(0)})
        flips.append(f[f.right_a != f.right_b].assign(margin_change=lambda d: d.margin_b - d.margin_a))
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "q_bh"])
    table["q_bh"] = np.nan
    meta["bh_families"] = {}
    for level in LEVELS:  # each level its own family: a phenomenon row repeats its paradigms' pairs
        at = (table.level == level).to_numpy()
        if at.any():
            table.loc[at, "q_bh"] = false_discovery_control(table.loc[at, "p_sign"].to_numpy(), method="bh")
            meta["bh_families"][level] = {"rows": int(at.sum()), "benchmarks": sorted(set(table.benchmark[at]))}
    meta["convention"] = next(iter(conventions), None)
    flips = pd.concat(flips, ignore_index=True) if flips else pd.DataFrame()
    if len(flips):
        flips = flips.loc[flips.margin_change.abs().sort_values(ascending=False, kind="stable").index[:N_FLIPS]]
    return Comparison(table[COLUMNS], meta, notes, flips.reset_index(drop=True))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m probes compare",
        description="Paired comparison of B against A on the pairs both scored, the pair as the unit (seeds "
                    "reduced to each pair's share right): per benchmark x paradigm, x phenomenon and overall, b / c "
                    "(pairs where A / B is ahead), the exact sign test's p (McNemar's with one seed), a 95 % "
                    "bootstrap interval of acc_b - acc_a resampling pairs, Benjamini-Hochberg q within each level.")
    p.add_argument("a", metavar="A", help="RUN_DIR (its last scored checkpoint), RUN_DIR:STEP, or a folder of "
                                          "seed runs (optionally :STEP)")
    p.add_argument("b", metavar="B", help="the same forms as A")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="writes DIR/compare.csv, DIR/compare.json and DIR/flips.csv")
    p.add_argument("--metric", choices=("mlp", "sum"), default="mlp",
                   help="per-pair decision: mean log-prob per token (default) or summed log-prob")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="of the bootstrap generator")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    from probes.analysis.outputs import check_owned_output, staged_output, write_csv, write_text
    from train.errors import UserError

    args = build_parser().parse_args(argv)
    owned = (("compare.csv", "compare.json", "flips.csv", ".compare-files"), ".compare-files")  # outputs.py's rule
    try:
        if args.n_boot < 1:
            raise EvalInputError(f"--n-boot must be >= 1, got {args.n_boot}")
        check_owned_output(args.out, *owned)
        res = compare(args.a, args.b, args.metric, args.n_boot, args.seed)
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
    t = res.table
    sig = t[(t.level == "paradigm") & (t.q_bh < 0.05)]
    for r in t[t.level == "overall"].itertuples():
        print(f"{r.benchmark} overall: {r.acc_a:.3f} -> {r.acc_b:.3f} over {r.n} pairs, difference 95 % interval "
              f"[{r.ci_lo:+.3f}, {r.ci_hi:+.3f}], sign test p = {r.p_sign:.3g}")
    print(f"{len(t)} rows ({(t.level == 'paradigm').sum()} paradigms); {len(sig)} paradigm(s) differ at q < 0.05 "
          f"({(sig.c > sig.b).sum()} better in B, {(sig.b > sig.c).sum()} worse) -> {args.out / 'compare.csv'}")
    return 0
