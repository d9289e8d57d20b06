"""Scoring a tiny GPT-NeoX end to end: continuation tokenisation, generation, the CLI and its parquet."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from probes.syntaxqa.items import EmptyKnowledgePointWarning
from probes.syntaxqa.score import SyntaxQAConfig, build_items_and_reports, continuation_ids, generate_answers, main, score_items, summarize

# Hand-written trees and dependency sentences (our own text); enough facts for all three question types.
TREES = """\
( (S (NP-SBJ (DT The) (NN bank) ) (VP (VBD gave) (NP (PRP its) (NNS clients) ) (NP (DT a) (NN refund) )
   (PP-TMP (IN in) (NP (NNP May) ))) (. .) ))
( (S (NP-SBJ (NNP Ann) (CC and) (NNP Bo) ) (VP (MD will) (VP (VB paint) (NP (DT the) (JJ old) (NN fence) )
   (PP-LOC (IN behind) (NP (DT the) (NN house) )))) (. .) ))
( (S (NP-SBJ (DT The) (NN river) ) (VP (VBD flooded) (NP (DT the) (NNS fields) ) (ADVP-TMP (RB yesterday) )) (. .) ))
( (S (NP-SBJ (PRP He) ) (VP (VBD sold) (NP (NP (DT the) (NN car) ) (PP (IN with) (NP (DT a) (JJ red) (NN roof) )))
   (PP-TMP (IN on) (NP (NNP Monday) ))) (. .) ))
( (S (NP-SBJ (NP (DT The) (NN man) ) (SBAR (WHNP-1 (WP who) ) (S (NP-SBJ (-NONE- *T*-1) ) (VP (VBD called) ))))
   (VP (VBZ is) (NP-PRD (PRP$ my) (NN uncle) )) (. .) ))
"""

# A hand-written Chinese sentence (UD style): Chinese items get the Chinese frame (正确/错误).
ZH = "".join(f"{i}\t{w}\t{w}\t{u}\t_\t_\t{h}\t{r}\t_\tSpaceAfter=No\n" for i, w, u, h, r in [
    (1, "我", "PRON", 2, "nsubj"), (2, "买", "VERB", 4, "acl:relcl"), (3, "的", "PART", 2, "mark:rel"),
    (4, "书", "NOUN", 6, "nsubj"), (5, "很", "ADV", 6, "advmod"), (6, "好", "ADJ", 0, "root"), (7, "。", "PUNCT", 6, "punct")])


def _tokenizer(texts: list[str], save_to: Path | None = None) -> PreTrainedTokenizerFast:
    """A small byte-level BPE trained on the given texts, with BOS/EOS, wrapped for transformers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|pad|>")
    if save_to is not None:
        fast.save_pretrained(save_to)
    return fast


def _model(vocab: int, seed: int = 0) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=1024, bos_token_id=0, eos_token_id=0)
    return GPTNeoXForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("sqa")
    (d / "hand.mrg").write_text(TREES)
    (d / "zh_hand.conllu").write_text("# sent_id = zh1\n" + ZH + "\n", encoding="utf-8")
    cfg = SyntaxQAConfig(sources=[str(d / "hand.mrg"), str(d / "zh_hand.conllu")], knowledge_points=["GS", "ADJ", "DO", "PPA"],
                         k_per_tuple=2, seed=0, max_new_tokens=6, batch_size=8)
    with pytest.warns(EmptyKnowledgePointWarning, match=r"zh_hand.conllu: no items for knowledge point\(s\) DO, PPA"):
        items = build_items_and_reports(cfg)[0]
    texts = [p for it in items for p in it.prompts] + [it.answer for it in items] + ['"True"', '"False"'] * 20
    tok = _tokenizer(texts, save_to=d / "model")
    model = _model(len(tok))
    model.save_pretrained(d / "model")
    return d, cfg, items, tok, model


def test_continuations_share_one_context(setup):
    _, _, items, tok, _ = setup
    prefix = items[0].prompts[0]
    for conts in (["True", "False"], ["A", "B", "C", "D"]):
        ctx, tails = continuation_ids(tok, prefix, conts)
        assert ctx[0] == tok.bos_token_id
        for c, t in zip(conts, tails):
            assert ctx + t == [tok.bos_token_id] + tok(prefix + c, add_special_tokens=False)["input_ids"]
            assert tok.decode(ctx[1:] + t).endswith(c)


