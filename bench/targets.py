"""The speed targets' table of docs/performance.md, regenerated in one command.

Each row runs an existing benchmark through its own functions, with the arguments its
own command line would get (parsed by its ``build_parser``, so its defaults hold), once
on the default topology a user starts and once on the split one beside it:

* ``single``: one ``punctual serve`` process (bursts and worker: API, runner and worker
  in it; schedules: runner and worker; creates: one API process);
* ``split``: runner and worker in processes of their own (creates: two API processes,
  the deployment the create target is stated for).

The claim row is store-only: the topology does not apply. The burst rows run pgqueuer
in the same run (``bench.peers.pgqueuer_burst``, alternating round by round), once per
topology. Progress lines of the benchmarks come first; then a header (commit, machine,
load average) and a markdown table, median of ``--runs`` [min-max], with each row's
verdict against its target and the command that measures that row alone.

    .venv/bin/python -m bench.targets                          # every row, both topologies
    .venv/bin/python -m bench.targets --only burst500,worker --topology single
    .venv/bin/python -m bench.targets --quick                  # end-to-end check only
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import claim_scale, create_throughput, schedules_sustained, worker_throughput
from bench.common import (
    Spread,
    load_average,
    measured_source,
    parse_list,
    percentile,
    print_machine,
    print_table,
    run_variants,
)
from bench.peers import pgqueuer_burst

ROWS = ["burst2000", "burst500", "create", "batch", "worker", "claim", "schedules"]
TOPOLOGIES = ["single", "split"]
API_PROCESSES = {"single": 1, "split": 2}
"""The create rows: API processes per topology (the create bench runs API servers only)."""

BURST2000_RATIO = 1.0
BURST500_P99_S = 0.10
CREATE_FLOOR_RATIO = 0.25
BATCH_PER_S = 10_000.0
WORKER_PER_S = 3_000.0
CLAIM_SMALL_ROWS = 1_000
CLAIM_RATIO = 2.0
CLAIM_REPEATS = 5
"""As in docs/performance.md's claim section (``--repeats 5``)."""

QUICK_CLAIM_ROWS = 20_000
QUICK: dict[str, dict[str, object]] = {
    # Tiny sizes and short waits: only to see that every row runs end to end.
    "bursts": {"--lead": 3},
    "creates": {"--count": 200, "--warmup": 20, "--batch-count": 1000},
    "worker": {"--runs": 500, "--warmup": 50},
    "claim": {"--repeats": 2},
    "schedules": {
        "--schedules": 50,
        "--seconds": 5,
        "--warmup": 1,
        "--lead": 3,
        "--drain": 10,
        "--quiet-load": 0,
        "--timeline": 0,
    },
}


@dataclass
class Row:
    """One line of the table: figures and verdicts by topology (``single``/``split``)."""

    key: str
    target: str
    figures: dict[str, str] = field(default_factory=dict)
    met: dict[str, bool] = field(default_factory=dict)
    peer: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    store_only: bool = False

    def cells(self) -> list[str]:
        if self.store_only:
            columns = [self.figures.get("store", "not run"), "n/a (store only)"]
        else:
            columns = [self.figures.get(t, "not run") for t in TOPOLOGIES]
        return [
            self.target,
            *columns,
            "; ".join(self.peer) or "-",
            self.verdict(),
            "; ".join(f"`{c}`" for c in self.commands),
        ]

    def verdict(self) -> str:
        words = {t: "met" if ok else "missed" for t, ok in self.met.items()}
        if not words:
            return "n/a"
        if len(set(words.values())) == 1:
            return next(iter(words.values()))
        return ", ".join(f"{word} ({t})" for t, word in words.items())


@dataclass
class Plan:
    """What this invocation measures, and what happened on the way (failures, seconds)."""

    rows: list[str]
    topologies: list[str]
    runs: int
    quick: bool
    claim_rows: int
    slots: int
    log_dir: Path
    failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def invocation(
    module: str, parser: argparse.ArgumentParser, options: Mapping[str, object]
) -> tuple[argparse.Namespace, str]:
    """The module's arguments for ``options``, as its own command line parses them, and
    the shortest command that gives them (options at the module's default left out)."""
    argv: list[str] = []
    shown: list[str] = []
    for flag, value in options.items():
        pair = [flag, str(value)]
        argv += pair
        dest = flag.lstrip("-").replace("-", "_")
        if getattr(parser.parse_args(pair), dest) != parser.get_default(dest):
            shown += pair
    return parser.parse_args(argv), " ".join(["python -m", module, *shown])


def with_quick(plan: Plan, group: str, options: Mapping[str, object]) -> Mapping[str, object]:
    return {**options, **QUICK[group]} if plan.quick else options


