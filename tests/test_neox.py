"""gpt-neox interop: the exported YAML read back means our run; our model through gpt-neox's checkpoint
layout and back gives the same logits; score-run/watch on a gpt-neox save directory."""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import AutoTokenizer, GPTNeoXForCausalLM

from train.errors import ConfigError, InputFileError
from train.grid import compose_run, hydra_context
from train.model import build_model
from train.neox import compare_config, main as neox_main, neox_config, render_yaml
from train.neox_read import model_fields, normalize_keys, save_steps
from train.neox_ckpt import _BLOCK, _MLP, ENGINE_FILE, LAYER_FILE, import_step, sync_run
from train.optim import lr_at
from train.schedule import checkpoint_steps
from train.weights import load_causal_lm
from trainutil import TINY

# 10 steps: (2561 - 1) // 32 = 80 sequences of 32 (+1) tokens, 8 per step
BUDGET = "data.budget_tokens=2561"
WORDS = "the a cat cats dog dogs runs run sees see .".split()
SPECIALS = ["[UNK]", "<|endoftext|>", "<|padding|>"]


def compose(*extra: str):
    with hydra_context():
        cfg, _ = compose_run([*TINY, BUDGET, *extra])
    return cfg


def from_neox(neox: dict) -> dict:
    """What a gpt-neox config trains, in our terms (the inverse of train.neox.neox_config, for what it expresses):
    {"model": {ModelConfig fields}, "optim": {...}, "seq_len", "total_steps", "world_size",
    "save_steps": the iterations gpt-neox checkpoints}. Keys may be spelt with - or _ (gpt-neox accepts
    both); gpt-neox's own defaults apply to missing keys. Raises InputFileError naming a key our
    GPTNeoX model cannot express."""
    c = normalize_keys(neox)
    model = model_fields(c)
    opt = c.get("optimizer") or {}
    params = opt.get("params") or {}
    lr = params.get("lr", c.get("lr"))
    total = c.get("train_iters")
    decay_iters = c.get("lr_decay_iters") or total
    micro, accum = c.get("train_micro_batch_size_per_gpu"), c.get("gradient_accumulation_steps", 1)
    batch = c.get("train_batch_size")
    world = batch // (micro * accum) if batch and micro else None
    optim = {"lr": lr, "betas": list(params.get("betas", [0.9, 0.999])), "eps": params.get("eps", 1e-8),
             "weight_decay": c.get("weight_decay", 0.1), "grad_clip": c.get("gradient_clipping", 1.0),
             "min_lr_ratio": (c.get("min_lr", 0.0) / lr) if lr else None,
             "decay": c.get("lr_decay_style", "linear"), "global_batch": batch,
             "warmup_steps": c.get("warmup", 0.01) * decay_iters if decay_iters else None}
    return {"model": model, "optim": optim, "seq_len": c.get("seq_length"), "total_steps": total,
            "world_size": world, "save_steps": save_steps(c)}