def _merging_tokenizer() -> PreTrainedTokenizerFast:
    """Character BPE whose merges glue the opening quote to the answer: '▁"True' is one token."""
    text = 'The answer is "True" or "False" ABCD'
    chars = sorted(set(text.replace(" ", "")) | {"▁"})
    merges = [("▁", '"'), ('▁"', "T"), ('▁"T', "r"), ('▁"Tr', "u"), ('▁"Tru', "e")]
    vocab = {"<s>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok.decoder = decoders.Metaspace(prepend_scheme="never")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>")


def test_quote_merged_with_the_answer():
    # The prompt ends with the token '▁"', but prompt+"True" ends with '▁"True': the prompt's tokens
    # are not a prefix of the prompt+answer tokens, so the shared context must stop before the quote,
    # and "True" (one merged token) and "False" (quote + five letters) are scored on that context.
    tok = _merging_tokenizer()
    prefix = 'The answer is "'
    p_ids = tok(prefix, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(p_ids)[-1] == '▁"'
    ctx, tails = continuation_ids(tok, prefix, ["True", "False"])
    assert ctx == [tok.bos_token_id] + p_ids[:-1]
    assert tok.convert_ids_to_tokens(tails[0]) == ['▁"True']
    assert tok.convert_ids_to_tokens(tails[1]) == ['▁"', "F", "a", "l", "s", "e"]
    for c, t in zip(["True", "False"], tails):
        assert ctx + t == [tok.bos_token_id] + tok(prefix + c, add_special_tokens=False)["input_ids"]
    # letters split off cleanly: the context is the whole prompt
    ctx, tails = continuation_ids(tok, prefix, ["A", "B", "C", "D"])
    assert ctx == [tok.bos_token_id] + p_ids and all(len(t) == 1 for t in tails)


def test_likelihood_scores_match_a_direct_forward(setup):
    _, cfg, items, tok, model = setup
    tf = [it for it in items if it.qtype == "TF"][:3]
    df = score_items(model, tok, tf, cfg)
    for it, (_, r) in zip(tf, df.iterrows()):
        ctx, tails = continuation_ids(tok, it.prompts[0], ["True", "False"])
        sums = []
        for t in tails:
            ids = torch.tensor([ctx + t])
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0].double(), -1)
            sums.append(sum(float(logp[len(ctx) - 1 + j, t[j]]) for j in range(len(t))))
        assert np.allclose(r["lp_options"], sums, atol=1e-4)
        winner = "True" if sums[0] > sums[1] else "False"
        assert r["pred"] == winner and r["correct"] == float(winner == it.answer)


def test_batched_generation_equals_one_by_one(setup):
    _, cfg, items, tok, model = setup
    fitb = [it for it in items if it.qtype == "FITB"][:4]
    prompts = [it.prompts[0] for it in fitb]
    closes = ['"'] * len(prompts)
    batched = generate_answers(model, tok, prompts, closes, cfg, "cpu")
    one = SyntaxQAConfig(sources=cfg.sources, max_new_tokens=cfg.max_new_tokens, batch_size=1)
    assert batched == generate_answers(model, tok, prompts, closes, one, "cpu")
    assert all('"' not in a for a in batched)


