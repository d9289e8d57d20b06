"""``python -m probes COMMAND ...``: COMMANDS below and the probe families' commands (train/commands.py);
``score``, ``score-run`` and ``watch`` parse their arguments here, the others are imported only when called."""
from __future__ import annotations

import argparse
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Optional, Sequence

from probes.benchmarks.formats import add_field_options, field_options  # standard library only
from probes.families import families

COMMANDS = {  # `python -m probes NAME ...`: import path of its main(argv), one line of help
    "score": ("probes.__main__:score_main", "score one HF causal LM directory on one benchmark, write per-pair parquet"),
    "score-run": ("probes.__main__:score_run_main", "score every whole checkpoint of a run directory (skips finished files)"),
    "watch": ("probes.__main__:watch_main", "follow a training run and score checkpoints as they become whole"),
    "tokens": ("probes.scoring.tokens:main", "one pair's per-token surprisal over a run's checkpoints (table; --out draws it)"),
    "unigram": ("probes.scoring.unigram:main", "add unigram log-prob columns (SLOR, MORCELA) to a run's eval files"),
    "curves": ("probes.analysis.curves:main", "learning curves and U-shapes from the eval files of run directories"),
    "report": ("probes.analysis.report:main", "report.md + figures + tables: seeds, U-shapes, AoA, scaling grid, case "
                                              "study, regions"),
    "compare": ("probes.analysis.compare:main", "two runs, checkpoints or seed groups: do the recipes differ "
                                                "(seeds, Welch) or these models (--unit item: pairs) -> compare.csv"),
    "benchmarks": ("probes.benchmarks.registry:main", "list / inspect / check benchmarks"),
}

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")

# transformers 5 builds an EMPTY tokenizer from config.json alone (2 tokens, every text -> no ids)
# rather than failing, so the files are checked before loading
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def build_run_parser(command: str) -> argparse.ArgumentParser:
    """Parser of ``score``, ``score-run`` and ``watch``: each one's own flags around the scoring flags they share."""
    what = {"score-run": "Score every whole checkpoint of a run",
            "watch": "Follow a training run and score its checkpoints as they become whole, until the run has finished"}
    p = argparse.ArgumentParser(
        prog=f"python -m probes {command}",
        description="Score a causal LM on a minimal-pair benchmark (convention start_token_all_tokens_v2: "
                    "the start token the model was trained with (the model directory's start_token.json) "
                    "+ all sentence tokens; MLP and sum-LP accuracy, ties wrong)." if command == "score" else
                    f"{what[command]} into RUN_DIR/evals/step<N>/<benchmark>.parquet. A file that holds "
                    f"the same pairs scored on the same checkpoint (its manifest hash) is never redone "
                    f"(so a killed job can be restarted); only checkpoints/step<N> directories with "
                    f"every file are read.")
    if command == "score":
        p.add_argument("--model", required=True, type=Path, metavar="DIR",
                       help="HF model directory (config.json + weights + tokenizer files)")
        p.add_argument("--benchmark", required=True, metavar="NAME_OR_PATH",
                       help="a benchmark name known to probes.benchmarks.registry, or a benchmark file/folder (a path "
                            "is that file, also when named like a built-in, e.g. grammar.jsonl; a name that is also a "
                            "path here is refused: write ./NAME for the path)")
        p.add_argument("--out", required=True, type=Path, metavar="FILE.parquet")
    else:
        p.add_argument("run_dir", type=Path, metavar="RUN_DIR", nargs="?" if command == "score-run" else None)
        p.add_argument("--benchmark", action="append", default=[], metavar="NAME_OR_PATH",
                       help="a benchmark name or file/folder; repeat for several")
        for fam in families():  # each family's own flags (probes/families.py), read back by _score_run
            for flag, name, kwargs in fam.options:
                p.add_argument(flag, dest=f"{fam.key}.{name}", default=None, **kwargs)
    p.add_argument("--format", default="auto", help="benchmark reader for a path (default: sniffed per file)")
    add_field_options(p)
    p.add_argument("--max-pairs-per-paradigm", type=int, default=None, metavar="N",
                   help="a fixed-seed sample of N pairs per paradigm (default: every pair)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (faster on GPUs; lps move by ~1e-2 nats)")
    p.add_argument("--per-token", action="store_true",
                   help="also store every token's lp in the eval file's sidecar <stem>.tokens.parquet")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow the model directory's own Python code (off by default)")
    if command == "score":
        return p
    p.add_argument("--replace", action="store_true",
                   help="score over eval files of another pair sample (e.g. the in-loop results); without it "
                        "they are named and nothing is scored")
    if command == "score-run":  # a public suite instead of a run directory (probes/scoring/hub.py)
        p.add_argument("--hub", metavar="ORG/NAME", help="score the revisions of a hub model (e.g. EleutherAI/pythia-160m)")
        p.add_argument("--revisions", metavar="pythia|step0,step1000,...",
                       help="with --hub: 'pythia' (its 154 checkpoints) or a comma-separated list of step<N>")
        p.add_argument("--out", type=Path, metavar="RUN_DIR", help="with --hub: the run directory to write")
        p.add_argument("--tokens-per-step", type=int, default=None, metavar="N",
                       help="with --hub: tokens per optimizer step (default: Pythia's 2,097,152)")
        p.add_argument("--delete-after", action="store_true",
                       help="with --hub: drop each revision's files from the cache once scored (not the reference)")
    if command == "watch":
        p.add_argument("--poll", type=float, default=60.0, metavar="SECONDS",
                       help="seconds between looks at the run directory (default 60)")
        p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                       help="give up (exit status 3) when the run has not finished by then")
    return p