def test_export_reads_back_as_our_run():
    cfg = compose("schedule=pythia", "schedule.every=4", "optim.global_batch=8", "optim.micro_batch=4",
                  "optim.warmup_steps=3")
    exp = neox_config(cfg, world_size=2)
    c = yaml.safe_load(render_yaml(exp, ["x"]))
    # hand-computed: 10 iterations of 8 x 32; 2 GPUs x micro 4 x 1 accumulation step
    assert (c["train_iters"], c["seq_length"], c["train_batch_size"]) == (10, 32, 8)
    assert (c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"]) == (4, 1)
    # Pythia's schedule as Pythia's configs spell it: a factor and the early powers of two
    assert (c["checkpoint_factor"], c["extra_save_iters"]) == (4, [0, 1, 2])
    assert save_steps(c) == [0, 1, 2, 4, 8, 10] == checkpoint_steps(cfg.schedule, 10, 8 * 32)
    back = from_neox(c)
    for key, value in back["model"].items():
        if key not in ("name", "vocab_size"):
            assert getattr(cfg.model, key) == value, key
    assert back["model"]["init_method"] == "pythia" and c["output_layer_init_method"] == "wang_init"
    o = back["optim"]
    assert (o["lr"], o["betas"], o["eps"], o["weight_decay"], o["grad_clip"], o["decay"], o["global_batch"]) == \
        (cfg.optim.lr, cfg.optim.betas, cfg.optim.eps, cfg.optim.weight_decay, cfg.optim.grad_clip, "cosine", 8)
    assert o["min_lr_ratio"] == pytest.approx(cfg.optim.min_lr_ratio)
    assert o["warmup_steps"] == pytest.approx(3)
    assert (back["total_steps"], back["seq_len"], back["world_size"]) == (10, 32, 2)
    # gpt-neox's AnnealingLR (megatron/learning_rates.py) by hand from the YAML's numbers: our schedule
    # at update 0 and from the end of warmup on; one update behind in between, as the header says
    warm, total, lr, low = c["warmup"] * c["lr_decay_iters"], c["lr_decay_iters"], c["optimizer"]["params"]["lr"], \
        c["min_lr"]
    for s in range(10):
        if s <= warm:
            neox = lr * max(1, s) / warm
        else:
            neox = low + (lr - low) / 2 * (math.cos(math.pi * (s - warm) / (total - warm)) + 1)
        ours = lr_at(cfg.optim, s, 10)
        if s in (1, 2):
            assert neox == pytest.approx(lr * s / 3) and ours == pytest.approx(lr * (s + 1) / 3)
        else:
            assert neox == pytest.approx(ours, rel=1e-12), s
    assert any("updates 1..2 use lr*s/3, ours lr*(s+1)/3" in d for d in exp.differences)


# EleutherAI/gpt-neox configs/pythia/70M.yml (published; hyphens as underscores): what our Pythia-70M
# recipe must export to, key for key
PYTHIA_70M = {"pipe_parallel_size": 1, "model_parallel_size": 1, "num_layers": 6, "hidden_size": 512,
              "num_attention_heads": 8, "seq_length": 2048, "max_position_embeddings": 2048, "pos_emb": "rotary",
              "rotary_pct": 0.25, "no_weight_tying": True, "gpt_j_residual": True, "init_method": "small_init",
              "output_layer_init_method": "wang_init",
              "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1.0e-8}},
              "min_lr": 0.0001, "gradient_clipping": 1.0, "weight_decay": 0.1, "hidden_dropout": 0,
              "attention_dropout": 0, "train_iters": 143000, "lr_decay_iters": 143000, "lr_decay_style": "cosine",
              "warmup": 0.01, "checkpoint_factor": 1000, "extra_save_iters": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
              "tokenizer_type": "HFTokenizer"}


# The whole of EleutherAI/gpt-neox configs/pythia/70M.yml, as published (its own spelling)
PYTHIA_70M_YML = {
    "pipe-parallel-size": 1, "model-parallel-size": 1, "num-layers": 6, "hidden-size": 512, "num-attention-heads": 8,
    "seq-length": 2048, "max-position-embeddings": 2048, "pos-emb": "rotary", "rotary-pct": 0.25,
    "no-weight-tying": True, "gpt-j-residual": True, "output-layer-parallelism": "column",
    "attention-config": [[["flash"], 6]], "scaled-upper-triang-masked-softmax-fusion": True, "bias-gelu-fusion": True,
    "init_method": "small_init", "output_layer_init_method": "wang_init",
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1.0e-8}}, "min_lr": 0.0001,
    "zero_optimization": {"stage": 1, "allgather_partitions": True, "allgather_bucket_size": 500000000,
                          "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": 500000000,
                          "contiguous_gradients": True, "cpu_offload": False},
    "train_micro_batch_size_per_gpu": 32, "gas": 1, "data-impl": "mmap", "num_workers": 1,
    "checkpoint-activations": True, "checkpoint-num-layers": 1, "partition-activations": True,
    "synchronize-each-layer": True, "gradient_clipping": 1.0, "weight-decay": 0.1, "hidden-dropout": 0,
    "attention-dropout": 0,
    "fp16": {"fp16": True, "enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 12,
             "hysteresis": 2, "min_loss_scale": 1},
    "train-iters": 143000, "lr-decay-iters": 143000, "distributed-backend": "nccl", "lr-decay-style": "cosine",
    "warmup": 0.01, "checkpoint-factor": 1000, "extra-save-iters": [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    "eval-interval": 100000, "eval-iters": 10, "log-interval": 10, "steps_per_print": 10, "wall_clock_breakdown": True,
    "tokenizer-type": "HFTokenizer"}


