"""The README's option table and links cannot go stale: every option it lists exists in configs/, every
config group option is listed, and every page it links exists (issue 29 item 1)."""
import re
from pathlib import Path

from train.overrides import config_groups

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _table() -> dict[str, list[str]]:
    start = README.index("| group | options | what it sets |")
    rows = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        group, options = line.split("|")[1:3]
        rows[group.strip().strip("`")] = re.findall(r"`([^`]+)`", options)
    return rows


def test_every_option_listed_exists_and_every_option_is_listed():
    listed, groups = _table(), config_groups()
    assert set(listed) == set(groups), "groups: README vs configs/"
    for group, options in groups.items():
        assert sorted(listed[group]) == options, f"configs/{group}/ vs the README's row"


def test_the_two_commands_at_the_top_are_kept():
    head = README.split("## ", 1)[0]
    assert "bash scripts/setup.sh && .venv/bin/python -m train experiment=demo" in head
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest -q" in head


def test_every_linked_page_exists():
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).resolve().is_file(), f"{page.name} links {target}"


def test_sections_other_engineers_fill_are_kept():
    assert "\n## Layout\n" in README and "\n### Laptop-scale ZhoBLiMP grid\n" in README


def _section_commands(heading: str) -> list[list[str]]:
    """The bash blocks of a README section, each command joined over its `\\` continuations and split as
    bash would (comments dropped)."""
    import shlex

    body = README.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", body, flags=re.S)
    return [shlex.split(cmd, comments=True) for block in blocks for cmd in block.replace("\\\n", " ").splitlines()
            if cmd.strip()]


def test_section_2_runs_as_written_in_a_fresh_shell(tmp_path, shared):
    """README §2's commands, exactly as written but for the corpus (a 2 MB part of it), the budget and where
    they write, run by bash from the repository root with no environment activated (issue 36 item 3).
    The Chinese command is the English one with its corpus, tokenizer, benchmark and run directory swapped."""
    import os
    import shlex
    import subprocess

    en, report, zh = _section_commands("2. Your corpus")
    assert [en[0], zh[0], report[0]] == [".venv/bin/python"] * 3 and en[1:3] == ["-m", "train"]
    swapped = {"data.paths": "[../shared/corpora/zh]", "tokenizer.vocab_size": "6000", "probes": "zhoblimp",
               "hydra.run.dir": "runs/mycorpus-zh"}
    assert zh == [a.split("=", 1)[0] + "=" + swapped[a.split("=", 1)[0]] if a.split("=", 1)[0] in swapped else a
                  for a in en]
    corpus = shared("corpora", "en", "onestopenglish")
    run, out = tmp_path / "run", tmp_path / "report"
    subst = {"data.paths": f"[{corpus}]", "data.budget_tokens": "8192", "hydra.run.dir": str(run)}
    train_cmd = [f"{a.split('=', 1)[0]}={subst[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in subst else a for a in en]
    report_cmd = [str(run) if a == "runs/mycorpus" else str(out) if a == "reports/mycorpus" else a for a in report]
    assert report_cmd[:4] == [".venv/bin/python", "-m", "probes", "report"] and str(out) in report_cmd
    # a fresh shell: no activated environment, nothing of it on PATH (PYTHONPATH stays: a worktree's own code)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    script = f"{shlex.join(train_cmd)} && {shlex.join(report_cmd)}"
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run / "evals").is_dir() and (out / "report.md").is_file()
    assert "probes at every checkpoint: blimp (670 pairs)" in proc.stdout, proc.stdout[-2000:]
