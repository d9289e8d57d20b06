"""Minimal pairs vs generated tasks over training (docs/elagent.md, "Minimal pairs vs generated tasks"): chance
levels differ (0.5, 1/4, 1/7, ...), so each probe is put on (acc - chance) / (1 - chance) before a group's mean."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T
from probes.analysis.aoa import AoAConfig, aoa_from_fit, fit_sigmoids
from probes.analysis.plotting import draw_baseline, inch_margins, new_figure, plot_line, token_axis
from probes.analysis.evalset import ALL_SUFFIX, EvalSet, log_tokens
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.paperfigs import model_order, pick
from probes.analysis.scaling import budget_label, budget_order
from probes.families import families

PAIRS, TASKS = "minimal_pairs", "generated_tasks"
USE_BENCHMARKS = ("elagent_word_order",)  # minimal-pair benchmarks that are generated tasks
COLORS = {PAIRS: "tab:blue", TASKS: "tab:orange"}
PROBE_COLUMNS = ["run", "step", "tokens", "group", "probe", "acc", "chance", "score"]


def probe_curves(ev: EvalSet, metric: str = "acc_mlp", tasks: Sequence[pd.DataFrame] = ()) -> pd.DataFrame:
    """One row per run x step x probe: group, accuracy, chance and the chance-corrected score. ``tasks``: the
    other families' generated-task rows (run, step, tokens, probe, acc, chance; probes/families.py)."""
    t = ev.table[~ev.table.benchmark.astype(str).str.endswith(ALL_SUFFIX)]
    mp = t.groupby(["run", "step", "benchmark"], sort=True).agg(tokens=("tokens", "first"), acc=(metric, "mean"))
    mp = mp.reset_index().rename(columns={"benchmark": "probe"})
    mp["group"] = np.where(mp.probe.isin(USE_BENCHMARKS), TASKS, PAIRS)
    mp["chance"] = 0.5
    frames = [mp] + [f.assign(group=TASKS) for f in tasks if len(f)]
    out = pd.concat(frames, ignore_index=True)
    acc, chance = out.acc.astype(float), out.chance.astype(float)
    out["score"] = (acc - chance) / (1 - chance)  # 0 at chance, 1 at perfect; NaN where chance is unknown
    out = out[PROBE_COLUMNS]
    return out.sort_values(["run", "group", "probe", "step"], ignore_index=True)


def group_curves(probes: pd.DataFrame) -> pd.DataFrame:
    """Per run x step x group: the mean chance-corrected score of the group's probes (chance 0 on that
    scale), n_probes (those with a known chance level; the others are left out)."""
    g = probes[np.isfinite(probes.score)].groupby(["run", "step", "group"], sort=True)
    out = g.agg(tokens=("tokens", "first"), score=("score", "mean"), n_probes=("probe", "nunique")).reset_index()
    out["chance"] = 0.0
    return out


def group_aoa(groups: pd.DataFrame, cfg: Optional[AoAConfig] = None) -> pd.DataFrame:
    """AoA of each run's group curves (probes.analysis.aoa's fit and rule on the chance-corrected score)."""
    cfg = cfg or AoAConfig()
    rows = []
    for (run, group), d in groups.groupby(["run", "group"], sort=True):
        d = d[d.tokens > 0].sort_values("tokens")  # the initialisation has no place on a log axis
        row = {"run": run, "group": group, "chance": float(d.chance.mean()) if len(d) else np.nan,
               "n_points": len(d), "final_score": float(d.score.iloc[-1]) if len(d) else np.nan,
               "aoa_log10_tokens": np.nan, "status": "too_few_checkpoints"}
        if len(d) >= cfg.min_points:
            x = log_tokens(d.tokens.to_numpy(dtype=float))
            fit = fit_sigmoids(x, d.score.to_numpy(dtype=float)[None, :])
            aoa, _best, status = aoa_from_fit(x, fit, row["chance"], cfg.min_gain, cfg.min_rise_rmse)
            row["aoa_log10_tokens"], row["status"] = float(aoa[0]), str(status[0])
        rows.append(row)
    out = pd.DataFrame(rows)
    out["aoa_tokens"] = 10 ** out["aoa_log10_tokens"]
    return out


