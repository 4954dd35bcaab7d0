"""Registering a workflow refuses what no worker could execute (WF-7)."""

from __future__ import annotations

import math

import pytest

from punctual import App
from punctual.errors import ConfigurationError


@pytest.mark.parametrize("timeout", [0, -1, math.nan])
def test_an_execution_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    app = App()
    with pytest.raises(ConfigurationError, match="execution_timeout_seconds must be greater"):

        @app.workflow("w", "1", execution_timeout_seconds=timeout)
        def body(payload: object) -> None: ...

    assert app.definitions == []


def test_a_positive_execution_timeout_is_kept() -> None:
    app = App()

    @app.workflow("w", "1", execution_timeout_seconds=0.5)
    def body(payload: object) -> None: ...

    assert [d.execution_timeout_seconds for d in app.definitions] == [0.5]
