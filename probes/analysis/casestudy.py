"""The ZhoBLiMP case study (§5.4, Figure 6) for any paradigm (docs/probing.md, "Case study"): from the per-slot
columns of its eval rows (the reduced cache keeps only summed generic deltas), grouped by phrase_regions.json."""
from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T, band_caption, band_kind, seed_pair_half
from probes.analysis.evalset import EvalInputError, EvalSet, log_tokens, parse_model_params
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.paperfigs import pick
from probes.analysis.plotting import accuracy_over_deltas, plot_line, safe_name
from probes.analysis.scaling import budget_label
from probes.evals.files import ALL_SUFFIX, REGIONS as GENERIC

PHRASE_REGIONS = Path(__file__).parents[1] / "benchmarks" / "phrase_regions.json"
# --case-study auto: the paper's paradigm (real or generated pairs), else the built-in grammar's
# attractor paradigm (the demo), first present wins
DEFAULT_PARADIGMS = ("npi_renhe_wh_question_subj", "npi_renhe_wh_question_subj_yikang", "sv_agreement_pp_attractor")
QUANTITIES = {"mean": "Δ mean log-prob per token of the region (good − bad), nats",
              "sum": "Δ summed log-prob of the region (good − bad), nats"}
REGION_COLORS = ("tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan",
                 "tab:red", "tab:gray", "tab:green")
_SLOT_COL = re.compile(r"^lp_good_slot_(.+)$")
_ANY_SLOT = re.compile(r"^(?:lp|ntok|xtok)_(?:good|bad)_slot_(.+)$")
_GENERIC_COL = re.compile(r"^(?:lp|ntok)_(?:good|bad)_(?:prefix|critical|suffix)$")


@dataclass
class CaseStudyConfig:
    paradigm: str = "auto"  # a paradigm name, "auto" (DEFAULT_PARADIGMS) or "none"
    quantity: str = "mean"  # mean | sum: what the figure draws (tables carry both)
    phrase_regions: Optional[str] = None  # JSON file of slot groupings; None = probes/benchmarks/phrase_regions.json
    max_plots: int = 6  # figures (one per model x budget; largest models first)


@dataclass
class RegionSpec:
    """Which regions a case study shows and where they come from."""

    source: str  # "template slots" | "generic split"
    regions: dict[str, list[str]] = field(default_factory=dict)  # region -> slots (generic: itself)
    grouped: bool = False  # the slots are grouped by phrase_regions.json (not one region per slot)

    def describe(self) -> str:
        if self.source == "generic split":
            return ("generic split (no template slots in the eval files): prefix / critical span / suffix "
                    "where good and bad tokens differ")
        how = "phrase regions from template slots" if self.grouped else \
            "one region per template slot (no grouping in phrase_regions.json)"
        return f"{how}: " + "; ".join(f"{r} = {' + '.join(s)}" for r, s in self.regions.items())


def load_phrase_regions(path: str | Path | None = None) -> dict[str, dict[str, list[str]]]:
    """{paradigm: {region: [slot, ...]}} from a JSON file (keys starting with '_' are comments)."""
    path = Path(path) if path else PHRASE_REGIONS
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalInputError(f"{path}: cannot read the phrase-region mapping ({exc})") from exc
    out: dict[str, dict[str, list[str]]] = {}
    for paradigm, regions in raw.items():
        if paradigm.startswith("_"):
            continue
        if not isinstance(regions, dict):
            raise EvalInputError(f"{path}: '{paradigm}' must map region names to lists of slots")
        out[paradigm] = {}
        for name, slots in regions.items():
            if name.startswith("_"):
                continue
            if not isinstance(slots, list) or not slots or not all(isinstance(s, str) for s in slots):
                raise EvalInputError(f"{path}: '{paradigm}' region '{name}' must be a non-empty list of slot names")
            out[paradigm][name] = list(slots)
    return out


def region_spec(columns: list[str], paradigm: str, mapping: dict[str, dict[str, list[str]]],
                has_slots: bool) -> RegionSpec:
    """The regions of ``paradigm`` from its eval rows' columns (``has_slots``: some row has finite slot values)."""
    slots = [m.group(1) for c in columns if (m := _SLOT_COL.match(c))]
    if has_slots and slots:
        if paradigm in mapping:
            return RegionSpec("template slots", mapping[paradigm], grouped=True)
        return RegionSpec("template slots", {s: [s] for s in slots})
    return RegionSpec("generic split", {r: [r] for r in GENERIC})


