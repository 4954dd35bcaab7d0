"""The host's log lines (SPEC OP-4, docs/operations.md "Logs"): ``[logging] level``,
``format = "text" | "json"`` and ``access_log``, an event line's fields as JSON keys, and
a timer's event said at INFO only when what it says changed."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual.adapters.observability import (
    EventHub,
    JsonFormatter,
    Metrics,
    configure_logging,
    event_fields,
)
from punctual.errors import ConfigurationError
from punctual.ports.events import Event
from punctual.settings import load_settings

TOUCHED = ("", "punctual", "alembic", "uvicorn", "uvicorn.error", "uvicorn.asgi", "uvicorn.access")


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``configure_logging`` sets process-wide state: put it back as it was."""
    saved = {
        name: (logger.handlers[:], logger.level, logger.propagate)
        for name in TOUCHED
        for logger in [logging.getLogger(name)]
    }
    yield
    logging.captureWarnings(False)
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def configured(level: str = "INFO", format: str = "text", access_log: bool = False) -> io.StringIO:
    stream = io.StringIO()
    configure_logging(level=level, format=format, access_log=access_log, stream=stream)
    return stream


def lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_an_event_line_s_fields_become_typed_keys() -> None:
    fields = event_fields(
        "event=start.dispatched tenant=acme subject=st_1 lag_ms=12.5 attempt=2 "
        "note=back this file up with the database complete=True error=None"
    )
    assert fields == {
        "event": "start.dispatched",
        "tenant": "acme",
        "subject": "st_1",
        "lag_ms": 12.5,
        "attempt": 2,
        "note": "back this file up with the database",
        "complete": True,
        "error": None,
    }
    assert event_fields("idle slot process 12 exited (exit code=255)") == {}
    # A field that names something stays text, so each key has one type in every line.
    assert event_fields("event=run.completed tenant=2024 subject=42 workflow=7 attempt=1") == {
        "event": "run.completed",
        "tenant": "2024",
        "subject": "42",
        "workflow": "7",
        "attempt": 1,
    }
    # The line's own field comes first; the same name inside a later value is text of it.
    spoofed = "event=readiness_failed tenant=acme detail=bad thing tenant=other event=spoofed"
    assert event_fields(spoofed) == {
        "event": "readiness_failed",
        "tenant": "acme",
        "detail": "bad thing tenant=other event=spoofed",
    }
    # A field named like one of the line's own keys does not overwrite it.
    assert event_fields("event=x level=3 message=hi") == {
        "event": "x",
        "level_": 3,
        "message_": "hi",
    }


def test_json_lines_carry_time_level_logger_message_and_the_fields(
    restored_logging: None,
) -> None:
    stream = configured(level="INFO", format="json")
    logging.getLogger("punctual.events").info(
        "event=run.completed tenant=acme subject=run_1 attempt=1"
    )
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("punctual.worker").exception("event=worker_loop_error worker=wrk_1")
    first, second = (json.loads(line) for line in lines(stream))
    assert first["level"] == "INFO" and first["logger"] == "punctual.events"
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert first["message"] == "event=run.completed tenant=acme subject=run_1 attempt=1"
    assert (first["event"], first["subject"], first["attempt"]) == ("run.completed", "run_1", 1)
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exception"]


def test_text_lines_are_time_level_logger_message(restored_logging: None) -> None:
    stream = configured(level="INFO", format="text")
    logging.getLogger("punctual.runner").info("event=runner_started runner=wrk_1")
    (line,) = lines(stream)
    assert line.endswith(" INFO punctual.runner event=runner_started runner=wrk_1")


