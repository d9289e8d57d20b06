"""Benchmark loaders on small hand-written files: every format, every trap, every error message."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from probes.benchmarks.registry import (
    DEDUP_RULE,
    ENV_VAR,
    FORMATS,
    BenchmarkConfig,
    benchmark_configs,
    describe,
    load_benchmark,
    main,
    subsample,
)
from probes.benchmarks.formats import BenchmarkFormatError, sniff_format
from probes.benchmarks.pairs import Pair


def write_jsonl(path: Path, records: list[dict], newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(json.dumps(r, ensure_ascii=False) + newline for r in records).encode("utf-8"))
    return path


def blimp_rec(uid: str, i, good: str, bad: str, term: str = "island_effects", id_key: str = "pairID") -> dict:
    return {"sentence_good": good, "sentence_bad": bad, "field": "syntax", "linguistics_term": term,
            "UID": uid, "simple_LM_method": True, id_key: i}


def load(path: Path, fmt: str = "auto", name: str = "t", **kw) -> list[Pair]:
    return load_benchmark(BenchmarkConfig(name=name, path=str(path), format=fmt, **kw))


# ---------------------------------------------------------------- each format


def test_blimp_string_and_int_ids_become_the_same_strings(tmp_path):
    # BLiMP writes pairID as a string, BabyLM's blimp_filtered as an int pair_id
    write_jsonl(tmp_path / "a" / "adjunct_island.jsonl", [
        blimp_rec("adjunct_island", "0", "Who left?", "Who left Bo?"),
        {**blimp_rec("adjunct_island", "1", "Who ran?", "Who ran Bo?"), "one_prefix_prefix": "Who",
         "one_prefix_word_good": "ran", "one_prefix_word_bad": "ran", "crucial_item": "ran"},
    ])
    write_jsonl(tmp_path / "b" / "passive_1.jsonl", [
        blimp_rec("passive_1", 0, "It was eaten.", "It was slept.", "argument_structure", id_key="pair_id"),
    ])
    a, b = load(tmp_path / "a", "blimp"), load(tmp_path / "b", "blimp")
    assert [p.pair_id for p in a] == ["0", "1"] and b[0].pair_id == "0"
    assert (a[0].paradigm, a[0].phenomenon) == ("adjunct_island", "island_effects")
    assert (b[0].paradigm, b[0].phenomenon, b[0].benchmark) == ("passive_1", "argument_structure", "t")
    assert a[1].good == "Who ran?" and a[1].regions is None


def test_zhoblimp_phenomenon_comes_from_the_data_file_not_the_file_name(tmp_path):
    write_jsonl(tmp_path / "BA_passive_like.jsonl", [
        {"UID": "BA_passive_like", "phenomenon": "passive", "sentence_good": "他把杯子打碎了。",
         "sentence_bad": "他被杯子打碎了。", "pairID": 7},
    ])
    (p,) = load(tmp_path, "zhoblimp")
    assert (p.paradigm, p.phenomenon, p.pair_id) == ("BA_passive_like", "passive", "7")
    assert sniff_format(tmp_path / "BA_passive_like.jsonl") == "zhoblimp"


def test_sling_capitalised_fields_and_paradigms_keyed_by_path(tmp_path):
    rec = {"sentence_good": "好", "sentence_bad": "坏", "field": "syntax"}
    write_jsonl(tmp_path / "Anaphor" / "reflexive_auto" / "animacy.jsonl", [
        {**rec, "Phenomenon": "Reflexive_auto", "Paradigm": "animacy_effect", "pair_ID": "0"}])
    write_jsonl(tmp_path / "Anaphor" / "reflexive_natural" / "natural_animacy.jsonl", [
        {**rec, "Phenomenon": "Reflexive_natural", "Paradigm": "animacy_effect", "pair_ID": "0"}])
    write_jsonl(tmp_path / "Aspect" / "zai_le.jsonl", [
        {**rec, "phenomenon": "Aspect", "paradigm": "zai_le", "pair_ID": 0}])
    pairs = load(tmp_path, "sling")
    assert [(p.phenomenon, p.paradigm, p.pair_id) for p in pairs] == [
        ("Anaphor", "Anaphor/reflexive_auto/animacy", "0"),
        ("Anaphor", "Anaphor/reflexive_natural/natural_animacy", "0"),
        ("Aspect", "Aspect/zai_le", "0"),
    ]
    # auto detection picks the SLING reader for every one of them
    assert [p.paradigm for p in load(tmp_path)] == [p.paradigm for p in pairs]
    # a single file has no folder above it: the record's (capitalised) field names the phenomenon
    (one,) = load(tmp_path / "Anaphor" / "reflexive_auto" / "animacy.jsonl", "sling")
    assert (one.phenomenon, one.paradigm) == ("Reflexive_auto", "animacy")


def test_sling_txt_copy(tmp_path):
    f = tmp_path / "WhFronting" / "bare_wh.txt"
    f.parent.mkdir()
    f.write_text("他们勾结了什么?@@@什么他们勾结了?\n你们转换成了什么?@@@什么你们转换成了?\n", encoding="utf-8")
    pairs = load(tmp_path)
    assert [(p.phenomenon, p.paradigm, p.pair_id, p.bad) for p in pairs][1] == (
        "WhFronting", "WhFronting/bare_wh", "1", "什么你们转换成了?")
    f.write_text("他们勾结了什么?@@@什么他们勾结了?\n只有一句\n", encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"bare_wh\.txt:2: expected 'good@@@bad'"):
        load(tmp_path, "sling")


def climp_csv(rows: list[tuple[str, str, str, str]]) -> str:
    lines = [",0,1,2,3"] + [f"{i},{ph},{pa},{s},{lab}" for i, (ph, pa, s, lab) in enumerate(rows)]
    return "\n".join(lines) + "\n"


def test_climp_alternating_rows_and_the_headerless_crlf_file(tmp_path):
    (tmp_path / "classifier_1000.csv").write_text(climp_csv([
        ("classifier", "classifier", "一本书", "1"), ("classifier", "classifier", "一只书", "0"),
        ("classifier", "classifier", "一匹马", "1"), ("classifier", "classifier", "一本马", "0"),
    ]), encoding="utf-8")
    # ba_construction_1000.csv: no header, CRLF, one sentence a line, no final newline
    (tmp_path / "ba_construction_1000.csv").write_bytes("王鑫把车扔了\r\n王鑫被车扔了\r\n他把门开了\r\n他被门开了".encode())
    pairs = load(tmp_path, "climp")
    got = [(p.phenomenon, p.paradigm, p.pair_id, p.good, p.bad) for p in pairs]
    assert got == [
        ("ba_construction", "ba_construction", "0", "王鑫把车扔了", "王鑫被车扔了"),
        ("ba_construction", "ba_construction", "1", "他把门开了", "他被门开了"),
        ("classifier", "classifier", "0", "一本书", "一只书"),
        ("classifier", "classifier", "1", "一匹马", "一本马"),
    ]
    assert {sniff_format(f) for f in tmp_path.iterdir()} == {"climp"}


def test_climp_errors_name_file_and_line(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text(climp_csv([("c", "p", "甲", "1"), ("c", "p", "乙", "1")]), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"x\.csv:3: label '1', expected '0'"):
        load(f, "climp")
    f.write_text(climp_csv([("c", "p", "甲", "1"), ("c", "p", "乙", "0"), ("c", "p", "丙", "1")]), encoding="utf-8")
    with pytest.raises(BenchmarkFormatError, match=r"x\.csv:4: odd number of rows"):
        load(f, "climp")
    g = tmp_path / "ba.csv"
    g.write_bytes("甲\r\n乙\r\n丙".encode())
    with pytest.raises(BenchmarkFormatError, match=r"ba\.csv:3: odd number of sentences"):
        load(g, "climp")


def test_babylm_supplement_schemas_keep_embedded_newlines(tmp_path):
    d = tmp_path / "supplement_filtered"
    write_jsonl(d / "qa_congruence_easy.jsonl", [
        {"row": 0, "fragment": "sentence", "contrast": "x", "sentence_good": "What did you get?\nI got a chair.",
         "sentence_bad": "What did you get?\nI got a teacher."}])
    write_jsonl(d / "subject_aux_inversion.jsonl", [
        # pair_ID repeats within the file in the real data: the ordinal is the id
        {"pair_ID": 0, "row": 0, "ambiguous": False, "template": "t1", "sentence_good": "Is it?", "sentence_bad": "It is?"},
        {"pair_ID": 0, "row": 0, "ambiguous": True, "template": "t2", "sentence_good": "Has it?", "sentence_bad": "It has?"}])
    write_jsonl(d / "turn_taking.jsonl", [
        {"quad": "(('you', 'I'),)", "type": "single", "length": "short", "other": None,
         "sentence_good": "A: Should you?\r\nB: No, I shouldn't.", "sentence_bad": "A: Should she?\nB: No, I shouldn't."}])
    write_jsonl(d / "hypernym.jsonl", [{"row": 0, "contrast": "c", "sentence_good": "a dog", "sentence_bad": "a cat"}])
    pairs = load(tmp_path)
    assert [(p.paradigm, p.phenomenon, p.pair_id) for p in pairs] == [
        ("hypernym", "hypernym", "0"), ("qa_congruence_easy", "qa_congruence_easy", "0"),
        ("subject_aux_inversion", "subject_aux_inversion", "0"), ("subject_aux_inversion", "subject_aux_inversion", "1"),
        ("turn_taking", "turn_taking", "0"),
    ]
    assert pairs[1].good == "What did you get?\nI got a chair."
    assert pairs[4].good == "A: Should you?\r\nB: No, I shouldn't."  # inside the JSON string: the author's text


def test_generic_jsonl_with_column_mapping(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", [
        {"ok": "The cat sleeps.", "ko": "The cat sleep.", "par": "agr", "ph": "agreement", "id": 11},
        {"ok": "The cats sleep.", "ko": "The cats sleeps.", "par": "agr", "ph": "agreement", "id": 12},
    ], newline="\r\n")
    pairs = load(f, "jsonl", good_field="ok", bad_field="ko", paradigm_field="par", phenomenon_field="ph", id_field="id")
    assert [(p.paradigm, p.phenomenon, p.pair_id, p.good, p.bad) for p in pairs] == [
        ("agr", "agreement", "11", "The cat sleeps.", "The cat sleep."),
        ("agr", "agreement", "12", "The cats sleep.", "The cats sleeps."),
    ]
    # without a mapping for paradigm/phenomenon/id: the file stem and the record ordinal
    write_jsonl(tmp_path / "plain.jsonl", [{"sentence_good": "a b", "sentence_bad": "b a"}])
    (p,) = load(tmp_path / "plain.jsonl", "jsonl")
    assert (p.paradigm, p.phenomenon, p.pair_id) == ("plain", "plain", "0")


def test_generic_csv_crlf_and_quoted_embedded_newline(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_bytes(b'good,bad,p\r\n"A: hi\r\nB: yo",B: hi,x\r\nfine,fin,x\r\n,,\r\nok,"",x\r\n')
    # row 2 spans lines 2-3; an empty sentence on line 6 (line 5 is blank and skipped) is an error
    with pytest.raises(BenchmarkFormatError, match=r"mine\.csv:6: field 'bad' must be a non-empty string"):
        load(f, "csv", good_field="good", bad_field="bad", paradigm_field="p")
    # a spreadsheet's byte-order mark must not end up in the first column's name
    f.write_bytes(b'\xef\xbb\xbfgood,bad,p\r\n"A: hi\r\nB: yo",B: hi,x\r\nfine,fin,x\r\n')
    pairs = load(f, good_field="good", bad_field="bad", paradigm_field="p")  # auto -> generic csv
    assert [(p.paradigm, p.pair_id, p.good) for p in pairs] == [("x", "0", "A: hi\r\nB: yo"), ("x", "1", "fine")]


# ---------------------------------------------------------------- one rule for identical and duplicate pairs


def test_identical_dropped_duplicates_kept_once_counted_and_warned(tmp_path, caplog):
    write_jsonl(tmp_path / "p.jsonl", [
        blimp_rec("p", "0", "A b.", "A c."),
        blimp_rec("p", "1", "Same.", "Same."),  # identical: dropped
        blimp_rec("p", "2", "A b.", "A c."),  # duplicate of 0: dropped, 0 kept
        blimp_rec("p", "3", "A c.", "A b."),  # the reverse pair is a different pair
    ])
    with caplog.at_level(logging.WARNING, logger="probes.benchmarks.registry"):
        pairs = load(tmp_path, name="mine")
    assert [p.pair_id for p in pairs] == ["0", "3"]
    assert (pairs.report.n_read, pairs.report.n_identical, pairs.report.n_duplicates) == (4, 1, 1)
    assert "mine: dropped 1 identical (good == bad) and 1 duplicate pairs of 4 read" in caplog.text
    df = describe(pairs)
    assert df.to_dict("records") == [
        {"phenomenon": "island_effects", "paradigm": "p", "n_pairs": 2, "n_identical_dropped": 1, "n_duplicates_dropped": 1},
        {"phenomenon": "TOTAL", "paradigm": "1 paradigms in 1 phenomena", "n_pairs": 2,
         "n_identical_dropped": 1, "n_duplicates_dropped": 1},
    ]


def test_same_pair_in_two_paradigms_is_not_a_duplicate(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", [blimp_rec("p", "0", "A b.", "A c.")])
    write_jsonl(tmp_path / "q.jsonl", [blimp_rec("q", "0", "A b.", "A c.")])
    assert len(load(tmp_path)) == 2


def test_one_id_for_two_different_pairs_is_an_error(tmp_path):
    write_jsonl(tmp_path / "m.jsonl", [
        {"sentence_good": "a b", "sentence_bad": "b a", "k": 1}, {"sentence_good": "c d", "sentence_bad": "d c", "k": 1}])
    with pytest.raises(BenchmarkFormatError, match=r"pair id '1' names two different pairs in paradigm 'm'.*id_field"):
        load(tmp_path, "jsonl", id_field="k")


def test_paradigm_name_used_by_two_files_is_keyed_by_path(tmp_path):
    write_jsonl(tmp_path / "v1" / "agr.jsonl", [blimp_rec("agr", "0", "A b.", "A c.")])
    write_jsonl(tmp_path / "v2" / "agr.jsonl", [blimp_rec("agr", "0", "X y.", "X z.")])
    write_jsonl(tmp_path / "v2" / "other.jsonl", [blimp_rec("other", "0", "X y.", "X z.")])
    assert [p.paradigm for p in load(tmp_path)] == ["v1/agr", "v2/agr", "other"]


# ---------------------------------------------------------------- errors


def test_malformed_jsonl_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(blimp_rec("p", "0", "a", "b")) + "\n\n{\"sentence_good\": \"x\",\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: malformed JSON line"):
        load(f, "blimp")


def test_jsonl_lines_that_parse_only_together_still_name_their_line(tmp_path):
    # the whole file is parsed as one JSON array first: a record split over two lines, or two records
    # on one line, parse that way too, so they must be caught and reported line by line
    good = json.dumps(blimp_rec("p", "0", "a", "b"))
    half = json.dumps(blimp_rec("p", "1", "c", "d"))[:-1].rsplit(",", 1)
    for name, text, line, why in (
            ("split", f"{good}\n{half[0]}\n{half[1]}}}\n", 2, "malformed JSON line"),
            ("two", f"{good}\n{good},{good}\n", 2, "malformed JSON line"),
            ("list", f"{good}\n[1, 2]\n", 2, "expected a JSON object")):
        f = tmp_path / f"{name}.jsonl"
        f.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=rf"{name}\.jsonl:{line}: {why}"):
            load(f, "blimp")
    f = tmp_path / "ok.jsonl"
    f.write_text(f"{good}\r\n\n  \n{json.dumps(blimp_rec('p', '1', 'c', 'd'))}", encoding="utf-8")
    assert [p.pair_id for p in load(f, "blimp")] == ["0", "1"]


def test_missing_required_field_names_file_line_and_field(tmp_path):
    rec = blimp_rec("p", "0", "a", "b")
    del rec["linguistics_term"]
    write_jsonl(tmp_path / "m.jsonl", [blimp_rec("p", "1", "c", "d"), rec])
    with pytest.raises(BenchmarkFormatError, match=r"m\.jsonl:2: missing required field 'linguistics_term'"):
        load(tmp_path, "blimp")
    write_jsonl(tmp_path / "m.jsonl", [{"sentence_good": "a"}])
    with pytest.raises(BenchmarkFormatError, match=r"m\.jsonl:1: missing required field 'sentence_bad'"):
        load(tmp_path, "jsonl")
    write_jsonl(tmp_path / "m.jsonl", [{"good": "a", "bad": "b"}])
    with pytest.raises(BenchmarkFormatError, match=r"m\.jsonl:1: missing required field 'par' \(paradigm_field\)"):
        load(tmp_path, "jsonl", good_field="good", bad_field="bad", paradigm_field="par")


def test_unknown_format_and_name_list_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown benchmark format 'xml'.*'blimp', 'zhoblimp'"):
        load(tmp_path, "xml")
    with pytest.raises(ValueError, match=r"unknown benchmark name 'blimpp'.*'babylm_blimp'"):
        load_benchmark(BenchmarkConfig(name="blimpp"))
    (tmp_path / "notes.txt").write_text("just text\n")
    with pytest.raises(BenchmarkFormatError, match=r"notes\.txt: unknown \.txt format"):
        load(tmp_path)
    assert set(FORMATS) == {"auto", "blimp", "zhoblimp", "climp", "sling", "babylm", "jsonl", "csv", "grammar", "elagent"}


def test_missing_default_location_says_how_to_set_it(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError) as e:
        load_benchmark(BenchmarkConfig(name="zhoblimp"))
    msg = str(e.value)
    assert "'zhoblimp'" in msg and str(tmp_path / "zhoblimp/data/ZhoBLiMP") in msg and ENV_VAR in msg
    with pytest.raises(FileNotFoundError, match=r"'mine': path .*nowhere"):
        load(tmp_path / "nowhere", name="mine")


def test_environment_variable_points_at_a_benchmarks_tree(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "blimp" / "data" / "p.jsonl", [blimp_rec("p", "0", "A b.", "A c.")])
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    (p,) = load_benchmark(BenchmarkConfig(name="blimp"))
    assert (p.benchmark, p.paradigm) == ("blimp", "p")


# ---------------------------------------------------------------- subsampling


def make_pairs(paradigm: str, n: int) -> list[Pair]:
    return [Pair("b", paradigm, "ph", str(i), f"g{i}", f"b{i}") for i in range(n)]


def test_subsample_per_paradigm_seeded_stable_and_nested():
    pairs = make_pairs("x", 50) + make_pairs("y", 3) + make_pairs("z", 40)
    s10 = subsample(pairs, 10, seed=1)
    assert [sum(p.paradigm == q for p in s10) for q in "xyz"] == [10, 3, 10]
    assert s10 == subsample(pairs, 10, seed=1)  # deterministic
    assert s10 != subsample(pairs, 10, seed=2)  # the seed matters
    pos = [pairs.index(p) for p in s10]
    assert pos == sorted(pos)  # original order kept
    assert set(s10) <= set(subsample(pairs, 20, seed=1))  # a smaller sample lies inside a larger one
    # a paradigm's sample does not depend on the other paradigms loaded with it
    alone = subsample(make_pairs("x", 50), 10, seed=1)
    assert alone == [p for p in s10 if p.paradigm == "x"]


def test_load_with_max_pairs_per_paradigm(tmp_path):
    write_jsonl(tmp_path / "p.jsonl", [blimp_rec("p", str(i), f"A {i}.", f"B {i}.") for i in range(30)])
    pairs = load(tmp_path, max_pairs_per_paradigm=7, subsample_seed=3)
    assert len(pairs) == 7 and pairs.report.n_read == 30
    assert describe(pairs)["n_pairs"].tolist() == [7, 7]
    with pytest.raises(ValueError, match="max_pairs_per_paradigm"):
        load(tmp_path, max_pairs_per_paradigm=0)


# ---------------------------------------------------------------- describe and the command


def test_describe_plain_list_counts_per_paradigm():
    df = describe(make_pairs("y", 2) + make_pairs("x", 3))
    assert df[["paradigm", "n_pairs"]].values.tolist() == [["x", 3], ["y", 2], ["2 paradigms in 1 phenomena", 5]]


def test_main_prints_table_total_and_dedup_report(tmp_path, capsys):
    write_jsonl(tmp_path / "p.jsonl", [blimp_rec("p", "0", "A b.", "A c."), blimp_rec("p", "1", "S.", "S.")])
    write_jsonl(tmp_path / "q.jsonl", [blimp_rec("q", "0", "A b.", "A c.", term="binding")])
    assert main([str(tmp_path), "--format", "blimp"]) == 0
    out = capsys.readouterr().out
    assert f"benchmark {tmp_path.name}:" in out
    assert "TOTAL" in out and "2 paradigms in 2 phenomena" in out
    assert "total: 2 pairs in 2 paradigms and 2 phenomena; read 3, dropped 1 identical and 0 duplicate pairs" in out
    assert DEDUP_RULE in out
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "is neither a benchmark name" in capsys.readouterr().err
    (tmp_path / "q.jsonl").write_text("{oops\n")
    assert main([str(tmp_path)]) == 2
    assert "q.jsonl:1: malformed JSON line" in capsys.readouterr().err


def test_benchmark_configs_from_a_name_list(tmp_path):
    cfgs = benchmark_configs(["zhoblimp", "mine"], max_pairs_per_paradigm=50, paths={"mine": str(tmp_path)})
    assert [(c.name, c.path, c.max_pairs_per_paradigm) for c in cfgs] == [
        ("zhoblimp", None, 50), ("mine", str(tmp_path), 50)]
    with pytest.raises(ValueError, match=r"unknown benchmark name\(s\) \['mine'\]"):
        benchmark_configs(["mine"])
    with pytest.raises(ValueError, match=r"path\(s\) given for \['blimp'\]"):
        benchmark_configs(["zhoblimp"], paths={"blimp": "/x"})


def test_config_is_a_structured_omegaconf_schema(tmp_path):
    # the lead registers BenchmarkConfig with Hydra's ConfigStore: every field must be OmegaConf-typed
    from omegaconf import OmegaConf

    write_jsonl(tmp_path / "p.jsonl", [blimp_rec("p", str(i), f"A {i}.", f"B {i}.") for i in range(9)])
    merged = OmegaConf.merge(
        OmegaConf.structured(BenchmarkConfig),
        OmegaConf.from_dotlist([f"path={tmp_path}", "name=mine", "max_pairs_per_paradigm=4", "grammar.variant=zh"]),
    )
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, BenchmarkConfig) and cfg.grammar.variant == "zh"
    assert len(load_benchmark(cfg)) == 4


def test_empty_benchmark_is_an_error(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match=r"'t': no pairs in .*"):
        load(tmp_path)


def test_grammar_goes_through_probes_grammar():
    pairs = load_benchmark(BenchmarkConfig(name="grammar_zh", max_pairs_per_paradigm=5))
    assert pairs and {p.benchmark for p in pairs} == {"grammar_zh"}
    assert describe(pairs)["n_pairs"].iloc[:-1].max() <= 5