def pair_deltas(df: pd.DataFrame, spec: RegionSpec) -> pd.DataFrame:
    """Per pair: ``mean_<R>`` and ``sum_<R>`` for each region R and for the whole sentence
    (``total``); NaN where a pair lacks the region's slots or the region has no token on a side."""
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["mean_total"] = df.lp_good / df.ntok_good - df.lp_bad / df.ntok_bad
        out["sum_total"] = df.lp_good - df.lp_bad
        for name, slots in spec.regions.items():
            side = {}
            for s in ("good", "bad"):
                cols = ([f"{k}_{s}_slot_{x}" for x in slots] if spec.source == "template slots"
                        else [f"{k}_{s}_{x}" for x in slots] for k in ("lp", "ntok"))
                lp_cols, n_cols = cols
                missing = [c for c in lp_cols + n_cols if c not in df.columns]
                if missing:  # a slot the mapping names that this paradigm's pairs do not have
                    side[s] = (pd.Series(np.nan, index=df.index), pd.Series(np.nan, index=df.index))
                    continue
                # sum(min_count=len): one missing slot makes the region missing, not smaller
                side[s] = (df[lp_cols].sum(axis=1, min_count=len(lp_cols)),
                           df[n_cols].sum(axis=1, min_count=len(n_cols)))
            (lg, ng), (lb, nb) = side["good"], side["bad"]
            mean = lg / ng.where(ng > 0) - lb / nb.where(nb > 0)
            out[f"mean_{name}"] = mean
            out[f"sum_{name}"] = (lg - lb).where(ng.notna() & nb.notna())
    return pd.DataFrame(out, index=df.index)


def straddling(df: pd.DataFrame, spec: RegionSpec) -> pd.Series:
    """Per pair: does a token straddle a region's left boundary (on either side; it counts for the region of its
    last character)? NaN in eval files written before the xtok columns existed."""
    cols = [f"xtok_{side}_slot_{slots[0]}" for slots in spec.regions.values() for side in ("good", "bad")]
    if not all(c in df.columns for c in cols):
        return pd.Series(np.nan, index=df.index)
    return (df[cols].fillna(0) > 0).any(axis=1).astype(float)


def _read(path: Path, paradigm: str, slots: Optional[list[str]], generic: bool = False) -> pd.DataFrame:
    """The rows of ``paradigm`` in one eval file: lp/ntok of the sentences and of ``slots`` (None: every slot), or of
    the generic regions (no such slot, or ``generic``). Only these columns: ~30 ms a ZhoBLiMP file, not ~110 ms."""
    try:
        pf = pq.ParquetFile(path, read_dictionary=["paradigm"])
        names = pf.schema_arrow.names
        want = [c for c in names if (m := _ANY_SLOT.match(c)) and (slots is None or m.group(1) in slots)]
        if generic or not want:
            want = [c for c in names if _GENERIC_COL.match(c)]
        want = [c for c in ("lp_good", "lp_bad", "ntok_good", "ntok_bad") if c in names] + want
        rows = pc.equal(pf.read(columns=["paradigm"]).column(0), paradigm)
        return pf.read(columns=want).filter(rows).to_pandas()
    except Exception as exc:  # a torn or foreign file names itself
        raise EvalInputError(f"{path}: cannot read the rows of paradigm {paradigm!r} ({exc})") from exc


def _read_all(paths: list[Path], paradigm: str, slots: Optional[list[str]], generic: bool = False):
    # ~30 ms a ZhoBLiMP file; arrow releases the GIL, so threads overlap the reads of a grid
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda p: _read(p, paradigm, slots, generic), paths))


