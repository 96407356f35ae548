"""docs/architecture.md's generated part (the rooms, their modules, the paths of a call) is
what ``scripts/architecture.py`` makes of the code now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_architecture_doc_is_generated_from_the_code_as_it_is() -> None:
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "scripts/architecture.py")
    assert spec is not None and spec.loader is not None
    architecture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(architecture)
    doc = (ROOT / "docs" / "architecture.md").read_text()
    start, end = doc.index(architecture.BEGIN), doc.index(architecture.END)
    written = doc[start : end + len(architecture.END)]
    assert written == architecture.generated(), (
        "docs/architecture.md is out of date: run python scripts/architecture.py --write"
    )