def spread(values: Sequence[float], digits: int, unit: str = "") -> str:
    """``median [min-max] unit``, as every benchmark prints it."""
    text = Spread.of(values).fmt(digits)
    return f"{text}{unit}" if unit and text != "n/a" else text


def median(values: Sequence[float]) -> float:
    return Spread.of(values).median


def at_most(values: Sequence[float], limit: float) -> bool:
    """Met by the median; an empty or NaN figure is not met."""
    value = median(values)
    return not math.isnan(value) and value <= limit


def at_least(values: Sequence[float], limit: float) -> bool:
    value = median(values)
    return not math.isnan(value) and value >= limit


def guarded(
    plan: Plan,
    name: str,
    rows: list[Row],
    topologies: Sequence[str],
    measure: Callable[[], None],
) -> None:
    """One benchmark's failure marks its rows and lets the others run: a long run
    is not thrown away for one row."""
    began = time.monotonic()
    print(f"\n-- {name} (load average {load_average()})", flush=True)
    try:
        measure()
    except (Exception, SystemExit) as exc:  # SystemExit: a failed pgqueuer install
        traceback.print_exc()
        text = str(exc).strip()
        plan.failures.append(f"{name}: {text.splitlines()[0] if text else type(exc).__name__}")
        for row in rows:
            for topology in topologies:
                row.figures.setdefault(topology, f"error ({name})")
    finally:
        plan.seconds[name] = time.monotonic() - began
        print(f"-- {name}: {plan.seconds[name]:.0f} s", flush=True)


# --- the rows --------------------------------------------------------------------------------


def bursts(plan: Plan, rows: dict[str, Row]) -> None:
    """Both burst rows from one ``pgqueuer_burst`` run per topology (pgqueuer alongside)."""
    scenarios = [s for s in ("burst500", "burst2000") if s in rows]
    if not scenarios:
        return
    wanted = [rows[s] for s in scenarios]
    parser = pgqueuer_burst.build_parser()
    python: Path | None = None
    for topology in plan.topologies:
        options = {
            "--scenarios": ",".join(scenarios),
            "--runs": plan.runs,
            "--topology": topology,
            "--slots": plan.slots,
        }
        args, command = invocation(
            "bench.peers.pgqueuer_burst", parser, with_quick(plan, "bursts", options)
        )
        for row in wanted:
            row.commands.append(command)

        def measure(args: argparse.Namespace = args, topology: str = topology) -> None:
            nonlocal python
            if python is None:
                python = pgqueuer_burst.ensure_peer_venv(args.venv, args.pgqueuer_spec)
            results = pgqueuer_burst.measure(args, python)
            for scenario in scenarios:
                found = pgqueuer_burst.figures(results, scenario)
                row = rows[scenario]
                row.figures[topology] = (
                    f"{spread(found.punctual, 3, ' s')}, ratio {spread(found.ratios, 2)}"
                )
                row.peer.append(f"{spread(found.pgqueuer, 3, ' s')} ({topology} run)")
                if scenario == "burst2000":
                    row.met[topology] = at_most(found.ratios, BURST2000_RATIO)
                else:
                    row.met[topology] = at_most(found.punctual, BURST500_P99_S)

        guarded(plan, f"bursts, {topology}", wanted, [topology], measure)


def creates(plan: Plan, rows: dict[str, Row]) -> None:
    """Single and batch creates from one ``create_throughput`` run: every variant deployed
    at once and measured in turn, so the two topologies share the noise."""
    routes = [r for r in ("create", "batch") if r in rows]
    if not routes:
        return
    wanted = [rows[r] for r in routes]
    processes = [API_PROCESSES[t] for t in plan.topologies]
    options = {
        "--backends": "postgres",
        "--clients": "16",
        "--api-processes": ",".join(str(p) for p in processes),
        "--routes": ",".join(routes),
        "--runs": plan.runs,
    }
    args, command = invocation(
        "bench.create_throughput",
        create_throughput.build_parser(),
        with_quick(plan, "creates", options),
    )
    for row in wanted:
        row.commands.append(command)

    def measure() -> None:
        deployments = create_throughput.measure_backend("postgres", args, plan.log_dir)
        by_variant = {d.variant: [r.rate for r in d.results] for d in deployments}
        for topology in plan.topologies:
            for route in routes:
                variant = next(
                    v
                    for v in by_variant
                    if v.route == route and v.processes == API_PROCESSES[topology] and not v.preload
                )
                rates = by_variant[variant]
                row = rows[route]
                figure = spread(rates, 0, " items/s" if route == "batch" else " creates/s")
                target = BATCH_PER_S if route == "batch" else create_throughput.TARGET_PER_S
                met = at_least(rates, target)
                floor = create_throughput.floor_of(variant, by_variant)
                if route == "create" and floor is not None:
                    ratios = [r / f for r, f in zip(rates, by_variant[floor], strict=True) if f > 0]
                    figure += f", {spread(ratios, 2, ' x')} the /healthz floor"
                    met = met and at_least(ratios, CREATE_FLOOR_RATIO)
                row.figures[topology] = figure
                row.met[topology] = met

    guarded(plan, "creates", wanted, plan.topologies, measure)


