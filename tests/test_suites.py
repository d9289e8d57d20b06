"""RuBLiMP, TurBLiMP and JBLiMP from the command line (issue 37): `probes score --benchmark NAME` prints the
per-phenomenon table with the authors' rule beside ours and writes the eval file that records it; a tokenizer
that cannot write the language is named by script before scoring; the authors' rules on hand-computed lps."""
from __future__ import annotations


import pandas as pd
import pytest

from probeutil import tiny_neox, word_tokenizer
from test_probes_cli import model_dir  # noqa: F401  (the saved tiny model directory, a fixture)
from probes.__main__ import main
from probes.scoring.primitive import correct, score_pairs
from probes.scoring.readout import unwritable_scripts
from probes.scoring.store import read_pairs
from probes.benchmarks.pairs import Pair



# name: (a phenomenon in the table, the authors' rule, the script the English word tokenizer cannot write)
SUITES = {
    "rublimp": ("Negation", "mlp", "Cyrillic"),
    "turblimp": ("suspended_affixation", "sum_after_first", "Latin with diacritics"),
    "jblimp": ("island effects", "sum", "Hiragana"),
}


@pytest.mark.parametrize("name", sorted(SUITES))
def test_score_a_named_suite(name, model_dir, tmp_path, capsys, shared):
    shared("benchmarks", name)
    phenomenon, rule, script = SUITES[name]
    out = tmp_path / f"{name}.parquet"
    assert main(["score", "--model", str(model_dir), "--benchmark", name, "--out", str(out),
                 "--max-pairs-per-paradigm", "1", "--device", "cpu"]) == 0
    got = capsys.readouterr()
    assert phenomenon in got.out and "(all)" in got.out
    assert f"the authors of {name} score by {rule}" in got.out
    if rule not in ("mlp", "sum"):  # a rule of its own gets its own column
        assert f"acc_{rule}" in got.out
    # the warning names the script the tokenizer cannot write (a word-level English tokenizer)
    assert f"warning: the tokenizer reads benchmark {name} badly" in got.err and script in got.err
    df, meta = read_pairs(out)
    assert meta["authors_convention"] == rule and meta["benchmark"] == name
    assert len(df) == df["paradigm"].nunique()  # one pair per paradigm


def test_a_suite_file_with_the_field_options(model_dir, tmp_path, capsys, shared):
    """Any similar suite scores from its file with the column options: a TurBLiMP base file given as a path."""
    f = shared("benchmarks", "turblimp", "data", "base", "augmented_binding.csv")
    out = tmp_path / "b.parquet"
    args = ["score", "--model", str(model_dir), "--benchmark", str(f), "--out", str(out),
            "--max-pairs-per-paradigm", "3", "--good-field", "good_sentence", "--bad-field", "bad_sentence",
            "--phenomenon-field", "phenomenon"]
    assert main(args) == 0
    df = pd.read_parquet(out)
    assert len(df) == 3 and set(df["phenomenon"]) == {"binding"}
    capsys.readouterr()
    assert main([*args, "--delimiter", ","]) == 2  # the wrong delimiter, named with the right one
    assert "set the delimiter to ';'" in capsys.readouterr().err


def test_authors_rules_on_hand_computed_lps():
    """sum_after_first leaves each sentence's first token out (minicons' default): here that turns the
    decision, while MLP and sum-LP keep theirs."""
    df = pd.DataFrame({"lp_good": [-5.0], "lp_bad": [-4.0], "ntok_good": [2], "ntok_bad": [4],
                       "lp_good_first": [-3.0], "lp_bad_first": [-1.0]})
    # MLP: -2.5 vs -1.0 -> wrong; sum: -5 vs -4 -> wrong; after the first token: -2 vs -3 -> right
    assert [bool(correct(df, r).iloc[0]) for r in ("mlp", "sum", "sum_after_first")] == [False, False, True]
    with pytest.raises(ValueError, match="score the checkpoint again"):
        correct(df.drop(columns=["lp_good_first", "lp_bad_first"]), "sum_after_first")


def test_first_token_lp_is_the_first_scored_token():
    """lp_{good,bad}_first is the lp of each sentence's first token, as the per-token columns have it."""
    pairs = [Pair("b", "p", "p", "0", "the cat runs .", "a cat run ."), Pair("b", "p", "p", "1", "dogs see .", "dogs sees .")]
    df = score_pairs(tiny_neox(), word_tokenizer(), pairs, per_token=True)
    for side in ("good", "bad"):
        assert df[f"lp_{side}_first"].tolist() == pytest.approx([float(lp[0]) for lp in df[f"lps_{side}"]], abs=1e-6)
    assert df["lp_good_first"][0] != df["lp_bad_first"][0]  # "the" and "a": another first token


def test_unwritable_characters_are_named_by_script():
    tok = word_tokenizer()  # knows "the cat ..." only
    got = unwritable_scripts(tok, ["the кошка runs .", "the ねこ sees ş ."])
    assert set(got["Cyrillic"]) == set("кошка")
    assert set(got["Hiragana"]) == set("ねこ") and got["Latin with diacritics"] == ["ş"]
    assert "Latin" not in got  # the English words it knows are not named
