"""gpt-neox checkpoints -> the HF GPTNeoX directories our probes read (docs/gpt-neox.md).

A save directory holds one global_step<N>/ per checkpoint and `latest`, naming the newest complete one. With
pipe_parallel_size >= 1 DeepSpeed writes one LAYER_FILE per pipeline layer that has parameters:
    0 word_embeddings; 2 .. L+1 the L blocks (mlp.linear1/2, or Pythia's mlp.dense_h_to_4h/dense_4h_to_h);
    L+3 the final norm; L+4 final_linear (only with no_weight_tying); 1 and L+2 are functions, no file.
With pipe_parallel_size 0 (Pythia-14M) ENGINE_FILE's `module` holds them as "sequential.<index>.<key>". Learnt
from gpt-neox's tools/ckpts/convert_neox_to_hf.py and DeepSpeed's PipelineModule.save_state_dict (the code is
ours); the fused QKV is laid out per head as [q, k, v] in both, so every tensor maps over unchanged."""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
import pickle
import re
from pathlib import Path
from typing import Callable, Optional

import torch
import yaml

from train.checkpoint import write_manifest
from train.errors import InputFileError, reading
from train.files import built_dir, checkpoint_dir, write_json_atomic
from train.model import count_parameters, hf_config
from train.neox_read import EOD, model_config, model_fields, normalize_keys
from train.start_token import write_record

log = logging.getLogger(__name__)

LAYER_FILE = "layer_{:02d}-model_00-model_states.pt"
ENGINE_FILE = "mp_rank_00_model_states.pt"
_STEP = re.compile(r"^global_step(\d+)$")
# neox key in a block -> HF key under gpt_neox.layers.<i>.: the same names, but the MLP has two spellings
_BLOCK = {f"{m}.{p}": f"{m}.{p}" for m in ("input_layernorm", "post_attention_layernorm",
                                           "attention.query_key_value", "attention.dense") for p in ("weight", "bias")}
_MLP = {"new": {f"mlp.linear{n}.{p}": f"mlp.{hf}.{p}" for n, hf in ((1, "dense_h_to_4h"), (2, "dense_4h_to_h"))
                for p in ("weight", "bias")},
        "legacy": {f"mlp.{hf}.{p}": f"mlp.{hf}.{p}" for hf in ("dense_h_to_4h", "dense_4h_to_h")
                   for p in ("weight", "bias")}}
# buffers gpt-neox may save that HF recomputes (the rotary frequencies are checked, not copied)
_BUFFERS = ("attention.rotary_emb.inv_freq", "attention.bias", "attention.masked_bias")
# What DeepSpeed/gpt-neox put in the engine file besides tensors: numpy's RNG state (an array).
# Data constructors, no code; allowed for the sequential layout, whose weights live in that file.
_NUMPY_GLOBALS = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
                  "numpy.ndarray", "numpy.dtype", "numpy.dtypes.UInt32DType")


def step_of(path: Path) -> Optional[int]:
    m = _STEP.match(Path(path).name)
    return int(m.group(1)) if m and Path(path).is_dir() else None


def is_neox_run(run_dir: Path) -> bool:
    run_dir = Path(run_dir)
    return run_dir.is_dir() and any(step_of(p) is not None for p in run_dir.iterdir())


def complete_steps(run_dir: Path) -> list[tuple[int, Path]]:
    """(N, global_step<N>) of every complete checkpoint: N at most the step `latest` names (written after the
    checkpoint: a newer directory may be half written); without `latest` (a copy) every one."""
    run_dir = Path(run_dir)
    found = sorted((s, p) for p in run_dir.iterdir() if (s := step_of(p)) is not None)
    latest = run_dir / "latest"
    if latest.is_file():
        tag = latest.read_text().strip()
        m = _STEP.match(tag)
        if not m:
            raise InputFileError(f"{latest}: expected a tag global_step<N>, found {tag[:60]!r}")
        found = [(s, p) for s, p in found if s <= int(m.group(1))]
    return found