def test_pythia_70m_recipe_exports_to_pythias_own_config(tmp_path, capsys):
    argv = ["model=pythia-70m", "optim=pythia", "schedule=pythia", "data.seq_len=2048",
            f"data.budget_tokens={143000 * 1024 * 2048}"]  # Pythia's tokens: 143,000 steps of 1024 x 2048
    with hydra_context():
        cfg, _ = compose_run(argv)
    exp = neox_config(cfg, world_size=32)
    c = exp.config
    assert {k: c[k] for k in PYTHIA_70M} == PYTHIA_70M
    assert c["train_batch_size"] == 1024 and len(save_steps(c)) == 154  # Pythia's 154 revisions
    # every key both configs set, none chosen: 31 shared (counted by hand from the YAML), exactly these differ
    shared, differ = compare_config(c, PYTHIA_70M_YML)
    assert len(shared) == 31
    assert {k: (a, b) for k, a, b in differ} == {
        "attention_config": ([[["global"], 6]], [[["flash"], 6]]),  # the same math, flash is a kernel
        "bias_gelu_fusion": (False, True),  # exact GELU vs the tanh approximation
        "gradient_accumulation_steps": (2, 1),  # "gas"; micro 16 x 2 = their 32 x 1 per GPU: same batch
        "train_micro_batch_size_per_gpu": (16, 32),
        "zero_optimization": ({"stage": 1}, PYTHIA_70M_YML["zero_optimization"])}  # bucket sizes: speed only
    # bf16, where Pythia used fp16 with loss scaling: said in the header, and fp32 gradient accumulation
    assert c["bf16"] == {"enabled": True} and c["data_types"] == {"grad_accum_dtype": "fp32"} and "fp16" not in c
    text = render_yaml(exp, argv)
    assert "#  - precision: bf16" in text and "Pythia trained in fp16 with dynamic loss scaling" in text
    # the CLI lists them too
    yml = tmp_path / "70M.yml"
    yml.write_text(yaml.safe_dump(PYTHIA_70M_YML))
    assert neox_main([*argv, "--world-size", "32", "--out", str(tmp_path / "out"), "--compare", str(yml)]) == 0
    out = capsys.readouterr().out
    assert f"compared with {yml}: 31 keys in both, 5 differ:" in out and "  bias_gelu_fusion: ours False, theirs True" in out


def test_export_log_schedule_and_batch_split():
    cfg = compose("schedule=log", "schedule.n_log=4", "optim.global_batch=8", "optim.micro_batch=4")
    exp = neox_config(cfg, world_size=4)
    c = exp.config
    assert save_steps(c) == checkpoint_steps(cfg.schedule, 10, 8 * 32) == [0, 1, 2, 5, 10]
    assert c["checkpoint_factor"] == 10 and c["extra_save_iters"] == [0, 1, 2, 5]
    # 8 sequences over 4 GPUs: micro 4 cannot be, 2 is (speed only), and the CLI says so
    assert (c["train_micro_batch_size_per_gpu"], c["gradient_accumulation_steps"]) == (2, 1)
    assert any("train_micro_batch_size_per_gpu=2" in d for d in exp.differences)
    assert not any("lr warmup" in d for d in exp.differences)  # a 1-step warmup is the same in both
    with pytest.raises(ConfigError, match=r"optim.global_batch=8 is not a multiple of --world-size 3"):
        neox_config(cfg, world_size=3)


