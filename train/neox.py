"""EleutherAI gpt-neox interop, config side: our run config as a gpt-neox YAML, and back (docs/gpt-neox.md).

    python -m train.neox experiment=demo [overrides] --out DIR [--world-size 8] [--tokenizer DIR]
    python -m train.neox --import NEOX_DIR [--out HF_DIR] [--config YAML] [--tokenizer DIR]

Every key written was checked by name against gpt-neox commit NEOX_COMMIT (megatron/neox_arguments/, its
configs/pythia/*.yml, megatron/training.py, learning_rates.py, model/transformer.py, model/activations.py).
Tests cannot reach that repository, so they read the YAML back (tests/test_neox.py, `from_neox`)."""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import yaml

from train.batch import load_run_config
from train.checkpoint import list_checkpoints, read_trainer_state
from train.cli import exit_on_user_error
from train.errors import ConfigError, InputFileError, reading
from train.files import write_text_atomic
from train.grid import GridError, compose_run, hydra_context
from train.neox_read import EOD, normalize_keys, save_steps
from train.optim import warmup_steps
from train.plan import planned_steps
from train.schedule import checkpoint_steps

NEOX_COMMIT = "ea7aefd8f8e183256992d9fede4d7c71a46d67a5"  # EleutherAI/gpt-neox main, 2026-05-19
DEFAULT_WORLD_SIZE = 8  # GPUs the batch split assumes unless --world-size says otherwise (one A100 node)

# Our model.hidden_act -> (gpt-neox activation, bias_gelu_fusion). gpt-neox's "gelu" is exact unless
# bias_gelu_fusion swaps in the tanh approximation (HF "gelu_new"), as Pythia's own configs do.
_ACTIVATIONS = {"gelu": ("gelu", False), "gelu_new": ("gelu", True), "gelu_pytorch_tanh": ("gelu", True),
                "relu": ("relu", False), "silu": ("silu", False)}
_INIT = {"pythia": ("small_init", "wang_init"), "hf": ("normal", "normal")}  # ours -> (init, output layer)


@dataclass
class NeoxExport:
    config: dict  # gpt-neox keys (underscore spelling, as neox_args.py names them) -> values
    differences: list[str] = field(default_factory=list)  # what gpt-neox will not reproduce, and why
    world_size: int = DEFAULT_WORLD_SIZE


