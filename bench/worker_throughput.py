"""Trivial runs executed per second by one ``punctual worker`` process on PostgreSQL.

A fresh database; one ``punctual worker --app punctual.demo:app`` process with the default
slots; then, per measured run, ``--runs`` pending runs of the demo ``echo`` are inserted
in one transaction (what dispatch writes, through the store port) and the benchmark polls
until every one of them has ended. Reported per run:

* runs/s = runs / (the last run's ``ended_at`` - the insert's commit), every run
  ``completed``;
* the worker's CPU (its process group: the worker and its slot processes), PostgreSQL's
  (the backends of the benchmark's database) and everything else's ("others'"), in % of
  one core.

``--topology single`` runs the worker inside one ``punctual serve`` (API, runner and
worker in one process, what a user starts) instead of a ``punctual worker`` of its own.

``--compare SRC`` measures a second punctual source side by side (for example an export
of the previous commit, ``python -m bench export HEAD~3``): the worker processes of the
two variants alternate run by run, each against its own fresh database, and the ratio of
the medians is printed.

    .venv/bin/python -m bench.worker_throughput
    .venv/bin/python -m bench.worker_throughput --compare /tmp/punctual-bench-src-abc1234/src
    .venv/bin/python -m bench.worker_throughput --topology single
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import (
    DEMO_APP,
    PUNCTUAL,
    TENANT,
    CpuWindow,
    Proc,
    Spread,
    Target,
    build_system,
    database_of,
    free_port,
    fresh_target,
    measured_source,
    print_machine,
    print_table,
    serve_argv,
    spawn,
    wait_until,
    workflow_loaded,
)

POLL_SECONDS = 0.05
"""Only how soon the end is seen: the figure itself is read from the runs' stamps."""


@dataclass
class Measured:
    runs_per_second: float
    worker_cpu: float
    postgres_cpu: float
    others_cpu: float
    not_completed: int


@dataclass
class Variant:
    name: str
    pythonpath: str | None  # None: this working tree


@contextlib.contextmanager
def worker_system(
    variant: Variant, log_dir: Path, slots: int | None, topology: str = "split"
) -> Iterator[tuple[Target, Any, Proc]]:
    """A fresh database, an in-process system to insert runs, and the process whose
    worker executes them: ``punctual worker`` (split) or ``punctual serve`` (single)."""
    with fresh_target("postgres", "worker_tp") as target:
        system = build_system(target)
        env: dict[str, str] = {}
        if variant.pythonpath is not None:
            paths = [variant.pythonpath, *target.env()["PYTHONPATH"].split(os.pathsep)]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        if topology == "split":
            argv = [str(PUNCTUAL), "worker", "--app", DEMO_APP, "--database-url", target.url]
            if slots is not None:
                argv += ["--slots", str(slots)]
        elif topology == "single":
            argv = [*serve_argv(target, "api,runner,worker", free_port()), "--app", DEMO_APP]
            if slots is not None:
                env["PUNCTUAL_WORKER__SLOTS"] = str(slots)
        else:
            raise ValueError(f"unknown topology {topology!r} (single or split)")
        name = "worker" if topology == "split" else "serve"
        proc = spawn(f"{name}-{variant.name}", argv, target, log_dir, **env)
        try:
            wait_until(
                "the worker's definitions", lambda: workflow_loaded(system), 120, procs=[proc]
            )
            yield target, system, proc
        finally:
            proc.stop()
            system.close()


def _new_runs(system: Any, count: int, tag: str) -> list[Any]:
    from punctual.domain.ids import new_id
    from punctual.ports.records import NewRun
    from punctual.workflows import load_app

    definition = next(d for d in load_app(DEMO_APP).definitions if d.name == "echo")
    codec = system.services.codec
    runs = []
    for i in range(count):
        payload = codec.encrypt({"message": f"{tag}-{i}"}, TENANT)
        runs.append(
            NewRun(
                id=new_id("run"),
                tenant=TENANT,
                workflow="echo",
                definition_version=definition.version,
                artifact=definition.artifact,
                origin={"kind": "bench", "id": tag},
                started_by="bench",
                input=payload,
                task_queue="standard",
                priority=3,
                traceparent=None,
                timeout_seconds=60.0,
            )
        )
    return runs