def read_config(step_dir: Path, config: Optional[Path] = None) -> tuple[dict, str]:
    """(the run's gpt-neox config, - spelt _, merged from the files it was started with; where it came from)."""
    files = [Path(config)] if config is not None else sorted(
        p for p in (Path(step_dir) / "configs").glob("*") if p.suffix in (".yml", ".yaml", ".json"))
    if not files:
        raise InputFileError(f"{step_dir}: no configs/*.yml (gpt-neox saves its YAML there); pass --config YAML")
    merged: dict = {}
    for f in files:
        with reading(f, "the gpt-neox YAML"):
            data = yaml.safe_load(f.read_text())
        if not isinstance(data, dict):
            raise InputFileError(f"{f}: not a gpt-neox config (a YAML mapping of keys)")
        merged.update(normalize_keys(data))
    return merged, ", ".join(map(str, files))


def _load(path: Path, allow_numpy: bool = False) -> dict:
    if not path.is_file():
        raise InputFileError(f"{path}: missing (gpt-neox writes it with the checkpoint)")
    safe = []
    if allow_numpy:
        for name in _NUMPY_GLOBALS:
            module, _, attr = name.rpartition(".")
            try:
                safe.append(getattr(importlib.import_module(module), attr))
            except (ImportError, AttributeError):  # numpy 1 vs 2 spellings
                continue
    with reading(path, "a gpt-neox checkpoint file", "a truncated or damaged file"):
        try:
            with torch.serialization.safe_globals(safe):
                data = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputFileError(f"{path} holds more than tensors and is refused (loaded with "
                                 f"weights_only=True): {first}") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a state dict, found {type(data).__name__}")
    return data


class _Layers:
    """The state dict of pipeline layer `index`, from the per-layer files or the engine file's module."""

    def __init__(self, step_dir: Path, c: dict):
        self.dir = Path(step_dir)
        if (c.get("model_parallel_size") or 1) != 1:
            raise InputFileError(f"{self.dir}: model_parallel_size={c['model_parallel_size']}; only unsharded "
                                 f"checkpoints (model_parallel_size 1) are imported")
        self.sequential = c.get("pipe_parallel_size", 1) == 0
        self.module = None
        if self.sequential:
            engine = _load(self.dir / ENGINE_FILE, allow_numpy=True)
            if not isinstance(engine.get("module"), dict):
                raise InputFileError(f"{self.dir / ENGINE_FILE}: no 'module' state dict (pipe_parallel_size=0 "
                                     f"keeps the weights there)")
            self.module = engine["module"]

    def where(self, index: int) -> str:
        return str(self.dir / (ENGINE_FILE if self.sequential else LAYER_FILE.format(index)))

    def get(self, index: int) -> dict:
        if self.sequential:
            prefix = f"sequential.{index}."
            return {k[len(prefix):]: v for k, v in self.module.items() if k.startswith(prefix)}
        return _load(self.dir / LAYER_FILE.format(index))


def _take(sd: dict, key: str, where: str) -> torch.Tensor:
    if key not in sd:
        raise InputFileError(f"{where}: no {key!r} (found {', '.join(sorted(sd)) or 'nothing'})")
    return sd.pop(key)


def read_weights(step_dir: Path, c: dict) -> tuple[dict, dict]:
    """(HF state dict, facts read from the tensors: intermediate_size, vocab_rows, hidden, rotary)."""
    layers = _Layers(step_dir, c)
    n = c.get("num_layers")
    if not n:
        raise InputFileError(f"{step_dir}: the gpt-neox config has no num_layers")
    sd: dict[str, torch.Tensor] = {}
    embed = layers.get(0)
    sd["gpt_neox.embed_in.weight"] = _take(embed, "word_embeddings.weight", layers.where(0))
    rows, hidden = sd["gpt_neox.embed_in.weight"].shape
    facts = {"vocab_rows": int(rows), "hidden": int(hidden), "intermediate_size": None, "inv_freq": None}
    for i in range(n):
        where, block = layers.where(i + 2), layers.get(i + 2)
        naming = "new" if "mlp.linear1.weight" in block else "legacy"
        for neox_key, hf_key in {**_BLOCK, **_MLP[naming]}.items():
            sd[f"gpt_neox.layers.{i}.{hf_key}"] = _take(block, neox_key, where)
        inv = block.pop("attention.rotary_emb.inv_freq", None)
        if inv is not None and facts["inv_freq"] is None:
            facts["inv_freq"] = inv
        left = sorted(k for k in block if k not in _BUFFERS and not k.endswith("_extra_state"))
        if left:  # a weight we would drop: the model would not be the one trained
            raise InputFileError(f"{where}: tensors HF GPTNeoX has no place for: {', '.join(left)}")
        w1 = sd[f"gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight"]
        w2 = sd[f"gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight"]
        if w1.shape[0] != w2.shape[1]:  # gated activations (swiglu...) make linear1 twice as wide
            raise InputFileError(f"{where}: MLP widths {w1.shape[0]} (in) and {w2.shape[1]} (out) differ: a "
                                 f"gated activation, which HF GPTNeoX cannot hold")
        facts["intermediate_size"] = facts["intermediate_size"] or int(w1.shape[0])
    norm = layers.get(n + 3)
    sd["gpt_neox.final_layer_norm.weight"] = _take(norm, "norm.weight", layers.where(n + 3))
    sd["gpt_neox.final_layer_norm.bias"] = _take(norm, "norm.bias", layers.where(n + 3))
    if c.get("no_weight_tying", False):
        sd["lm_head.weight"] = _take(layers.get(n + 4), "final_linear.weight", layers.where(n + 4))
    return sd, facts


