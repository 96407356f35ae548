"""docs/api.md names every setting a queue saves, where it says which are saved."""

from __future__ import annotations

from pathlib import Path

from s3q.config import PERSISTED

API = Path(__file__).parents[2] / "docs" / "api.md"


def test_the_paragraph_on_saved_settings_names_each_one() -> None:
    text = API.read_text()
    start = text.index("The queue's own settings")
    paragraph = text[start : text.index("\n\n", start)]
    missing = [name for name in PERSISTED if f"`{name}`" not in paragraph]
    assert missing == [], f"docs/api.md's saved settings lack {missing}"