def worker(plan: Plan, rows: dict[str, Row]) -> None:
    """Trivial runs/s of the worker in one ``serve`` (single) and on its own (split)."""
    row = rows.get("worker")
    if row is None:
        return
    parser = worker_throughput.build_parser()
    for topology in plan.topologies:
        options = {"--repeat": plan.runs, "--topology": topology}
        args, command = invocation(
            "bench.worker_throughput", parser, with_quick(plan, "worker", options)
        )
        row.commands.append(command)

        def measure(args: argparse.Namespace = args, topology: str = topology) -> None:
            rates = [m.runs_per_second for m in worker_throughput.measure(args)["measured"]]
            row.figures[topology] = spread(rates, 0, " runs/s")
            row.met[topology] = at_least(rates, WORKER_PER_S)

        guarded(plan, f"worker, {topology}", [row], [topology], measure)


def claim(plan: Plan, rows: dict[str, Row]) -> None:
    """Small, big, small, ... each size on a fresh database; each big one is compared with
    the mean of the small ones either side of it, as docs/performance.md did."""
    row = rows.get("claim")
    if row is None:
        return
    parser = claim_scale.build_parser()
    sizes: dict[int, argparse.Namespace] = {}
    for rows_count in (CLAIM_SMALL_ROWS, plan.claim_rows):
        options = {"--rows": rows_count, "--repeats": CLAIM_REPEATS, "--seconds": 3}
        args, command = invocation("bench.claim_scale", parser, with_quick(plan, "claim", options))
        sizes[rows_count] = args
        row.commands.append(command)

    def page_ms(rows_count: int) -> float:
        args = sizes[rows_count]
        times = claim_scale.claim_page(args.rows, args.due, args.repeats)
        value = median(times.explain_ms)
        print(
            f"   claim of {args.due} due among {args.rows:,} pending: EXPLAIN ANALYZE "
            f"{spread(times.explain_ms, 1, ' ms')}, plain {spread(times.plain_ms, 1, ' ms')}",
            flush=True,
        )
        return value

    def measure() -> None:
        small = [page_ms(CLAIM_SMALL_ROWS)]
        big: list[float] = []
        for _ in range(plan.runs):
            big.append(page_ms(plan.claim_rows))
            small.append(page_ms(CLAIM_SMALL_ROWS))
        ratios = [b / ((small[i] + small[i + 1]) / 2) for i, b in enumerate(big)]
        row.figures["store"] = (
            f"{spread(ratios, 2, ' x')} ({spread(big, 1, ' ms')} at {plan.claim_rows:,} vs "
            f"{spread(small, 1, ' ms')} at {CLAIM_SMALL_ROWS:,})"
        )
        row.met["store"] = at_most(ratios, CLAIM_RATIO)

    guarded(plan, "claim", [row], ["store"], measure)


def schedules(plan: Plan, rows: dict[str, Row]) -> None:
    """Run start lag of 1,000 one-second schedules, each run on fresh processes."""
    row = rows.get("schedules")
    if row is None:
        return
    options = {
        "--runs": plan.runs,
        "--topology": ",".join(plan.topologies),
        "--slots": plan.slots,
    }
    args, command = invocation(
        "bench.schedules_sustained",
        schedules_sustained.build_parser(),
        with_quick(plan, "schedules", options),
    )
    row.commands.append(command)
    found: dict[str, list[schedules_sustained.RunResult]] = {}

    def keep(topology: str, results: list[schedules_sustained.RunResult]) -> list[list[str]]:
        found[topology] = results
        return []

    def measure() -> None:
        run_variants(
            plan.topologies,
            args.runs,
            lambda topology, run, logs: schedules_sustained.one_run(args, topology, run, logs),
            schedules_sustained.describe,
            keep,
        )
        for topology, results in found.items():
            run_start = [percentile(r.run_start_ms, 99) for r in results if r.run_start_ms]
            dispatch = [percentile(r.dispatch_ms, 99) for r in results if r.dispatch_ms]
            kept = sum(r.runs_keep_up for r in results)
            row.figures[topology] = (
                f"run start p99 {spread(run_start, 0, ' ms')} (dispatch p99 "
                f"{spread(dispatch, 0, ' ms')}), runs kept up {kept}/{len(results)}"
            )
            row.met[topology] = at_most(run_start, schedules_sustained.TARGET_P99_MS)

    guarded(plan, "schedules", [row], plan.topologies, measure)