def test_export_cli(tmp_path, capsys):
    tok = tmp_path / "tok"
    tok.mkdir()
    word_tokenizer().save(str(tok / "tokenizer.json"))
    assert neox_main([*TINY, BUDGET, "--out", str(tmp_path / "out"), "--world-size", "1",
                      "--tokenizer", str(tok)]) == 0
    text = (tmp_path / "out" / "default.yml").read_text()
    c = yaml.safe_load(text)
    assert c["vocab_file"] == str((tmp_path / "out" / "tokenizer.json").resolve())
    assert (tmp_path / "out" / "tokenizer.json").read_text() == (tok / "tokenizer.json").read_text()
    assert c["save"] == str((tmp_path / "out" / "run").resolve())
    assert "ea7aefd8f8e183256992d9fede4d7c71a46d67a5" in text and "#  - data: gpt-neox reads" in text
    out = capsys.readouterr().out
    assert "10 iterations of 8 x 32 tokens (1 GPUs x micro 4 x accumulation 2)" in out
    assert "init: the same distributions" in out
    # no budget: the steps are unknown without the corpus; one line naming the key
    with pytest.raises(SystemExit) as e:
        neox_main([*TINY, "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    assert "error: data.budget_tokens is null" in capsys.readouterr().err


# ---- checkpoints ---------------------------------------------------------------------------------------

def word_tokenizer() -> Tokenizer:
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(SPECIALS + WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return tok


MODEL = ["model.hidden_size=32", "model.num_attention_heads=4", "model.intermediate_size=96",
         "model.rotary_pct=0.5", "model.rotary_emb_base=500"]


def neox_run(tmp_path: Path, *extra: str, drop=(), set_=None) -> tuple[GPTNeoXForCausalLM, str, Path]:
    """(our model, the gpt-neox YAML for it, the tokenizer.json it names)."""
    cfg = compose(*MODEL, *extra)
    tok_file = tmp_path / "tokenizer.json"
    word_tokenizer().save(str(tok_file))
    model = build_model(cfg.model, len(SPECIALS + WORDS), seed=3).eval()
    with torch.no_grad():  # nonzero biases and norms: a swapped or dropped one shows in the logits
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    c = neox_config(cfg, world_size=1, vocab_file=str(tok_file)).config
    for key in drop:
        del c[key]
    c.update(set_ or {})
    return model, yaml.safe_dump(c), tok_file


IDS = torch.tensor([[1, 3, 5, 9, 3, 6, 8, 13, 4], [1, 4, 6, 10, 12, 13, 3, 5, 7]])


# current gpt-neox: mlp.linear1/2, no inv_freq saved (rotary_save_freqs_buffer=false); Pythia-era: the
# dense_h_to_4h names and inv_freq in every block; Pythia-14M's pipe_parallel_size=0 (one engine file)
@pytest.mark.parametrize("naming, sequential, tied, inv_freq", [
    ("new", False, False, False), ("legacy", False, False, True), ("new", True, False, True),
    ("legacy", False, True, True)])
def test_round_trip_same_logits(tmp_path, naming, sequential, tied, inv_freq):
    torch.set_num_threads(1)
    # Pythia's YAMLs have no intermediate_size: the width must come from the weights (gpt-neox #1208)
    model, text, _ = neox_run(tmp_path, f"model.tie_word_embeddings={str(tied).lower()}",
                              drop=["intermediate_size"], set_={"pipe_parallel_size": 0 if sequential else 1})
    step_dir = write_neox_checkpoint(model, tmp_path / "neox", 3, text, naming=naming, sequential=sequential,
                                     rotary_buffer=inv_freq)
    # 2 blocks: embedding 0, blocks 2 and 3, final norm 5, output layer 6 (none when tied)
    layers = set() if sequential else {0, 2, 3, 5} | (set() if tied else {6})
    assert {p.name for p in step_dir.iterdir() if p.is_file()} == \
        {LAYER_FILE.format(i) for i in layers} | {"mp_rank_00_model_states.pt"}
    out = import_step(step_dir, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["intermediate_size"] == 96 and config["hidden_size"] == 32
    assert config["rope_parameters"]["partial_rotary_factor"] == 0.5
    assert config["rope_parameters"]["rope_theta"] == 500
    assert config["tie_word_embeddings"] is tied and config["vocab_size"] == 128
    back = load_causal_lm(out, GPTNeoXForCausalLM).eval()
    with torch.no_grad():
        assert torch.equal(back(IDS).logits, model(IDS).logits)
    # the tokenizer named by vocab_file, with gpt-neox's document token as start token
    tok = AutoTokenizer.from_pretrained(out)
    sentence = "the cats see a dog ."
    assert tok(sentence)["input_ids"] == word_tokenizer().encode(sentence).ids
    assert json.loads((out / "start_token.json").read_text())["start_token"] == "<|endoftext|>"
    assert json.loads((out / "trainer_state.json").read_text())["step"] == 3


def test_import_refuses_what_it_cannot_hold(tmp_path):
    torch.set_num_threads(1)
    model, text, _ = neox_run(tmp_path)
    step_dir = write_neox_checkpoint(model, tmp_path / "neox", 1, text)
    # a config whose rotary base disagrees with the saved inv_freq buffer
    c = yaml.safe_load(text)
    wrong = tmp_path / "wrong.yml"
    wrong.write_text(yaml.safe_dump({**c, "rotary_emb_base": 10000}))
    with pytest.raises(InputFileError, match=r"made with base 500, the config says rotary_emb_base=10000"):
        import_step(step_dir, tmp_path / "hf", config=wrong)
    wrong.write_text(yaml.safe_dump({**c, "pos_emb": "alibi"}))
    with pytest.raises(InputFileError, match=r"wrong.yml: gpt-neox config: pos_emb='alibi'"):
        import_step(step_dir, tmp_path / "hf", config=wrong)
    # a layer file that would run code when unpickled: refused by weights_only, never run
    layer = step_dir / LAYER_FILE.format(2)
    torch.save({"attention.dense.weight": Payload(tmp_path / "ran")}, layer)
    with pytest.raises(InputFileError, match=r"layer_02-model_00-model_states.pt holds more than tensors"):
        import_step(step_dir, tmp_path / "hf")
    assert not (tmp_path / "ran").exists()
    # a truncated one: named, and no HF directory left under its final name
    layer.write_bytes(layer.read_bytes()[:100])
    with pytest.raises(InputFileError, match=r"layer_02-model_00-model_states.pt: cannot read"):
        import_step(step_dir, tmp_path / "hf")
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".tmp-*"))


class Payload:
    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):  # unpickling it would create a file
        return (Path.touch, (self.path,))


# ---- a gpt-neox run under score-run / watch ---------------------------------------------------------

RECORDS = [{"sentence_good": f"the {n} {v} .", "sentence_bad": f"the {n} {w} .", "UID": "sv",
            "linguistics_term": "agreement", "pairID": str(i)}
           for i, (n, v, w) in enumerate([("cat", "runs", "run"), ("cats", "run", "runs"), ("dog", "sees", "see")])]


def test_score_run_and_watch_on_a_neox_run(tmp_path):
    from probes.__main__ import main as probes_main
    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
    from probes.scoring.primitive import score_pairs
    from probes.scoring.store import eval_path, read_pairs
    from probes.scoring.watch import ScoreOptions, run_finished, watch

    torch.set_num_threads(1)
    model, text, _ = neox_run(tmp_path)
    c = yaml.safe_load(text)
    text = yaml.safe_dump({**c, "train_iters": 4})
    run = tmp_path / "neox"
    for step in (0, 2):
        write_neox_checkpoint(model, run, step, text)
    write_neox_checkpoint(model, run, 4, text)
    (run / "latest").write_text("global_step2")  # step 4 is still being written
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))

    assert probes_main(["score-run", str(run), "--benchmark", str(bench), "--batch-size", "2",
                        "--device", "cpu"]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step0", "step2"]
    assert eval_path(run, 2, "mini").is_file() and not eval_path(run, 4, "mini").exists()
    df, meta = read_pairs(eval_path(run, 2, "mini"))
    assert len(df) == 3 and meta["tokens"] == 2 * 8 * 32 and meta["step"] == 2
    # the imported checkpoint scores like our model: the same log-probs as scoring `model` itself
    tok = AutoTokenizer.from_pretrained(run / "checkpoints" / "step2")
    pairs = load_benchmark(BenchmarkConfig(name="mini", path=str(bench)))
    ours = score_pairs(model, tok, pairs, batch_size=2, device="cpu")
    assert ours["lp_good"].tolist() == df["lp_good"].tolist() and ours["lp_bad"].tolist() == df["lp_bad"].tolist()
    state = json.loads((run / "checkpoints" / "step2" / "trainer_state.json").read_text())
    assert (state["source"], state["total_steps"]) == ("gpt-neox", 4)
    stamp = (run / "checkpoints" / "step2" / "manifest.json").stat().st_mtime_ns
    assert not run_finished(run)

    (run / "latest").write_text("global_step4")
    benchmarks = {"mini": pairs}
    assert watch(run, benchmarks, ScoreOptions(batch_size=2, device="cpu"), poll_s=0.01, timeout_s=60,
                 say=lambda _: None)
    assert run_finished(run) and eval_path(run, 4, "mini").is_file()
    # idempotent: nothing imported twice
    assert sync_run(run, say=lambda _: None) == []
    assert (run / "checkpoints" / "step2" / "manifest.json").stat().st_mtime_ns == stamp


def test_a_replaced_global_step_is_imported_and_scored_again(tmp_path):
    """gpt-neox restarted from an earlier step writes global_step<N> anew: score-run imports the new
    weights (not the first import's) and scores them; an unchanged step is left alone."""
    import copy

    from probes.__main__ import main as probes_main
    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
    from probes.scoring.primitive import score_pairs
    from probes.scoring.store import eval_path, read_pairs

    torch.set_num_threads(1)
    model, text, _ = neox_run(tmp_path)
    run = tmp_path / "neox"
    for step in (0, 2):
        write_neox_checkpoint(model, run, step, text)
    bench = tmp_path / "mini.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    argv = ["score-run", str(run), "--benchmark", str(bench), "--batch-size", "2", "--device", "cpu"]
    assert probes_main(argv) == 0
    first = read_pairs(eval_path(run, 2, "mini"))[0]
    stamp0 = (run / "checkpoints" / "step0" / "manifest.json").stat().st_mtime_ns

    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.5)
    write_neox_checkpoint(other, run, 2, text)  # the same step, written again with other weights
    assert probes_main(argv) == 0
    again = GPTNeoXForCausalLM.from_pretrained(run / "checkpoints" / "step2").eval()
    with torch.no_grad():
        assert torch.equal(again(IDS).logits, other(IDS).logits)
    tok = AutoTokenizer.from_pretrained(run / "checkpoints" / "step2")
    pairs = load_benchmark(BenchmarkConfig(name="mini", path=str(bench)))
    df = read_pairs(eval_path(run, 2, "mini"))[0]
    want = score_pairs(other, tok, pairs, batch_size=2, device="cpu")  # same process, batches, kernels
    assert df["lp_good"].tolist() == want["lp_good"].tolist() != first["lp_good"].tolist()
    assert (run / "checkpoints" / "step0" / "manifest.json").stat().st_mtime_ns == stamp0  # untouched
    assert sync_run(run, say=lambda _: None) == []