def neox_config(cfg, *, world_size: int = DEFAULT_WORLD_SIZE, vocab_file: Optional[str] = None,
                eod_in_vocab: Optional[bool] = None, total_steps: Optional[int] = None,
                save_dir: Optional[str] = None) -> NeoxExport:
    """The gpt-neox config that trains `cfg` on `world_size` GPUs for `total_steps` (default: the plan's)."""
    m, o = cfg.model, cfg.optim
    diffs: list[str] = []
    if world_size < 1:
        raise ConfigError(f"--world-size={world_size}: expected at least 1 GPU")
    if m.hidden_act not in _ACTIVATIONS:
        raise ConfigError(f"model.hidden_act={m.hidden_act!r}: gpt-neox has no matching activation "
                          f"(exportable: {', '.join(_ACTIVATIONS)})")
    if m.init_method not in _INIT:
        raise ConfigError(f"model.init_method={m.init_method!r}: expected one of {', '.join(_INIT)}")
    seq_len = cfg.data.seq_len or m.max_position_embeddings
    try:
        steps = total_steps if total_steps is not None else planned_steps(cfg)
    except ValueError as e:  # no budget: the corpus alone says how many steps
        raise ConfigError(f"{e}; or export from a started run: --run RUN_DIR (its total_steps)") from None
    if steps < 1:
        raise ConfigError(f"data.budget_tokens={cfg.data.budget_tokens} is not one step of optim.global_batch="
                          f"{o.global_batch} x data.seq_len={seq_len}: nothing to train")
    micro, accum = _split_batch(o.global_batch, o.micro_batch, world_size, diffs)
    warm = warmup_steps(o, steps)
    activation, fused_gelu = _ACTIVATIONS[m.hidden_act]
    init, out_init = _INIT[m.init_method]
    factor, extra = _save_iters(checkpoint_steps(cfg.schedule, steps, o.global_batch * seq_len), cfg.schedule,
                                o.global_batch * seq_len)
    precision = {"fp32": "fp32", "bf16": "bfloat16", "auto": "bfloat16"}[cfg.engine.precision]
    c = {
        # one pipeline stage: the checkpoint is DeepSpeed's per-layer files (what --import reads)
        "pipe_parallel_size": 1, "model_parallel_size": 1,
        "num_layers": m.num_hidden_layers, "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
        "intermediate_size": m.intermediate_size, "mlp_multiple_of": 1,
        "seq_length": seq_len, "max_position_embeddings": m.max_position_embeddings,
        "pos_emb": "rotary", "rotary_pct": m.rotary_pct, "rotary_emb_base": m.rotary_emb_base,
        "no_weight_tying": not m.tie_word_embeddings, "gpt_j_residual": m.use_parallel_residual,
        "gpt_j_tied": False,  # HF GPTNeoX has two LayerNorms per block
        "norm": "layernorm", "layernorm_epsilon": m.layer_norm_eps, "activation": activation,
        "bias_gelu_fusion": fused_gelu,
        "attention_config": [[["global"], m.num_hidden_layers]],  # "flash" is the same math, faster
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "init_method": init, "output_layer_init_method": out_init,
        "init_method_std": 0.02,  # used by "normal" only (our init_method=hf: transformers' 0.02)
        # padded vocabulary = the tokenizer's size rounded up to this: ours pads to 128, a pinned size
        # is reached by padding to itself (it is at least the tokenizer's size: train/model.py checks)
        "make_vocab_size_divisible_by": 128 if m.vocab_size is None else m.vocab_size,
        "optimizer": {"type": "Adam", "params": {"lr": o.lr, "betas": list(o.betas), "eps": o.eps}},
        "weight_decay": o.weight_decay,  # decoupled (apex/DeepSpeed FusedAdam adam_w_mode), biases and norms excluded
        "gradient_clipping": o.grad_clip, "min_lr": o.lr * o.min_lr_ratio, "lr_decay_style": o.decay,
        "lr_decay_iters": steps,
        "warmup": warm / steps,  # a fraction of lr_decay_iters: warm / steps * steps = our warmup steps
        "train_iters": steps, "train_batch_size": o.global_batch, "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accum,
        "checkpoint_scale": "linear", "checkpoint_factor": factor, "extra_save_iters": extra,
        "precision": precision,
        "zero_optimization": {"stage": cfg.engine.zero_stage if cfg.engine.kind == "deepspeed" else 1},
        "seed": cfg.seed, "tokenizer_type": "HFTokenizer",
    }
    if save_dir is not None:  # gpt-neox saves nothing without `save`; `load` makes a rerun resume
        c["save"] = c["load"] = save_dir
    if precision == "bfloat16":
        # fp32 gradient accumulation: gpt-neox warns "pp>0, zero1, and bf16 will break without fp32 grads"
        c["bf16"] = {"enabled": True}
        c["data_types"] = {"grad_accum_dtype": "fp32"}
        diffs.append("precision: bf16 (bf16 weights/activations, fp32 master weights and gradient accumulation); "
                     "Pythia trained in fp16 with dynamic loss scaling (its configs' fp16 block: loss_scale 0, "
                     "initial_scale_power 12), which this run does not reproduce")
    if vocab_file is not None:
        c["vocab_file"] = vocab_file
    else:
        diffs.append("tokenizer: no tokenizer.json was available (a sentencepiece tokenizer is trained by the "
                     "first `python -m train` of the run); set vocab_file to the run's tokenizer.json, e.g. "
                     "<run>/checkpoints/step0/tokenizer.json, or export again with --tokenizer DIR")
    if eod_in_vocab is False:
        diffs.append(f"tokenizer: it has no {EOD} piece, which gpt-neox's HFTokenizer puts after every "
                     f"document (eod_id would be None)")
    diffs += _differences(cfg, warm, m.intermediate_size)
    return NeoxExport(config=c, differences=diffs, world_size=world_size)


