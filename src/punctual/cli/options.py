"""Options that every command of a kind shares, declared once: ``--url``, ``--token`` and
``--tenant`` for the tenant commands (``punctual.cli.remote.Remote``), ``--config`` and
``--database-url`` for the host commands (``punctual.cli.host.Host``), and ``--json``.

The options are the fields of a frozen dataclass, each annotated with its ``typer.Option``;
a command takes that dataclass as one parameter, and ``as_json: bool`` for ``--json``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

Command = Callable[..., None]
Register = Callable[[Command], Command]

_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def shared_options(bundle: type[Any], json_option: Any) -> Callable[[Register], Register]:
    """A decorator maker for one kind of command: ``@made(app.command(name))`` (or
    ``app.callback()``) registers the command with ``--json`` (``json_option``) and the
    fields of ``bundle`` added after its own options. The command takes, in their place, one
    parameter annotated ``bundle`` and ``as_json: bool`` (a command may declare its own
    ``--json`` option instead, to say what it prints)."""
    hints = typing.get_type_hints(bundle, include_extras=True)
    bundled = [field.name for field in dataclasses.fields(bundle)]
    shared = [
        inspect.Parameter("as_json", _KEYWORD, default=False, annotation=json_option),
        *(
            inspect.Parameter(
                field.name, _KEYWORD, default=field.default, annotation=hints[field.name]
            )
            for field in dataclasses.fields(bundle)
        ),
    ]

    def command_of_kind(register: Register) -> Register:
        def decorate(command: Command) -> Command:
            declared = inspect.signature(command, eval_str=True).parameters.values()
            receiver = next(p.name for p in declared if p.annotation is bundle)
            own = [
                parameter
                for parameter in declared
                if parameter.name != receiver
                and not (parameter.name == "as_json" and parameter.annotation is bool)
            ]
            names = {parameter.name for parameter in own}

            @functools.wraps(command)
            def with_shared_options(**options: Any) -> None:
                made = bundle(**{name: options.pop(name) for name in bundled})
                command(**{receiver: made}, **options)

            parameters = [*own, *(p for p in shared if p.name not in names)]
            with_shared_options.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
            with_shared_options.__annotations__ = {p.name: p.annotation for p in parameters}
            register(with_shared_options)
            return command

        return decorate

    return command_of_kind
