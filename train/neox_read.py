"""A gpt-neox config in our terms: the model and checkpoint steps it trains. Both the export (train/neox.py)
and the checkpoint import (train/neox_ckpt.py) stand on it; keys checked against train.neox.NEOX_COMMIT."""
from __future__ import annotations

from dataclasses import fields
from typing import Optional

from train.errors import InputFileError

EOD = "<|endoftext|>"  # gpt-neox's HFTokenizer ends every document with this piece (tokenizer.py: eod_id)


def save_steps(c: dict) -> list[int]:
    """The iterations a gpt-neox run with config `c` checkpoints (megatron/training.py: step 0 only when
    listed in extra_save_iters; then every iteration that is_save_iter accepts; and the last one)."""
    total = c.get("train_iters") or 0
    extra = set(c.get("extra_save_iters") or [])
    factor = c.get("checkpoint_factor")
    out = {0} if 0 in extra else set()
    for it in range(1, total + 1):
        if it in extra or (factor and _on_factor(it, factor, c.get("checkpoint_scale", "linear"))):
            out.add(it)
    if total:
        out.add(total)
    return sorted(out)


def _on_factor(it: int, factor, scale: str) -> bool:
    if scale == "linear":
        return it % int(factor) == 0
    power = 1.0  # log: 1, f, f^2 ... (truncated to ints)
    while power < it + 1:
        if int(power) == it:
            return True
        power *= factor
    return False


def normalize_keys(c: dict) -> dict:
    """gpt-neox accepts `num-layers` and `num_layers` alike; top-level keys in the underscore spelling."""
    return {str(k).replace("-", "_"): v for k, v in c.items()}


def model_fields(c: dict, *, intermediate_size: Optional[int] = None, vocab_rows: Optional[int] = None) -> dict:
    """ModelConfig fields of the model a gpt-neox config `c` (normalised keys) describes, gpt-neox's defaults
    where a key is missing. `intermediate_size` from the weights' shapes wins: Pythia's YAMLs have no such
    key, and 4 x hidden_size is a formula (gpt-neox #1208)."""
    def need(key):
        if c.get(key) is None:
            raise InputFileError(f"gpt-neox config has no {key!r}")
        return c[key]

    pos, norm = c.get("pos_emb", "learned"), c.get("norm", "layernorm")
    attention = sorted(_attention_types(c.get("attention_config")) - {"global", "flash"})
    for refused, why in [(pos != "rotary", f"pos_emb={pos!r}; HF GPTNeoX has rotary positions only"),
                         (c.get("gpt_j_tied"), "gpt_j_tied=true (one LayerNorm per block); HF GPTNeoX has two"),
                         (norm != "layernorm", f"norm={norm!r}; HF GPTNeoX has LayerNorm only"),
                         *((c.get(key) is False, f"{key}=false; HF GPTNeoX has these biases")
                           for key in ("use_bias_in_norms", "use_bias_in_attn_linear", "use_bias_in_mlp")),
                         (c.get("use_qk_layernorm"), "use_qk_layernorm=true; HF GPTNeoX has no QK norm"),
                         (attention, f"attention_config has {attention}; HF GPTNeoX has dense causal attention "
                                     f"only (global/flash)")]:
        if refused:
            raise InputFileError(f"gpt-neox config: {why}")
    activation = c.get("activation", "gelu")
    if activation == "gelu":
        hidden_act = "gelu_new" if c.get("bias_gelu_fusion") and not c.get("onnx_safe") else "gelu"
    elif activation in ("relu", "silu"):
        hidden_act = activation
    else:
        raise InputFileError(f"gpt-neox config: activation={activation!r}; importable: gelu, relu, silu "
                             f"(gated activations have no HF GPTNeoX layout)")
    hidden = need("hidden_size")
    base = c.get("rotary_emb_base", 10000)
    return {
        "name": "gpt-neox",
        "hidden_size": hidden,
        "num_hidden_layers": need("num_layers"),
        "num_attention_heads": need("num_attention_heads"),
        "intermediate_size": intermediate_size or c.get("intermediate_size") or 4 * hidden,
        "rotary_pct": float(c.get("rotary_pct", 1.0)),
        "rotary_emb_base": int(base) if float(base).is_integer() else base,
        "use_parallel_residual": bool(c.get("gpt_j_residual", False)),
        "tie_word_embeddings": not c.get("no_weight_tying", False),
        "max_position_embeddings": c.get("max_position_embeddings") or need("seq_length"),
        "vocab_size": vocab_rows,
        "layer_norm_eps": float(c.get("layernorm_epsilon", 1e-5)),
        "hidden_act": hidden_act,
        "init_method": {"small_init": "pythia"}.get(c.get("init_method", "normal"), "hf"),
    }


def _attention_types(spec) -> set[str]:
    """The attention kinds named in attention_config ([[["flash"], 6]] -> {"flash"}); default global."""
    if not spec:
        return {"global"}
    kinds: set[str] = set()
    for entry in spec:
        names = entry[0] if isinstance(entry, (list, tuple)) and entry else entry
        kinds.update([names] if isinstance(names, str) else names)
    return kinds


def model_config(fields_: dict):
    """A ModelConfig from `model_fields` output (unknown names refused by the dataclass)."""
    from train.model import ModelConfig
    known = {f.name for f in fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in fields_.items() if k in known})
