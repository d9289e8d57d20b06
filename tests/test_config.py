"""The Hydra config tree against its typed schema."""
import pytest
from hydra.errors import ConfigCompositionException

from trainutil import compose_cfg
from train.config import to_typed


def test_default_config_composes_to_typed_objects():
    cfg = to_typed(compose_cfg([]))
    assert cfg.model.name == "tiny" and cfg.engine.kind == "torch" and cfg.data.seed == cfg.seed
    assert cfg.optim.lr == cfg.model.lr  # the pythia preset takes the per-size lr


@pytest.mark.parametrize("size,lr", [("pythia-14m", 1e-3), ("pythia-160m", 6e-4), ("pythia-1.4b", 2e-4)])
def test_pythia_preset_takes_the_lr_of_the_model(size, lr):
    cfg = to_typed(compose_cfg([f"model={size}", "optim=pythia"]))
    assert cfg.optim.lr == lr and cfg.optim.min_lr_ratio == 0.1 and cfg.optim.global_batch == 1024
    assert cfg.optim.warmup_ratio == 0.01 and cfg.optim.betas == [0.9, 0.95]


def test_unknown_key_names_the_key():
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg(["model.hiden_size=3"])
    assert "hiden_size" in str(err.value.__cause__ or err.value)


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg(["optim.global_batch=lots"])
    assert "global_batch" in str(err.value.__cause__ or err.value)


def test_bad_value_names_the_key():
    with pytest.raises(ValueError, match="engine.kind='jax'"):
        to_typed(compose_cfg(["engine.kind=jax"]))


def test_experiment_preset_wins_over_the_base_config():
    cfg = compose_cfg(["experiment=demo"])
    assert cfg.experiment == "demo" and cfg.schedule.kind == "log" and cfg.schedule.n_log == 20
    assert cfg.data.grammar.n_documents == 6000 and cfg.data.seed == cfg.seed


def test_key_added_with_plus_is_refused_too():
    # `+key=value` is Hydra's own suggested fix for a typo; it bypasses the schema at compose time
    with pytest.raises(ValueError, match="unknown config key 'optim.global_batchh'"):
        to_typed(compose_cfg(["+optim.global_batchh=32"]))


def test_seq_len_beyond_the_position_embeddings_names_both_keys():
    with pytest.raises(ValueError, match=r"data.seq_len=128 .*model.max_position_embeddings=64"):
        to_typed(compose_cfg(["model.max_position_embeddings=64", "data.seq_len=128"]))
    assert to_typed(compose_cfg(["model.max_position_embeddings=64", "data.seq_len=64"])).data.seq_len == 64


@pytest.mark.parametrize("override,message", [
    ("optim.micro_batch=0", "optim.micro_batch=0: must be at least 1"),
    ("optim.micro_batch=-8", "optim.micro_batch=-8: must be at least 1"),
    ("optim.global_batch=0", "optim.global_batch=0: must be at least 1"),
    ("optim.micro_batch=3", "optim.global_batch=256 must be a multiple of optim.micro_batch=3"),
])
def test_batch_sizes_are_checked_at_config_time(override, message):
    with pytest.raises(ValueError, match=message):
        to_typed(compose_cfg(["optim=zhoblimp", override]))
