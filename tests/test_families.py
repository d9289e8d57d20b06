"""Probe families as plug-ins (probes/families.py): every writer puts its family's `kind` into every eval file,
`compare` pairs what can be paired on a run with every family's files and says what it skipped, and a family
defined here, in the test, is built, drawn, reported and compared by the real commands once it is in FAMILIES."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from test_hub import build_hub, offline  # noqa: F401 (a fixture)
from test_syntaxqa_score import TREES
from trainutil import tiny_cfg

import probes.families
from probes.__main__ import build_run_parser, main as probes_main
from probes.evals.files import META_KEY, eval_file_meta
from probes.families import Family
from probes.lmeval.tasks import write_task
from train.evalsums import CHECKSUM_KEY
from probes.scoring.hook import _load_benchmarks
from train.loop import train

pytest.importorskip("lm_eval")
TASK = "sd_grammar"
FAMILY_OF = {"grammar": "minimal_pairs", "elagent_word_order": "minimal_pairs", "elagent": "elagent",
             "syntax_qa": "syntax_questions", f"lmeval_{TASK}": "lm_eval"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny run probed in the loop by every family: minimal pairs, ELAGENT, syntax questions, lm-eval."""
    torch.set_num_threads(1)
    cache, run_dir, tasks = (tmp_path_factory.mktemp(n) for n in ("cache", "run", "tasks"))
    (tasks / "hand.mrg").write_text(TREES)
    write_task(_load_benchmarks(tiny_cfg(cache).probes)["grammar"], "grammar", tasks)
    train(tiny_cfg(cache, "model.max_position_embeddings=1024", "schedule.n_log=3",
                   "probes.benchmarks=[{name: grammar, max_pairs_per_paradigm: 4}, {name: elagent_word_order, "
                   "language_a: {shots: 1, pairs_per_paradigm: 2}}]",
                   "probes.elagent.enabled=true", "probes.elagent.items_per_paradigm=1", "probes.elagent.shots=0",
                   "probes.syntax_qa.enabled=true", f"probes.syntax_qa.sources=[{tasks / 'hand.mrg'}]",
                   "probes.syntax_qa.knowledge_points=[GS]", "probes.syntax_qa.k_per_tuple=1",
                   "probes.syntax_qa.generate=false",
                   f"probes.lm_eval.tasks=[{TASK}]", f"probes.lm_eval.include_path={tasks}", "probes.lm_eval.limit=4"),
          run_dir)
    return run_dir, tasks


def kinds(run_dir: Path) -> dict[str, set]:
    """{file name: the kinds its metadata says} over every step, straight from the parquet schema."""
    out: dict[str, set] = {}
    for f in sorted((run_dir / "evals").glob("step*/*.parquet")):
        if not f.name.endswith(".tokens.parquet"):
            out.setdefault(f.stem, set()).add(json.loads(pq.read_schema(f).metadata[META_KEY]).get("kind"))
    return out


def test_every_writer_writes_its_familys_kind(run, tmp_path, offline, capsys):  # noqa: F811
    d, tasks = run
    assert kinds(d) == {name: {kind} for name, kind in FAMILY_OF.items()}  # the in-loop hooks
    bench = ["--benchmark", "grammar", "--max-pairs-per-paradigm", "2", "--device", "cpu"]
    for command in ("score-run", "watch"):  # a copy of the run without its evals
        copy = tmp_path / command
        shutil.copytree(d, copy, ignore=shutil.ignore_patterns("evals"))
        extra = ["--poll", "0.1", "--timeout", "120"] if command == "watch" else []
        assert probes_main([command, str(copy), *bench, "--lm-eval-task", TASK, "--lm-eval-include-path", str(tasks),
                            *extra]) == 0, capsys.readouterr().err[-2000:]
        assert kinds(copy) == {"grammar": {"minimal_pairs"}, f"lmeval_{TASK}": {"lm_eval"}}
    offline(build_hub(tmp_path / "hub", {"step0": d / "checkpoints" / "step0"}))
    hub = tmp_path / "hub_run"
    assert probes_main(["score-run", "--hub", "tinyorg/tiny-suite", "--revisions", "step0", "--out", str(hub),
                        *bench]) == 0, capsys.readouterr().err[-2000:]
    assert kinds(hub) == {"grammar": {"minimal_pairs"}}


def test_an_old_file_without_kind_is_read_by_its_name(run, tmp_path):
    d, _ = run
    for name, kind in FAMILY_OF.items():
        f = next((d / "evals").glob(f"step*/{name}.parquet"))
        t = pq.read_table(f)
        meta = json.loads(t.schema.metadata[META_KEY])
        meta.pop("kind"), meta.pop(CHECKSUM_KEY)  # as files were written before either existed
        old = tmp_path / "evals" / f.parent.name / f.name
        old.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(t.replace_schema_metadata({META_KEY: json.dumps(meta)}), old)
        assert eval_file_meta(old)["kind"] == kind


def test_compare_pairs_what_it_can_and_names_what_it_skipped(run, tmp_path, capsys):
    d, _ = run
    assert probes_main(["compare", f"{d}:0", str(d), "--out", str(tmp_path / "cmp"), "--n-boot", "50"]) == 0
    err = capsys.readouterr().err
    t = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert set(t.benchmark) == {"grammar", "elagent_word_order"}
    for kind, name in (("elagent", "elagent"), ("lm_eval", f"lmeval_{TASK}"), ("syntax_questions", "syntax_qa")):
        assert f"skipped {kind} file(s) {name}:" in err


# ------------------------------------------------------------------ a family that lives in this test only