def test_cli_end_to_end(setup, capsys):
    d, _, items, _, _ = setup
    out = d / "evals" / "step0" / "syntax_qa.parquet"
    with pytest.warns(EmptyKnowledgePointWarning):
        rc = main(["--model", str(d / "model"), "--out", str(out), "--sources", str(d / "hand.mrg"),
                   "--sources", str(d / "zh_hand.conllu"), "--knowledge-points", "GS", "ADJ", "DO", "PPA",
                   "--k-per-tuple", "2",
                   "--max-new-tokens", "6", "--shots", "1", "--shot-seeds", "2"])
    assert rc == 0
    df = pd.read_parquet(out)
    assert len(df) == len(items) and set(df["qtype"]) == {"TF", "MC", "FITB"} and set(df["lang"]) == {"en", "zh"}
    assert set(df.loc[df.qtype == "TF", "pred"]) <= {"True", "False"}  # canonical even for 正确/错误 prompts
    zh_tf = df[(df.lang == "zh") & (df.qtype == "TF")]
    assert len(zh_tf) and all("答案：答案是“" in it.prompts[0] for it in items if it.lang == "zh")
    assert (df["n_prompts"] == 2).all()  # two exemplar seeds per item
    assert df["correct"].between(0, 1).all() and df.loc[df.qtype == "FITB", "f1"].between(0, 1).all()
    meta = json.loads(__import__("pyarrow.parquet", fromlist=["x"]).read_schema(out).metadata[b"syntax_dynamics"])
    assert meta["benchmark"] == "syntax_qa" and meta["config"]["shots"] == 1
    s = summarize(df)
    assert meta["summary"]["OA"] == pytest.approx(s["OA"])
    assert 0 <= s["OA"] <= 1 and s["OA_random"] == pytest.approx(
        (0.5 + 0.25 + (df[df.qtype == "FITB"].rand_acc.mean() + df[df.qtype == "FITB"].rand_f1.mean()) / 2) / 3)
    printed = capsys.readouterr().out
    assert "total" in printed and "syntax_qa:" in printed


def test_cli_flags_are_the_config_fields():
    """`--k-per-tuple` is SyntaxQAConfig.k_per_tuple (probes.syntax_qa.k_per_tuple in training); no
    flag renames a field, and a flag not given leaves the field's default."""
    import dataclasses

    from probes.syntaxqa.config import PaperConfig
    from probes.syntaxqa.score import CLI_ONLY, build_parser

    parser = build_parser()
    flags = {a.dest: a.option_strings for a in parser._actions if a.dest != "help"}
    fields = {f.name for f in dataclasses.fields(SyntaxQAConfig)} - {"enabled", "paper"}
    # the nested paper settings: syntax_qa.paper.<field> is --paper-<field>, dest "paper.<field>"
    paper = {f"paper.{f.name}" for f in dataclasses.fields(PaperConfig)}
    assert set(flags) == fields | paper | set(CLI_ONLY)
    for name in fields:
        assert f"--{name.replace('_', '-')}" in flags[name], (name, flags[name])
    for name in paper:
        assert f"--{name.replace('.', '-').replace('_', '-')}" in flags[name], (name, flags[name])
    given = parser.parse_args(["--model", "m", "--out", "o.parquet", "--sources", "a", "b", "--sources", "c",
                               "--max-items", "7", "--no-generate"])
    assert {k: v for k, v in vars(given).items() if k not in CLI_ONLY} == {
        "sources": ["a", "b", "c"], "max_items": 7, "generate": False}
    cfg = SyntaxQAConfig(**{k: v for k, v in vars(given).items() if k not in CLI_ONLY})
    assert cfg.k_per_tuple == SyntaxQAConfig().k_per_tuple and cfg.generate is False