def _score_run(command: str, args) -> int:
    from dataclasses import fields

    from probes.scoring.watch import ScoreOptions, score_run, watch
    from train.files import CorruptCheckpointError
    from train.lock import EVAL_LOCK, RunDirLocked, RunLock
    from train.neox_ckpt import is_neox_run

    if command == "watch" and args.poll <= 0:
        raise CliError(f"--poll must be > 0 seconds, got {args.poll}")
    hub = command == "score-run" and _hub_args(args)
    # what the families whose flags were given score the run with (Family.options, .probe), before any model is
    # read: an extra not installed, a task unknown
    probes = []
    for fam in families():
        given = {name: v for _, name, _ in fam.options if (v := getattr(args, f"{fam.key}.{name}")) is not None}
        if not given:
            continue
        if "batch_size" in {f.name for f in fields(fam.config)}:
            given["batch_size"] = args.batch_size
        try:
            section = fam.config(**given)
            if not section.enabled:  # e.g. a task folder without a task
                continue
            if hub:
                raise CliError(f"{fam.options[0][0]} scores the checkpoints of a run directory, not hub checkpoints")
            probes.append(fam.load("probe")(section, args.run_dir))
        except ValueError as e:  # the section's messages name its config keys; here they are flags
            message = str(e)
            for flag, name, _ in fam.options:
                message = message.replace(f"probes.{fam.key}.{name}", flag)
            raise CliError(message) from None
    if not args.benchmark and not probes:
        flags = " or ".join(fam.options[0][0] for fam in families() if fam.options)
        raise CliError(f"nothing to score: give --benchmark and/or {flags}")
    if command == "score-run" and not hub and not (args.run_dir / "checkpoints").is_dir() and not is_neox_run(args.run_dir):
        raise CliError(f"{args.run_dir}: no checkpoints/ directory; not a run directory "
                       f"(nor a gpt-neox save directory with global_step<N>)")
    benchmarks: dict = {}
    for spec in args.benchmark:  # all loaded first: a bad one fails before any model is read
        own = None if args.run_dir is None else _run_benchmark_config(args.run_dir, spec)  # --hub: no run config
        if own is not None:
            if args.max_pairs_per_paradigm is not None:
                own.max_pairs_per_paradigm = args.max_pairs_per_paradigm
            print(f"--benchmark {spec}: generated with the run's own settings ({args.run_dir / 'config.yaml'})")
        name, pairs = _load_pairs(spec, args.format, args.max_pairs_per_paradigm, own, field_options(args))
        if name in benchmarks:
            raise CliError(f"--benchmark {spec}: a second benchmark named {name!r} (the eval "
                           f"file's name); rename the file")
        if not pairs:
            raise CliError(f"--benchmark {spec}: no pairs")
        benchmarks[name] = pairs
    opts = ScoreOptions(batch_size=args.batch_size, device=args.device, bf16=args.bf16,
                        trust_remote_code=args.trust_remote_code, per_token=args.per_token)
    if hub:
        from probes.evals.files import EvalInputError
        from probes.analysis.outputs import check_owned_output
        from probes.scoring.hub import (OWNED, PYTHIA_TOKENS_PER_STEP, HubOptions, RevisionError, check_out,
                                        parse_revisions, score_hub)
        from train.errors import UserError
        from train.weights import WeightsMismatchError

        fresh, written = not args.out.exists(), []
        try:
            revisions = parse_revisions(args.revisions)
            hub_opts = HubOptions(args.hub, revisions, args.tokens_per_step or PYTHIA_TOKENS_PER_STEP, args.delete_after)
            check_out(args.out)  # before the lock file goes in
            check_owned_output(args.out, *OWNED)
            args.out.mkdir(parents=True, exist_ok=True)
            with RunLock(args.out, name=EVAL_LOCK, why="another score-run is scoring this directory"):
                written, warnings, errors = score_hub(args.out, hub_opts, benchmarks, opts)
        except (OSError, ValueError, UserError, RunDirLocked, EvalInputError, WeightsMismatchError,
                RevisionError) as e:
            raise CliError(str(e)) from None
        finally:  # nothing scored (offline, no revision cached): no stub run folder for a runs/* glob (issue 44)
            if fresh and not written:
                shutil.rmtree(args.out, ignore_errors=True)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        print(f"{args.out}: {len(written)} eval files written ({len(revisions) - len(errors)} of {len(revisions)} "
              f"revisions scored or already done)")
        for e in errors:
            print(f"error: {e}", file=sys.stderr)
        return 2 if errors else 0
    try:
        with RunLock(args.run_dir, name=EVAL_LOCK,
                     why="another score-run or watch is scoring this run; wait for it to finish"):
            if command == "score-run":
                written = score_run(args.run_dir, benchmarks, opts, probes=probes, replace_samples=args.replace)
                print(f"{args.run_dir}: {len(written)} eval files written")
                if written and (args.run_dir / "curves").is_dir():  # drawn from the files now replaced
                    from probes.analysis.curves import main as curves_main

                    curves_main([str(args.run_dir), "--out", str(args.run_dir / "curves")], own=True)
                return 0
            return 0 if watch(args.run_dir, benchmarks, opts, poll_s=args.poll, timeout_s=args.timeout,
                              probes=probes, replace_samples=args.replace) else 3
    except (OSError, ValueError, RunDirLocked, CorruptCheckpointError) as e:  # messages name the checkpoint or file
        raise CliError(str(e)) from None


