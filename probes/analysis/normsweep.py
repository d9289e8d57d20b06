"""Length- and frequency-normalised scores as the ZhoBLiMP authors sweep them (docs/report.md, "Normalised
scores"), from each run's last eval files' per-pair sums. Their |s| counts tokens with a non-zero log-prob, ours
every scored token (equal unless a token's probability rounds to 1)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from probes.analysis.aggregate import Z975
from probes.analysis.paperfigs import pick
from probes.analysis.scaling import budget_label
from probes.evals.files import ALL_SUFFIX, MINIMAL_PAIRS, EvalInputError, eval_file_meta
from train.files import step_dirs

POW_ALPHAS = tuple(round(0.1 * i, 1) for i in range(1, 10))
MORCELA_BETAS = tuple(round(0.1 * i, 1) for i in range(1, 11))
MORCELA_GAMMAS = tuple(range(0, 21, 2))
POW_DEFAULT = 0.5  # metrics.pow_norm_lp's default (their "slln_lp")
MORCELA_DEFAULT = (1.0, 0)  # metrics.morcela's defaults: SLOR


# what the sweep reads of an eval file (the sentences are most of its bytes)
_COLUMNS = ("paradigm", "phenomenon", "lp_good", "lp_bad", "ntok_good", "ntok_bad", "ulp_good", "ulp_bad")


def _powers(n: np.ndarray, alphas) -> np.ndarray:
    """n[:, None] ** alphas, each power taken once per distinct token count (a file has a few dozen)."""
    values, inv = np.unique(n, return_inverse=True)
    return (values[:, None] ** np.asarray(alphas, dtype=float)[None, :])[inv.ravel()]


def pair_correct(df) -> tuple[np.ndarray, list[tuple[str, str, float, float]]]:
    """(n_pairs, n_points) bool: is the good sentence strictly above the bad one at each point. `df`: a
    DataFrame or a dict of numpy columns (lp_*, ntok_*, and ulp_* where the file has them)."""
    has_u = "ulp_good" in df and "ulp_bad" in df and not (np.isnan(np.asarray(df["ulp_good"], dtype=float)).any()
                                                         or np.isnan(np.asarray(df["ulp_bad"], dtype=float)).any())
    lg, lb = np.asarray(df["lp_good"], dtype=float), np.asarray(df["lp_bad"], dtype=float)
    ng, nb = np.asarray(df["ntok_good"], dtype=float), np.asarray(df["ntok_bad"], dtype=float)
    blocks = [(lg / ng > lb / nb)[:, None], (lg > lb)[:, None],
              lg[:, None] / _powers(ng, POW_ALPHAS) > lb[:, None] / _powers(nb, POW_ALPHAS)]
    # (metric, name, param1, param2) of every point, in the columns' order
    pts = [("mlp", "mlp", np.nan, np.nan), ("sum", "sum", np.nan, np.nan)]
    pts += [("pow", f"pow{a}", a, np.nan) for a in POW_ALPHAS]
    if has_u:
        ug, ub = np.asarray(df["ulp_good"], dtype=float), np.asarray(df["ulp_bad"], dtype=float)
        blocks.append(((lg - ug) / ng > (lb - ub) / nb)[:, None])
        beta = np.repeat(MORCELA_BETAS, len(MORCELA_GAMMAS))[None, :]
        gamma = np.tile(np.asarray(MORCELA_GAMMAS, dtype=float), len(MORCELA_BETAS))[None, :]
        sg = (lg[:, None] - beta * ug[:, None] + gamma) / ng[:, None]
        sb = (lb[:, None] - beta * ub[:, None] + gamma) / nb[:, None]
        blocks.append(sg > sb)
        pts.append(("slor", "slor", np.nan, np.nan))
        pts += [("morcela", f"morcela_{b}_{g}", b, g) for b in MORCELA_BETAS for g in MORCELA_GAMMAS]
    return np.concatenate(blocks, axis=1), pts


def _read_final(path: Path) -> Optional[tuple[dict, dict[str, np.ndarray], list[str], np.ndarray, np.ndarray]]:
    """(metadata, numeric columns, sorted paradigm names, each row's index into them, each name's phenomenon) of
    a minimal-pair eval file, else None. A name is sorted once, not once a row (pd.factorize: a tenth of the sweep)."""
    try:
        names = set(pq.read_schema(path).names)
        if not {"lp_good", "lp_bad", "ntok_good", "ntok_bad", "paradigm"} <= names:
            return None  # not a minimal-pair eval file (another family's; its columns tell before its kind)
        pf = pq.ParquetFile(path, read_dictionary=[c for c in ("paradigm", "phenomenon") if c in names],
                            pre_buffer=False)
        meta = eval_file_meta(path, pf.schema_arrow.metadata or {})
        if meta["kind"] != MINIMAL_PAIRS:
            return None
        t = pf.read(columns=[c for c in _COLUMNS if c in names], use_threads=False)
    except (EvalInputError, ValueError, OSError):
        return None
    cols = {c: t[c].to_numpy() for c in t.column_names if c not in ("paradigm", "phenomenon")}
    par = t["paradigm"].combine_chunks()
    dictionary = np.asarray(par.dictionary.to_pylist(), dtype=object)
    order = np.argsort(dictionary, kind="stable")  # names sorted as pd.factorize(sort=True) sorts them
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    row_rank = rank[par.indices.to_numpy(zero_copy_only=False)]
    used = np.bincount(row_rank, minlength=len(order)) > 0  # the names a row has, in sorted order
    inv = (np.cumsum(used) - 1)[row_rank]
    paradigms = [str(p) for p in dictionary[order][used]]
    phen = np.full(int(used.sum()), None, dtype=object)
    if "phenomenon" in t.column_names:  # a paradigm's first phenomenon (groupby(...).first(): nulls skipped)
        ph = t["phenomenon"].combine_chunks()
        rows = np.flatnonzero(ph.indices.is_valid().to_numpy(zero_copy_only=False))
        first = np.full(len(phen), -1)
        present, at = np.unique(inv[rows], return_index=True)  # each paradigm's first row with a phenomenon
        first[present] = rows[at]
        ph_names = np.asarray(ph.dictionary.to_pylist(), dtype=object)
        codes = ph.indices.to_numpy(zero_copy_only=False)
        phen[first >= 0] = ph_names[codes[first[first >= 0]].astype(np.int64)]
    return meta, cols, paradigms, inv, phen


def sweep_paradigms(runs) -> pd.DataFrame:
    """One row per run x benchmark x paradigm x point: accuracy at the run's last checkpoint."""
    frames = []
    for r in runs:
        # the last checkpoint's eval files of a run, the all-pairs file in place of its sample
        steps = step_dirs(Path(r.path) / "evals")
        files = {f.stem: f for f in sorted(steps[max(steps)].glob("*.parquet")) if not f.name.startswith(".")} \
            if steps else {}
        for f in (f for stem, f in files.items() if f"{stem}{ALL_SUFFIX}" not in files):
            got = _read_final(f)
            if got is None:
                continue
            meta, cols, names, inv, phen = got
            ok, pts = pair_correct(cols)
            names = np.asarray(names, dtype=object)
            n = np.bincount(inv, minlength=len(names))
            k = ok.shape[1]  # correct pairs per paradigm and point: one bincount over (pair, point) cells
            acc = np.bincount((inv[:, None] * k + np.arange(k)).ravel(), weights=ok.ravel(),
                              minlength=len(names) * k).reshape(len(names), k) / n[:, None]
            metric, point, p1, p2 = (np.repeat(np.asarray(c), len(names)) for c in zip(*pts))
            # point-major, paradigm-minor: one frame per file, in the order of one frame per point
            frames.append(pd.DataFrame({
                "run": r.name, "model": r.model, "budget": r.budget, "seed": r.seed,
                "benchmark": meta.get("benchmark", f.stem), "step": int(meta.get("step", -1)),
                "phenomenon": np.tile(phen, len(pts)), "paradigm": np.tile(names, len(pts)), "metric": metric,
                "point": point, "p1": p1.astype(float), "p2": p2.astype(float), "acc": acc.T.ravel(),
                "n_pairs": np.tile(n, len(pts))}))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out["budget"] = out["budget"].astype("Int64")
    return out