def one_run(target: Target, system: Any, proc: Proc, count: int, tag: str) -> Measured:
    from punctual.adapters.stores.sql import tables as t

    runs = _new_runs(system, count, tag)
    ids = [r.id for r in runs]
    engine = sa.create_engine(target.url.replace("postgresql://", "postgresql+psycopg://", 1))
    cpu = CpuWindow({"worker": proc.pid}, database=database_of(target.url))
    try:
        cpu.start()
        with system.services.store.transaction() as tx:
            tx.runs.insert_new(runs, datetime.now(UTC))
        committed = datetime.now(UTC)
        r = t.runs.c
        unfinished = sa.select(sa.func.count()).where(
            r.origin_id == tag, r.state.in_(["pending", "running"])
        )

        def done() -> bool:
            with engine.connect() as conn:
                return int(conn.execute(unfinished).scalar_one()) == 0

        deadline = time.monotonic() + max(120.0, count / 50)
        while not done():
            proc.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"runs of {tag} not finished after {deadline:.0f} s")
            time.sleep(POLL_SECONDS)
        cpu.stop()
        with engine.connect() as conn:
            last = conn.execute(
                sa.select(sa.func.max(r.ended_at)).where(r.origin_id == tag)
            ).scalar_one()
            completed = int(
                conn.execute(
                    sa.select(sa.func.count()).where(r.origin_id == tag, r.state == "completed")
                ).scalar_one()
            )
    finally:
        engine.dispose()
    if last.tzinfo is None:
        last = last.replace(tzinfo=UTC)
    elapsed = (last - committed).total_seconds()
    assert len(ids) == count
    return Measured(
        runs_per_second=count / elapsed if elapsed > 0 else float("nan"),
        worker_cpu=cpu.percent("worker"),
        postgres_cpu=cpu.percent("postgres"),
        others_cpu=cpu.percent("others"),
        not_completed=count - completed,
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line, also used by ``bench.targets`` so its rows keep these defaults."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs per measured round")
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds per variant")
    parser.add_argument("--warmup", type=int, default=500, help="untimed runs first")
    parser.add_argument("--slots", type=int, default=None, help="default: the worker's default")
    parser.add_argument(
        "--compare", default=None, help="another punctual src directory to measure alongside"
    )
    parser.add_argument(
        "--topology",
        choices=["split", "single"],
        default="split",
        help="split: one `punctual worker` process (default); single: the worker inside one "
        "`punctual serve` (api, runner and worker in one process, what a user starts)",
    )
    return parser


def variants_of(args: argparse.Namespace) -> list[Variant]:
    variants = [Variant("measured", None)]
    if args.compare:
        variants.insert(0, Variant("compare", args.compare))
    return variants


def measure(args: argparse.Namespace) -> dict[str, list[Measured]]:
    """The variants' rounds, alternating (each printed as it ends), by variant name."""
    variants = variants_of(args)
    results: dict[str, list[Measured]] = {v.name: [] for v in variants}
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="punctual-bench-")))
        systems = {
            v.name: stack.enter_context(worker_system(v, logs, args.slots, args.topology))
            for v in variants
        }
        for name, (target, system, proc) in systems.items():
            if args.warmup:
                one_run(target, system, proc, args.warmup, f"warm-{name[:4]}-{os.getpid()}")
        for round_ in range(args.repeat):
            for v in variants:
                target, system, proc = systems[v.name]
                m = one_run(
                    target, system, proc, args.runs, f"r{round_}-{v.name[:4]}-{os.getpid()}"
                )
                results[v.name].append(m)
                print(
                    f"   {v.name} round {round_ + 1}: {m.runs_per_second:,.0f} runs/s, worker "
                    f"CPU {m.worker_cpu:.0f} %, PostgreSQL {m.postgres_cpu:.0f} %, others "
                    f"{m.others_cpu:.0f} %, not completed {m.not_completed}",
                    flush=True,
                )
    return results


def main() -> None:
    args = build_parser().parse_args()
    print_machine("worker throughput: trivial runs (demo echo) per second, one worker process")
    print(
        f"   {args.runs} runs per round, {args.repeat} rounds per variant, slots: "
        f"{args.slots or 'default'}"
    )
    if args.topology == "single":
        print("   the worker runs inside one `punctual serve --components api,runner,worker`")
    variants = variants_of(args)
    if args.compare:
        print(f"   compare = the punctual in {args.compare}; measured = {measured_source()}")
    results = measure(args)
    rows = []
    for v in variants:
        ms = results[v.name]
        rows.append(
            [
                v.name,
                Spread.of([m.runs_per_second for m in ms]).fmt(0),
                Spread.of([m.worker_cpu for m in ms]).fmt(0),
                Spread.of([m.postgres_cpu for m in ms]).fmt(0),
                Spread.of([m.others_cpu for m in ms]).fmt(0),
            ]
        )
    print_table(["variant", "runs/s", "worker CPU %", "PostgreSQL CPU %", "others' CPU %"], rows)
    if len(variants) == 2:
        before = Spread.of([m.runs_per_second for m in results[variants[0].name]]).median
        after = Spread.of([m.runs_per_second for m in results[variants[1].name]]).median
        print(f"   ratio measured / compare: {after / before:.2f}")


if __name__ == "__main__":
    main()