def _split_batch(global_batch: int, micro: int, world: int, diffs: list[str]) -> tuple[int, int]:
    """(micro batch per GPU, accumulation steps) with micro x accum x world = global batch; when our micro
    batch (speed and memory only) does not divide the per-GPU batch, the largest that does."""
    per_gpu, rest = divmod(global_batch, world)
    if rest:
        raise ConfigError(f"optim.global_batch={global_batch} is not a multiple of --world-size {world}: "
                          f"gpt-neox needs train_batch_size = micro x accumulation x GPUs")
    if per_gpu % micro:
        chosen = max(d for d in range(1, min(micro, per_gpu) + 1) if per_gpu % d == 0)
        diffs.append(f"batch: optim.micro_batch={micro} does not divide the {per_gpu} sequences per GPU on "
                     f"{world} GPUs; train_micro_batch_size_per_gpu={chosen} (same global batch, same trajectory)")
        micro = chosen
    return micro, per_gpu // micro


def _save_iters(steps: list[int], schedule, tokens_per_step: int) -> tuple[int, list[int]]:
    """(checkpoint_factor, extra_save_iters) under which gpt-neox saves exactly `steps`: every multiple of
    the factor, every extra (0 only through this list) and the last iteration (Pythia: 1000; 0, 1, 2 ... 512)."""
    total = steps[-1]
    factor = total  # no regular tail: only the last iteration, which gpt-neox saves anyway
    if schedule.kind == "pythia":  # train/schedule.py: every multiple of the interval, in steps
        every = math.ceil(schedule.every / tokens_per_step) if schedule.unit == "tokens" else schedule.every
        factor = max(1, every)
    return factor, [s for s in steps if s == 0 or (s % factor and s != total)]


def _differences(cfg, warm: int, intermediate: int) -> list[str]:
    """What the exported YAML does not reproduce (each line says why)."""
    o = cfg.optim
    out = ["data: gpt-neox reads its own preprocessed corpus (tools/datasets/preprocess_data.py with this "
           "tokenizer and --append-eod; set data_path or train_data_paths): document order, shuffling, the "
           "budget view and the sequence packing are gpt-neox's, so the run matches ours in model, optimiser "
           "and schedule, not batch for batch",
           "init: the same distributions (init_method, output_layer_init_method), drawn by gpt-neox's RNG from "
           "`seed`: other initial weights than ours"]
    if warm >= 2:  # megatron/learning_rates.py: lr * max(1, s) / W while s <= W
        out.append(f"lr warmup: gpt-neox's updates 1..{warm - 1} use lr*s/{warm}, ours lr*(s+1)/{warm} (its warmup "
                   f"is one update behind); updates 0 and {warm} on have equal learning rates")
    if o.decay == "linear" and o.min_lr_ratio > 0:
        out.append(f"lr decay: gpt-neox's linear style decays towards 0 and clips at min_lr; ours goes "
                   f"linearly to min_lr ({o.min_lr_ratio} x lr)")
    if intermediate % 2:
        out.append(f"model.intermediate_size={intermediate}: gpt-neox rounds the first MLP projection up to an "
                   f"even size ({intermediate + 1}) but not the second, so it cannot build this model")
    if cfg.max_skipped_batches:
        out.append(f"max_skipped_batches={cfg.max_skipped_batches}: gpt-neox has no equivalent")
    return out