def _plot(seeds: pd.DataFrame, aoa: pd.DataFrame, path: Path) -> Path:
    """A panel per model (rows) x budget (columns): both groups' seed-mean scores, chance (0) dashed, AoA dotted; one
    legend for all panels (a legend in every panel, placed by loc="best", was a fifth of the drawing time)."""
    groups = {key: g for key, g in seeds.groupby(["model", "budget"], dropna=False, sort=False)}
    models, budgets = model_order(seeds), budget_order(seeds)
    # a column is one budget: one x range, its tick labels under the bottom panel only
    fig, axes = new_figure(4.2 * len(budgets) + 0.95, 3.2 * len(models) + 1.0, len(models), len(budgets), layout=None,
                           sharex="col", sharey=True)
    ref = seeds["tokens"].to_numpy()
    legend: dict = {}
    for (i, model), (j, budget) in ((mi, bj) for mi in enumerate(models) for bj in enumerate(budgets)):
        ax = axes[i, j]
        g = groups.get((model, budget))
        if g is None:  # this model was not trained on this budget
            ax.set_visible(False)
            continue
        for group, d in g.groupby("group", sort=True):
            d = d.sort_values("tokens")
            n = int(d.n_seeds.max())
            # a t-band from 2 seeds spans the axis (probes.analysis.bands): drawn from 3 seeds on
            band = (d.score_lo.clip(-1, 1).to_numpy(), d.score_hi.clip(-1, 1).to_numpy()) if n >= MIN_SEEDS_T else None
            plot_line(ax, d.tokens.to_numpy(), d.score_mean.to_numpy(), ref, group.replace("_", " "), COLORS[group],
                      band=band)
            draw_baseline(ax, d.tokens.to_numpy(), np.zeros(len(d)), ref, COLORS[group])
            a = pick(aoa, model=model, group=group, budget=budget)
            if len(a) and np.isfinite(a.aoa_log10_tokens.iloc[0]):
                ax.axvline(10 ** a.aoa_log10_tokens.iloc[0], color=COLORS[group], ls=":", lw=1.4,
                           label=f"AoA {group.replace('_', ' ')}")
        # the shared y axis is labelled once per row, the x axis once in the title
        token_axis(ax, ref, ylabel="(acc − chance) / (1 − chance)" if ax.get_subplotspec().is_first_col() else "",
                   chance=False)
        ax.set_xlabel("")
        ax.set_ylim(min(-0.05, float(g.score_mean.min()) - 0.05), 1.02)
        n = int(g.n_seeds.max())
        ax.set_title(f"{model} · {budget_label(budget)} ({n} seed{'s' if n > 1 else ''})", fontsize=9, y=1.0)
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), loc="lower center", bbox_to_anchor=(0.5, 0.0), fontsize=8,
               frameon=False, ncol=max(min(len(legend), 4), 1))
    fig.suptitle("minimal pairs vs generated tasks, chance-corrected: dashed = chance (0), dotted = age of "
                 "acquisition\nx: tokens seen (log scale); hollow marker = step 0, drawn 1 decade left",
                 fontsize=10, y=1 - 0.1 / fig.get_figheight(), va="top")
    # fixed margins (inches) for the labels: drawn once, not measured and drawn again by constrained layout
    inch_margins(fig, left=0.75, right=0.2, top=0.8, bottom=0.4 + 0.19 * -(-len(legend) // 4), wspace=0.2, hspace=0.45)
    return save_figure(fig, path)


def formuse_section(ev: EvalSet, out: Path, metric: str = "acc_mlp", tasks: Sequence[pd.DataFrame] = (),
                    aoa_cfg: Optional[AoAConfig] = None, jobs=None) -> tuple[list[str], list[tuple[str, Path]]]:
    """Markdown and figures of the minimal-pairs-vs-generated-tasks view, its tables/formuse*.csv and
    figures/formuse.png (drawn by `jobs`, a FigureJobs, where given). ``tasks``: as probe_curves takes them."""
    out = Path(out)
    probes = probe_curves(ev, metric, tasks)
    info = pd.DataFrame([(r.name, r.model, r.budget) for r in ev.runs], columns=["run", "model", "budget"])
    info["budget"] = info["budget"].astype("Int64")
    groups = group_curves(probes).merge(info, on="run", how="left")
    seeds = seed_summary(groups, ["model", "budget", "group", "step"], values=("score",))
    aoa = group_aoa(groups, aoa_cfg).merge(info, on="run", how="left")
    aoa_seeds = aoa.groupby(["model", "budget", "group"], dropna=False).agg(
        n_runs=("run", "nunique"), aoa_log10_tokens=("aoa_log10_tokens", "mean"),
        acquired_runs=("aoa_log10_tokens", "count"), final_score=("final_score", "mean")).reset_index()
    write_csv(out / "tables" / "formuse_probes.csv", probes.merge(info, on="run", how="left"))
    write_csv(out / "tables" / "formuse.csv", seeds)
    write_csv(out / "tables" / "formuse_aoa.csv", aoa)
    members = probes.groupby(["group", "probe"]).agg(chance=("chance", "mean"), runs=("run", "nunique")).reset_index()
    md = ["## Minimal pairs vs generated tasks (chance-corrected)", "",
          "Which comes first over training: preferring the grammatical sentence of a minimal pair, or solving a "
          "task generated from new rules after k solved examples? **minimal pairs** = the minimal-pair "
          "benchmarks; **generated tasks** = ELAGENT (Language A word order after demonstrations, redefined "
          "precedence, deduction) and fill-in-the-blank syntax questions where present. The probes' chance levels "
          "differ (0.5, 1/4, 1/7, ...), so each probe's accuracy is put on one scale first, "
          "(acc − chance) / (1 − chance): 0 at chance, 1 at perfect. A group's curve is the mean of its probes' "
          "scores (a probe: mean over its paradigms), drawn with chance (0, dashed) and its age of acquisition "
          "(dotted; `probes.analysis.aoa`'s sigmoid rule). This is not FAC²E's knowledge-vs-use measure, which "
          "scores recalling and applying knowledge within one item from elicited rationales (small base models "
          "cannot give them) and counts grammar and numeric/logical/deductive reasoning alike as language. "
          "Numbers: `tables/formuse*.csv`.", "",
          "Which probes feed which group:", "", "| group | probe | chance | runs |", "|---|---|---|---|"]
    md += [f"| {r.group} | `{r.probe}` | {r.chance:.3f} | {r.runs} |" for r in members.itertuples(index=False)]
    md += [""]
    if not (probes.group == TASKS).any() or not (probes.group == PAIRS).any():
        missing = "generated-task" if not (probes.group == TASKS).any() else "minimal-pair"
        md += [f"_No {missing} probe in these runs (enable `probes.elagent`, add `elagent_word_order` to "
               "`probes.benchmarks`, or a minimal-pair benchmark): only one group is drawn._", ""]
    md += ["Age of acquisition per model × budget (mean over seeds that acquired it; `tables/formuse_aoa.csv` "
           "has each run's fit status):", "",
           "| model | budget | group | AoA (tokens) | acquired / runs | final score |", "|---|---|---|---|---|---|"]
    for r in aoa_seeds.itertuples(index=False):
        a = "" if pd.isna(r.aoa_log10_tokens) else f"{10 ** r.aoa_log10_tokens:,.0f}"
        md.append(f"| {r.model} | {budget_label(r.budget)} | {r.group} | {a} | {r.acquired_runs} / {r.n_runs} | "
                  f"{r.final_score:.3f} |")
    png = out / "figures" / "formuse.png"
    if jobs is not None:
        jobs.submit(None, _plot, seeds, aoa, png)  # listed here, drawn by the time the report is written
    else:
        _plot(seeds, aoa, png)
    figs = [("Minimal pairs vs generated tasks per model × budget", png)]
    md += ["", f"![{figs[0][0]}]({figs[0][1].relative_to(out).as_posix()})", ""]
    return md, figs


def use_sections(ev: EvalSet, out: Path, metric: str = "acc_mlp", aoa_cfg: Optional[AoAConfig] = None,
                 jobs=None) -> tuple[list[str], list[tuple[str, Path]]]:
    """The other probe families' report sections (where runs have their files; probes/families.py), then the
    minimal-pairs-vs-generated-tasks view over the tasks they give."""
    runs = [(r.name, Path(r.path), r.model, r.budget) for r in ev.runs]
    names, dirs = [r.name for r in ev.runs], [Path(r.path) for r in ev.runs]
    md, figs, tasks = [], [], []
    for fam in families():
        if fam.section:
            f_md, f_figs = fam.load("section")(runs, out)
            md, figs = md + f_md, figs + f_figs
        if fam.tasks:
            tasks.append(fam.load("tasks")(fam.load("table")(dirs, names)))
    fu_md, fu_figs = formuse_section(ev, out, metric, tasks, aoa_cfg, jobs)
    return md + fu_md, figs + fu_figs