def _hub_args(args) -> bool:
    """True for `score-run --hub`; the flags that go with it checked."""
    hub_only = [f for f, v in (("--revisions", args.revisions), ("--out", args.out),
                               ("--tokens-per-step", args.tokens_per_step), ("--delete-after", args.delete_after)) if v]
    if args.hub is None:
        if hub_only:
            raise CliError(f"{hub_only[0]} goes with --hub ORG/NAME")
        if args.run_dir is None:
            raise CliError("score-run needs RUN_DIR (or --hub ORG/NAME --revisions ... --out RUN_DIR)")
        return False
    if args.run_dir is not None:
        raise CliError(f"--hub writes to --out; RUN_DIR {args.run_dir} is not read")
    if args.revisions is None or args.out is None:
        raise CliError("--hub needs --revisions (pythia, or step0,step1000,...) and --out RUN_DIR")
    if args.tokens_per_step is not None and args.tokens_per_step < 1:
        raise CliError(f"--tokens-per-step must be >= 1, got {args.tokens_per_step}")
    if args.trust_remote_code:  # a downloaded suite is untrusted input
        raise CliError("--trust-remote-code is refused with --hub: a downloaded suite's Python never runs here "
                       "(Pythia's revisions need none); download it and score the directory with probes score")
    return True