def test_level_warning_hides_info_and_debug_shows_punctual_s_own(
    restored_logging: None,
) -> None:
    stream = configured(level="WARNING")
    logging.getLogger("punctual.runner").info("event=runner_started runner=wrk_1")
    logging.getLogger("punctual.runner").warning("event=engine_unavailable runner=wrk_1")
    assert [line.split(" ", 3)[2:] for line in lines(stream)] == [
        ["WARNING", "punctual.runner event=engine_unavailable runner=wrk_1"]
    ]
    stream = configured(level="DEBUG")
    logging.getLogger("punctual.worker").debug("event=run_body_started run=run_1")
    logging.getLogger("httpcore").debug("a library's own debug line")
    assert [line.split(" ", 4)[3] for line in lines(stream)] == ["punctual.worker"]


def test_the_access_log_is_on_or_off_whatever_the_level(restored_logging: None) -> None:
    access = logging.getLogger("uvicorn.access")
    args = ("127.0.0.1:5000", "GET", "/healthz", "1.1", 200)
    stream = configured(level="WARNING", format="json", access_log=True)
    access.info('%s - "%s %s HTTP/%s" %d', *args)
    (line,) = (json.loads(line) for line in lines(stream))
    assert line["logger"] == "uvicorn.access"
    assert (line["method"], line["path"], line["status"]) == ("GET", "/healthz", 200)
    stream = configured(level="DEBUG", access_log=False)
    access.info('%s - "%s %s HTTP/%s" %d', *args)
    assert lines(stream) == []
    assert not access.hasHandlers(), "uvicorn skips its access lines when none would show"


def test_uvicorn_s_own_info_lines_stay_quiet(restored_logging: None) -> None:
    stream = configured(level="INFO")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("uvicorn.error").error("Exception in ASGI application")
    assert [line.split(" ", 3)[2] for line in lines(stream)] == ["ERROR"]


def test_a_timer_s_event_is_said_at_info_only_when_it_changed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = EventHub(Metrics())
    with caplog.at_level(logging.DEBUG, logger="punctual.events"):
        for due in (0, 0, 0, 3, 3, 0, 0):
            hub.emit(Event("dispatch.backlog", "*", "runner", {"due": due}))
        hub.emit(Event("start.failed", "acme", "st_1", {}))
        hub.emit(Event("start.failed", "acme", "st_1", {}))
    said = [(r.levelname, r.getMessage().split()[-1]) for r in caplog.records]
    assert said == [
        ("INFO", "due=0"),
        ("DEBUG", "due=0"),
        ("DEBUG", "due=0"),
        ("INFO", "due=3"),
        ("DEBUG", "due=3"),
        ("INFO", "due=0"),
        ("DEBUG", "due=0"),
        ("INFO", "subject=st_1"),
        ("INFO", "subject=st_1"),
    ]


def test_logging_settings_defaults_environment_and_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("LEVEL", "FORMAT", "ACCESS_LOG"):
        monkeypatch.delenv(f"PUNCTUAL_LOGGING__{name}", raising=False)
    defaults = load_settings(None).logging
    assert (defaults.level, defaults.format, defaults.access_log) == ("INFO", "text", False)
    config = tmp_path / "punctual.toml"
    config.write_text('[logging]\nlevel = "warning"\nformat = "json"\naccess_log = true\n')
    from_file = load_settings(config).logging
    assert (from_file.level, from_file.format, from_file.access_log) == ("WARNING", "json", True)
    monkeypatch.setenv("PUNCTUAL_LOGGING__LEVEL", "DEBUG")
    assert load_settings(config).logging.level == "DEBUG", "the environment wins over the file"


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"level": "LOUD"}, "logging.level"),
        ({"format": "xml"}, "logging.format"),
        ({"access_log": "sometimes"}, "logging.access_log"),
        ({"colour": True}, "logging.colour"),
    ],
)
def test_a_bad_logging_value_names_its_key(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigurationError, match=key.replace(".", r"\.")):
        load_settings(None, logging=section)


def test_the_json_formatter_needs_no_configuration() -> None:
    record = logging.LogRecord("punctual", logging.INFO, __file__, 1, "plain %s", ("text",), None)
    assert json.loads(JsonFormatter().format(record))["message"] == "plain text"
