"""docs/cli.md says what the CLI does: its example message ids have the shape of real ids (so
`s3q history --id` takes them), and its list of the commands that take ``--json`` is the CLI's."""

from __future__ import annotations

import re
from pathlib import Path

import click

from s3q.cli import main
from s3q.log import ids

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_example_ids_have_the_shape_of_real_ids() -> None:
    examples = re.findall(r"\b[0-9a-f]{20,}\b", DOC)
    assert examples, "docs/cli.md shows no message id"
    for mid in examples:
        assert len(mid) == ids.LENGTH, f"{mid} is not an id of {ids.LENGTH} hexadecimal digits"
        assert ids.enqueued_by(mid) > 0, f"{mid} names no log object"


def _with_json(group: click.Group, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= _with_json(command, f"{prefix}{name} ")
        elif any(p.name == "as_json" for p in command.params):
            found.add(prefix + name)
    return found


def test_the_list_of_commands_with_json_is_the_cli_s() -> None:
    section = DOC.split("## Output for scripts", 1)[1].split("\n## ", 1)[0]
    listed = re.search(r"nothing else\s*\(([^)]*)\)", section)
    assert listed is not None
    named = set(re.findall(r"`([a-z ]+)`", listed.group(1)))
    assert named == _with_json(main)
