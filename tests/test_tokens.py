"""Per-token sidecars (probes/scoring/tokens.py) on real tiny checkpoints: sums, resume, readers, CLI."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from probeutil import tiny_neox, word_tokenizer
from probes.__main__ import main
from probes.scoring.store import eval_path, read_pairs, write_pairs
from probes.scoring.tokens import pair_tokens, read_tokens, tokens_path
from test_watch import RECORDS, save_checkpoint

STEPS = (0, 1, 3)


@pytest.fixture()
def run(tmp_path):
    torch.set_num_threads(1)
    f = tmp_path / "mini.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    run = tmp_path / "run"
    for step in STEPS:
        save_checkpoint(run, step)
    return run, f


def _by_pair(rows: list[dict]) -> dict[str, dict]:
    return {r["pair_id"]: r for r in rows}


def hand_lps(step: int, ids: list[int]) -> np.ndarray:
    """log p of ids[1:], one full log_softmax per position of the unbatched sequence (float64)."""
    model = tiny_neox(seed=step).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    return np.array([logp[j, ids[j + 1]].item() for j in range(len(ids) - 1)])


def test_sidecar_sums_are_the_eval_lp(run):
    run, f = run
    assert main(["score-run", str(run), "--benchmark", str(f), "--per-token"]) == 0
    from transformers import AutoTokenizer

    from probes.scoring.primitive import start_id

    tok = AutoTokenizer.from_pretrained(run / "checkpoints" / "step0")
    start = start_id(tok)  # the start token is probes.scoring.primitive's business; scored tokens are the text's
    for step in STEPS:
        df, meta = read_pairs(eval_path(run, step, "mini"))
        assert not any(c.startswith(("ids_", "pieces_", "lps_")) for c in df.columns)  # eval file stays lean
        rows, side_meta = read_tokens(tokens_path(eval_path(run, step, "mini")))
        assert (side_meta["step"], side_meta["tokenizer"]) == (step, meta["tokenizer"])
        assert pq.read_schema(tokens_path(eval_path(run, step, "mini"))).field("lps_good").type.value_type == "float"
        rows = _by_pair(rows)
        assert sorted(rows) == sorted(df["pair_id"])
        for r in df.itertuples():
            t = rows[r.pair_id]
            assert t["paradigm"] == r.paradigm
            for side in ("good", "bad"):
                ids = tok(getattr(r, side), add_special_tokens=False)["input_ids"]
                assert t[f"ids_{side}"] == ids
                assert t[f"pieces_{side}"] == getattr(r, side).split()  # word-level pieces
                lps = np.asarray(t[f"lps_{side}"], dtype=np.float64)
                # the float32 values the model produced: their sum is the eval file's lp, exactly
                assert float(lps.sum()) == getattr(r, f"lp_{side}")
                assert len(lps) == getattr(r, f"ntok_{side}")
                np.testing.assert_allclose(lps, hand_lps(step, [start, *ids]), atol=2e-5)


def test_rerun_adds_missing_sidecars_and_rescoring_drops_stale_ones(run, capsys):
    run, f = run
    assert main(["score-run", str(run), "--benchmark", str(f)]) == 0
    ev = eval_path(run, 1, "mini")
    assert ev.is_file() and not tokens_path(ev).exists()
    before = ev.stat().st_mtime_ns
    # asked for per-token now: the evals exist, but their sidecars do not -- that is work
    assert main(["score-run", str(run), "--benchmark", str(f), "--per-token"]) == 0
    assert all(tokens_path(eval_path(run, s, "mini")).is_file() for s in STEPS)
    assert ev.stat().st_mtime_ns != before
    capsys.readouterr()
    assert main(["score-run", str(run), "--benchmark", str(f), "--per-token"]) == 0
    assert "0 eval files written" in capsys.readouterr().out  # nothing left to do
    # an eval file rescored without per-token must not keep a sidecar of the old scores
    ev.unlink()
    assert main(["score-run", str(run), "--benchmark", str(f)]) == 0
    assert ev.is_file() and not tokens_path(ev).exists()


def test_analysis_reads_a_run_with_sidecars(run):
    from probes.analysis.evalset import load_runs

    run, f = run
    assert main(["score-run", str(run), "--benchmark", str(f), "--per-token"]) == 0
    es = load_runs([run], workers=1, cache=False)
    assert sorted(es.table["benchmark"].unique()) == ["mini"]  # the sidecar is no benchmark
    assert sorted(es.table["step"].unique()) == list(STEPS)


def test_tokens_cli_table_figure_and_errors(run, tmp_path, capsys):
    run, f = run
    assert main(["score-run", str(run), "--benchmark", str(f), "--per-token"]) == 0
    capsys.readouterr()
    fig = tmp_path / "fig.png"
    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "1", "--out", str(fig)]) == 0
    out = capsys.readouterr().out
    assert "mini sv/1 good" in out and "mini sv/1 bad" in out
    assert "0:the" in out and "1:cats" in out and "2:run" in out  # good: "the cats run ."
    df, _ = read_pairs(eval_path(run, 3, "mini"))
    lp = df.set_index("pair_id").loc["1", "lp_good"]
    assert f"{-lp:.3f}" in out  # the total column is the sentence's surprisal
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(fig).shape[1] > 600

    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "99"]) == 2
    assert "no such pair" in capsys.readouterr().err
    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "1", "--benchmark", "blimp"]) == 2
    assert "--benchmark blimp: no per-token files" in capsys.readouterr().err

    # a write killed between sidecar and eval file: that checkpoint is left out, not an error
    eval_path(run, 0, "mini").unlink()
    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "1"]) == 0
    assert [p["step"] for p in pair_tokens(run, "mini", "sv", "1")] == [1, 3]

    # the eval file replaced behind the sidecar's back: refused, both files named
    path = eval_path(run, 3, "mini")
    df, meta = read_pairs(path)
    df.loc[df["pair_id"] == "1", "lp_good"] -= 0.5
    write_pairs(df, path, meta)
    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "1"]) == 2
    err = capsys.readouterr().err
    assert "stale sidecar" in err and str(tokens_path(path)) in err and str(path) in err


def test_tokens_cli_without_sidecars(run, capsys):
    run, f = run
    assert main(["score-run", str(run), "--benchmark", str(f)]) == 0
    assert main(["tokens", str(run), "--paradigm", "sv", "--pair", "1"]) == 2
    assert "no per-token files" in capsys.readouterr().err


def test_score_and_hook_write_sidecars(run, tmp_path):
    from probes.scoring.hook import ProbeHook, ProbesConfig
    from probes.benchmarks.pairs import Pair

    run, f = run
    out = tmp_path / "one.parquet"
    assert main(["score", "--model", str(run / "checkpoints" / "step1"), "--benchmark", str(f),
                 "--out", str(out), "--per-token"]) == 0
    rows = _by_pair(read_tokens(tmp_path / "one.tokens.parquet")[0])
    df, _ = read_pairs(out)
    assert [float(np.sum(np.asarray(rows[p]["lps_bad"], np.float64))) for p in df["pair_id"]] == df["lp_bad"].tolist()

    tok = word_tokenizer()
    pairs = {"agr": [Pair("agr", "sv", "agreement", "0", "the cat runs .", "the cat run ."),
                     Pair("agr", "sv", "agreement", "1", "the dogs see .", "the dogs sees .")]}
    hook_run = tmp_path / "hooked"
    hook = ProbeHook(ProbesConfig(batch_size=2, per_token=True), tok, hook_run, pairs=pairs)
    hook.post_checkpoint_saved(hook_run / "checkpoints" / "step2", 2, 512, tiny_neox(seed=2))
    path = eval_path(hook_run, 2, "agr")
    df, _ = read_pairs(path)
    rows = _by_pair(read_tokens(tokens_path(path))[0])
    assert [float(np.sum(np.asarray(rows[p]["lps_good"], np.float64))) for p in df["pair_id"]] == df["lp_good"].tolist()
    assert not hook.missing(2)
    tokens_path(path).unlink()
    assert hook.missing(2)  # per_token: a lost sidecar is probed again


def test_cjk_pieces_are_never_drawn_as_empty_boxes():
    from probes.scoring.tokens import _labeller

    assert _labeller(["the", "▁cat"])[0] is None
    family, label = _labeller(["▁那个", "人"])
    # a CJK font where one is installed, else code points (matplotlib's DejaVu Sans has no CJK glyphs)
    assert family is not None or label("▁那个") == "▁U+90A3U+4E2A"
