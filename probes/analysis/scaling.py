"""Scaling grid: final accuracy (each run's last checkpoint, mean over seeds) over model size x corpus size, and
the ZhoBLiMP paper's difficulty groups (§5.3) from each paradigm's best accuracy over sizes and the Pearson r of
its accuracy with log model size, on the largest corpus as the paper does (ScalingConfig.budget).
The paper's thresholds did not survive in its text: the defaults below are OUR OWN ("Easy" clearly learned,
"Medium" > 5 standard errors above chance at 300 pairs, "Difficult" a strong size trend).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from probes.analysis.evalset import RunInfo, parse_model_params
from probes.analysis.outputs import save_figure
from probes.analysis.plotting import new_figure, wrap_title

# ZhoBLiMP §5.3: "Out of the 118 paradigms, 80 and 15 paradigms are of easy and medium level [...]
# 13 are difficult and 10 are other" (Zh-Pythia 14M-1.4B trained on 3B tokens).
PAPER_GROUPS = {"Easy": 80, "Medium": 15, "Difficult": 13, "Other": 10}


@dataclass
class ScalingConfig:
    easy_min_best: float = 0.85  # best accuracy over model sizes at or above this: Easy
    medium_min_best: float = 0.65  # at or above this (and below easy): Medium; below: near chance
    difficult_min_r: float = 0.5  # near chance and Pearson r(acc, log10 size) >= this: Difficult
    min_sizes_for_r: int = 3  # fewer model sizes than this: r is not computed (group Other, said why)
    metric: str = "mlp"  # mlp | sum
    budget: str = "largest"  # largest: group on each benchmark's largest corpus budget (the paper's 3B) | each

    def __post_init__(self) -> None:
        if not self.medium_min_best <= self.easy_min_best:
            raise ValueError("ScalingConfig: medium_min_best must be <= easy_min_best")
        if self.metric not in ("mlp", "sum"):
            raise ValueError(f"ScalingConfig.metric must be 'mlp' or 'sum', got {self.metric!r}")
        if self.budget not in ("largest", "each"):
            raise ValueError(f"ScalingConfig.budget must be 'largest' or 'each', got {self.budget!r}")


def pearson_r(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    xc, yc = x - x.mean(), y - y.mean()
    return float((xc * yc).sum() / np.sqrt((xc ** 2).sum() * (yc ** 2).sum()))


def budget_label(b) -> str:
    if b is None or b is pd.NA or (isinstance(b, float) and np.isnan(b)):
        return "full"
    b = float(b)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if b >= scale:
            return f"{b / scale:g}{unit}"
    return f"{b:g}"


def budget_order(df: pd.DataFrame) -> list:
    return sorted(df["budget"].drop_duplicates(), key=lambda b: (pd.isna(b), 0 if pd.isna(b) else float(b)))


def final_accuracy(table: pd.DataFrame, runs: list[RunInfo]) -> pd.DataFrame:
    """Per model x budget x benchmark x paradigm: accuracy at each run's last checkpoint, mean over seeds."""
    last = table.groupby(["run", "benchmark"])["step"].transform("max")
    fin = table[table.step == last]
    g = fin.groupby(["model", "budget", "benchmark", "phenomenon", "paradigm"], dropna=False, sort=True)
    out = g.agg(acc_mlp=("acc_mlp", "mean"), acc_sum=("acc_sum", "mean"), n_seeds=("run", "nunique"),
                final_tokens=("tokens", "mean")).reset_index()
    scored = set(fin.run)
    by_model = {r.model: r.model_params for r in runs if r.name in scored}  # a run's table rows carry its model
    out["model_params"] = out["model"].map(lambda m: by_model.get(m) or parse_model_params(str(m)))
    return out


INTERVAL = ["lo", "hi", "band", "seed_spread"]  # what a cell takes from probes.analysis.bands.final_bands