def case_study_runs(ev: EvalSet, benchmark: str, paradigm: str,
                    mapping: dict[str, dict[str, list[str]]]) -> tuple[pd.DataFrame, RegionSpec]:
    """One row per run x checkpoint of ``paradigm``: accuracies and region deltas (see module doc)."""
    t = ev.table[(ev.table.benchmark == benchmark) & (ev.table.paradigm == paradigm)]
    runs = {r.name: r for r in ev.runs}
    keys = [(run, int(step), g.iloc[0]) for (run, step), g in t.groupby(["run", "step"], sort=True)]
    paths = [Path(runs[run].path) / "evals" / f"step{step}" / f"{benchmark}.parquet" for run, step, _ in keys]
    slots = sorted({s for r in mapping[paradigm].values() for s in r}) if paradigm in mapping else None
    frames = [(*k, df) for k, df in zip(keys, _read_all(paths, paradigm, slots))]
    if not frames:
        raise EvalInputError(f"case study: no eval rows of paradigm {paradigm!r} in benchmark {benchmark!r}")
    # one region definition for the whole study: template slots where any file has them
    has_slots = [f for f in frames if any(_SLOT_COL.match(c) and f[3][c].notna().any() for c in f[3].columns)]
    if not has_slots and any(_ANY_SLOT.match(c) for f in frames for c in f[3].columns):
        # slot columns, but none for this paradigm's pairs: read the generic regions instead
        frames = [(*k, df) for k, df in zip(keys, _read_all(paths, paradigm, slots, generic=True))]
    # the slots this paradigm's pairs have (a file holds every paradigm's slot columns)
    columns = [c for c in dict.fromkeys(c for f in (has_slots or frames) for c in f[3].columns)
               if not _SLOT_COL.match(c) or any(c in f[3] and f[3][c].notna().any() for f in has_slots)]
    spec = region_spec(columns, paradigm, mapping, bool(has_slots))
    rows = []
    for run, step, meta, df in frames:  # accuracies over all pairs, region deltas over the pairs that have them
        d = pair_deltas(df, spec)
        row = {"run": run, "model": meta.model, "budget": meta.budget, "seed": meta.seed, "benchmark": benchmark,
               "paradigm": paradigm, "step": step, "tokens": int(meta.tokens), "n_pairs": len(df),
               "acc_mlp": float((df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad).mean()),
               "acc_sum": float((df.lp_good > df.lp_bad).mean())}
        have = d[[f"sum_{r}" for r in spec.regions]].notna().all(axis=1)
        row["n_region_pairs"] = int(have.sum())
        row["n_straddle_pairs"] = (straddling(df, spec)[have].sum(min_count=1) if spec.source == "template slots"
                                   else np.nan)
        # standard errors over pairs: the pair-bootstrap band where there are too few seeds for a t-band
        for a in ("acc_mlp", "acc_sum"):
            row[f"{a}_se"] = float(np.sqrt(row[a] * (1 - row[a]) / max(len(df), 1)))
        for c in d.columns:
            v = d[c] if c.endswith("_total") else d.loc[have, c]
            row[c] = float(v.mean()) if v.notna().any() else np.nan
            row[f"{c}_se"] = float(v.std(ddof=1) / np.sqrt(v.notna().sum())) if v.notna().sum() > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows), spec


def _caption(s: pd.DataFrame) -> str:
    """band_caption for summarize's bands: from 3 seeds its t is over seeds alone, on the pairs scored."""
    return band_caption(s).replace("t over seeds and pairs", "t over seeds, on these pairs")


def summarize(runs: pd.DataFrame, spec: RegionSpec) -> pd.DataFrame:
    """Mean over seeds per model x budget x checkpoint with the band of probes.analysis.bands (a t-interval from 3
    seeds, else seed_pair_half from the seeds' standard errors over pairs and their spread); column `band`."""
    curves = ["acc_mlp", "acc_sum", "mean_total", "sum_total", *[f"{q}_{r}" for r in spec.regions for q in ("mean", "sum")]]
    keys = ["model", "budget", "benchmark", "paradigm", "step"]
    s = seed_summary(runs, keys, [*curves, "n_region_pairs", "n_straddle_pairs", "n_pairs"])
    few = s["n_seeds"].to_numpy() < MIN_SEEDS_T
    var = runs.assign(**{f"{v}_v": runs[f"{v}_se"] ** 2 for v in curves if f"{v}_se" in runs})
    vsum = var.groupby(keys, dropna=False, sort=True)[[f"{v}_v" for v in curves if f"{v}_se" in runs]].sum(min_count=1)
    vsum = vsum.reset_index(drop=True)
    for v in curves:
        if f"{v}_v" not in vsum:
            continue
        half = seed_pair_half(vsum[f"{v}_v"], s[f"{v}_sd"], s["n_seeds"])
        m = s[f"{v}_mean"].to_numpy(dtype=float)
        s[f"{v}_lo"] = np.where(few, m - half, s[f"{v}_lo"])
        s[f"{v}_hi"] = np.where(few, m + half, s[f"{v}_hi"])
    s["band"] = band_kind(s["n_seeds"].to_numpy())
    return s


