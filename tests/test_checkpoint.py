import json

import pytest
import torch
from transformers import GPTNeoXForCausalLM, PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers

from train.checkpoint import (IncompleteCheckpointError, latest_resumable, list_checkpoints,
                              prune_resume_states, save_checkpoint, verify_checkpoint)
from train.engine import Dist, EngineConfig, TorchEngine
from train.model import ModelConfig, build_model
from train.optim import OptimConfig


def tiny_tokenizer():
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "the", "dog", "runs"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture
def engine():
    model = build_model(ModelConfig(hidden_size=32, intermediate_size=64, vocab_size=128), seed=0)
    dist = Dist(rank=0, world=1, local_rank=0, device=torch.device("cpu"))
    return TorchEngine(EngineConfig(), OptimConfig(global_batch=2, micro_batch=2), model, dist), dist


def test_checkpoint_is_whole_and_resume_state_is_pruned(tmp_path, engine):
    eng, dist = engine
    tok = tiny_tokenizer()
    for step in (0, 1, 2, 4):
        save_checkpoint(tmp_path, step, eng, tok, {"step": step}, dist, with_resume=True)
        prune_resume_states(tmp_path, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [0, 1, 2, 4]
    assert [s for s, p in list_checkpoints(tmp_path) if (p / "resume").is_dir()] == [2, 4]
    assert latest_resumable(tmp_path).name == "step4"
    ckpt = tmp_path / "checkpoints" / "step4"
    assert json.loads((ckpt / "trainer_state.json").read_text()) == {"step": 4}
    assert (ckpt / "resume" / "optimizer.pt").is_file() and (ckpt / "resume" / "rng_rank0.pt").is_file()
    loaded = GPTNeoXForCausalLM.from_pretrained(ckpt)
    assert torch.equal(loaded.lm_head.weight, eng.module.lm_head.weight)


def test_temporary_directories_are_not_checkpoints(tmp_path, engine):
    eng, dist = engine
    save_checkpoint(tmp_path, 1, eng, tiny_tokenizer(), {"step": 1}, dist, with_resume=True)
    # A crash mid-write leaves only a temporary name behind: readers skip it, a rerun replaces it.
    (tmp_path / "checkpoints" / ".tmp-step2").mkdir()
    (tmp_path / "checkpoints" / ".tmp-step2" / "config.json").write_text("{")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert latest_resumable(tmp_path).name == "step1"
    save_checkpoint(tmp_path, 2, eng, tiny_tokenizer(), {"step": 2}, dist, with_resume=False)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2]
    verify_checkpoint(tmp_path / "checkpoints" / "step2")


def test_incomplete_checkpoint_is_reported_by_name(tmp_path, engine):
    eng, dist = engine
    save_checkpoint(tmp_path, 3, eng, tiny_tokenizer(), {"step": 3}, dist, with_resume=True)
    (tmp_path / "checkpoints" / "step3" / "model.safetensors").unlink()
    with pytest.raises(IncompleteCheckpointError, match=r"step3 is incomplete: missing model.safetensors"):
        latest_resumable(tmp_path)