@dataclass
class ToyConfig:
    enabled: bool = False
    items: int = 3


class ToyHook:
    """Writes evals/step<N>/toy.parquet: `items` items, item i right from step i on."""

    def __init__(self, cfg: ToyConfig, ctx):
        self.cfg, self.tokenizer, self.run_dir = cfg, ctx.tokenizer, ctx.run_dir

    def post_checkpoint_saved(self, ckpt_dir, step, tokens, model) -> dict:
        from probes.scoring.evaluate import evaluate_checkpoint

        rows = pd.DataFrame({"paradigm": "toy_p", "phenomenon": "toy", "pair_id": [str(i) for i in range(self.cfg.items)],
                             "ok": [step >= i for i in range(self.cfg.items)]})
        evaluate_checkpoint(model, self.tokenizer, list(range(self.cfg.items)), name="toy", step=step, tokens=tokens,
                            ckpt_dir=ckpt_dir, run_dir=self.run_dir, key=lambda i: (i,), score=lambda *_: rows, kind="toy")
        return {}

    def close(self) -> None:
        pass


class ToyProbe(ToyHook):
    """The toy family in `score-run --toy` / `watch --toy`: ToyHook's files, after the fact."""
    file_name = staticmethod(lambda task: task)

    def __init__(self, cfg: ToyConfig, run_dir):
        self.cfg, self.run_dir = cfg, run_dir

    def todo(self, step, manifest) -> list[str]:
        return [] if (Path(self.run_dir) / f"evals/step{step}/toy.parquet").is_file() else ["toy"]

    def evaluate(self, model, tokenizer, ckpt_dir, step, tokens, tasks, fingerprint) -> dict:
        self.tokenizer = tokenizer
        return self.post_checkpoint_saved(ckpt_dir, step, tokens, model)


def toy_table(run_dirs, names=None) -> pd.DataFrame:
    rows = []
    for run, name in zip(run_dirs, names or [Path(r).name for r in run_dirs]):
        for f in sorted(Path(run).glob("evals/step*/*.parquet")):
            meta = eval_file_meta(f)
            if meta["kind"] == "toy":
                rows.append({"run": name, "step": meta["step"], "acc": pd.read_parquet(f).ok.mean()})
    return pd.DataFrame(rows)


def toy_curves(table: pd.DataFrame, out: Path) -> list[Path]:
    from probes.analysis.outputs import save_figure
    from probes.analysis.plotting import new_figure

    fig, axes = new_figure()
    axes[0, 0].plot(table.step, table.acc)
    return [save_figure(fig, Path(out) / "plots" / "toy.png")]


def toy_section(runs, out) -> tuple[list[str], list]:
    table = toy_table([r[1] for r in runs], [r[0] for r in runs])
    return ["## Toy family", "", f"final accuracy {table.sort_values('step').acc.iloc[-1]:.3f}", ""], []


def toy_decisions(path: Path, metric: str):
    meta = eval_file_meta(path)
    return pd.read_parquet(path)[["paradigm", "phenomenon", "pair_id", "ok"]], meta["convention"], meta["tokens"]


TOY = Family(kind="toy", key="toy", config=ToyConfig, hook=f"{__name__}:ToyHook", table=f"{__name__}:toy_table",
             curves=f"{__name__}:toy_curves", section=f"{__name__}:toy_section", decisions=f"{__name__}:toy_decisions",
             options=(("--toy", "enabled", {"action": "store_true", "help": "score the toy family"}),),
             probe=f"{__name__}:ToyProbe")


def test_a_family_added_here_is_built_drawn_reported_and_compared(tmp_path, monkeypatch, capsys):
    torch.set_num_threads(1)
    monkeypatch.setattr(probes.families, "FAMILIES", [*probes.families.FAMILIES, f"{__name__}:TOY"])
    d = tmp_path / "run"
    train(tiny_cfg(tmp_path / "cache", "probes.toy.enabled=true", "probes.toy.items=5"), d)  # the hook, in the loop
    steps = sorted(int(p.parent.name[4:]) for p in d.glob("evals/step*/toy.parquet"))
    assert len(steps) >= 4 and kinds(d)["toy"] == {"toy"}
    copy = tmp_path / "copy"  # its flag, declared by the family alone, scores a run after the fact
    shutil.copytree(d, copy, ignore=shutil.ignore_patterns("evals"))
    assert "score the toy family" in build_run_parser("watch").format_help()
    assert probes_main(["score-run", str(copy), "--toy", "--device", "cpu"]) == 0, capsys.readouterr().err[-2000:]
    assert sorted(int(p.parent.name[4:]) for p in copy.glob("evals/step*/toy.parquet")) == steps
    assert kinds(copy) == {"toy": {"toy"}}
    assert probes_main(["curves", str(d), "--out", str(tmp_path / "curves")]) == 0
    assert (tmp_path / "curves" / "plots" / "toy.png").stat().st_size > 1000
    assert probes_main(["report", str(d), "--out", str(tmp_path / "report"), "--n-boot", "20"]) == 0
    assert "## Toy family\n\nfinal accuracy 1.000" in (tmp_path / "report" / "report.md").read_text()
    assert probes_main(["compare", f"{d}:{steps[1]}", str(d), "--out", str(tmp_path / "cmp"), "--n-boot", "50"]) == 0
    t = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    toy = t[(t.benchmark == "toy") & (t.level == "paradigm")].iloc[0]
    # item i is right from step i on: between steps[1] and the last, items steps[1]+1 .. 4 turn right
    assert (toy.n, toy.b, toy.c) == (5, 0, 4 - steps[1])