def plot_case_study(s: pd.DataFrame, spec: RegionSpec, title: str, path: Path, quantity: str = "mean",
                    metric: str = "acc_mlp", runs: Optional[pd.DataFrame] = None) -> Path:
    """Figure 6 of the paper: accuracy (top) and each region's Δ (bottom) against tokens, log x;
    lines are seed means, bands the 95 % interval over seeds (none with one seed)."""
    c = s.sort_values("step")
    tok = c["tokens"].to_numpy()
    n_seeds = int(c["n_seeds"].min())

    def band(col):
        return c[f"{col}_lo"].to_numpy(), c[f"{col}_hi"].to_numpy()

    fig, axes = accuracy_over_deltas(tok, tok, metric, QUANTITIES[quantity].replace(" (good", "\n(good"), 6.2, 0.12, 0.9)
    top, bottom = axes[:, 0]
    plot_line(top, tok, c[f"{metric}_mean"].to_numpy(), tok, "accuracy", "0.35", band=band(metric))
    seeds = [r.sort_values("step") for _, r in runs.groupby("run", sort=True)] \
        if runs is not None and runs["run"].nunique() > 1 else []

    def thin(ax, col: str, color) -> None:  # each seed as a thin line beside the mean (no band below 3 seeds)
        for r in seeds:
            ax.plot(10 ** log_tokens(r.tokens.to_numpy(), tok), r[col].to_numpy(), color=color, lw=0.6, alpha=0.5)

    thin(top, metric, "0.35")
    for i, (r, slots) in enumerate(spec.regions.items()):  # a template has up to 14 slots
        color = REGION_COLORS[i % len(REGION_COLORS)]
        y = c[f"{quantity}_{r}_mean"].to_numpy(dtype=float)
        if np.isfinite(y).any():
            label = r if spec.source == "generic split" or r == slots[0] else f"{r} ({' + '.join(slots)})"
            plot_line(bottom, tok, y, tok, label, color, band=band(f"{quantity}_{r}"))
            thin(bottom, f"{quantity}_{r}", color)
    bottom.legend(fontsize=8, loc="best", title="region", title_fontsize=8)
    bands = f"{n_seeds} seed{'s' if n_seeds > 1 else ''}; " + _caption(c)
    n = int(c["n_region_pairs_mean"].min()), int(c["n_pairs_mean"].max())
    fig.suptitle(f"{title}\n{spec.source} ({n[0]} of {n[1]} pairs) · {quantity} Δ · {bands}", fontsize=9)
    return save_figure(fig, path)


def pick_paradigms(ev: EvalSet, name: str) -> list[tuple[str, str]]:
    """(benchmark, paradigm) of the case study; [] for "none" or when "auto" finds none."""
    if name == "none":
        return []
    have = ev.table[["benchmark", "paradigm"]].drop_duplicates()
    for cand in (DEFAULT_PARADIGMS if name == "auto" else (name,)):
        hit = have[have.paradigm == cand]
        if len(hit):
            return [tuple(x) for x in hit.sort_values("benchmark").itertuples(index=False)]
    if name == "auto":
        return []
    near = sorted(p for p in have.paradigm.unique() if name.lower() in p.lower())[:5]
    raise EvalInputError(f"--case-study {name}: no run has paradigm {name!r}"
                         + (f" (similar: {near})" if near else "") + "; 'none' turns the case study off")