def render_yaml(export: NeoxExport, overrides: Sequence[str]) -> str:
    """The YAML text: a header (what it is, what differs) and the keys in a readable order."""
    head = [f"# gpt-neox config exported by `python -m train.neox {' '.join(overrides)}`",
            f"# Key names checked against EleutherAI/gpt-neox commit {NEOX_COMMIT}.",
            f"# Batch for {export.world_size} GPUs (data parallel): train_batch_size = "
            f"train_micro_batch_size_per_gpu x gradient_accumulation_steps x GPUs; with another number of "
            f"GPUs change the accumulation steps, not train_batch_size.",
            "# Not reproduced by this file:"]
    head += [f"#  - {d}" for d in export.differences]
    body = yaml.safe_dump(export.config, sort_keys=False, default_flow_style=None, width=120)
    return "\n".join(head) + "\n" + body


_ALIASES = {"gas": "gradient_accumulation_steps"}  # DeepSpeed's short name, used by Pythia's configs


def compare_config(ours: dict, theirs: dict) -> tuple[list[str], list[tuple[str, object, object]]]:
    """(the keys both gpt-neox configs set, [(key, ours, theirs)] for each that differs; a nested block whole)."""
    a, b = ({_ALIASES.get(k, k): v for k, v in normalize_keys(c).items()} for c in (ours, theirs))
    shared = sorted(set(a) & set(b))
    return shared, [(k, a[k], b[k]) for k in shared if a[k] != b[k]]


def _tokenizer_json(cfg, tokenizer: Optional[Path]) -> Optional[Path]:
    """The run's tokenizer.json: --tokenizer DIR, else a pretrained tokenizer's directory."""
    if tokenizer is not None:
        f = Path(tokenizer) / "tokenizer.json" if Path(tokenizer).is_dir() else Path(tokenizer)
        if not f.is_file():
            raise InputFileError(f"--tokenizer {tokenizer}: no tokenizer.json there (gpt-neox's HFTokenizer "
                                 f"reads that file)")
        return f
    if cfg.tokenizer.kind == "pretrained" and cfg.tokenizer.path:
        f = Path(cfg.tokenizer.path).expanduser() / "tokenizer.json"
        return f if f.is_file() else None
    return None


