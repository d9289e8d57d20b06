"""Form vs use over training: FAC²E's knowledge-versus-use view (Wang et al., "FAC²E: Better Understanding Large
Language Model Capabilities by Dissociating Language and Cognition", ../shared/papers/003_*.txt, §2).

FAC²E separates linguistic knowledge (grammaticality: agreement, licensing, long-distance dependencies, §2.1)
from the use of knowledge to solve a problem (its crystallized vs fluid steps, §2.2), and finds the two only
weakly correlated across models (§3.1). Over training the question becomes: are they acquired together, or
does one lag? The probes of a run fall into two groups:

* ``form``: every minimal-pair benchmark (knowledge of the grammar: grammar, BLiMP, ZhoBLiMP, ...), except
  the generated ELAGENT one below and the last-checkpoint-only ``<name>_all`` copies;
* ``use``: the generated reasoning tasks (ELAGENT's Language A word order ``elagent_word_order``, and the
  multiple-choice tasks precedence, bAbI, predicates), and fill-in-the-blank of the syntax questions
  (``FITB_acc``: the model has to produce the phrase, not only recognise it) where runs have them.

A probe's accuracy is the mean over its paradigms (minimal pairs: the report's metric, chance 0.5) or the
stored task accuracy with its random baseline (ELAGENT: 1/options; FITB: a random phrase of the sentence).
A group's curve is the mean over its probes at each checkpoint, its chance the mean of theirs. The age of
acquisition of each group's curve is the report's (``probes.analysis.aoa``: a sigmoid on log10 tokens, halfway
between chance and the best fitted accuracy), fitted per run with the group's chance, averaged over seeds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.analysis.aggregate import seed_summary
from probes.analysis.bands import MIN_SEEDS_T
from probes.analysis.aoa import AoAConfig, aoa_from_fit, fit_sigmoids
from probes.analysis.plotting import new_figure, plot_line, token_axis
from probes.analysis.evalset import ALL_SUFFIX, EvalSet, log_tokens
from probes.analysis.outputs import save_figure, write_csv
from probes.analysis.scaling import budget_label

USE_BENCHMARKS = ("elagent_word_order",)  # minimal-pair benchmarks that are generated tasks, not knowledge
COLORS = {"form": "tab:blue", "use": "tab:orange"}
PROBE_COLUMNS = ["run", "step", "tokens", "group", "probe", "acc", "chance"]


def probe_curves(ev: EvalSet, metric: str = "acc_mlp", elagent: Optional[pd.DataFrame] = None,
                 syntax_qa: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """One row per run x step x probe: group, accuracy and chance (module docstring)."""
    t = ev.table[~ev.table.benchmark.astype(str).str.endswith(ALL_SUFFIX)]
    mp = t.groupby(["run", "step", "benchmark"], sort=True).agg(tokens=("tokens", "first"), acc=(metric, "mean"))
    mp = mp.reset_index().rename(columns={"benchmark": "probe"})
    mp["group"] = np.where(mp.probe.isin(USE_BENCHMARKS), "use", "form")
    mp["chance"] = 0.5
    frames = [mp]
    if elagent is not None and len(elagent):
        from probes.elagent.score import TASKS

        e = elagent[elagent.key.isin(TASKS)]
        e = e.pivot_table(index=["run", "step", "tokens", "key"], columns="metric", values="value").reset_index()
        frames.append(pd.DataFrame({"run": e.run, "step": e.step, "tokens": e.tokens, "group": "use",
                                    "probe": "elagent:" + e.key, "acc": e.acc, "chance": e.acc_random}))
    if syntax_qa is not None and len(syntax_qa):
        q = syntax_qa[(syntax_qa.kp == "all") & syntax_qa.metric.isin(["FITB_acc", "FITB_acc_random"])]
        # each mode is a probe of its own: the likelihood and paper modes' numbers are never averaged
        mode = q["mode"] if "mode" in q else pd.Series("likelihood", index=q.index)
        q = q.assign(mode=mode).pivot_table(index=["run", "mode", "step", "tokens"], columns="metric",
                                            values="value").reset_index()
        if "FITB_acc" in q:  # absent where generation was skipped
            probe = np.where(q["mode"] == "likelihood", "syntax_qa:FITB_acc", "syntax_qa_" + q["mode"] + ":FITB_acc")
            frames.append(pd.DataFrame({"run": q.run, "step": q.step, "tokens": q.tokens, "group": "use",
                                        "probe": probe, "acc": q.FITB_acc,
                                        "chance": q.get("FITB_acc_random", np.nan)}))
    out = pd.concat(frames, ignore_index=True)[PROBE_COLUMNS]
    return out.sort_values(["run", "group", "probe", "step"], ignore_index=True)


def group_curves(probes: pd.DataFrame) -> pd.DataFrame:
    """Per run x step x group: acc and chance averaged over the group's probes, n_probes."""
    g = probes.groupby(["run", "step", "group"], sort=True)
    return g.agg(tokens=("tokens", "first"), acc=("acc", "mean"), chance=("chance", "mean"),
                 n_probes=("probe", "nunique")).reset_index()