def sweep_summary(par: pd.DataFrame, move: float = 0.20) -> pd.DataFrame:
    """Per model x budget x benchmark x metric family: the overall accuracy's min and max over the sweep (and their
    points), its value at the authors' default, and the paradigms whose own accuracy moves more than `move`: all,
    and `_sure` those whose move minus 1.96 times its pair-noise bound (sqrt((a(1-a) + b(1-b)) / n) between the
    ends a, b on n pairs: the same pairs in every seed, so seeds do not shrink it) still exceeds `move`."""
    keys = ["model", "budget", "benchmark"]
    per_seed = par.groupby([*keys, "run", "metric", "point", "p1", "p2"], dropna=False)["acc"].mean().reset_index()
    overall = per_seed.groupby([*keys, "metric", "point", "p1", "p2"], dropna=False).agg(
        acc=("acc", "mean"), n_seeds=("run", "nunique")).reset_index()
    mean_par = par.groupby([*keys, "paradigm", "metric", "point"], dropna=False).agg(
        acc=("acc", "mean"), n_pairs=("n_pairs", "min")).reset_index()
    rows = []
    default = {"pow": f"pow{POW_DEFAULT}", "morcela": f"morcela_{MORCELA_DEFAULT[0]}_{MORCELA_DEFAULT[1]}"}
    for (model, budget, bench, metric), g in overall.groupby([*keys, "metric"], dropna=False, sort=True):
        lo, hi = g.loc[g.acc.idxmin()], g.loc[g.acc.idxmax()]
        span = pick(mean_par, model=model, benchmark=bench, metric=metric, budget=budget)
        ends = span.groupby("paradigm").agg(max=("acc", "max"), min=("acc", "min"), n=("n_pairs", "min"))  # cython
        spread = ends["max"] - ends["min"]
        noise = Z975 * np.sqrt((ends["max"] * (1 - ends["max"]) + ends["min"] * (1 - ends["min"])) / ends["n"])
        at_default = g.loc[g.point == default.get(metric, g.point.iloc[0]), "acc"]
        rows.append({"model": model, "budget": budget, "benchmark": bench, "metric": metric,
                     "n_points": len(g), "n_seeds": int(g.n_seeds.max()), "acc_min": lo.acc, "point_min": lo.point,
                     "acc_max": hi.acc, "point_max": hi.point,
                     "authors_default": default.get(metric, g.point.iloc[0]),
                     "acc_at_default": float(at_default.iloc[0]) if len(at_default) else np.nan,
                     f"paradigms_moving_over_{move:g}": int((spread > move).sum()),
                     f"paradigms_moving_over_{move:g}_sure": int((spread - noise > move).sum()),
                     "max_paradigm_move": float(spread.max()) if len(spread) else np.nan,
                     "n_paradigms": int(len(spread))})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
    return out