def export(overrides: Sequence[str], out_dir: Path, *, world_size: int = DEFAULT_WORLD_SIZE,
           tokenizer: Optional[Path] = None, run: Optional[Path] = None, compare: Optional[Path] = None,
           say=print) -> Path:
    """Writes OUT/<experiment>.yml (and OUT/tokenizer.json when one is known) from Hydra `overrides` or a
    started `run` directory (which also gives the steps and the tokenizer); returns the YAML path."""
    total = None
    if run is not None:  # its config.yaml, total_steps from its newest trainer state, that checkpoint's tokenizer
        cfg, ckpts = load_run_config(run), list_checkpoints(run)
        if not ckpts:
            raise InputFileError(f"--run {run}: no checkpoints yet; its total_steps is known from the first one")
        newest = ckpts[-1][1]
        with reading(newest / "trainer_state.json", "the checkpoint's trainer state"):
            total = int(read_trainer_state(newest)["total_steps"])
        tokenizer = tokenizer if tokenizer is not None else newest
    else:
        try:
            with hydra_context():
                cfg, _choices = compose_run(overrides)
        except GridError as e:
            raise ConfigError(str(e)) from None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_json = _tokenizer_json(cfg, tokenizer)
    vocab_file, eod = None, None
    if tok_json is not None:
        copy = out_dir / "tokenizer.json"
        if tok_json.resolve() != copy.resolve():
            write_text_atomic(copy, tok_json.read_text())
        vocab_file = str(copy.resolve())
        vocab = json.loads(copy.read_text())
        eod = EOD in (vocab.get("model", {}).get("vocab") or {}) or \
            any(t.get("content") == EOD for t in vocab.get("added_tokens", []))
    # gpt-neox writes global_step<N>/ there; `probes watch` on that directory probes them (train/neox_ckpt.py)
    exp = neox_config(cfg, world_size=world_size, vocab_file=vocab_file, eod_in_vocab=eod, total_steps=total,
                      save_dir=str((out_dir / "run").resolve()))
    path = out_dir / f"{cfg.experiment}.yml"
    write_text_atomic(path, render_yaml(exp, list(overrides) or [f"--run {run}"]))
    c = exp.config
    say(f"wrote {path}: {c['num_layers']} layers x {c['hidden_size']}, {c['train_iters']} iterations of "
        f"{c['train_batch_size']} x {c['seq_length']} tokens ({exp.world_size} GPUs x micro "
        f"{c['train_micro_batch_size_per_gpu']} x accumulation {c['gradient_accumulation_steps']}), "
        f"{len(save_steps(c))} checkpoints")
    say("not reproduced by gpt-neox (also in the file's header):")
    for d in exp.differences:
        say(f"  - {d}")
    if compare is not None:
        shared, differ = compare_config(c, yaml.safe_load(Path(compare).read_text()) or {})
        say(f"compared with {compare}: {len(shared)} keys in both, {len(differ)} differ" + (":" if differ else ""))
        for k, a, b in differ:
            say(f"  {k}: ours {a!r}, theirs {b!r}")
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.neox", description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m train (export)")
    parser.add_argument("--out", type=Path, help="export: the directory for the YAML; import: the HF directory")
    parser.add_argument("--world-size", type=int, default=DEFAULT_WORLD_SIZE,
                        help=f"GPUs the exported batch is split over (default {DEFAULT_WORLD_SIZE})")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="a directory with the run's tokenizer.json (export), or an HF tokenizer directory "
                             "to save with the imported model (import; default: the YAML's vocab_file)")
    parser.add_argument("--import", dest="import_dir", type=Path, default=None, metavar="NEOX_DIR",
                        help="a gpt-neox global_step<N> directory (needs --out), or its save directory "
                             "(every global_step<N> into NEOX_DIR/checkpoints/step<N>)")
    parser.add_argument("--run", type=Path, default=None, metavar="RUN_DIR",
                        help="export: take the config, step count and tokenizer from a started run directory")
    parser.add_argument("--compare", type=Path, default=None, metavar="YAML",
                        help="export: list every key the export shares with this gpt-neox config that differs "
                             "(e.g. gpt-neox's configs/pythia/70M.yml)")
    parser.add_argument("--config", type=Path, default=None,
                        help="import: the run's gpt-neox YAML (default: global_step<N>/configs/*.yml)")
    args = parser.parse_args(argv)
    if args.world_size < 1:
        parser.error(f"--world-size={args.world_size}: expected at least 1")
    if args.import_dir is not None:
        if args.overrides:
            parser.error(f"--import takes no Hydra overrides (got {' '.join(args.overrides)})")
        return exit_on_user_error(lambda: _import(args))
    if args.out is None:
        parser.error("--out DIR is required (where the gpt-neox YAML goes)")
    if args.run is not None and args.overrides:
        parser.error("--run takes the run's own config.yaml; give either --run or overrides")
    exit_on_user_error(lambda: export(args.overrides, args.out, world_size=args.world_size,
                                      tokenizer=args.tokenizer, run=args.run, compare=args.compare))
    return 0


def _import(args) -> int:
    from train.neox_ckpt import import_step, is_neox_run, step_of, sync_run
    src = args.import_dir
    if step_of(src) is not None:
        if args.out is None:
            raise ConfigError(f"--import {src}: a global_step directory needs --out HF_DIR")
        out = import_step(src, args.out, config=args.config, tokenizer=args.tokenizer)
        print(f"wrote {out}")
        return 0
    if not is_neox_run(src):
        raise InputFileError(f"--import {src}: neither a global_step<N> directory nor a gpt-neox save "
                             f"directory holding some")
    if args.out is not None:
        raise ConfigError("--out goes with one global_step directory; a save directory is imported into "
                          "its own checkpoints/step<N>")
    written = sync_run(src, config=args.config, tokenizer=args.tokenizer)
    print(f"{src}: {len(written)} checkpoints imported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
