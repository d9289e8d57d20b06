"""`probes score` prints accuracy per phenomenon and warns, naming the benchmark, when the tokenizer
cannot read it (issue 29 item 4)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from probeutil import tiny_neox, word_tokenizer
from probes.__main__ import main
from probes.scoring.readout import coverage

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [  # BLiMP's schema; two phenomena
    {"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": uid, "linguistics_term": term,
     "pairID": str(i)}
    for i, (n, v, w, uid, term) in enumerate([
        ("cat", "runs", "run", "sv_agr", "agreement"), ("cats", "run", "runs", "sv_agr", "agreement"),
        ("dog", "sees", "see", "sv_agr2", "agreement"), ("cat", "sees", "see", "sv_other", "other")])
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("model")
    word_tokenizer().save_pretrained(d)
    tiny_neox().save_pretrained(d)
    return d


def _bench(tmp_path: Path, name: str, records) -> Path:
    f = tmp_path / f"{name}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f


def test_score_prints_accuracy_per_phenomenon(model_dir, tmp_path, capsys):
    out = tmp_path / "mini.parquet"
    assert main(["score", "--model", str(model_dir), "--benchmark", str(_bench(tmp_path, "mini", RECORDS)),
                 "--out", str(out), "--device", "cpu"]) == 0
    stdout, stderr = capsys.readouterr()
    df = pd.read_parquet(out)
    mlp = (df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad)
    lines = {line.split()[0]: line.split() for line in stdout.splitlines() if line.split()}
    for phenomenon, rows in df.groupby("phenomenon"):
        pairs, paradigms, acc_mlp = lines[phenomenon][1:4]
        assert (int(pairs), int(paradigms)) == (len(rows), rows["paradigm"].nunique())
        assert float(acc_mlp) == pytest.approx(mlp[rows.index].mean(), abs=5e-4)
    assert lines["agreement"][1:3] == ["3", "2"] and lines["(all)"][1:3] == ["4", "3"]
    assert "tokenizer coverage of mini: 0.0% unknown" in stdout and "warning" not in stderr


def test_score_warns_when_the_tokenizer_cannot_read_the_benchmark(model_dir, tmp_path, capsys):
    foreign = [dict(r, sentence_good="那个 人 跑 .", sentence_bad="人 那个 跑 .") for r in RECORDS]
    assert main(["score", "--model", str(model_dir), "--benchmark", str(_bench(tmp_path, "zh_like", foreign)),
                 "--out", str(tmp_path / "zh.parquet"), "--device", "cpu"]) == 0
    stderr = capsys.readouterr().err
    # 3 pairs (the two sv_agr ones are now duplicates) x 2 sentences x 4 words; 3 of 4 outside the vocabulary
    assert "warning: the tokenizer reads benchmark zh_like badly: of its 24 pieces, 75% unknown pieces" in stderr


def test_unseen_and_byte_pieces_are_counted():
    from probes.benchmarks.pairs import Pair

    tok = word_tokenizer()
    pairs = [Pair(benchmark="b", paradigm="p", phenomenon="x", pair_id="0", good="the cat runs .", bad="the dog runs .")]
    counts = [0] * len(tok)
    for word in ("the", "cat", "runs", "."):  # the run's corpus never had "dog"
        counts[tok.convert_tokens_to_ids(word)] = 5
    import numpy as np

    cov = coverage(tok, pairs, np.asarray(counts))
    assert cov["pieces"] == 8 and cov["unknown"] == 0 and cov["unseen"] == pytest.approx(1 / 8)
    assert cov["byte_fallback"] == 0
    # from the ids scoring read (start id first): the same counts, a repeated sentence counted twice
    from probes.scoring.primitive import pair_sentence_ids

    twice = pairs + pairs
    assert coverage(tok, twice, np.asarray(counts), pair_sentence_ids(tok, twice)) == {**cov, "pieces": 16.0}


def test_curve_labels_spell_out_mlp():
    """Plots said "accuracy (MLP)", which a linguist reads as a multilayer perceptron."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from probes.analysis.plotting import accuracy_label, token_axis

    assert "mean log-prob" in accuracy_label("acc_mlp") and "per token" in accuracy_label("acc_mlp")
    assert "summed" in accuracy_label("acc_sum")
    fig, ax = plt.subplots()
    token_axis(ax, np.array([1e3, 1e4]))  # the default label of every accuracy axis
    assert "mean log-prob" in ax.get_ylabel()
    plt.close(fig)
