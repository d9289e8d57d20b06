"""mode=paper of the syntax questions: the paper's exact prompt strings, held-out exemplars, MVP's reused
true/false items (checked against the paper's own Table 10), the answer parser, and a tiny GPT-NeoX end to end."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from probes.syntaxqa.metrics import exact_match
from probes.syntaxqa.config import PaperConfig
from probes.syntaxqa.paper import (PaperItem, answer_text, build_paper_items_and_reports, build_paper_prompt,
                                   parse_answer, question_text)
from probes.syntaxqa.score import SyntaxQAConfig, main, summarize
from test_syntaxqa_score import _model, _tokenizer

# Our own sentences as PTB trees: subject, verb, indirect object, direct object, a temporal PP.
WORDS = [("bank", "gave", "clients", "refund", "May"), ("school", "sent", "parents", "letter", "June"),
         ("firm", "offered", "workers", "bonus", "July"), ("club", "showed", "members", "film", "March"),
         ("shop", "sold", "visitors", "map", "April"), ("team", "handed", "fans", "flag", "August"),
         ("mayor", "promised", "voters", "park", "October"), ("farm", "brought", "cooks", "basket", "winter"),
         ("lab", "lent", "students", "microscope", "spring"), ("paper", "paid", "writers", "fee", "autumn"),
         ("city", "built", "children", "pool", "summer"), ("coach", "taught", "players", "trick", "January")]
TREES = "".join(
    f"( (S (NP-SBJ (DT The) (NN {s}) ) (VP (VBD {v}) (NP (PRP$ its) (NNS {io}) ) (NP (DT a) (NN {do}) ) "
    f"(PP-TMP (IN in) (NP (NNP {m}) ))) (. .) ))\n" for s, v, io, do, m in WORDS * 4)
TREES = "".join(line.replace("(DT The)", f"(DT The) (JJ {adj})") for line, adj in
                zip(TREES.splitlines(keepends=True), ["old", "new", "big", "small", "busy"] * 10))  # 48 different sentences


@pytest.fixture(scope="module")
def treebank(tmp_path_factory):
    d = tmp_path_factory.mktemp("paper")
    (d / "hand.mrg").write_text(TREES)
    return d


def _cfg(d: Path, **kw) -> SyntaxQAConfig:
    paper = PaperConfig(**kw.pop("paper", {}))
    base = dict(sources=[str(d / "hand.mrg")], mode="paper", knowledge_points=["GS", "DO", "IO", "MVP"], k_per_tuple=1,
                seed=0, batch_size=8, paper=paper)
    return SyntaxQAConfig(**{**base, **kw})


# ------------------------------------------------------------------------------- prompt strings


def test_templates_and_zero_shot_prompts_are_the_papers_strings():
    # Figure 1's sentence and options, Figure 5's GS template, Figure 6's zero-shot prompt, typed by hand
    mc = PaperItem(item_id="m", source="s", sent_id="1", lang="en", kp="GS", qtype="MC", category="B",
                   sentence="Pierre Vinken will join the board as a nonexecutive director Nov. 29.",
                   question=question_text("GS", "MC", "will join"), answer="B",
                   options=["The board", "Pierre Vinken", "61 years old", "A nonexecutive director"])
    assert build_paper_prompt(mc) == (
        "The following are multiple choice questions, please answer them with “A”, “B”, “C”, or “D”.\n"
        "Sentence: Pierre Vinken will join the board as a nonexecutive director Nov. 29.\n"
        "Question: In the above sentence, which of the following is the grammatical subject of “will join”?\n"
        "Options: \n A. The board\n B. Pierre Vinken\n C. 61 years old\n D. A nonexecutive director\n"
        "Answer: The answer is “")
    assert question_text("GS", "FITB", "will join") == "In the above sentence, the grammatical subject of “will join” is _____."
    assert question_text("GS", "TF", "will join", "Pierre Vinken") == (
        "In the above sentence, the grammatical subject of “will join” is “Pierre Vinken”.")
    assert question_text("GS", "TF", "will join", "The board", negated=True) == (
        "In the above sentence, the grammatical subject of “will join” is not “The board”.")
    with pytest.raises(ValueError, match="MVP has no true/false template"):
        question_text("MVP", "TF", "")


def test_items_from_trees_ask_in_the_papers_words_and_few_shot_frame(treebank):
    items, exemplars, _ = build_paper_items_and_reports(_cfg(treebank, knowledge_points=["GS"]))
    tf = {it.category: it for it in items if it.qtype == "TF"}
    assert set(tf) == {"pos-True", "pos-False", "neg-True", "neg-False"}
    t = tf["pos-True"]
    verb = t.question.split("“")[1].split("”")[0]
    assert t.question == f"In the above sentence, the grammatical subject of “{verb}” is “{t.golds[0]}”." and t.answer == "True"
    assert tf["neg-False"].question.endswith(f"is not “{tf['neg-False'].golds[0]}”.") and tf["neg-False"].answer == "False"
    assert tf["pos-False"].answer == "False" and f"“{tf['pos-False'].golds[0]}”." not in tf["pos-False"].question
    # few-shot (Figure 6b): the (with answers) line, each exemplar closed by its answer, no blank lines
    ex = [e for e in exemplars if e.qtype == "TF" and e.kp == "GS"][:2]
    want = ("The following are true or false questions (with answers):\n"
            + "".join(f"Sentence: {e.sentence}\nQuestion: {e.question}\nAnswer: The answer is “{e.answer}”\n" for e in ex)
            + f"Sentence: {t.sentence}\nQuestion: {t.question}\nAnswer: The answer is “")
    assert build_paper_prompt(t, ex) == want and "\n\n" not in want
    fitb = next(it for it in items if it.qtype == "FITB")
    assert fitb.prompts[0].startswith("The following are fill in the blank questions (with answers):\nSentence: ")
    assert fitb.prompts[0].endswith(f"Question: In the above sentence, the grammatical subject of “{fitb.question.split('“')[1].split('”')[0]}” "
                                    "is _____.\nAnswer: The answer is “")


# ------------------------------------------------------------------------------- exemplars


def test_exemplars_are_held_out_same_point_and_type_and_seeded(treebank):
    cfg = _cfg(treebank, max_items=14, paper={"shots": 3, "shot_seeds": 3})
    items, exemplars, _ = build_paper_items_and_reports(cfg)
    by_id = {e.item_id: e for e in exemplars}
    test_ids = {it.item_id for it in items}
    test_sents = {it.sent_id for it in items}
    assert exemplars and not test_ids & set(by_id)
    assert not test_sents & {e.sent_id for e in exemplars}  # no exemplar shows a sentence under test
    changed = 0
    for it in items:
        assert len(it.prompts) == len(it.exemplar_ids) == 3
        for prompt, ids in zip(it.prompts, it.exemplar_ids):
            assert len(ids) == 3 and len(set(ids)) == 3
            for e in map(by_id.__getitem__, ids):
                assert (e.kp, e.qtype) == (it.kp, it.qtype)
                assert f"Sentence: {e.sentence}\nQuestion: {e.question}\n" in prompt
        changed += len({tuple(ids) for ids in it.exemplar_ids}) > 1
    assert changed == len(items)  # three seeds, three draws
    # the test set does not depend on the exemplars; another seed draws other exemplars
    zero, _, _ = build_paper_items_and_reports(_cfg(treebank, max_items=14, paper={"shots": 0}))
    assert [it.item_id for it in zero] == [it.item_id for it in items]
    assert all(len(it.prompts) == 1 and it.prompts[0].startswith("The following are ") and "(with answers)" not in it.prompts[0]
               for it in zero)


def test_mvp_true_false_items_are_the_gs_sc_do_io_ones(treebank):
    items, _, _ = build_paper_items_and_reports(_cfg(treebank))
    assert not [it for it in items if it.kp == "MVP" and it.qtype == "TF"]
    assert {it.kp for it in items if it.kp_also == "MVP"} == {"GS", "DO", "IO"}
    assert all(it.kp_also == ("MVP" if it.qtype == "TF" and it.kp != "MVP" else "") for it in items)
    without, _, _ = build_paper_items_and_reports(_cfg(treebank, knowledge_points=["GS", "DO"]))
    assert not any(it.kp_also for it in without)


def test_mvp_true_false_score_reproduces_the_papers_table_10():
    # Mistral 7B, zero-shot true/false (Table 10): GS 56.15 SC 56.15 DO 53.33 IO 40.00 over 130/130/150/30
    # questions (Table 1) and MVP 54.09: the 440 reused questions, counted once in the overall score
    counts = {"GS": (73, 130), "SC": (73, 130), "DO": (80, 150), "IO": (12, 30)}
    rows = [{"kp": kp, "qtype": "TF", "kp_also": "MVP", "correct": float(i < right), "f1": float("nan"),
             "rand_acc": 0.5, "rand_f1": float("nan"), "unparsed": 0.0}
            for kp, (right, n) in counts.items() for i in range(n)]
    s = summarize(pd.DataFrame(rows))
    assert [round(100 * s[f"{kp}/TF_acc"], 2) for kp in counts] == [56.15, 56.15, 53.33, 40.00]
    assert round(100 * s["MVP/TF_acc"], 2) == 54.09 and s["MVP/n_items"] == 440
    assert s["n_items"] == 440 and s["TF_acc"] == pytest.approx(238 / 440)


# ------------------------------------------------------------------------------- parser


OPTS = ["The board", "Pierre Vinken", "61 years old", "A nonexecutive director"]


@pytest.mark.parametrize("gen, qtype, want", [
    ("True”\nSentence:", "TF", "True"), ("false.”", "TF", "False"), (' True"', "TF", "True"),
    ("True\nFalse", "TF", "True"), ("Yes”", "TF", None), ("True or False", "TF", None), ("\nTrue”", "TF", None),
    ("B”", "MC", "B"), ("(C)”", "MC", "C"), ("B. Pierre Vinken”", "MC", "B"), ("D) A nonexecutive", "MC", "D"),
    ("A nonexecutive director”", "MC", "D"), ("pierre vinken”", "MC", "B"), ("E”", "MC", None),
    ("The board or the director”", "MC", None), ("b”", "MC", None), ("”", "MC", None),
    ("Pierre Vinken” is the", "FITB", "Pierre Vinken"), ("the board\nSentence: x", "FITB", "the board"),
    ("”", "FITB", None), ("   ", "FITB", None),
])
def test_parser_on_hand_written_generations(gen, qtype, want):
    assert parse_answer(gen, qtype, OPTS) == want


def test_answer_text_cuts_at_the_first_closing_quote_or_newline():
    assert answer_text("B”, because\n") == ("B", True)
    assert answer_text("the board\n“x”") == ("the board", False)
    assert answer_text('a "quoted" word') == ("a", True)
    assert answer_text("ran out of tokens") == ("ran out of tokens", False)


def test_item_scores_from_hand_written_generations():
    from probes.syntaxqa.paper import score_generations

    def item(qtype, answer, golds=(), options=()):
        return PaperItem(item_id="i", source="s", sent_id="1", lang="en", kp="GS", qtype=qtype, category="",
                         sentence="", question="", answer=answer, golds=list(golds), options=list(options))

    # three exemplar seeds: right, unparsed (counted wrong and counted), wrong
    tf = score_generations(item("TF", "True"), ["True”", "Maybe”", "False”"])
    assert tf["correct"] == pytest.approx(1 / 3) and tf["unparsed"] == pytest.approx(1 / 3) and tf["preds"] == ["True", "", "False"]
    mc = score_generations(item("MC", "B", options=OPTS), ["Pierre Vinken”", "B. Pierre”"])
    assert mc["correct"] == 1.0 and mc["unparsed"] == 0.0
    # FITB: exact "the old bank" (1, F1 1); "”" unparsed (0, F1 0); "bank" (0, F1 2*(1*1/3)/(1+1/3) = 0.5)
    fitb = score_generations(item("FITB", "The old bank", golds=["The old bank"]), ["the old bank”", "”", "bank”"])
    assert fitb["correct"] == pytest.approx(1 / 3) and fitb["f1"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert fitb["unparsed"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny(treebank):
    torch.set_num_threads(1)
    cfg = _cfg(treebank, knowledge_points=["GS", "IO", "MVP"], paper={"shots": 2, "shot_seeds": 2})
    items, _, _ = build_paper_items_and_reports(cfg)
    texts = [p for it in items for p in it.prompts] + ["“True”", "“False”", "“A”", "“B”"] * 20
    tok = _tokenizer(texts, save_to=treebank / "model")
    model = _model(len(tok))
    model.save_pretrained(treebank / "model")
    return treebank, items, tok, model


def test_cli_paper_mode_end_to_end(tiny, capsys):
    from probes.scoring.primitive import sentence_ids

    d, items, tok, model = tiny
    out = d / "evals" / "step0" / "syntax_qa_paper.parquet"
    rc = main(["--model", str(d / "model"), "--out", str(out), "--sources", str(d / "hand.mrg"), "--mode", "paper",
               "--knowledge-points", "GS", "IO", "MVP", "--k-per-tuple", "1", "--paper-shots", "2",
               "--paper-shot-seeds", "2", "--batch-size", "8"])
    assert rc == 0 and f"syntax_qa_paper: {len(items)} items (paper mode)" in capsys.readouterr().out
    df = pd.read_parquet(out)
    meta = json.loads(pq.read_schema(out).metadata[b"syntax_dynamics"])
    assert meta["mode"] == "paper" and meta["benchmark"] == "syntax_qa_paper" and meta["config"]["paper"]["shots"] == 2
    assert (df["mode"] == "paper").all() and df.item_id.tolist() == [it.item_id for it in items]
    assert (df["n_prompts"] == 2).all() and (df["n_shots"] == 2).all()
    # the paper's budgets: 10 new tokens for TF/MC, 256 for FITB (the model's 1024 positions hold both)
    assert (df.loc[df.qtype != "FITB", "max_new_tokens"] == 10).all() and (df.loc[df.qtype == "FITB", "max_new_tokens"] == 256).all()
    # every score is the parse of the stored generations, averaged over the exemplar seeds
    for r in df.itertuples():
        parsed = [parse_answer(g, r.qtype, list(r.options)) for g in r.generations]
        assert list(r.preds) == [p or "" for p in parsed]
        assert r.unparsed == pytest.approx(sum(p is None for p in parsed) / 2)
        if r.qtype != "FITB":
            assert r.correct == pytest.approx(sum(p == r.answer for p in parsed) / 2)
        else:
            assert r.correct == pytest.approx(sum(p is not None and exact_match(p, list(r.golds)) for p in parsed) / 2)
    # greedy: the same answer as an unbatched generate(do_sample=False) of the stored prompt
    for it in [next(i for i in items if i.qtype == q) for q in ("TF", "MC", "FITB")]:
        row = df.set_index("item_id").loc[it.item_id]
        ids = sentence_ids(tok, [it.prompts[0]])[0]
        with torch.inference_mode():
            g = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               do_sample=False, max_new_tokens=int(row.max_new_tokens), pad_token_id=tok.pad_token_id,
                               eos_token_id=tok.eos_token_id)
        assert answer_text(tok.decode(g[0, len(ids):], skip_special_tokens=True)) == answer_text(row.generations[0])
    s = summarize(df)
    assert meta["summary"]["OA"] == pytest.approx(s["OA"]) and meta["summary"]["unparsed"] == pytest.approx(df.unparsed.mean())
    reused = df[(df.qtype == "TF") & df.kp.isin(["GS", "IO"])]
    assert len(reused) == 8 and set(reused.kp_also) == {"MVP"}
    assert s["MVP/TF_acc"] == pytest.approx(reused.correct.mean()) and s["MVP/n_items"] == len(reused) + (df.kp == "MVP").sum()


def test_hook_writes_both_modes_and_curves_and_report_label_them(tiny, tmp_path):
    from probes.analysis.evalfile import EvalInputError
    from probes.analysis.evalset import load_runs
    from probes.syntaxqa.report import syntax_qa_table, write_syntax_qa_curves
    from probes.syntaxqa.hook import SyntaxQAHook
    from probes.syntaxqa.report import syntax_qa_section

    d, _, tok, model = tiny
    run = tmp_path / "run"
    common = dict(enabled=True, knowledge_points=["GS"], max_items=6)
    paper = SyntaxQAHook(_cfg(d, **common, paper={"shots": 1, "shot_seeds": 1, "max_new_tokens_fitb": 8}), tok, run)
    lik = SyntaxQAHook(_cfg(d, **common, mode="likelihood", max_new_tokens=8), tok, run)
    metrics = paper.post_checkpoint_saved(d / "model", 0, 0, model)
    assert "probe/syntax_qa_paper/OA" in metrics and "probe/syntax_qa_paper/unparsed" in metrics
    lik.post_checkpoint_saved(d / "model", 0, 0, model)
    assert (run / "evals" / "step0" / "syntax_qa_paper.parquet").is_file() and (run / "evals" / "step0" / "syntax_qa.parquet").is_file()
    assert paper.post_checkpoint_saved(d / "model", 0, 0, model) == {}  # done already
    table = syntax_qa_table([run])
    assert set(table["mode"]) == {"likelihood", "paper"}
    assert set(table.loc[table["mode"] == "paper", "metric"]) >= {"OA", "unparsed", "TF_unparsed"}
    assert "unparsed" not in set(table.loc[table["mode"] == "likelihood", "metric"])
    written = write_syntax_qa_curves(table, tmp_path / "curves")
    assert {p.name for p in written if p.suffix == ".png"} == {"syntax_qa_run.png", "syntax_qa_paper_run.png"}
    md, _ = syntax_qa_section([("run", run, "tiny", None)], tmp_path / "report")
    final = pd.read_csv(tmp_path / "report" / "tables" / "syntax_qa_final.csv")
    assert sorted(final["mode"]) == ["likelihood", "paper"] and final.set_index("mode")["unparsed"].notna().tolist() == [False, True]
    assert any(line.startswith("| run | tiny | full | paper | 0 |") for line in md)
    # question items are not minimal pairs: a run with only these files has no benchmark to read
    with pytest.raises(EvalInputError, match="files are of kind .syntax_questions., which .probes curves. draws alone"):
        load_runs([run])


def test_config_errors_name_the_key(treebank):
    with pytest.raises(ValueError, match=r"syntax_qa.mode: unknown 'papers'"):
        SyntaxQAConfig(mode="papers")
    with pytest.raises(ValueError, match=r"syntax_qa.shots is the likelihood mode's; .* syntax_qa.paper.shots"):
        SyntaxQAConfig(mode="paper", shots=5)
    with pytest.raises(ValueError, match=r"syntax_qa.paper.shot_seeds must be >= 1"):
        PaperConfig(shot_seeds=0)
    rows = [(1, "我", "PRON", 2, "nsubj"), (2, "买", "VERB", 0, "root"), (3, "书", "NOUN", 2, "obj"), (4, "。", "PUNCT", 2, "punct")]
    (treebank / "zh_hand.conllu").write_text("# sent_id = z1\n" + "".join(
        f"{i}\t{w}\t{w}\t{u}\t_\t_\t{h}\t{r}\t_\tSpaceAfter=No\n" for i, w, u, h, r in rows) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"zh_hand.conllu is not English"):
        build_paper_items_and_reports(SyntaxQAConfig(sources=[str(treebank / "zh_hand.conllu")], mode="paper", knowledge_points=["GS"]))


def test_hydra_overrides_reach_the_typed_paper_config():
    from train.config import to_typed
    from trainutil import compose_cfg

    cfg = to_typed(compose_cfg(["probes.syntax_qa.mode=paper", "probes.syntax_qa.paper.shots=3"])).probes.syntax_qa
    assert cfg.mode == "paper" and isinstance(cfg.paper, PaperConfig) and (cfg.paper.shots, cfg.paper.shot_seeds) == (3, 3)
    assert (cfg.paper.max_new_tokens_choice, cfg.paper.max_new_tokens_fitb) == (10, 256)  # the paper's (D.1)
    with pytest.raises(Exception, match=r"probes.syntax_qa.paper.shot\b"):
        to_typed(compose_cfg(["probes.syntax_qa.paper.shot=3"]))
    with pytest.raises(ValueError, match=r"syntax_qa.mode: unknown"):
        to_typed(compose_cfg(["probes.syntax_qa.mode=generate"]))