def targets(plan: Plan) -> dict[str, str]:
    """What each row is held to; the claim row says the size it really compares."""
    return {
        "burst2000": "2,000 due in one second: last body began after due, "
        f"ratio to pgqueuer ≤ {BURST2000_RATIO:.1f}",
        "burst500": f"500 due in one second: body start p99 ≤ {BURST500_P99_S:.2f} s",
        "create": "creates/s over HTTP, PostgreSQL, 16 clients ≥ "
        f"{create_throughput.TARGET_PER_S:,.0f}/s and ≥ {CREATE_FLOOR_RATIO} x /healthz",
        "batch": f"batch create ≥ {BATCH_PER_S:,.0f} items/s (4 clients x 500 items)",
        "worker": f"trivial runs/s, one worker, default slots ≥ {WORKER_PER_S:,.0f}/s",
        "claim": f"claim a page of 500 at {plan.claim_rows:,} pending ≤ {CLAIM_RATIO:g} x "
        f"at {CLAIM_SMALL_ROWS:,}",
        "schedules": "1,000 one-second schedules for 60 s: due → run started p99 ≤ "
        f"{schedules_sustained.TARGET_P99_MS:.0f} ms",
    }


def build_parser() -> argparse.ArgumentParser:
    """``--runs`` is what each benchmark repeats (its rounds, runs or repeats)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="Median of N runs of every row.")
    parser.add_argument("--topology", default="single,split", help="single, split or single,split.")
    parser.add_argument(
        "--only", default=",".join(ROWS), help=f"A subset of the rows: {','.join(ROWS)}."
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=4,
        help="Worker slots of the burst and schedule rows (default 4: what `punctual serve` "
        "starts with; the worker row uses the worker's default).",
    )
    parser.add_argument(
        "--claim-rows",
        type=int,
        default=None,
        help=f"Pending starts of the claim row's big size (default 1,000,000; "
        f"--quick: {QUICK_CLAIM_ROWS:,}).",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Tiny sizes and one run, only to check that the command works end to end; "
        "the figures mean nothing.",
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    wanted = parse_list(args.only)
    topologies = parse_list(args.topology)
    unknown = sorted(set(wanted) - set(ROWS)) + sorted(set(topologies) - set(TOPOLOGIES))
    if unknown or not wanted or not topologies:
        raise SystemExit(f"unknown or no rows/topologies: {', '.join(unknown) or '(none)'}")
    claim_rows = args.claim_rows or (QUICK_CLAIM_ROWS if args.quick else 1_000_000)
    started_load = load_average()
    source = measured_source()
    began = time.monotonic()
    print_machine("targets: the speed targets of docs/performance.md, single vs split")
    if args.quick:
        print("   --quick: tiny sizes, one run: the figures below mean nothing")
    with tempfile.TemporaryDirectory(prefix="punctual-bench-logs-") as logs:
        plan = Plan(
            rows=[r for r in ROWS if r in wanted],
            topologies=[t for t in TOPOLOGIES if t in topologies],
            runs=1 if args.quick else args.runs,
            quick=args.quick,
            claim_rows=claim_rows,
            slots=args.slots,
            log_dir=Path(logs),
        )
        texts = targets(plan)
        rows = {key: Row(key, texts[key], store_only=key == "claim") for key in plan.rows}
        for group in (bursts, creates, worker, claim, schedules):
            group(plan, rows)
    took = (time.monotonic() - began) / 60
    print()
    print_machine(f"targets, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"   load average at the start: {started_load}; took {took:.1f} min "
        f"({', '.join(f'{k} {v / 60:.1f}' for k, v in plan.seconds.items())} min)"
    )
    if measured_source() != source:
        print(f"   warning: the measured source changed during the run (it began at {source})")
    print(
        f"   median of {plan.runs} run(s) [min-max]"
        + ("; --quick: tiny sizes, the figures mean nothing" if plan.quick else "")
    )
    print(
        "   single = one `punctual serve` (creates: one API process); split = runner and "
        "worker apart (creates: two API processes)\n"
    )
    print_table(
        [
            "target",
            "single serve (median [min-max])",
            "split (median [min-max])",
            "peer in the same run (pgqueuer)",
            "verdict",
            "command",
        ],
        [rows[key].cells() for key in plan.rows],
    )
    if plan.failures:
        print("failed: " + "; ".join(plan.failures))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