def test_cli_errors_name_the_flag_or_file(setup, tmp_path, capsys):
    d = setup[0]
    rc = main(["--model", str(tmp_path), "--out", str(tmp_path / "x.parquet"), "--sources", str(d / "hand.mrg")])
    assert rc == 2 and "--model" in capsys.readouterr().err
    rc = main(["--model", str(d / "model"), "--out", str(tmp_path / "x.parquet"), "--sources", str(tmp_path / "nope.mrg")])
    assert rc == 2 and "nope.mrg: no such file" in capsys.readouterr().err
    rc = main(["--model", str(d / "model"), "--out", str(tmp_path / "x.parquet"), "--sources", str(d / "hand.mrg"),
               "--knowledge-points", "XX"])
    assert rc == 2 and "syntax_qa.knowledge_points" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_hook_writes_every_checkpoint_once_and_curves_read_them(setup, tmp_path):
    from probes.scoring.store import read_pairs
    from probes.syntaxqa.report import syntax_qa_table, write_syntax_qa_curves
    from probes.syntaxqa.hook import SyntaxQAHook

    d, cfg, items, tok, model = setup
    cfg = SyntaxQAConfig(**{**cfg.__dict__, "enabled": True, "knowledge_points": ["GS", "ADJ"]})
    run = tmp_path / "run"
    hook = SyntaxQAHook(cfg, tok, run)
    model.train()
    metrics = hook.post_checkpoint_saved(d / "model", 0, 0, model)
    assert model.training  # the hook restores the mode it found
    assert 0.0 <= metrics["probe/syntax_qa/OA"] <= 1.0 and "probe/syntax_qa/GS/OA" in metrics
    df, meta = read_pairs(run / "evals" / "step0" / "syntax_qa.parquet")
    assert len(df) == len(hook.items) and meta["step"] == 0 and meta["kind"] == "syntax_questions"
    assert meta["summary"]["OA"] == pytest.approx(metrics["probe/syntax_qa/OA"])
    assert hook.post_checkpoint_saved(d / "model", 0, 0, model) == {}  # done already: not redone
    hook.post_checkpoint_saved(d / "model", 4, 4096, model)
    table = syntax_qa_table([run])
    oa = table[(table.kp == "all") & (table.metric == "OA")].sort_values("step")
    assert oa.step.tolist() == [0, 4] and oa.tokens.tolist() == [0, 4096]
    written = write_syntax_qa_curves(table, tmp_path / "curves")
    assert (tmp_path / "curves" / "plots" / "syntax_qa_run.png") in written
    assert pd.read_csv(tmp_path / "curves" / "syntax_qa.csv").shape[0] == len(table)


def test_enabled_without_sources_names_the_key():
    with pytest.raises(ValueError, match="syntax_qa.sources is empty"):
        SyntaxQAConfig(enabled=True)


def test_options_share_one_forward_of_the_prompt_with_the_same_scores(setup, monkeypatch):
    from probes.scoring import primitive as scoring
    from probes.syntaxqa import questions as P
    from probes.syntaxqa.score import _likelihood_scores

    _, cfg, items, tok, model = setup
    lik = [it for it in items if it.qtype in ("TF", "MC")]
    assert {it.qtype for it in lik} == {"TF", "MC"}
    calls = {"next": 0, "seq": 0}
    real_next, real_seq = scoring.next_token_logprobs, scoring.token_logprobs

    def count(key, fn):
        def wrapped(model, first, *args, **kwargs):
            calls[key] += len(first)
            return fn(model, first, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(scoring, "next_token_logprobs", count("next", real_next))
    monkeypatch.setattr(scoring, "token_logprobs", count("seq", real_seq))
    shared = _likelihood_scores(model, tok, lik, cfg, "cpu")
    tails = [continuation_ids(tok, p, P.continuations(it))[1] for it in lik for p in it.prompts]
    one_token = [t for t in tails if all(len(x) == 1 for x in t)]
    # one forward per prompt whose options are all one token; the others (options this tiny BPE
    # splits) as one sequence per option
    assert 0 < len(one_token) < len(tails)
    assert calls == {"next": len(one_token), "seq": sum(len(t) for t in tails if t not in one_token)}
    separate = _likelihood_scores(model, tok, lik, cfg, "cpu", share_context=False)
    assert calls["seq"] - sum(len(t) for t in tails if t not in one_token) == sum(len(t) for t in tails)
    assert shared.keys() == separate.keys()
    for key in shared:
        (acc_a, pred_a, lp_a), (acc_b, pred_b, lp_b) = shared[key], separate[key]
        assert (acc_a, pred_a) == (acc_b, pred_b) and len(lp_a) == len(lp_b)
        np.testing.assert_allclose(lp_a, lp_b, rtol=0, atol=1e-5)


def test_next_token_logprobs_equal_the_last_token_of_the_whole_sequence(setup):
    from probes.scoring.primitive import next_token_logprobs, token_logprobs

    _, _, _, tok, model = setup
    contexts = [[0, 5, 9, 11, 3], [0, 7], [0, 5, 9]]  # different lengths: padding in one batch
    cands = [[4, 8, 100], [2], [13, 14]]
    got = next_token_logprobs(model, contexts, cands, batch_size=2)
    for ctx, cs, lp in zip(contexts, cands, got):
        want = [token_logprobs(model, [ctx + [c]])[0][-1] for c in cs]
        np.testing.assert_allclose(lp, want, rtol=0, atol=1e-5)