def sweep_markdown(summary: pd.DataFrame) -> str:
    """One line per model x budget x benchmark: each family's range (ends' points) and default."""
    if summary.empty:
        return "_(no eval files at the last checkpoints)_\n"
    move_col = next(c for c in summary.columns if c.startswith("paradigms_moving_over_") and c[-1].isdigit())
    L = ["| model · corpus | benchmark | MLP | sum-LP | pow-norm α: range (α at ends) | at α=0.5 | SLOR | "
         "MORCELA β,γ: range (β_γ at ends) | at β=1,γ=0 | paradigms moving > " + move_col.rsplit("_", 1)[1]
         + " (max; beyond pair noise) |", "|---|---|---:|---:|---|---:|---:|---|---:|---|"]
    for (model, budget, bench), g in summary.groupby(["model", "budget", "benchmark"], dropna=False, sort=True):
        m = {r["metric"]: r for r in g.to_dict("records")}
        pc = lambda v: "" if v is None or pd.isna(v) else f"{100 * v:.1f}"  # noqa: E731

        def rng(k, strip):
            r = m.get(k)
            if r is None:
                return "n/a (no unigram columns)"
            return (f"{pc(r['acc_min'])}–{pc(r['acc_max'])} ({r['point_min'].removeprefix(strip)} → "
                    f"{r['point_max'].removeprefix(strip)})")

        mc = m.get("morcela")
        moving = (f"{mc[move_col]} of {mc['n_paradigms']} ({pc(mc['max_paradigm_move'])}; {mc[move_col + '_sure']}, the "
                  "rest not determined)" if mc is not None else "")
        L.append(f"| {model} · {budget_label(budget)} | {bench} | {pc(m['mlp']['acc_min'])} | {pc(m['sum']['acc_min'])} | "
                 f"{rng('pow', 'pow')} | {pc(m['pow']['acc_at_default'])} | "
                 f"{pc(m['slor']['acc_min']) if 'slor' in m else 'n/a'} | {rng('morcela', 'morcela_')} | "
                 f"{pc(mc['acc_at_default']) if mc is not None else 'n/a'} | {moving} |")
    return "\n".join(L) + "\n"