def _check_rotary(facts: dict, fields: dict, where: str) -> None:
    """A saved inv_freq fixes the rotary width and base: the config must agree with it."""
    inv = facts["inv_freq"]
    if inv is None:
        return
    head = fields["hidden_size"] // fields["num_attention_heads"]
    dims = int(head * fields["rotary_pct"])
    if 2 * inv.numel() != dims:
        raise InputFileError(f"{where}: the saved rotary inv_freq covers {2 * inv.numel()} of {head} head "
                             f"dimensions but rotary_pct={fields['rotary_pct']} gives {dims}")
    if inv.numel() > 1:
        base = float(inv[1].double() ** (-dims / 2))
        if abs(base - fields["rotary_emb_base"]) > 1e-3 * fields["rotary_emb_base"]:
            raise InputFileError(f"{where}: the saved rotary inv_freq was made with base {base:.6g}, the config "
                                 f"says rotary_emb_base={fields['rotary_emb_base']}")


def _tokenizer(c: dict, origin: str, tokenizer: Optional[Path]):
    """The run's tokenizer as an HF fast tokenizer (document token = gpt-neox's EOD), or None."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    if tokenizer is not None:
        with reading(Path(tokenizer), "the tokenizer"):
            return AutoTokenizer.from_pretrained(str(tokenizer))
    vocab = c.get("vocab_file")
    if c.get("tokenizer_type", "GPT2BPETokenizer") != "HFTokenizer" or not vocab:
        return None
    candidates = [Path(vocab)] + [Path(f).parent / vocab for f in origin.split(", ")]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise InputFileError(f"{origin}: vocab_file={vocab} not found (also looked beside the YAML); pass "
                             f"--tokenizer DIR")
    with reading(found, "the tokenizer.json named by vocab_file"):
        tok = PreTrainedTokenizerFast(tokenizer_file=str(found))
    vocab_ids = tok.get_vocab()
    if EOD in vocab_ids:  # gpt-neox ends every document with it: the start token of the next one
        tok.bos_token = tok.eos_token = EOD
        tok.pad_token = "<|padding|>" if "<|padding|>" in vocab_ids else EOD
    return tok


def import_step(step_dir: Path, out_dir: Path, *, config: Optional[Path] = None, tokenizer: Optional[Path] = None,
                require_tokenizer: bool = False, state: Optional[dict] = None) -> Path:
    """Writes the HF directory of one global_step<N> (config, weights, tokenizer and start_token.json when
    the run names one, trainer_state.json, manifest.json) under a temporary name, then renames it."""
    from transformers import GPTNeoXForCausalLM
    step_dir, out_dir = Path(step_dir), Path(out_dir)
    step = step_of(step_dir)
    c, origin = read_config(step_dir, config)
    weights, facts = read_weights(step_dir, c)
    try:
        fields = model_fields(c, intermediate_size=facts["intermediate_size"], vocab_rows=facts["vocab_rows"])
    except InputFileError as e:
        raise InputFileError(f"{origin}: {e}") from None
    if fields["hidden_size"] != facts["hidden"]:
        raise InputFileError(f"{origin}: hidden_size={fields['hidden_size']} but the embedding in {step_dir} "
                             f"is {facts['hidden']} wide")
    _check_rotary(facts, fields, str(step_dir))
    tok = _tokenizer(c, origin, tokenizer)
    if tok is None and require_tokenizer:
        raise InputFileError(f"{origin}: no tokenizer to score with (tokenizer_type HFTokenizer with a "
                             f"vocab_file, or pass a tokenizer directory)")
    if tok is not None and len(tok) > facts["vocab_rows"]:
        raise InputFileError(f"{step_dir}: the tokenizer has {len(tok)} ids but the embedding only "
                             f"{facts['vocab_rows']} rows")
    ids = {} if tok is None else {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    model = GPTNeoXForCausalLM(hf_config(model_config(fields), **ids))
    # the output layer's name is transformers' (lm_head in 5.x, embed_out before); tied: the embedding
    head = next(k for k in model.state_dict() if not k.startswith("gpt_neox."))
    weights[head] = weights.pop("lm_head.weight", weights["gpt_neox.embed_in.weight"])
    with reading(step_dir, "the gpt-neox weights into HF GPTNeoX"):
        model.load_state_dict(weights, strict=True)
    state = {"step": step, "source": "gpt-neox", "neox_checkpoint": str(step_dir.resolve()),
             "neox_files": source_stamp(step_dir),
             "config_hash": hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()).hexdigest(),
             **(state or {})}
    with built_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        if tok is not None:
            tok.save_pretrained(tmp)
            write_record(tmp, tok)
        write_json_atomic(tmp / "trainer_state.json", state)
        write_manifest(tmp, state, count_parameters(model))
    return out_dir


def tokens_per_step(c: dict) -> Optional[int]:
    """Tokens per iteration: train_batch_size (or micro x accumulation x GPUs) x seq_length."""
    batch = c.get("train_batch_size")
    if not batch and c.get("train_micro_batch_size_per_gpu") and c.get("global_num_gpus"):
        batch = c["train_micro_batch_size_per_gpu"] * c.get("gradient_accumulation_steps", 1) * \
            c["global_num_gpus"] // ((c.get("pipe_parallel_size") or 1) * (c.get("model_parallel_size") or 1))
    return batch * c["seq_length"] if batch and c.get("seq_length") else None


def source_stamp(step_dir: Path) -> dict[str, list[int]]:
    """{file below global_step<N>: [size, mtime_ns]}, recorded by an import: a global_step<N> written again
    (a restarted gpt-neox run) is told from the imported one without reading its weights."""
    out = {}
    for path in sorted(Path(step_dir).rglob("*")):
        if path.is_file():
            st = path.stat()
            out[path.relative_to(step_dir).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def _imported_from(out: Path, src: Path) -> bool:
    """Whether checkpoints/step<N> is the import of global_step<N> as it is now (an unrecorded one is kept)."""
    try:
        state = json.loads((out / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False  # not whole: import again
    recorded = state.get("neox_files")
    return recorded is None or recorded == source_stamp(src)


def sync_run(run_dir: Path, *, config: Optional[Path] = None, tokenizer: Optional[Path] = None,
             say: Callable[[str], None] = print) -> list[Path]:
    """Imports every complete global_step<N> of a gpt-neox save directory that has no checkpoints/step<N>
    yet or was replaced since its import (then its evals are redone too); returns the imported ones. A
    directory without global_step<N> (our own runs) passes untouched."""
    run_dir = Path(run_dir)
    if not is_neox_run(run_dir):
        return []
    written = []
    for step, src in complete_steps(run_dir):
        out = checkpoint_dir(run_dir, step)
        if out.is_dir():
            if _imported_from(out, src):
                continue
            say(f"gpt-neox {src} was replaced after its import: importing it again")
        c, _origin = read_config(src, config)
        per_step = tokens_per_step(c)
        state = {"tokens": None if per_step is None else step * per_step, "total_steps": c.get("train_iters")}
        import_step(src, out, config=config, tokenizer=tokenizer, require_tokenizer=True, state=state)
        say(f"imported gpt-neox {src} -> {out}")
        written.append(out)
    return written
