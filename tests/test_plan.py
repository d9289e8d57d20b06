"""`python -m train.plan`: steps, tokens, checkpoints, GPU-hours and storage from the budget alone."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.plan import Hardware, main, plan

ROOT = Path(__file__).resolve().parents[1]


def test_a_slice_of_the_grid_is_planned_from_the_budget_without_the_corpus(monkeypatch):
    monkeypatch.setenv("SYNTAX_DYNAMICS_CORPUS", "/nonexistent/corpus")  # never read
    plans = plan(["experiment=zhoblimp_grid", "model=pythia-14m", "seed=0"], Hardware(mfu=0.5))
    assert [p.name for p in plans] == [f"pythia-14m-b{b}-s0" for b in (10**7, 10**8, 10**9, 3 * 10**9)]
    p = plans[0]
    # The paper's batch, "256 x 64 tokens": 256 sequences of 64 (+1 overlapping) tokens = 16,384 per step.
    # 10M tokens: 10^7 // 64 = 156,250 sequences (the view holds one more token, the last label) -> 610 steps.
    assert (p.global_batch, p.seq_len) == (256, 64)
    assert (p.steps, p.tokens) == (610, 610 * 16384) and p.tokens <= 10**7
    # Pythia-14m with the grid's tokenizer of chinese-llama's size, 49,953 pieces: 50,048 embedding rows (Pythia:
    # 50,304), untied head -- 2 x 256 x 128 parameters below Pythia's count
    assert p.params == 14_067_712 - 2 * (50304 - 50048) * 128 and p.tokenizer == "sentencepiece-unigram 49,953"
    assert p.gpu_hours == pytest.approx(6 * p.params * p.tokens / (989e12 * 0.5) / 3600)
    # Token-positioned checkpoints: points 10^(k/10), k = 50..94, rounded up to whole steps of 16,384
    # tokens, those within the run, plus step 0 and the last step.
    points = {math.ceil(round(10 ** (k / 10)) / 16384) for k in range(50, 95)}
    assert p.checkpoints == len({s for s in points if s <= 610} | {0, 610}) == 22
    # The paper's 3B run: 46 saved checkpoints (§4.2), probed at 47 with step 0 (§5.4: 47 x 5 x 3 = 705).
    assert [q.checkpoints for q in plans] == [22, 32, 42, 47]
    assert plans[-1].steps == 3 * 10**9 // 64 // 256 == 183_105
    # DeepSpeed: fp32 weights on every checkpoint, 14 B/param resume state on keep_resume=2 of them.
    assert p.storage_bytes == p.checkpoints * 4 * p.params + 2 * 14 * p.params
    assert [q.steps for q in plans] == sorted(q.steps for q in plans)


PYTHIA = {"pythia-14m": 14_067_712, "pythia-70m": 70_426_624, "pythia-160m": 162_322_944,
          "pythia-410m": 405_334_016, "pythia-1.4b": 1_414_647_808}  # Biderman et al. 2023, 50,304 rows


def test_the_grids_pythia_sizes_are_pythias_and_the_plan_says_with_which_tokenizer(capsys, monkeypatch):
    # By default the grid trains a tokenizer of chinese-llama's size (the paper's, 49,953 pieces); an
    # 8,000-piece one made "pythia-14m" 3.25M parameters
    monkeypatch.setenv("SYNTAX_DYNAMICS_CORPUS", "/nonexistent/corpus")  # never read
    plans = plan(["experiment=zhoblimp_grid", "seed=0", "budget=10M"], Hardware())
    assert len(plans) == 5
    for p in plans:
        size = p.name.split("-b")[0]
        assert abs(p.params - PYTHIA[size]) <= 0.02 * PYTHIA[size], (size, p.params)
    assert main(["experiment=zhoblimp_grid", "seed=0", "budget=10M"]) == 0
    out = capsys.readouterr().out
    for p in plans:  # the actual count and the tokenizer beside each size name
        assert f"{p.params:,} sentencepiece-unigram 49,953" in out


def test_pythias_token_count_ends_at_pythias_last_step(capsys):
    # Pythia: 143,000 steps x 1024 sequences x 2048 tokens = 299,892,736,000 tokens, checkpoints up to step143000
    # (154 of them). A budget counts tokens trained on; the view's extra label token must not cost a step
    # (it did: 142,999 steps, last checkpoint step142999).
    argv = ["model=pythia-14m", "optim=pythia", "schedule=pythia", "data.budget_tokens=299892736000"]
    (p,) = plan(argv, Hardware())
    assert (p.steps, p.tokens, p.checkpoints) == (143_000, 299_892_736_000, 154)
    assert main(argv) == 0 and "143,000" in capsys.readouterr().out


def test_the_cli_prints_the_runs_totals_and_assumptions(capsys):
    assert main(["experiment=zhoblimp_grid", "model=pythia-14m", "budget=10M", "--mfu", "0.4"]) == 0
    out = capsys.readouterr().out
    runs, memory = out.split("memory per GPU")
    assert runs.count("pythia-14m-b10000000-s") == 3 and "total: 3 runs" in runs
    assert memory.count("pythia-14m-b10000000-s") == 3  # one memory row per run
    assert "pythia-14m 40.0% (--mfu)" in out and "989 TFLOP/s" in out
    assert "checkpoints per run by budget (step 0 and the last step included): 10M: 22" in out
    assert main(["experiment=zhoblimp_grid", "model=pythia-14m", "seed=0"]) == 0
    assert "10M: 22, 100M: 32, 1B: 42, 3B: 47" in capsys.readouterr().out



def test_a_launch_command_line_with_m_plans_the_same_sweep(capsys):
    # `python -m train -m OVERRIDES` -> `python -m train.plan -m OVERRIDES`: the flag is taken, not an
    # argparse usage error, and the sweep (12 runs of the laptop grid, 2 of the comma axis) is planned
    for argv in (["-m", "experiment=zhoblimp_mini"], ["experiment=zhoblimp_mini", "--multirun"],
                 ["experiment=zhoblimp_mini"]):
        assert main(argv) == 0
        assert "total: 12 runs" in capsys.readouterr().out
    assert main(["-m", "experiment=zhoblimp_mini", "model=mini-0.41m,mini-1.6m", "seed=0", "budget=2M"]) == 0
    out = capsys.readouterr().out
    assert "total: 2 runs" in out and "mini-0.41m-b2000000-s0" in out and "mini-1.6m-b2000000-s0" in out


def test_an_unknown_budget_is_a_clear_error_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "train.plan", "experiment=zhoblimp_grid", "budget=7M"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown budget '7M'" in proc.stderr and "10M" in proc.stderr


def test_bf16_probe_weights_halve_the_planned_storage_and_the_files_on_disk(tmp_path):
    import torch
    from safetensors import safe_open
    from transformers import GPTNeoXForCausalLM

    from trainutil import tiny_cfg
    from train.checkpoint import list_checkpoints
    from train.loop import train

    args = ["experiment=zhoblimp_grid", "model=pythia-14m", "budget=10M", "seed=0"]
    (fp32,) = plan(args)
    (bf16,) = plan(args + ["schedule.weights_dtype=bf16"])
    n, c = bf16.params, bf16.checkpoints
    assert bf16.storage_bytes == (c - 2) * 2 * n + 2 * (4 + 14) * n
    assert fp32.storage_bytes - bf16.storage_bytes == (c - 2) * 2 * n

    run = tmp_path / "run"
    train(tiny_cfg(tmp_path / "cache", "probes=none", "schedule.weights_dtype=bf16"), run)
    ckpts = list_checkpoints(run)
    assert len(ckpts) >= 4
    for _step, path in ckpts:
        with safe_open(path / "model.safetensors", framework="pt") as f:
            dtype = f.get_tensor("gpt_neox.embed_in.weight").dtype
        resumable = (path / "resume").is_dir()
        assert dtype == (torch.float32 if resumable else torch.bfloat16), path
        assert not [p.name for p in path.iterdir() if p.name.startswith(".")]
    model = GPTNeoXForCausalLM.from_pretrained(ckpts[0][1])
    assert model.config.dtype == torch.bfloat16 or str(model.config.dtype) == "bfloat16"


TINY_FILES = ["model=tiny", "data=files", "tokenizer.vocab_size=400", "tokenizer.hard_vocab_limit=false",
              "data.seq_len=16", "optim.global_batch=2", "optim.micro_batch=2", "probes=none"]


def test_the_plan_counts_the_corpus_as_the_run_does_and_marks_the_runs_it_cannot_start(tmp_path):
    from train.batch import stream_of
    from train.grid import compose_run, hydra_context
    from train.plan import BYTES_PER_TOKEN
    from train.token_store import TokenStore
    from train.tokenizer import load_tokenizer

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "\n\n".join(f"the cat {i} sat on the mat and the dog {i % 7} ran." for i in range(60))
    (corpus / "a.txt").write_text(text)
    args = TINY_FILES + [f"data.paths=[{corpus}]", f"data.cache_dir={tmp_path / 'cache'}"]
    # No token store yet: an estimate from the bytes, said to be one
    (p,) = plan(args + ["data.budget_tokens=100000"])
    est = len(text.encode()) / BYTES_PER_TOKEN  # less the held-out split: 5 % of a corpus this small
    assert p.corpus.estimate and p.corpus.tokens == round(est - min(p.cfg.data.heldout_tokens, 0.05 * est))
    assert "an estimate" in p.corpus.how and p.cannot_start.startswith("budget 100k needs a corpus of 100k tokens")
    # --count-tokens: the tokenizer and token store are built as a run builds them; the count is the stream's
    (p,) = plan(args + ["data.budget_tokens=64"], count_tokens=True)
    assert not p.corpus.estimate and p.corpus.how.startswith("counted")
    (store_dir,) = (tmp_path / "cache" / "stores").iterdir()
    with hydra_context():
        cfg, _ = compose_run(args + ["data.budget_tokens=64"])
    tok_dir = next((tmp_path / "cache" / "tokenizers").iterdir())
    stream = stream_of(cfg, TokenStore(store_dir), load_tokenizer(tok_dir))
    n = stream.stream_tokens
    assert p.corpus.tokens == n and not p.cannot_start
    # the run's own check at start and the plan agree on both sides of the corpus's size
    for budget, starts in ((n, True), (n + 1, False)):
        (p,) = plan(args + [f"data.budget_tokens={budget}"])  # the cached store, not an estimate
        assert (p.cannot_start == "", p.corpus.estimate) == (starts, False), budget
        with hydra_context():
            cfg, _ = compose_run(args + [f"data.budget_tokens={budget}"])
        if starts:
            stream_of(cfg, TokenStore(store_dir), load_tokenizer(tok_dir))
        else:
            with pytest.raises(ValueError, match="the corpus has only"):
                stream_of(cfg, TokenStore(store_dir), load_tokenizer(tok_dir))


@pytest.mark.skipif(not (ROOT.parent / "shared" / "corpora" / "zh").is_dir(), reason="the shipped corpus")
def test_on_the_shipped_corpus_every_grid_budget_cannot_start(capsys, monkeypatch):
    monkeypatch.delenv("SYNTAX_DYNAMICS_CORPUS", raising=False)
    monkeypatch.chdir(ROOT)
    assert main(["experiment=zhoblimp_grid", "model=pythia-14m", "seed=0"]) == 0
    out = capsys.readouterr().out
    assert out.count("  CANNOT START\n") == 4
    for budget in ("10M", "100M", "1B", "3B"):
        assert f"CANNOT START (1 of 4 runs, marked above): budget {budget} needs a corpus of {budget} tokens, it has " in out


def test_a_cpu_sized_plan_says_its_cpu_seconds(capsys):
    """Issue 44: `train plan experiment=zhoblimp_mini` printed 0.00 GPU-h and nothing a laptop's user could use."""
    assert main(["experiment=zhoblimp_mini", "model=mini-1.6m", "budget=2M", "seed=0"]) == 0
    # 6 x 1,602,624 params x 1,998,848 tokens at 86,448 GFLOP / 2,159 CPU-s (the laptop grid) = 480.0 CPU-s
    assert ("cpu: 480 CPU-s (0.13 CPU-h; the longest run 480) for the 1 runs under 20M parameters, at 40.0 GFLOP "
            "of 6*N*D per CPU-second") in capsys.readouterr().out
    assert main(["experiment=zhoblimp_grid", "model=pythia-160m", "budget=10M", "seed=0"]) == 0
    assert "cpu:" not in capsys.readouterr().out  # a GPU's run: its GPU-hours say it


def test_off_a_terminal_no_progress_bar_fills_the_log(tmp_path):
    """Issue 44: logs were walls of carriage-return progress bars (datasets' map, the token store's writing)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text("".join(f"the dog {i} runs .\n\n" for i in range(300)))
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}  # conftest sets it for the tests
    proc = subprocess.run([sys.executable, "-m", "train", "plan", "experiment=demo", "data=files",
                           f"data.paths=[{corpus}]", "tokenizer.vocab_size=400", "data.budget_tokens=4000",
                           f"data.cache_dir={tmp_path / 'c'}", "--count-tokens"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0 and "building the token store" in proc.stdout, proc.stderr[-2000:]
    assert "\r" not in proc.stdout + proc.stderr and "%|" not in proc.stderr, proc.stderr[-2000:]