def group_aoa(groups: pd.DataFrame, cfg: Optional[AoAConfig] = None) -> pd.DataFrame:
    """AoA of each run's form and use curve (probes.analysis.aoa's fit and rule, the group's own chance)."""
    cfg = cfg or AoAConfig()
    rows = []
    for (run, group), d in groups.groupby(["run", "group"], sort=True):
        d = d[d.tokens > 0].sort_values("tokens")  # the initialisation has no place on a log axis
        row = {"run": run, "group": group, "chance": float(d.chance.mean()) if len(d) else np.nan,
               "n_points": len(d), "final_acc": float(d.acc.iloc[-1]) if len(d) else np.nan,
               "aoa_log10_tokens": np.nan, "status": "too_few_checkpoints"}
        if len(d) >= cfg.min_points:
            x = log_tokens(d.tokens.to_numpy(dtype=float))
            fit = fit_sigmoids(x, d.acc.to_numpy(dtype=float)[None, :])
            aoa, _best, status = aoa_from_fit(x, fit, row["chance"], cfg.min_gain, cfg.min_rise_rmse)
            row["aoa_log10_tokens"], row["status"] = float(aoa[0]), str(status[0])
        rows.append(row)
    out = pd.DataFrame(rows)
    out["aoa_tokens"] = 10 ** out["aoa_log10_tokens"]
    return out


