"""Pythia-size GPT-NeoX models, built from configs whose field names are GPTNeoXConfig's."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional

from train.errors import ConfigError

if TYPE_CHECKING:  # imported where used: the config schema (train.config) and `plan` need neither
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

# Fields of ModelConfig that are ours; everything else passes straight to GPTNeoXConfig.
_OWN_FIELDS = ("name", "lr", "init_method", "gradient_checkpointing")
# transformers' names; flash_attention_2 needs the flash-attn package and a CUDA GPU.
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2", "flex_attention")


@dataclass
class ModelConfig:
    name: str = "tiny"
    lr: Optional[float] = None  # the published peak lr for this size; optim presets read ${model.lr}
    init_method: str = "pythia"  # pythia: small_init everywhere, wang_init on output projections | hf
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 256
    rotary_pct: float = 0.25
    rotary_emb_base: int = 10000
    use_parallel_residual: bool = True
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    vocab_size: Optional[int] = None  # None: the tokenizer's vocabulary padded to a multiple of 128
    layer_norm_eps: float = 1e-5
    hidden_act: str = "gelu"
    # Speed and memory only, not the trajectory (resume may change them; train/config.py):
    gradient_checkpointing: bool = False  # recompute each layer's activations in backward (~1/3 more compute)
    attn_implementation: str = "sdpa"  # sdpa | eager | flash_attention_2 | flex_attention (transformers')

    def __post_init__(self):
        # sizes that cannot build a model, refused at start (a zero head count divides by zero in transformers)
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                    "max_position_embeddings"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)}: must be at least 1")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"model.hidden_size={self.hidden_size} is not divisible by "
                              f"model.num_attention_heads={self.num_attention_heads}")
        if not 0 < self.rotary_pct <= 1:
            raise ConfigError(f"model.rotary_pct={self.rotary_pct}: expected a fraction in (0, 1]")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ConfigError(f"model.vocab_size={self.vocab_size}: must be at least 1 (or null: the tokenizer's)")
        if self.lr is not None and not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"model.lr={self.lr}: the peak learning rate must be a positive number")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(f"model.attn_implementation={self.attn_implementation!r}: expected one of "
                             f"{', '.join(ATTN_IMPLEMENTATIONS)}")


def pad_vocab(n: int, multiple: int = 128) -> int:
    """Pythia pads the embedding matrix to a multiple of 128 (50277 tokens -> 50304 rows)."""
    return ((n + multiple - 1) // multiple) * multiple


def embedding_rows(cfg: ModelConfig, tokenizer_vocab: Optional[int] = None) -> int:
    """model.vocab_size, or (null) the tokenizer's length padded to a multiple of 128."""
    if cfg.vocab_size is None:
        if tokenizer_vocab is None:
            raise ValueError("model.vocab_size is null and no tokenizer size was given to derive it from")
        return pad_vocab(tokenizer_vocab)
    if tokenizer_vocab is not None and cfg.vocab_size < tokenizer_vocab:
        raise ValueError(
            f"model.vocab_size={cfg.vocab_size} is smaller than the tokenizer's vocabulary "
            f"({tokenizer_vocab} ids): set model.vocab_size>={tokenizer_vocab} or null to derive it")
    return cfg.vocab_size


def hf_config(cfg: ModelConfig, tokenizer_vocab: Optional[int] = None, *, bos_token_id=None,
              eos_token_id=None) -> GPTNeoXConfig:
    fields = {k: v for k, v in asdict(cfg).items() if k not in _OWN_FIELDS}
    fields["vocab_size"] = embedding_rows(cfg, tokenizer_vocab)
    from transformers import GPTNeoXConfig
    # Pythia trains without dropout; bias terms and the rotary layout follow GPT-NeoX.
    return GPTNeoXConfig(**fields, attention_dropout=0.0, hidden_dropout=0.0,
                         bos_token_id=bos_token_id, eos_token_id=eos_token_id)


def init_pythia_(model: GPTNeoXForCausalLM) -> None:
    """Pythia's: normal(0, sqrt(2/(5d))) ("small_init") for every weight and embedding, normal(0, 2/(L*sqrt(d)))
    ("wang_init") for the projections into the residual stream; biases zero, LayerNorms identity."""
    import torch
    with torch.no_grad():  # the weights are filled in place, outside autograd
        d = model.config.hidden_size
        n_layers = model.config.num_hidden_layers
        small = math.sqrt(2.0 / (5.0 * d))
        wang = 2.0 / (n_layers * math.sqrt(d))
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                std = wang if name.endswith(("attention.dense", "mlp.dense_4h_to_h")) else small
                module.weight.normal_(0.0, std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()


def build_model(cfg: ModelConfig, tokenizer_vocab: Optional[int] = None, *, seed: int = 0,
                bos_token_id=None, eos_token_id=None, device: str | torch.device = "cpu") -> GPTNeoXForCausalLM:
    """A freshly initialised model; the same seed gives the same weights on every rank."""
    import torch
    from transformers import GPTNeoXForCausalLM
    config = hf_config(cfg, tokenizer_vocab, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    with torch.device(device), torch.random.fork_rng(devices=[], enabled=cfg.init_method == "hf"):
        if cfg.init_method == "hf":  # transformers initialises in the constructor: seed it there
            torch.manual_seed(seed)
        model = GPTNeoXForCausalLM(config)
    if str(device) != "meta":
        if cfg.init_method == "pythia":
            gen_state = torch.random.get_rng_state()
            torch.manual_seed(seed)
            init_pythia_(model)
            torch.random.set_rng_state(gen_state)
        elif cfg.init_method != "hf":
            raise ValueError(f"model.init_method={cfg.init_method!r}: expected 'pythia' or 'hf'")
    if cfg.gradient_checkpointing:
        # Non-reentrant checkpointing: works with DDP/ZeRO and with inputs that need no grad.
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameters_of(cfg: ModelConfig, tokenizer_vocab: Optional[int] = None) -> int:
    """count_parameters(build_model(cfg, tokenizer_vocab)) by arithmetic, without torch (`plan` sizes grids
    with it): embedding, per layer two LayerNorms, QKV, output and MLP (with biases), final norm, head."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    rows = embedding_rows(cfg, tokenizer_vocab)
    layer = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d)
    return rows * d * (1 if cfg.tie_word_embeddings else 2) + cfg.num_hidden_layers * layer + 2 * d
