"""Scoring primitive vs an independent one-sentence-at-a-time computation on a tiny real model."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from probes.scoring.evaluate import ids_fingerprint
from probes.benchmarks.pairs import Pair, Region
from probes.scoring.primitive import accuracy, correct, start_id, score_pairs, sentence_ids, token_logprobs

WORDS = "the a cat cats dog dogs runs run sees see who that and . ,".split()

def tiny_tokenizer(bos: bool = True, eos: bool = True) -> PreTrainedTokenizerFast:
    specials = ["[UNK]", "<bos>", "<eos>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    kw = {"unk_token": "[UNK]"}
    if bos:
        kw["bos_token"] = "<bos>"
    if eos:
        kw["eos_token"] = "<eos>"
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kw)

def tiny_model(vocab: int, seed: int = 0) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    model = GPTNeoXForCausalLM(cfg)
    # random init is near-uniform; scale the output layer so lps differ visibly between tokens
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
    return model

def reference_lps(model, ids: list[int]) -> np.ndarray:
    """Straightforward: one sequence, no mask, full log_softmax."""
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return np.array([logp[j, ids[j + 1]].item() for j in range(len(ids) - 1)])

@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()

@pytest.fixture(scope="module")
def model(tok):
    torch.set_num_threads(1)
    return tiny_model(len(tok))

def test_sentence_ids_prepend_bos_without_specials(tok):
    ids = sentence_ids(tok, ["the cat runs .", "dogs"])
    b = tok.bos_token_id
    assert ids == [[b, tok.convert_tokens_to_ids("the"), tok.convert_tokens_to_ids("cat"),
                    tok.convert_tokens_to_ids("runs"), tok.convert_tokens_to_ids(".")],
                   [b, tok.convert_tokens_to_ids("dogs")]]

def test_bos_falls_back_to_eos_then_errors():
    assert start_id(tiny_tokenizer(bos=False)) == tiny_tokenizer().convert_tokens_to_ids("<eos>")
    with pytest.raises(ValueError, match="neither bos_token_id nor eos_token_id"):
        start_id(tiny_tokenizer(bos=False, eos=False))

def test_token_logprobs_match_reference_and_batching(tok, model):
    texts = ["the cat runs .", "a dog", "the dogs that the cat sees run , and a cat runs .", "cats",
             "who sees the dog ?"]  # "?" is out of vocabulary: [UNK]
    seqs = sentence_ids(tok, texts)
    model.train()  # the primitive must restore this
    batched = token_logprobs(model, seqs, batch_size=2)
    assert model.training
    one = token_logprobs(model, seqs, batch_size=64)
    for s, a, c in zip(seqs, batched, one):
        ref = reference_lps(model, s)
        assert a.dtype == np.float64 and a.shape == (len(s) - 1,)
        np.testing.assert_allclose(a, ref, atol=1e-4)
        np.testing.assert_allclose(c, ref, atol=1e-4)
    # the scores are not trivially uniform: tokens differ by more than the tolerance
    assert np.ptp(np.concatenate(batched)) > 0.1

def test_token_logprobs_edge_cases(tok, model):
    out = token_logprobs(model, [[tok.bos_token_id]])
    assert out[0].shape == (0,)
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        token_logprobs(model, [[1, 2], []])
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        token_logprobs(model, [[1] * 65])

def test_score_pairs_lp_regions_and_dedup(tok, model):
    pairs = [
        Pair("t", "agr", "agreement", "1", "the cat runs .", "the cat run ."),
        Pair("t", "agr", "agreement", "2", "the cats run .", "the cats runs ."),
        Pair("t", "det", "determiner", "7", "the cat runs .", "a cat runs ."),  # repeats a sentence
        Pair("t", "det", "determiner", "8", "the dog", "the dog"),  # identical: all prefix
    ]
    df = score_pairs(model, tok, pairs, batch_size=3)
    assert list(df["pair_id"]) == ["1", "2", "7", "8"]
    for p, row in zip(pairs, df.itertuples()):
        for side in ("good", "bad"):
            ids = sentence_ids(tok, [getattr(p, side)])[0]
            ref = reference_lps(model, ids)
            assert getattr(row, f"lp_{side}") == pytest.approx(ref.sum(), abs=1e-4)
            assert getattr(row, f"ntok_{side}") == len(ids) - 1
            parts = [getattr(row, f"lp_{side}_{r}") for r in ("prefix", "critical", "suffix")]
            counts = [getattr(row, f"ntok_{side}_{r}") for r in ("prefix", "critical", "suffix")]
            assert sum(parts) == pytest.approx(getattr(row, f"lp_{side}"), abs=1e-9)
            assert sum(counts) == getattr(row, f"ntok_{side}")
    r1 = df.iloc[0]  # the cat | runs / run | .
    assert (r1.ntok_good_prefix, r1.ntok_good_critical, r1.ntok_good_suffix) == (2, 1, 1)
    # the shared prefix is scored in the same context: identical lps on both sides
    assert r1.lp_good_prefix == pytest.approx(r1.lp_bad_prefix, abs=1e-9)
    r3 = df.iloc[2]  # the / a | cat runs .
    assert (r3.ntok_bad_prefix, r3.ntok_bad_critical, r3.ntok_bad_suffix) == (0, 1, 3)
    r4 = df.iloc[3]
    assert (r4.ntok_good_prefix, r4.ntok_good_critical, r4.ntok_good_suffix) == (2, 0, 0)
    assert not correct(df.iloc[[3]], "mlp").iloc[0]  # a tie is wrong
    # the repeated sentence gets one score
    assert df.iloc[0].lp_good == df.iloc[2].lp_good

def test_slot_sums_follow_pair_regions(tok, model):
    #          0123456789012345
    good = "the cats  run ."
    bad = "the cats runs ."
    regions = (Region("subject", (0, 8), (0, 8)), Region("verb", (10, 13), (9, 13)),
               Region("end", (14, 15), (14, 15)))
    pairs = [Pair("g", "sv", "agreement", "0", good, bad, regions),
             Pair("g", "det", "determiner", "1", "the dog", "a dog")]  # no regions
    df = score_pairs(model, tok, pairs)
    g = reference_lps(model, sentence_ids(tok, [good])[0])  # the cats run .
    b = reference_lps(model, sentence_ids(tok, [bad])[0])
    r = df.iloc[0]
    assert r.lp_good_slot_subject == pytest.approx(g[0] + g[1], abs=1e-4)
    assert r.lp_good_slot_verb == pytest.approx(g[2], abs=1e-4)
    assert r.lp_bad_slot_end == pytest.approx(b[3], abs=1e-4)
    assert (r.ntok_good_slot_subject, r.ntok_bad_slot_verb, r.ntok_bad_slot_end) == (2, 1, 1)
    assert sum(r[f"lp_bad_slot_{n}"] for n in ("subject", "verb", "end")) == pytest.approx(r.lp_bad)
    assert pd.isna(df.iloc[1].lp_good_slot_verb)  # a pair without regions has no slot sums


def test_score_pairs_rejects_empty_sentence(tok, model):
    with pytest.raises(ValueError, match="paradigm 'p' pair '3': empty bad sentence"):
        score_pairs(model, tok, [Pair("t", "p", "x", "3", "the cat", "  ")])
    long = " ".join(["cat"] * 64)  # 64 tokens + BOS > max_position_embeddings=64
    with pytest.raises(ValueError, match="pair '4': the bad sentence has 65 tokens with BOS"):
        score_pairs(model, tok, [Pair("t", "p", "x", "4", "the cat", long)])
    # transformers 5 builds an empty tokenizer from a folder without tokenizer files
    from transformers import GPTNeoXTokenizer
    empty = GPTNeoXTokenizer(bos_token="<|endoftext|>")
    with pytest.raises(ValueError, match="pair '5': the good sentence tokenizes to no tokens"):
        score_pairs(model, empty, [Pair("t", "p", "x", "5", "the cat", "a cat")])

def test_accuracy_is_strict():
    df = pd.DataFrame({
        "lp_good": [-4.0, -6.0, -6.0, -3.0],
        "lp_bad": [-5.0, -6.0, -4.0, -3.0],
        "ntok_good": [2, 3, 3, 1],
        "ntok_bad": [2, 3, 2, 2],
    })
    # mlp: -2>-2.5 yes; -2>-2 tie -> no; -2>-2 tie -> no; -3>-1.5 no
    assert accuracy(df, "mlp") == 0.25
    # sum: yes; tie no; -6>-4 no; tie no
    assert accuracy(df, "sum") == 0.25
    assert list(correct(df, "mlp")) == [True, False, False, False]
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        accuracy(df, "mean")
    with pytest.raises(ValueError, match="empty"):
        accuracy(df.iloc[:0])

def test_fingerprint_tracks_vocabulary(tok):
    assert ids_fingerprint(tok) == ids_fingerprint(tiny_tokenizer())
    assert ids_fingerprint(tok) != ids_fingerprint(tiny_tokenizer(bos=False))


def test_prefix_nodes_share_equal_prefixes():
    from probes.scoring.primitive import _prefix_nodes

    nodes, n = _prefix_nodes([[0, 5, 6, 7], [0, 5, 8], [0, 5, 6, 7], [0], [1, 5]])
    assert [x.tolist() for x in nodes] == [[0, 1, 2], [0, 1], [0, 1, 2], [], [3]]
    assert n == 4


def _other_architectures(vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

    torch.manual_seed(1)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64))
    opt = OPTForCausalLM(OPTConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                   ffn_dim=64, num_attention_heads=4, max_position_embeddings=64,
                                   word_embed_proj_dim=32))
    return gpt2, opt


def test_head_only_where_needed_and_plain_path_agree(tok, model):
    from probes.scoring.head import _split_head

    texts = ["the cat runs .", "the cat run .", "the cats run , and a dog sees the cat .", "cats"]
    seqs = sentence_ids(tok, texts)
    gpt2, opt = _other_architectures(len(tok))
    assert _split_head(model) is not None and _split_head(gpt2) is not None
    assert _split_head(opt) is None  # not known to be head(body(x)): its own logits are used
    for m in (model, gpt2, opt):
        for a, s in zip(token_logprobs(m, seqs, batch_size=3), seqs):
            np.testing.assert_allclose(a, reference_lps(m, s), atol=1e-4)


def test_logsumexp_overflow_falls_back_to_exact(tok):
    # logits scaled so far apart that exp(logit - target logit) overflows float32
    steep = tiny_model(len(tok), seed=3)
    with torch.no_grad():
        steep.get_output_embeddings().weight.mul_(200.0)
    seqs = sentence_ids(tok, ["the cat runs .", "who sees the dog ?"])
    got = token_logprobs(steep, seqs)
    refs = [reference_lps(steep, s) for s in seqs]
    assert min(r.min() for r in refs) < -100  # the fallback was needed
    for a, ref in zip(got, refs):
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-3)


def test_bf16_autocast_changes_the_lps_within_bf16_precision(tok, model):
    """bf16=True must really run in bf16 (the lps move by more than float32 rounding could) and stay
    within what bf16's 8 significant bits allow. The bound, to first order: under autocast the matmuls
    round their inputs to bf16 (unit roundoff u = 2**-8), the LayerNorms and the logsumexp stay fp32.
    Rounding the final hidden state h moves a logit z_v = h.w_v by at most u sum_i |h_i w_vi|, and a
    log-prob z_y - logsumexp(z) by at most twice the largest such move; the rounding inside the body
    reaches h through LayerNorm, which rescales it to the same size, so each layer adds at most as much
    again: (layers + 1) such terms per token. A sentence adds its tokens' bounds."""
    from numerics import BF16_EPS, F32_EPS, sum_tol

    seqs = sentence_ids(tok, ["the cat runs .", "the dogs that the cat sees run ."])
    fp32 = token_logprobs(model, seqs)
    bf16 = token_logprobs(model, seqs, bf16=True)
    w = model.get_output_embeddings().weight.detach().double()
    layers = model.config.num_hidden_layers
    moved = 0.0
    for ids, a, b in zip(seqs, fp32, bf16):
        assert b.dtype == np.float64 and b.shape == a.shape
        with torch.no_grad():
            h = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0, :-1].double()
        scale = (h.abs() @ w.abs().T).max(-1).values.numpy()  # max_v sum_i |h_i w_vi|, per position
        per_token = 2 * (layers + 1) * (BF16_EPS / 2) * scale
        assert (np.abs(b - a) <= per_token).all(), (np.abs(b - a), per_token)
        assert abs(b.sum() - a.sum()) <= per_token.sum()
        # fp32 alone: every lp within float32 rounding of these dot products (tests/numerics.py)
        moved = max(moved, float((np.abs(b - a) / sum_tol(scale, model.config.hidden_size, F32_EPS)).max()))
    assert moved > 1, "bf16=True gave the fp32 lps: autocast did not run"


def test_cpu_head_blocks_match_logsumexp():
    # the CPU path of the output layer: addmm blocks of a transposed weight, bias included, a
    # vocabulary of several blocks and a partial last one, more rows than one chunk
    from probes.scoring.head import _HEAD_CHUNK, _HEAD_VOCAB_BLOCK, _HeadLSE

    torch.manual_seed(0)
    vocab, rows = 2 * _HEAD_VOCAB_BLOCK + 5, _HEAD_CHUNK["cpu"] + 7
    head = torch.nn.Linear(16, vocab, bias=True)
    with torch.no_grad():
        head.weight.mul_(5.0)
        head.bias.uniform_(-3.0, 3.0)
        head.bias[-5:] = 12.0  # the partial last block carries much of the mass
    h = torch.randn(rows, 16)
    with torch.inference_mode():
        logits = head(h)
        target = torch.randint(0, vocab, (rows,))
        shift = logits[torch.arange(rows), target]
        lse = _HeadLSE(head, torch.device("cpu"), bf16=False)
        assert lse.wt is not None  # the blocked path, not head(h)
        got = lse(h, shift)
    np.testing.assert_allclose(got.numpy(), torch.logsumexp(logits.double(), -1).numpy(), rtol=0, atol=1e-4)
