"""The report's syntax-questions section on two hand-made seeds: seed means, bands, table, figures."""
from __future__ import annotations

import pandas as pd
import pytest
from PIL import Image

from probeutil import word_tokenizer, write_items
from probes.syntaxqa.report import syntax_qa_section
from probes.syntaxqa.score import SyntaxQAConfig

T975_1 = 12.7062  # two-sided 95 % t quantile, 1 degree of freedom (two seeds)


def _items(scores: dict[str, tuple[float, float, float, float]]) -> pd.DataFrame:
    """One TF, one MC and one FITB item per knowledge point; scores[kp] = (TF, MC, FITB exact, FITB F1)."""
    rows = []
    for kp, (tf, mc, fa, ff) in scores.items():
        base = {"item_id": "", "kp": kp, "f1": float("nan"), "rand_f1": float("nan")}
        rows += [{**base, "item_id": f"{kp}-tf", "qtype": "TF", "correct": tf, "rand_acc": 0.5},
                 {**base, "item_id": f"{kp}-mc", "qtype": "MC", "correct": mc, "rand_acc": 0.25},
                 {**base, "item_id": f"{kp}-fitb", "qtype": "FITB", "correct": fa, "f1": ff,
                  "rand_acc": 0.2, "rand_f1": 0.4}]
    return pd.DataFrame(rows)


def _write(run, step: int, scores, tok) -> None:
    # the real writer: summary and metadata exactly as the in-loop hook stores them
    write_items(_items(scores), run / "evals" / f"step{step}" / "syntax_qa.parquet", step=step, tokens=step * 4096,
                model_dir=run, tokenizer=tok, cfg=SyntaxQAConfig(), reports=[])


@pytest.fixture
def runs(tmp_path):
    tok = word_tokenizer()
    zero = {"GS": (0, 0, 0, 0), "DO": (0, 0, 0, 0)}
    s1, s2, other = tmp_path / "s1", tmp_path / "s2", tmp_path / "no_qa"
    _write(s1, 0, zero, tok)
    _write(s1, 10, {"GS": (1, 1, 0, 0.5), "DO": (0, 1, 1, 1.0)}, tok)
    _write(s2, 0, zero, tok)
    _write(s2, 10, {"GS": (0, 0, 0, 0.0), "DO": (1, 0, 0, 0.5)}, tok)
    other.mkdir()  # a run probed without syntax questions: left out, not an error
    return [("s1", s1, "tiny", 10_000_000), ("s2", s2, "tiny", 10_000_000), ("no_qa", other, "tiny", None)]


def test_seed_means_bands_table_and_figures(runs, tmp_path):
    out = tmp_path / "report"
    md, figs = syntax_qa_section(runs, out)

    csv = pd.read_csv(out / "tables" / "syntax_qa.csv")
    assert set(csv.model) == {"tiny"} and (csv.n_seeds == 2).all()  # no_qa adds no group

    def at(kp, metric, step):
        r = csv[(csv.kp == kp) & (csv.metric == metric) & (csv.step == step)]
        assert len(r) == 1, (kp, metric, step)
        return r.iloc[0]

    # s1 step 10: TF .5, MC 1, FITB .5/.75 -> OA (.5 + 1 + .625)/3 = 17/24; s2: TF .5, MC 0, FITB 0/.25 -> 5/24
    oa = at("all", "OA", 10)
    assert oa["mean"] == pytest.approx(11 / 24) and oa.tokens == 40960
    assert oa["lo"] == pytest.approx(11 / 24 - T975_1 * 0.5 / 2, abs=1e-3)  # t * sd/sqrt(2), sd = .5/sqrt(2)
    assert oa["hi"] == pytest.approx(11 / 24 + T975_1 * 0.5 / 2, abs=1e-3)
    assert at("all", "MC_acc", 10)["mean"] == pytest.approx(0.5)
    assert at("all", "FITB_F1", 10)["mean"] == pytest.approx((0.75 + 0.25) / 2)
    assert at("GS", "OA", 10)["mean"] == pytest.approx((0.75 + 0.0) / 2)  # s1 GS: (1 + 1 + .25)/3
    assert at("all", "OA", 0)["mean"] == 0.0 and at("all", "OA", 0)["sd"] == 0.0
    # OA_random: (1/2 + 1/4 + (0.2 + 0.4)/2)/3 at every step; the types' own baselines beside it
    assert at("all", "OA_random", 10)["mean"] == pytest.approx(0.35)
    assert at("all", "MC_acc_random", 0)["mean"] == pytest.approx(0.25)
    assert at("DO", "FITB_F1_random", 10)["mean"] == pytest.approx(0.4)

    final = pd.read_csv(out / "tables" / "syntax_qa_final.csv")
    assert final.run.tolist() == ["s1", "s2"] and (final.step == 10).all()
    assert final.set_index("run").loc["s1", "OA"] == pytest.approx(17 / 24)

    assert md[0] == "## Syntax questions"
    text = "\n".join(md)
    assert "OA = (TF_acc + MC_acc + (FITB_acc + FITB_F1)/2)/3" in text
    assert "| s1 | tiny | 10M | likelihood | 10 | 40,960 | 0.708 | 0.350 | 0.500 | 1.000 | 0.500 | 0.750 |  |" in text
    assert len(figs) == 3
    for title, png in figs:
        assert png.parent == out / "figures" and f"]({png.relative_to(out).as_posix()})" in text
        with Image.open(png) as im:
            im.verify()
        with Image.open(png) as im:
            assert im.size[0] > 500 and im.size[1] > 300


def test_no_syntax_qa_files_adds_nothing(tmp_path):
    (tmp_path / "r").mkdir()
    assert syntax_qa_section([("r", tmp_path / "r", "tiny", None)], tmp_path / "out") == ([], [])
    assert not (tmp_path / "out").exists()