def test_sync_needs_a_tokenizer(tmp_path):
    model, text, tok_file = neox_run(tmp_path)
    write_neox_checkpoint(model, tmp_path / "neox", 0, text)
    tok_file.unlink()
    with pytest.raises(InputFileError, match=r"vocab_file=.*tokenizer.json not found"):
        sync_run(tmp_path / "neox", say=lambda _: None)
    assert not (tmp_path / "neox" / "checkpoints" / "step0").exists()


def test_import_cli(tmp_path, capsys):
    torch.set_num_threads(1)
    model, text, _ = neox_run(tmp_path)
    step_dir = write_neox_checkpoint(model, tmp_path / "neox", 5, text)
    assert neox_main(["--import", str(step_dir), "--out", str(tmp_path / "hf")]) == 0
    back = load_causal_lm(tmp_path / "hf", GPTNeoXForCausalLM).eval()
    with torch.no_grad():
        assert torch.equal(back(IDS).logits, model.eval()(IDS).logits)
    # a save directory: every complete global_step<N> into its checkpoints/step<N>
    assert neox_main(["--import", str(tmp_path / "neox")]) == 0
    assert (tmp_path / "neox" / "checkpoints" / "step5" / "model.safetensors").is_file()
    assert "1 checkpoints imported" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        neox_main(["--import", str(tmp_path / "hf")])
    assert e.value.code == 2
    assert "neither a global_step<N> directory nor a gpt-neox save directory" in capsys.readouterr().err


