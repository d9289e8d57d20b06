"""The report's figure cache (probes/analysis/figcache.py): a figure is reused only when its inputs and the
plotting code are unchanged, and a reused figure is the very PNG a fresh drawing makes."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probes.analysis import figcache, outputs, report
from probes.analysis.figcache import CACHE_DIR, FigureCache, figure_key, png_intact, tree_hash
from probes.analysis.outputs import FigureJobs
from probes.analysis.scaling import plot_grid_overall


def scaling_rows(acc=0.7) -> pd.DataFrame:
    """What the report hands plot_grid_overall: one benchmark, 2 models x 2 budgets."""
    return pd.DataFrame({"benchmark": "zh", "model": ["pythia-14m", "pythia-14m", "pythia-70m", "pythia-70m"],
                         "model_params": [14e6, 14e6, 70e6, 70e6], "budget": pd.array([10**7, 10**8] * 2, "Int64"),
                         "acc_mlp": [acc, 0.75, 0.8, 0.9]})


def draw(out: Path, rows: pd.DataFrame, cache: bool = True, workers: int = 1) -> tuple[Path, FigureCache | None]:
    c = FigureCache(out) if cache else None
    with FigureJobs(workers, c) as jobs:
        jobs.submit("scaling", plot_grid_overall, rows, "zh", "acc_mlp", out / "figures" / "scaling.png")
        [(_, path)] = jobs.results()
    return path, c


def no_drawing(monkeypatch) -> None:
    """From here on, any figure drawn fails the test: a hit must not draw."""
    def refuse(*a, **k):
        raise AssertionError("a figure was drawn")
    monkeypatch.setattr(outputs, "save_figure", refuse)


def test_unchanged_input_reuses_the_same_png(tmp_path, monkeypatch):
    fresh, _ = draw(tmp_path / "fresh", scaling_rows(), cache=False)
    first, c1 = draw(tmp_path / "rep", scaling_rows())
    assert (c1.hits, c1.misses) == (0, 1)
    assert first.read_bytes() == fresh.read_bytes()
    [entry] = (tmp_path / "rep" / CACHE_DIR).iterdir()
    assert entry.read_bytes() == fresh.read_bytes()
    first.unlink()
    no_drawing(monkeypatch)
    again, c2 = draw(tmp_path / "rep", scaling_rows())
    assert (c2.hits, c2.misses) == (1, 0)
    assert again.read_bytes() == fresh.read_bytes()  # byte for byte what a fresh drawing gives


def test_forked_worker_fills_the_cache(tmp_path):
    fresh, _ = draw(tmp_path / "fresh", scaling_rows(), cache=False)
    path, c = draw(tmp_path / "rep", scaling_rows(), workers=2)
    [entry] = (tmp_path / "rep" / CACHE_DIR).iterdir()
    assert path.read_bytes() == entry.read_bytes() == fresh.read_bytes()


def test_one_changed_number_redraws(tmp_path):
    first, _ = draw(tmp_path / "rep", scaling_rows(0.7))
    old = first.read_bytes()
    second, c = draw(tmp_path / "rep", scaling_rows(0.6))  # one cell of the heatmap: 70 -> 60
    assert (c.hits, c.misses) == (0, 1)
    assert second.read_bytes() != old
    assert len(list((tmp_path / "rep" / CACHE_DIR).iterdir())) == 1  # the stale entry pruned


def test_changed_plotting_code_redraws(tmp_path, monkeypatch):
    draw(tmp_path / "rep", scaling_rows())
    monkeypatch.setattr(figcache, "source_version", lambda: "plotting code edited")
    _, c = draw(tmp_path / "rep", scaling_rows())
    assert (c.hits, c.misses) == (0, 1)


def test_source_hash_follows_every_module(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    h = tree_hash(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")
    assert tree_hash(tmp_path) != h


@pytest.mark.parametrize("damage", ["absent", "torn", "flipped"])
def test_damaged_entry_is_a_miss(tmp_path, damage):
    first, _ = draw(tmp_path / "rep", scaling_rows())
    good = first.read_bytes()
    [entry] = (tmp_path / "rep" / CACHE_DIR).iterdir()
    if damage == "absent":
        entry.unlink()
    elif damage == "torn":
        entry.write_bytes(good[: len(good) // 2])
    else:  # one byte inside the image data: the chunk's CRC no longer matches
        b = bytearray(good)
        b[len(b) // 2] ^= 0xFF
        entry.write_bytes(bytes(b))
    assert damage == "absent" or not png_intact(entry.read_bytes())
    again, c = draw(tmp_path / "rep", scaling_rows())
    assert (c.hits, c.misses) == (0, 1)
    assert again.read_bytes() == good and entry.read_bytes() == good


def test_key_covers_every_argument(tmp_path):
    rows = scaling_rows()
    out = tmp_path / "rep"
    k = figure_key(plot_grid_overall, (rows, "zh", "acc_mlp", out / "a.png"), out)
    assert k == figure_key(plot_grid_overall, (scaling_rows(), "zh", "acc_mlp", out / "a.png"), out)
    # the same figure in another report directory (the staged build and the final one) has the same key
    assert k == figure_key(plot_grid_overall, (rows, "zh", "acc_mlp", tmp_path / "other" / "a.png"), tmp_path / "other")
    changed = [
        (rows.assign(acc_mlp=rows.acc_mlp + [0, 0, 0, 1e-12]), "zh", "acc_mlp", out / "a.png"),
        (rows.rename(columns={"acc_mlp": "acc_sum"}), "zh", "acc_mlp", out / "a.png"),
        (rows.assign(budget=rows.budget.astype("float64")), "zh", "acc_mlp", out / "a.png"),
        (rows.assign(budget=pd.array([10**7, None] * 2, "Int64")), "zh", "acc_mlp", out / "a.png"),
        (rows.assign(model=["pythia-14m", "pythia-14m", "pythia-70m", "pythia-71m"]), "zh", "acc_mlp", out / "a.png"),
        (rows.iloc[::-1], "zh", "acc_mlp", out / "a.png"),
        (rows, "zh2", "acc_mlp", out / "a.png"),
        (rows, "zh", "acc_sum", out / "a.png"),
        (rows, "zh", "acc_mlp", out / "b.png"),
    ]
    keys = {figure_key(plot_grid_overall, a, out) for a in changed}
    assert len(keys) == len(changed) and k not in keys
    # 1 and "1" print alike; in an object column they are different values
    a = pd.DataFrame({"x": pd.Series([1, "a"], dtype=object)})
    b = pd.DataFrame({"x": pd.Series(["1", "a"], dtype=object)})
    assert figure_key(plot_grid_overall, (a,), out) != figure_key(plot_grid_overall, (b,), out)
    assert figure_key(plot_grid_overall, (np.arange(3),), out) != figure_key(plot_grid_overall, (np.arange(3.0),), out)
    assert figure_key(plot_grid_overall, (1.0,), out) != figure_key(plot_grid_overall, (1.0 + 1e-15,), out)


def test_uncacheable_arguments(tmp_path):
    """A path outside the report may be read by the figure function: its contents are not in the key."""
    out = tmp_path / "rep"
    assert figure_key(plot_grid_overall, (tmp_path / "slots.json", out / "a.png"), out) is None
    assert figure_key(plot_grid_overall, (lambda: 1, out / "a.png"), out) is None


def test_report_reuses_its_figures(tmp_path, capsys):
    """`probes report` twice on the same runs: every figure from the cache the second time, the same bytes,
    the same report.md; the cache holds exactly this report's figures; --no-figure-cache draws all."""
    from test_report import make_grid

    runs = list(map(str, make_grid(tmp_path / "runs", seeds=(1,), n_steps=8, pairs=50)))
    out = tmp_path / "rep"
    args = [*runs, "--out", str(out), "--n-boot", "20", "--case-study", "none"]
    assert report.main(args) == 0
    assert "0 figure(s) reused" in capsys.readouterr().out
    pngs = {p.relative_to(out): p.read_bytes() for p in out.glob("[fa]*/*.png")}
    md = (out / "report.md").read_text()
    n = len(re.findall(r"\.png\)", md))
    assert n >= 4 and len(list((out / CACHE_DIR).iterdir())) == len(pngs)
    (out / CACHE_DIR / f"{'0' * 64}.png").write_bytes(next(iter(pngs.values())))  # stale: no figure has this key
    assert report.main(args) == 0
    assert f"{len(pngs)} figure(s) reused" in capsys.readouterr().out
    assert {p.relative_to(out): p.read_bytes() for p in out.glob("[fa]*/*.png")} == pngs
    assert (out / "report.md").read_text() == md
    assert sorted(p.read_bytes() for p in (out / CACHE_DIR).iterdir()) == sorted(pngs.values())
    assert report.main([*args, "--no-figure-cache"]) == 0
    assert "reused" not in capsys.readouterr().out
    assert not (out / CACHE_DIR).exists()
    assert {p.relative_to(out): p.read_bytes() for p in out.glob("[fa]*/*.png")} == pngs


def _square(x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_compute_jobs_give_their_value_or_their_error(workers):
    # FigureJobs.compute: a computation in a worker (or here, without one), its value or its error
    with FigureJobs(workers) as jobs:
        good, bad = jobs.compute(_square, 7), jobs.compute(_square, -1)
        assert good.result() == 49
        with pytest.raises(ValueError, match="negative: -1"):
            bad.result()