def _plot(seeds: pd.DataFrame, aoa: pd.DataFrame, path: Path) -> Path:
    """One panel per model x budget: form and use (seed mean, band over seeds), chance dashed, AoA dotted."""
    from probes.syntaxqa.curves import draw_baseline

    panels = list(seeds.groupby(["model", "budget"], dropna=False, sort=True))
    ncols = min(3, len(panels))
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = new_figure(5.0 * ncols + 2.4, 3.8 * nrows, nrows, ncols, sharey=True)
    ref = seeds["tokens"].to_numpy()
    for ax, ((model, budget), g) in zip(axes.flat, panels):
        for group, d in g.groupby("group", sort=True):
            d = d.sort_values("tokens")
            n = int(d.n_seeds.max())
            # a t-band from 2 seeds spans the axis (probes.analysis.bands): drawn from 3 seeds on
            band = (d.acc_lo.clip(0, 1).to_numpy(), d.acc_hi.clip(0, 1).to_numpy()) if n >= MIN_SEEDS_T else None
            plot_line(ax, d.tokens.to_numpy(), d.acc_mean.to_numpy(), ref, group, COLORS[group], band=band)
            draw_baseline(ax, d.tokens.to_numpy(), d.chance_mean.to_numpy(), ref, COLORS[group])
            a = aoa[(aoa.model == model) & (aoa.group == group)
                    & (aoa.budget.isna() if pd.isna(budget) else aoa.budget == budget)]
            if len(a) and np.isfinite(a.aoa_log10_tokens.iloc[0]):
                ax.axvline(10 ** a.aoa_log10_tokens.iloc[0], color=COLORS[group], ls=":", lw=1.4,
                           label=f"AoA {group}")
        token_axis(ax, ref, ylabel="accuracy", chance=False)
        ax.set_ylim(-0.02, 1.02)
        n = int(g.n_seeds.max())
        ax.set_title(f"{model} · {budget_label(budget)} ({n} seed{'s' if n > 1 else ''})", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("form (minimal pairs) vs use (generated tasks): dashed = chance of the group, "
                 "dotted = age of acquisition", fontsize=10)
    return save_figure(fig, path)


def formuse_section(ev: EvalSet, out: Path, metric: str = "acc_mlp", elagent: Optional[pd.DataFrame] = None,
                    syntax_qa: Optional[pd.DataFrame] = None, aoa_cfg: Optional[AoAConfig] = None,
                    ) -> tuple[list[str], list[tuple[str, Path]]]:
    """Markdown and figures of the form-vs-use view; writes tables/formuse_probes.csv (every probe's curve),
    tables/formuse.csv (group curves, seed means), tables/formuse_aoa.csv (per run) and figures/formuse.png.

    ``elagent`` / ``syntax_qa``: the tidy tables of probes.elagent.report / probes.syntaxqa.curves, with run
    names as in ``ev``."""
    out = Path(out)
    probes = probe_curves(ev, metric, elagent, syntax_qa)
    info = pd.DataFrame([(r.name, r.model, r.budget) for r in ev.runs], columns=["run", "model", "budget"])
    info["budget"] = info["budget"].astype("Int64")
    groups = group_curves(probes).merge(info, on="run", how="left")
    seeds = seed_summary(groups, ["model", "budget", "group", "step"], values=("acc", "chance"))
    aoa = group_aoa(groups, aoa_cfg).merge(info, on="run", how="left")
    aoa_seeds = aoa.groupby(["model", "budget", "group"], dropna=False).agg(
        n_runs=("run", "nunique"), aoa_log10_tokens=("aoa_log10_tokens", "mean"),
        acquired_runs=("aoa_log10_tokens", "count"), chance=("chance", "mean"),
        final_acc=("final_acc", "mean")).reset_index()
    write_csv(out / "tables" / "formuse_probes.csv", probes.merge(info, on="run", how="left"))
    write_csv(out / "tables" / "formuse.csv", seeds)
    write_csv(out / "tables" / "formuse_aoa.csv", aoa)
    members = probes.groupby(["group", "probe"]).agg(chance=("chance", "mean"), runs=("run", "nunique")).reset_index()
    md = ["## Form vs use (FAC²E's knowledge-versus-use view)", "",
          "FAC²E (Wang et al., §2) dissociates linguistic knowledge from using knowledge to solve a problem. Here "
          "**form** = the minimal-pair benchmarks (does the model know the grammar) and **use** = the generated "
          "tasks that need a rule applied to new material (ELAGENT: Language A word order after demonstrations, "
          "redefined precedence, deduction) and fill-in-the-blank syntax questions where present. Each group's "
          "curve is the mean of its probes' accuracies (a probe: mean over its paradigms), drawn with the mean of "
          "their chance levels (dashed) and its age of acquisition (dotted; `probes.analysis.aoa`'s sigmoid rule with the "
          "group's chance). A use curve that stays at chance while form rises, or an AoA gap, is the "
          "dissociation. Numbers: `tables/formuse*.csv`.", "",
          "Which probes feed which group:", "", "| group | probe | chance | runs |", "|---|---|---|---|"]
    md += [f"| {r.group} | `{r.probe}` | {r.chance:.3f} | {r.runs} |" for r in members.itertuples(index=False)]
    md += [""]
    if not (probes.group == "use").any() or not (probes.group == "form").any():
        missing = "use" if not (probes.group == "use").any() else "form"
        md += [f"_No {missing} probe in these runs (enable `probes.elagent`, add `elagent_word_order` to "
               "`probes.benchmarks`, or a minimal-pair benchmark): only one group is drawn._", ""]
    md += ["Age of acquisition per model × budget (mean over seeds that acquired it; `tables/formuse_aoa.csv` "
           "has each run's fit status):", "",
           "| model | budget | group | AoA (tokens) | acquired / runs | chance | final acc |", "|---|---|---|---|---|---|---|"]
    for r in aoa_seeds.itertuples(index=False):
        a = "" if pd.isna(r.aoa_log10_tokens) else f"{10 ** r.aoa_log10_tokens:,.0f}"
        md.append(f"| {r.model} | {budget_label(r.budget)} | {r.group} | {a} | {r.acquired_runs} / {r.n_runs} | "
                  f"{r.chance:.3f} | {r.final_acc:.3f} |")
    figs = [("Form vs use per model × budget", _plot(seeds, aoa, out / "figures" / "formuse.png"))]
    md += ["", f"![{figs[0][0]}]({figs[0][1].relative_to(out).as_posix()})", ""]
    return md, figs


def use_sections(ev: EvalSet, out: Path, metric: str = "acc_mlp", aoa_cfg: Optional[AoAConfig] = None,
                 ) -> tuple[list[str], list[tuple[str, Path]]]:
    """The report's ELAGENT section (where runs have its files) and the form-vs-use view, in that order."""
    from probes.elagent.report import elagent_section, elagent_table
    from probes.syntaxqa.curves import syntax_qa_table

    runs = [(r.name, Path(r.path), r.model, r.budget) for r in ev.runs]
    el_md, el_figs = elagent_section(runs, out)
    names, dirs = [r.name for r in ev.runs], [Path(r.path) for r in ev.runs]
    fu_md, fu_figs = formuse_section(ev, out, metric, elagent_table(dirs, names), syntax_qa_table(dirs, names),
                                     aoa_cfg)
    return el_md + fu_md, el_figs + fu_figs
