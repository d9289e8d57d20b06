import math
from pathlib import Path

import pytest
import torch
import yaml

from train.model import ModelConfig, build_model, count_parameters, hf_config, pad_vocab, parameters_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "model"

# Pythia's published totals with the 50304-row GPT-NeoX vocabulary (its tokenizer: 50,277 ids).
PYTHIA_TOKENIZER_LEN = 50277
PYTHIA_PARAMS = {
    "pythia-14m": 14_067_712,
    "pythia-70m": 70_426_624,
    "pythia-160m": 162_322_944,
    "pythia-410m": 405_334_016,
    "pythia-1.4b": 1_414_647_808,
}


def load(name: str) -> ModelConfig:
    return ModelConfig(**yaml.safe_load((CONFIGS / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name,expected", sorted(PYTHIA_PARAMS.items()))
def test_pythia_parameter_counts_on_meta_device(name, expected):
    cfg = load(name)
    model = build_model(cfg, PYTHIA_TOKENIZER_LEN, device="meta")
    assert model.config.vocab_size == 50304
    assert count_parameters(model) == expected


@pytest.mark.parametrize("name", sorted(PYTHIA_PARAMS))
def test_pythia_sizes_follow_the_tokenizer_unless_pinned(name):
    """An 8,000-piece tokenizer gets 8,064 embedding rows, not Pythia's 50,304 (42k never-used rows);
    chinese-llama's 49,953 pieces (the paper's tokenizer) get 50,048; a pinned vocab_size wins."""
    cfg = load(name)
    assert cfg.vocab_size is None
    d = cfg.hidden_size
    for n_tok, rows in ((8000, 8064), (49953, 50048)):
        model = build_model(cfg, n_tok, device="meta")
        assert model.config.vocab_size == rows
        # embedding in + untied output layer: 2 x rows x d
        assert count_parameters(model) == PYTHIA_PARAMS[name] - 2 * (50304 - rows) * d
        assert parameters_of(cfg, n_tok) == count_parameters(model)  # the plan's arithmetic, held to the model
    pinned = build_model(ModelConfig(**{**cfg.__dict__, "vocab_size": 50304}), 8000, device="meta")
    assert count_parameters(pinned) == PYTHIA_PARAMS[name]


def test_the_plans_parameter_arithmetic_matches_every_built_model():
    """train.plan counts parameters without torch (train.model.parameters_of): every preset, tied or not."""
    for f in sorted(CONFIGS.glob("*.yaml")):
        for tie in (False, True):
            cfg = ModelConfig(**{**yaml.safe_load(f.read_text()), "tie_word_embeddings": tie})
            assert parameters_of(cfg, 8000) == count_parameters(build_model(cfg, 8000, device="meta")), (f.name, tie)


def test_pythia_shared_architecture_choices():
    for name in PYTHIA_PARAMS:
        hf = hf_config(load(name), PYTHIA_TOKENIZER_LEN)
        assert hf.rope_parameters["partial_rotary_factor"] == 0.25 and hf.use_parallel_residual and not hf.tie_word_embeddings
        assert hf.max_position_embeddings == 2048
        assert hf.intermediate_size == 4 * hf.hidden_size


def test_published_learning_rates():
    lrs = {name: load(name).lr for name in PYTHIA_PARAMS}
    assert lrs == {"pythia-14m": 1e-3, "pythia-70m": 1e-3, "pythia-160m": 6e-4,
                   "pythia-410m": 3e-4, "pythia-1.4b": 2e-4}


def test_vocab_is_padded_from_tokenizer_and_checked():
    assert pad_vocab(50277) == 50304 and pad_vocab(128) == 128 and pad_vocab(129) == 256
    assert hf_config(ModelConfig(vocab_size=None), tokenizer_vocab=300).vocab_size == 384
    with pytest.raises(ValueError, match=r"model.vocab_size=256 is smaller than the tokenizer's vocabulary \(300"):
        hf_config(ModelConfig(vocab_size=256), tokenizer_vocab=300)


def test_pythia_initialisation_stds():
    cfg = ModelConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                      vocab_size=4096)
    model = build_model(cfg, seed=1)
    small = math.sqrt(2 / (5 * 256))
    wang = 2 / (4 * math.sqrt(256))
    layer = model.gpt_neox.layers[0]
    for weight, std in [(model.gpt_neox.embed_in.weight, small), (layer.attention.query_key_value.weight, small),
                        (layer.mlp.dense_h_to_4h.weight, small), (model.lm_head.weight, small),
                        (layer.attention.dense.weight, wang), (layer.mlp.dense_4h_to_h.weight, wang)]:
        assert weight.std().item() == pytest.approx(std, rel=0.03)
    assert torch.all(layer.attention.dense.bias == 0)
    assert torch.all(layer.input_layernorm.weight == 1)
    # Same seed, same weights (every rank builds its own copy).
    again = build_model(cfg, seed=1)
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)


def test_hf_initialisation_is_transformers_own_and_follows_the_seed():
    """model.init_method=hf: transformers' GPT-NeoX init, normal(0, initializer_range = 0.02, GPTNeoXConfig's
    default) for every matrix -- the residual projections too, which Pythia's init gives 2/(L*sqrt(d)) =
    0.125 here -- seeded like Pythia's, so step0 is the same model on every rank and every rerun."""
    cfg = ModelConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                      vocab_size=4096, init_method="hf")
    model = build_model(cfg, seed=1)
    assert model.config.initializer_range == 0.02
    layer = model.gpt_neox.layers[0]
    for weight in (model.gpt_neox.embed_in.weight, layer.attention.query_key_value.weight, layer.mlp.dense_h_to_4h.weight,
                   model.lm_head.weight, layer.attention.dense.weight, layer.mlp.dense_4h_to_h.weight):
        assert weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert torch.all(layer.attention.dense.bias == 0) and torch.all(layer.input_layernorm.weight == 1)
    assert torch.equal(build_model(cfg, seed=1).lm_head.weight, model.lm_head.weight)
    assert not torch.equal(build_model(cfg, seed=2).lm_head.weight, model.lm_head.weight)
    with pytest.raises(ValueError, match=r"model.init_method='xavier': expected 'pythia' or 'hf'"):
        build_model(ModelConfig(init_method="xavier"), 300)
