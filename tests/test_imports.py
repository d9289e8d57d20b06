"""The house has one direction: probes/ stands on train/, the eval contract (probes/evals/) is the bottom
of probes/, and no module reaches back. Read statically from every import statement, those inside
functions and under ``if TYPE_CHECKING:`` included: a circle a function-local import closes is still a
circle (it only waits to bite at call time), and the trainer finds its hooks through the config, never
an import."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("train", "probes")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Our modules that `name` imports anywhere in its file. ``from a.b import c`` is a.b.c when that is
    a module, else a.b; importing a.b.c runs the packages a and a.b first, so they count too (except the
    packages `name` itself lives in, which are already running)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(package[: len(package) - node.level + 1] + ([mod] if mod else []))
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            parts = t.split(".")
            found.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in known)
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 2)}
    return found - own


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports(m, f, known) for m, f in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def upward(g: dict[str, set[str]]) -> list[str]:
    """Imports against the direction: train -> probes, and probes.evals -> any other part of probes."""
    bad = []
    for m, targets in sorted(g.items()):
        for t in sorted(targets):
            if m.startswith("train") and t.startswith("probes"):
                bad.append(f"{m} imports {t}: train/ imports nothing of probes/ (hooks come from the config)")
            if (m.startswith("probes.evals") and t.startswith("probes")
                    and not (t == "probes" or t.startswith("probes.evals"))):
                bad.append(f"{m} imports {t}: the eval contract imports nothing above it")
    return bad


def test_no_import_circle_and_every_import_runs_one_way():
    g = graph(ROOT)
    assert {"train.loop", "probes.scoring.hook", "probes.evals.files"} <= set(g)  # it read the project
    assert not cycles(g), f"import circles: {cycles(g)}"
    assert not upward(g), "\n".join(upward(g))


def test_the_scan_catches_a_planted_circle_and_a_train_to_probes_import(tmp_path):
    """The bugs this file is for, planted in a small tree: a circle closed inside a function, and a
    train module reaching into probes under TYPE_CHECKING."""
    (tmp_path / "train").mkdir()
    (tmp_path / "probes" / "evals").mkdir(parents=True)
    for pkg in ("train", "probes", "probes/evals"):
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "train" / "a.py").write_text("from train import b\n")
    (tmp_path / "train" / "b.py").write_text("def f():\n    from train.a import x\n")
    (tmp_path / "train" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                             "    from probes.evals.files import y\n")
    (tmp_path / "probes" / "evals" / "files.py").write_text("from ..scoring import z\n")
    (tmp_path / "probes" / "scoring.py").write_text("import train.a\n")
    g = graph(tmp_path)
    assert cycles(g) == [["train.a", "train.b"]]
    assert upward(g) == [
        "probes.evals.files imports probes.scoring: the eval contract imports nothing above it",
        "train.c imports probes: train/ imports nothing of probes/ (hooks come from the config)",
        "train.c imports probes.evals: train/ imports nothing of probes/ (hooks come from the config)",
        "train.c imports probes.evals.files: train/ imports nothing of probes/ (hooks come from the config)",
    ]


def test_the_trainer_and_its_config_load_no_probe_module():
    """At run time too: what `python -m train` imports before the config names a hook loads no probes."""
    code = ("import sys, train.__main__, train.loop, train.grid, train.slurm, train.neox, train.verify\n"
            "print('\\n'.join(m for m in sys.modules if m == 'probes' or m.startswith('probes.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == []


def test_help_lists_every_command_and_imports_no_heavy_library():
    """`python -m train --help` and `python -m probes --help` list every subcommand, one line each, from one table
    per package, without importing what the commands need (torch, Hydra, pandas: seconds of CPU); a misspelt
    subcommand is answered with the closest."""
    from probes.__main__ import COMMANDS as PROBES
    from probes.families import families
    from train.__main__ import COMMANDS as TRAIN

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for package, names in (("train", {*TRAIN}), ("probes", {*PROBES, *(c[0] for f in families() for c in f.commands)})):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", package, "--help"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        listed = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("  ")}
        assert listed == names and {"verify", "batch", "plan", "slurm", "neox"} <= {*TRAIN}
        loaded = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
        assert not loaded & {"torch", "hydra", "pandas", "transformers", "numpy"}, package
        wrong = subprocess.run([sys.executable, "-m", package, "verfy" if package == "train" else "reprot"], cwd=ROOT,
                               env=env, capture_output=True, text=True, timeout=600)
        assert wrong.returncode == 2 and "did you mean" in wrong.stderr and wrong.stderr.count("\n") == 1