def grid_tables(final: pd.DataFrame, metric: str = "acc_mlp", cells: tuple[pd.DataFrame, pd.DataFrame] | None = None
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(overall, per_phenomenon): mean over paradigms (and phenomena) per model x budget x benchmark;
    `cells`: (overall, per phenomenon) final_bands, whose 95 % interval, band and seed spread each cell gets."""
    keys = ["model", "model_params", "budget", "benchmark"]
    ph = final.groupby([*keys, "phenomenon"], dropna=False, sort=True)[metric].mean().reset_index()
    overall = final.groupby(keys, dropna=False, sort=True)[metric].mean().reset_index()
    if cells is not None:
        on = ["model", "budget", "benchmark"]
        overall = overall.merge(cells[0][[*on, *INTERVAL]], on=on, how="left")
        ph = ph.merge(cells[1][[*on, "phenomenon", *INTERVAL]], on=[*on, "phenomenon"], how="left")
    return overall, ph


def difficulty_groups(final: pd.DataFrame, cfg: ScalingConfig | None = None) -> pd.DataFrame:
    """One row per budget x benchmark x paradigm: best accuracy over sizes, r with log size, group. Where
    `final` has a paradigm's 95 % interval (lo, hi: final_bands), the best accuracy's is best_lo / best_hi,
    and `group_sure` says whether it lies inside the group's accuracy range (no threshold crossed)."""
    cfg = cfg or ScalingConfig()
    metric = f"acc_{cfg.metric}"
    if cfg.budget == "largest" and len(final):
        # each benchmark's largest corpus budget; a run on the whole corpus (budget null) counts as the
        # largest, since every budget is a prefix of it
        b = final["budget"].astype("Float64").fillna(np.inf)
        final = final[b == b.groupby(final["benchmark"]).transform("max")]
    rows = []
    # numpy per group rather than DataFrame slices: 472 groups of a 5 x 4 grid took 1.5 s as slices
    acc = final[metric].to_numpy(dtype=float)
    params = final["model_params"].to_numpy(dtype=float, na_value=np.nan)
    models = final["model"].to_numpy(dtype=object)
    keys = ["budget", "benchmark", "phenomenon", "paradigm"]
    for (budget, bench, phen, par), idx in final.groupby(keys, dropna=False, sort=True).indices.items():
        a = acc[idx]
        if not np.isfinite(a).any():
            continue  # no pairs scored at the last checkpoint: nothing to group
        best_i = idx[np.nanargmax(a)]
        sized = idx[np.isfinite(params[idx])]
        n_sizes = len(np.unique(params[sized]))
        r = pearson_r(np.log10(params[sized]), acc[sized]) if n_sizes >= cfg.min_sizes_for_r else float("nan")
        best = float(acc[best_i])
        if best >= cfg.easy_min_best:
            group, why = "Easy", f"best {best:.2f} >= {cfg.easy_min_best}"
        elif best >= cfg.medium_min_best:
            group, why = "Medium", f"best {best:.2f} >= {cfg.medium_min_best}"
        elif np.isfinite(r) and r >= cfg.difficult_min_r:
            group, why = "Difficult", f"best {best:.2f} near chance, r {r:.2f} >= {cfg.difficult_min_r}"
        else:
            group = "Other"
            why = (f"best {best:.2f} near chance, r {r:.2f} < {cfg.difficult_min_r}" if np.isfinite(r)
                   else f"best {best:.2f} near chance; r needs >= {cfg.min_sizes_for_r} model sizes, have {n_sizes}")
        lo, hi = (float(final[c].iat[best_i]) if c in final else np.nan for c in ("lo", "hi"))
        edges = [e for e in (cfg.medium_min_best, cfg.easy_min_best) if lo < e <= hi]
        rows.append({"budget": budget, "benchmark": bench, "phenomenon": phen, "paradigm": par,
                     "best_acc": best, "best_lo": lo, "best_hi": hi, "best_model": models[best_i],
                     "n_model_sizes": n_sizes, "pearson_r_log_size": r, "group": group,
                     "group_sure": bool(np.isfinite(lo) and not edges), "reason": why})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
        out = out.sort_values(keys, na_position="last", ignore_index=True)
    return out


def _grid(overall: pd.DataFrame, benchmark: str) -> tuple[pd.DataFrame, list[str], list]:
    """The benchmark's cells, its models by parameter count and its budgets in order (both heatmaps')."""
    o = overall[overall.benchmark == benchmark]
    m = o[["model", "model_params"]].drop_duplicates("model")
    m = m.assign(_p=m.model_params.fillna(np.inf)).sort_values(["_p", "model"])
    return o, list(m.model), budget_order(o)


def heatmap(ax, data: np.ndarray, rows: list[str], cols: list[str], title: str, xlabel: str, ylabel: str) -> None:
    """The heatmap of `data` (accuracies, % in the cells) with its colour bar."""
    im = ax.imshow(data, vmin=0.4, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=30 if max(map(len, cols), default=0) > 6 else 0,
                  ha="right" if max(map(len, cols), default=0) > 6 else "center", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    # above the whole figure, in lines of its width: over a narrow heatmap the title was cut at both edges
    ax.figure.suptitle(wrap_title(title, ax.figure.get_figwidth() - 0.2, 10), fontsize=10)
    if data.size <= 400:
        for (i, j), v in np.ndenumerate(data):
            if np.isfinite(v):
                # in_layout=False: inside the axes anyway, so constrained layout need not measure each one
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if v < 0.75 else "black", in_layout=False)
    ax.figure.colorbar(im, ax=ax, label="accuracy")


def plot_grid_overall(overall: pd.DataFrame, benchmark: str, metric: str, path):
    o, models, budgets = _grid(overall, benchmark)
    data = np.full((len(models), len(budgets)), np.nan)
    for _, r in o.iterrows():
        data[models.index(r.model), budgets.index(r.budget)] = r[metric]
    fig, axes = new_figure(2.2 + 1.1 * len(budgets), 1.6 + 0.45 * len(models))
    # each size name with the parameter count it stands for in these runs ("pythia-14m (14.0M)")
    p = o.drop_duplicates("model").set_index("model")["model_params"]
    heatmap(axes[0, 0], data, [f"{m} ({p[m] / 1e6:.3g}M)" if pd.notna(p.get(m)) else m for m in models],
            [budget_label(b) for b in budgets],
            f"{benchmark}: final accuracy (%)", "corpus budget (tokens)", "model")
    return save_figure(fig, path)


def plot_grid_phenomena(overall: pd.DataFrame, per_phen: pd.DataFrame, benchmark: str, metric: str, path):
    _, models, budgets = _grid(overall, benchmark)  # model and budget order as in the overall heatmap
    p = per_phen[per_phen.benchmark == benchmark]
    phens = sorted(p.phenomenon.unique())
    cols = [(m, b) for b in budgets for m in models]
    data = np.full((len(phens), len(cols)), np.nan)
    for _, r in p.iterrows():
        data[phens.index(r.phenomenon), cols.index((r.model, r.budget))] = r[metric]
    labels = [f"{m}\n{budget_label(b)}" if len(budgets) > 1 else m for m, b in cols]
    fig, axes = new_figure(2.5 + 0.75 * len(cols), 1.5 + 0.32 * len(phens))
    heatmap(axes[0, 0], data, phens, labels, f"{benchmark}: final accuracy per phenomenon (%)",
            "model" + (" / budget" if len(budgets) > 1 else ""), "phenomenon")
    return save_figure(fig, path)