def _run_benchmark_config(run_dir: Path, spec: str):
    """The BenchmarkConfig a run's config.yaml probed a generated benchmark (grammar, ...) with, else None: the
    defaults would write other pairs under the same eval name as the in-loop files."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from probes.benchmarks.registry import REGISTRY
    from probes.scoring.hook import ProbesConfig

    path = Path(run_dir) / "config.yaml"
    if spec not in REGISTRY or REGISTRY[spec].relpath is not None or not path.is_file():
        return None
    try:
        probes = OmegaConf.load(path).get("probes")
        if probes is None:
            return None
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ProbesConfig), probes))
        return next((bc for bc in cfg.resolved_benchmarks() if bc.name == spec), None)
    except (OmegaConfBaseException, ValueError, OSError) as e:
        raise CliError(f"{path}: its probes settings cannot be read ({e}); they define --benchmark {spec}") from None


def _load_pairs(spec: str, fmt: str, max_per_paradigm: Optional[int], cfg=None,
                fields: Optional[dict] = None) -> tuple[str, list]:
    """(name, pairs) of a registry name, or a file or folder; `cfg`: the BenchmarkConfig to load it with (a run's
    own settings); `fields`: the generic reader's column and delimiter options, over a registry entry's own."""
    from probes.benchmarks.registry import FORMATS, REGISTRY, BenchmarkConfig, load_benchmark

    if fmt not in FORMATS:
        raise CliError(f"--format {fmt}: unknown; known: {', '.join(FORMATS)}")
    if spec in REGISTRY and Path(spec).exists():  # which one was meant cannot be guessed
        raise CliError(f"--benchmark {spec}: both the built-in benchmark {spec!r} and the file or folder "
                       f"{Path(spec).resolve()}; write ./{spec} for the path, or run from elsewhere for the name")
    if cfg is None and spec not in REGISTRY and not Path(spec).exists():
        raise CliError(f"--benchmark {spec}: unknown benchmark, and no such file or folder; "
                       f"known names: {', '.join(sorted(REGISTRY))}")
    if cfg is None:
        named = spec in REGISTRY
        cfg = BenchmarkConfig(name=spec if named else Path(spec).stem, path=None if named else spec, format=fmt,
                              max_pairs_per_paradigm=max_per_paradigm,
                              **{k: v for k, v in (fields or {}).items() if v is not None})
    try:
        return cfg.name, load_benchmark(cfg)
    except (ValueError, FileNotFoundError) as e:  # loader messages name the file and line
        raise CliError(f"--benchmark {spec}: {e}") from None


def _main(parser, run, argv: Optional[Sequence[str]] = None) -> int:
    """``run(args)`` on ``parser()``'s reading of argv (its counts checked), a CliError printed as one line with
    exit status 2."""
    args = parser().parse_args(argv)
    try:
        if args.batch_size < 1:
            raise CliError(f"--batch-size must be >= 1, got {args.batch_size}")
        if args.max_pairs_per_paradigm is not None and args.max_pairs_per_paradigm < 1:
            raise CliError(f"--max-pairs-per-paradigm must be >= 1, got {args.max_pairs_per_paradigm}")
        return run(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _score(args) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from probes.analysis.outputs import check_output_file
    from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint
    from probes.scoring.primitive import CONVENTIONS, accuracy, pair_sentence_ids
    from probes.scoring.readout import (coverage, coverage_warning, phenomenon_table, run_token_counts,
                                        unwritable_scripts)
    from probes.scoring.watch import check_vocabulary
    from train.errors import is_user_error, reading
    from train.files import CorruptCheckpointError, read_trainer_state
    from train.weights import WeightsMismatchError, load_causal_lm

    d = args.model
    if not d.is_dir():
        raise CliError(f"--model {d}: not a directory")
    if not (d / "config.json").is_file():
        raise CliError(f"--model {d}: no config.json; not a Hugging Face model directory")
    if not any((d / f).is_file() for f in WEIGHT_FILES) and not any(d.glob("model-*.safetensors")):
        raise CliError(f"--model {d}: no model weights (expected one of {', '.join(WEIGHT_FILES)})")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise CliError(f"--model {d}: no tokenizer files (expected one of {', '.join(TOKENIZER_FILES)}); "
                       f"scores need the tokenizer the model was trained with")
    try:
        check_output_file(args.out)
        name, pairs = _load_pairs(args.benchmark, args.format, args.max_pairs_per_paradigm,
                                  fields=field_options(args))
        # {}: a model directory that is not one of our checkpoints does not know its step/tokens (-1)
        state = read_trainer_state(args.model, missing_ok=True)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not pairs:
        raise CliError(f"--benchmark {args.benchmark}: no pairs")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError) as e:
        # the ids scored must come from the tokenizer saved with the model, never a substitute
        raise CliError(f"--model {args.model}: cannot load the tokenizer: {e}") from None
    try:
        with reading(args.model, "the model (config.json, weights)"):
            model = load_causal_lm(args.model, AutoModelForCausalLM, trust_remote_code=args.trust_remote_code)
        check_vocabulary(args.model, tokenizer, model)
    except (WeightsMismatchError, ValueError) as e:
        raise CliError(f"--model {e}") from None
    model.to(device)
    ids = pair_sentence_ids(tokenizer, pairs)  # scored, and read again by the coverage readout
    # how well the tokenizer reads the benchmark, before scoring (it may say not to bother); when badly, a warning
    # naming the scripts it cannot write
    counts, store = run_token_counts(args.model, len(tokenizer))
    cov = coverage(tokenizer, pairs, counts, ids)
    print(f"tokenizer coverage of {name}: {cov['unknown']:.1%} unknown, {cov['byte_fallback']:.1%} byte-fallback"
          + (f", {cov['unseen']:.1%} never seen in the run's corpus" if "unseen" in cov else "")
          + f" of {int(cov['pieces']):,} pieces")
    if coverage_warning(name, cov, store):  # only then: which characters it cannot write, named by script
        scripts = unwritable_scripts(tokenizer, (t for p in pairs for t in (p.good, p.bad)))
        print(coverage_warning(name, cov, store, scripts), file=sys.stderr)
    opts = ScoreOptions(batch_size=args.batch_size, device=device, bf16=args.bf16, progress=True,
                        per_token=args.per_token)
    try:
        df = evaluate_checkpoint(model, tokenizer, pairs, name=name, step=int(state.get("step", -1)),
                                 tokens=int(state.get("tokens", -1)), ckpt_dir=args.model, out=args.out, opts=opts,
                                 ids=ids, max_pairs_per_paradigm=args.max_pairs_per_paradigm).df
    except Exception as e:  # its manifest.json does not read; a sentence longer than the model's context, ...
        if isinstance(e, CorruptCheckpointError) or is_user_error(e):
            raise CliError(f"--benchmark {args.benchmark}: {e}" if isinstance(e, ValueError) else str(e)) from None
        raise
    print(f"{name}: {len(df)} pairs, {len(df.groupby(['phenomenon', 'paradigm']))} paradigms  "  # as `benchmarks`
          f"acc_mlp={accuracy(df, 'mlp'):.4f}  acc_sum={accuracy(df, 'sum'):.4f}  -> {args.out}")
    authors = getattr(pairs.report, "authors_convention", None) if hasattr(pairs, "report") else None
    print(phenomenon_table(df, authors))  # accuracy per phenomenon
    if authors:
        print(f"the authors of {name} score by {authors}: {CONVENTIONS[authors]} "
              f"(acc_{authors}={accuracy(df, authors):.4f})")
    return 0


score_main = partial(_main, partial(build_run_parser, "score"), _score)
score_run_main = partial(_main, partial(build_run_parser, "score-run"), partial(_score_run, "score-run"))
watch_main = partial(_main, partial(build_run_parser, "watch"), partial(_score_run, "watch"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    from train.commands import dispatch

    commands = {**COMMANDS, **{name: (target, about) for f in families() for name, target, about in f.commands}}
    return dispatch("python -m probes", commands, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