def case_study_section(ev: EvalSet, cfg: CaseStudyConfig, out: Path, jobs, metric: str = "acc_mlp"
                       ) -> tuple[list, list[str]]:
    """Tables under out/tables, figures submitted to ``jobs``; returns (markdown blocks, notes): a
    block is a line, a DataFrame (a table) or ("figures", title prefix) for the figures drawn."""
    if cfg.quantity not in QUANTITIES:
        raise EvalInputError(f"case study quantity {cfg.quantity!r}: expected one of {sorted(QUANTITIES)}")

    # "<benchmark>_all" holds only the last checkpoint: a case study needs a curve
    targets = [t for t in pick_paradigms(ev, cfg.paradigm) if not t[0].endswith(ALL_SUFFIX)]
    if not targets:
        why = "turned off" if cfg.paradigm == "none" else \
            f"none of the default paradigms {list(DEFAULT_PARADIGMS)} is in these runs; choose one with --case-study"
        return ["## Case study", "", f"_No case study: {why}._", ""], []
    mapping = load_phrase_regions(cfg.phrase_regions)
    L, notes = [], []
    for bench, paradigm in targets:
        runs, spec = case_study_runs(ev, bench, paradigm, mapping)
        s = summarize(runs, spec)
        stem = f"case_study_{safe_name(bench)}_{safe_name(paradigm)}"
        write_csv(out / "tables" / f"{stem}_runs.csv", runs)
        write_csv(out / "tables" / f"{stem}.csv", s)
        final = runs[runs.step == runs.groupby("run").step.transform("max")]
        n_reg, n_all = int(final.n_region_pairs.sum()), int(final.n_pairs.sum())
        n_cross = final.n_straddle_pairs.sum(min_count=len(final))
        if spec.source == "generic split":
            notes.append(f"case study {bench} · {paradigm}: the eval files carry no template slots, so its regions "
                         "are the generic prefix/critical/suffix split, not phrase regions")
        elif n_reg < n_all:
            notes.append(f"case study {bench} · {paradigm}: template slots for {n_reg} of {n_all} pair scores at the "
                         "final checkpoints; region deltas average those pairs, accuracy all of them")
        L += [f"## Case study: {bench} · {paradigm}", "",
              f"As ZhoBLiMP §5.4 / Figure 6. Regions: {spec.describe()}. Template slots for {n_reg} of {n_all} "
              "pairs (final checkpoint, summed over runs). Figures draw the "
              f"{'difference in MLP per region: mean log-prob per token of the region, good − bad' if cfg.quantity == 'mean' else 'summed log-prob of the region, good − bad'}"
              f" ({QUANTITIES[cfg.quantity]}), averaged over the paradigm's pairs; accuracy "
              f"({'MLP' if metric == 'acc_mlp' else 'sum-LP'}) over all its pairs. Lines: mean over seeds; bands: "
              + _caption(s).removeprefix("bands: ")
              + f". Both quantities (mean_<region>, sum_<region>) are in `tables/{stem}.csv` "
              f"(per run: `tables/{stem}_runs.csv`).", ""]
        drawn = 0
        keys = s[["model", "budget"]].drop_duplicates().itertuples(index=False)
        for model, budget in sorted(keys, key=lambda k: (-(parse_model_params(k.model) or 0),
                                                         -(0 if pd.isna(k.budget) else k.budget))):
            sel = pick(s, model=model, budget=budget)
            if sel.step.nunique() < 2 or drawn >= cfg.max_plots:
                continue  # never a one-point figure
            # the largest model on the largest budget in the main flow, the others in the appendix
            where = "figures" if drawn == 0 else "appendix"
            title = f"Case study, {paradigm} ({model} · {budget_label(budget)})"
            jobs.submit(title, plot_case_study, sel, spec, f"{bench} · {paradigm} · {model} · {budget_label(budget)}",
                        out / where / f"{stem}_{safe_name(model)}_{budget_label(budget)}.png",
                        cfg.quantity, metric,
                        pick(runs, model=model, budget=budget))
            drawn += 1
        if spec.source == "template slots":
            if pd.isna(n_cross):
                L += ["Tokens straddling a region boundary: not recorded in these eval files (written before "
                      "the `xtok_*` columns).", ""]
            else:
                L += [f"Pairs with a token straddling a region boundary (it holds text of both regions and counts "
                      f"for the region of its last character, e.g. 服务|员会): {int(n_cross)} of {n_reg}.", ""]
                if n_cross:
                    notes.append(f"case study {bench} · {paradigm}: in {int(n_cross)} of {n_reg} pair scores a token "
                                 "straddles a region boundary (counted for the region of its last character)")
        same = [r for r in spec.regions if runs[f"sum_{r}"].abs().max() < 1e-6]
        if same:  # e.g. the attractor paradigms: good and bad differ only in the verb
            L += [f"Region(s) {', '.join(same)}: the same tokens in the same context in good and bad sentences, "
                  "so Δ = 0 by construction; the contrast lies in the other region(s).", ""]
        last = s[s.step == s.groupby(["model", "budget"], dropna=False).step.transform("max")]
        cols = ["model", "budget", "step", "tokens", "n_seeds", f"{metric}_mean",
                *[f"{cfg.quantity}_{r}_mean" for r in spec.regions]]
        L += ["Final checkpoint (mean over seeds):", "", last[cols], "", ("figures", f"Case study, {paradigm} ("), ""]
    return L, notes
