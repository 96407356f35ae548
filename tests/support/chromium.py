"""Where the browser tests find Chromium: ``$S3Q_CHROMIUM`` or one on the PATH."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str:
    given = os.environ.get("S3Q_CHROMIUM")
    if given:
        return given
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "the dashboard tests need Chromium: apt-get install -y chromium "
        "(or set S3Q_CHROMIUM to a Chromium or Chrome executable)",
        pytrace=False,
    )
