"""Fixtures: one bridge subprocess shared by the tests that only need a healthy bridge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support import Bridge


@pytest.fixture(scope="session")
def bridge() -> Iterator[Bridge]:
    b = Bridge()
    yield b
    b.close()
