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