def test_export_from_a_started_run(tmp_path, capsys):
    """--run: the run's config.yaml (as train/loop.py writes it), total_steps and tokenizer of its newest
    checkpoint; no budget needed (the demo trains on its whole corpus)."""
    from omegaconf import OmegaConf

    cfg = compose("data.budget_tokens=null", "schedule=log", "schedule.n_log=4")
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step7"
    ckpt.mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(
        OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True))))
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 7, "total_steps": 7}))
    word_tokenizer().save(str(ckpt / "tokenizer.json"))
    assert neox_main(["--run", str(run), "--out", str(tmp_path / "out"), "--world-size", "2"]) == 0
    c = yaml.safe_load((tmp_path / "out" / "default.yml").read_text())
    assert c["train_iters"] == 7 and save_steps(c) == checkpoint_steps(cfg.schedule, 7, 8 * 32) == [0, 1, 2, 4, 7]
    assert Path(c["vocab_file"]).read_text() == (ckpt / "tokenizer.json").read_text()
    assert "tokenizer:" not in capsys.readouterr().out  # it had one, with <|endoftext|>


def write_neox_checkpoint(model, save_dir: Path, step: int, yaml_text: str, *, naming: str = "new",
                          sequential: bool = False, rotary_buffer: bool = True) -> Path:
    """Our HF GPTNeoX model as gpt-neox would save it at iteration `step`: save_dir/global_step<N>/ with
    the layer files (or, sequential, everything in the engine file), configs/neox.yml, then `latest`.
    The inverse of train.neox_ckpt.read_weights, for the round trip (only tests need it)."""
    import numpy as np

    from train.files import fsync_tree, write_text_atomic

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    cfg = model.config
    n = cfg.num_hidden_layers
    layers: dict[int, dict] = {0: {"word_embeddings.weight": sd["gpt_neox.embed_in.weight"]}}
    inv = getattr(model.gpt_neox.rotary_emb, "inv_freq", None)
    for i in range(n):
        block = {neox: sd[f"gpt_neox.layers.{i}.{hf}"] for neox, hf in {**_BLOCK, **_MLP[naming]}.items()}
        if rotary_buffer and inv is not None:
            block["attention.rotary_emb.inv_freq"] = inv.detach().clone()
        layers[i + 2] = block
    layers[n + 3] = {"norm.weight": sd["gpt_neox.final_layer_norm.weight"],
                     "norm.bias": sd["gpt_neox.final_layer_norm.bias"]}
    if not cfg.tie_word_embeddings:
        layers[n + 4] = {"final_linear.weight": model.get_output_embeddings().weight.detach().clone()}
    save_dir = Path(save_dir)
    final = save_dir / f"global_step{step}"
    tmp = save_dir / f".tmp-global_step{step}"
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "configs").mkdir(parents=True)
    # what gpt-neox's save_ds_checkpoint adds to DeepSpeed's record (numpy's RNG state among it)
    engine = {"iteration": step, "global_steps": step, "dp_world_size": 1, "mp_world_size": 1,
              "args": {"num_layers": n, "hidden_size": cfg.hidden_size, "padded_vocab_size": cfg.vocab_size,
                       "model_parallel_size": 1},
              "np_rng_state": np.random.get_state(), "torch_rng_state": torch.get_rng_state(),
              "module": None}
    if sequential:
        engine["module"] = {f"sequential.{i}.{k}": v for i, layer in layers.items() for k, v in layer.items()}
    else:
        for i, layer in layers.items():
            torch.save(layer, tmp / LAYER_FILE.format(i))
    torch.save(engine, tmp / ENGINE_FILE)
    (tmp / "configs" / "neox.yml").write_text(yaml_text)
    fsync_tree(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_text_atomic(save_dir / "latest", f"global_step{step}")
    return final
