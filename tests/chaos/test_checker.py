"""The chaos checker catches what it is there to catch: violations planted in a small
hand-made record are reported with their ids, and what the contract allows is not.

Each test writes the files a chaos run leaves (``tests.chaos.record``) for one clean
history — a start created, dispatched once, its body executed once and completed — then
plants one violation and checks the report names it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.chaos.checker import Report, check
from tests.chaos.record import BODIES, FAULTS, HISTORY, RECEIVER, SAMPLES, STORE, append_line

START = "st_000000000000000000000001"
RUN = "run_000000000000000000000001"
CREATED_AT = "2030-01-01T00:00:00.000Z"
DUE = "2030-01-01T00:00:01.000Z"
DUE_T = 1893456001.0
NONCE = "a" * 32


def start_view(**changes: Any) -> dict[str, Any]:
    view = {
        "id": START,
        "business_request_id": "c1-s1",
        "start_at": DUE,
        "state": "dispatched",
        "version": 2,
        "dispatch": {"run_id": RUN},
    }
    view.update(changes)
    return view


def run_view(**changes: Any) -> dict[str, Any]:
    view = {
        "id": RUN,
        "state": "completed",
        "origin": {"source": "scheduled_start", "id": START},
        "attempts": 1,
        "result": {"nonce": NONCE, "attempt": 1},
        "created_at": "2030-01-01T00:00:01.005Z",
        "ended_at": "2030-01-01T00:00:02.000Z",
    }
    view.update(changes)
    return view


def body(
    event: str, attempt: int = 1, nonce: str = NONCE, t: float = DUE_T + 0.1, **extra: Any
) -> dict[str, Any]:
    return {
        "event": event,
        "run_id": RUN,
        "attempt": attempt,
        "nonce": nonce,
        "pid": 4242,
        "ppid": 4241,
        "t": t,
        "origin_id": START,
        **extra,
    }


class Record:
    """A run directory written by hand."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ops = 0
        self.space: dict[str, Any] = {
            "starts": [start_view()],
            "runs": [run_view()],
            "schedules": [],
            "occurrences": {},
            "deliveries": {},
            "notifications": [],
        }
        self.quota_starts: list[dict[str, Any]] = []
        (directory / "run.json").write_text(
            json.dumps(
                {
                    "tenant": "chaos",
                    "quota_tenant": "quota",
                    "quota_limit": 2,
                    "webhook_secret": "s3cret",
                }
            )
        )
        self.operation(
            "create",
            "POST",
            "/v1/tenants/chaos/scheduled-starts",
            [(201, start_view(state="scheduled", dispatch=None))],
            key="k1",
            body={"business_request_id": "c1-s1"},
        )
        self.body(body("begin", concurrent=False))
        self.body(body("end", t=DUE_T + 0.5))
        for name in (FAULTS, RECEIVER, SAMPLES):
            (directory / name).touch()

    def operation(
        self,
        kind: str,
        method: str,
        path: str,
        answers: list[tuple[int | None, Any]],
        *,
        key: str | None = None,
        body: Any = None,
        tenant: str = "chaos",
        ended: bool = True,
    ) -> int:
        self.ops += 1
        append_line(
            self.directory / HISTORY,
            {
                "type": "op",
                "op": self.ops,
                "kind": kind,
                "tenant": tenant,
                "method": method,
                "path": path,
                "body": body,
                "key": key,
                "t": 1.0,
            },
        )
        for number, (status, answer) in enumerate(answers, 1):
            append_line(
                self.directory / HISTORY,
                {
                    "type": "answer",
                    "op": self.ops,
                    "n": number,
                    "status": status,
                    "body": answer,
                    "error": None,
                    "t0": 1.0,
                    "t1": 1.1,
                },
            )
        if ended:
            append_line(
                self.directory / HISTORY,
                {"type": "end", "op": self.ops, "status": answers[-1][0], "t": 1.2},
            )
        return self.ops

    def body(self, record: dict[str, Any]) -> None:
        append_line(self.directory / BODIES, record)

    def fault(self, record: dict[str, Any]) -> None:
        append_line(self.directory / FAULTS, {"type": "fault", **record})

    def check(self) -> Report:
        store = {
            "tenants": {"chaos": self.space, "quota": {"starts": self.quota_starts, "runs": []}}
        }
        (self.directory / STORE).write_text(json.dumps(store))
        return check(self.directory)


def rules(report: Report) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for violation in report.violations:
        found.setdefault(violation.rule, []).append(violation.ids)
    return found


def test_a_clean_record_has_no_violation(tmp_path: Path) -> None:
    report = Record(tmp_path).check()
    assert not report.violations, report.text()
    assert report.counts["bodies"] == {"begin": 1, "end": 1}


def test_a_second_completed_execution_of_a_run_is_reported_with_the_run_id(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.body(body("begin", attempt=2, nonce="b" * 32, t=DUE_T + 1.0))
    record.body(body("end", attempt=2, nonce="b" * 32, t=DUE_T + 1.5))
    found = rules(record.check())
    assert {"run": RUN} in found["run_twice"]
    assert {"run": RUN} in found["execution_not_counted"]  # attempt 2 of a run that counts 1


def test_the_same_attempt_executed_twice_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.body(body("begin", nonce="b" * 32, t=DUE_T + 1.0))
    found = rules(record.check())
    assert {"run": RUN} in found["attempt_executed_twice"]


def test_a_retried_attempt_after_its_worker_was_killed_is_allowed(tmp_path: Path) -> None:
    """DP-2: the body of attempt 1 completed, but its worker was killed before the outcome
    was recorded; attempt 2 executes again and its result is the run's."""
    record = Record(tmp_path)
    record.space["runs"] = [run_view(attempts=2, result={"nonce": "b" * 32, "attempt": 2})]
    record.fault(
        {
            "id": 1,
            "kind": "kill_worker",
            "target": "worker-1",
            "pids": [4241, 4242],
            "t": DUE_T + 0.6,
        }
    )
    record.body(body("begin", attempt=2, nonce="b" * 32, t=DUE_T + 5.0))
    record.body(body("end", attempt=2, nonce="b" * 32, t=DUE_T + 5.5))
    report = record.check()
    assert not report.violations, report.text()
    assert report.counts["re_executions"]["after_a_fault"] == 1


def test_a_kill_of_another_process_does_not_explain_a_second_execution(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["runs"] = [run_view(attempts=2, result={"nonce": "b" * 32, "attempt": 2})]
    record.fault(
        {"id": 1, "kind": "kill_worker", "target": "worker-2", "pids": [5000], "t": DUE_T + 0.6}
    )
    record.body(body("begin", attempt=2, nonce="b" * 32, t=DUE_T + 5.0))
    record.body(body("end", attempt=2, nonce="b" * 32, t=DUE_T + 5.5))
    assert {"run": RUN} in rules(record.check())["run_twice"]


def test_a_result_no_body_returned_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["runs"] = [run_view(result={"nonce": "f" * 32})]
    assert {"run": RUN} in rules(record.check())["result_not_from_a_body"]


def test_two_bodies_of_one_run_at_once_are_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["runs"] = [run_view(attempts=2)]
    record.body(body("begin", attempt=2, nonce="b" * 32, t=DUE_T + 0.2, concurrent=True))
    assert {"run": RUN} in rules(record.check())["concurrent_bodies"]


def test_an_accepted_start_absent_from_the_store_is_reported_with_its_id(tmp_path: Path) -> None:
    record = Record(tmp_path)
    ghost = "st_0000000000000000000000ff"
    record.operation(
        "create",
        "POST",
        "/v1/tenants/chaos/scheduled-starts",
        [(None, None), (201, {"id": ghost, "state": "scheduled"})],
        key="k2",
        body={"business_request_id": "c1-s2"},
    )
    found = rules(record.check())
    assert {"start": ghost, "op": 2, "key": "k2"} in found["accepted_start_lost"]


def test_a_dispatched_start_without_its_run_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["runs"] = []
    (tmp_path / BODIES).write_text("")
    assert {"start": START} in rules(record.check())["start_runs"]


def test_a_second_run_of_one_start_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["runs"].append(run_view(id="run_000000000000000000000002"))
    assert {"start": START} in rules(record.check())["start_runs"]


def test_a_start_no_client_saw_accepted_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    stranger = start_view(
        id="st_0000000000000000000000ee",
        business_request_id="nobody",
        state="canceled",
        dispatch=None,
    )
    record.space["starts"].append(stranger)
    assert {"start": stranger["id"], "business_request_id": "nobody"} in rules(record.check())[
        "start_never_accepted"
    ]


def test_an_acknowledged_cancel_that_lost_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    op = record.operation(
        "cancel_start",
        "POST",
        f"/v1/tenants/chaos/scheduled-starts/{START}/cancel",
        [(200, start_view(state="canceled", dispatch=None))],
        key="k3",
        body={"version": 1},
    )
    found = rules(record.check())
    assert {"start": START, "op": op} in found["acknowledged_cancel_lost"]
    assert {"start": START, "op": op} in found["terminal_state_changed"]


def test_a_terminate_overwritten_by_a_later_result_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    op = record.operation(
        "run_terminate",
        "POST",
        f"/v1/tenants/chaos/runs/{RUN}/terminate",
        [(200, run_view(state="terminated", result=None))],
        key="k4",
    )
    assert {"run": RUN, "op": op} in rules(record.check())["terminal_state_changed"]


def test_a_replay_that_answered_differently_is_reported_with_its_key(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.operation(
        "replay",
        "POST",
        "/v1/tenants/chaos/scheduled-starts",
        [(422, {"error": {"code": "start_at_in_past"}})],
        key="k1",
        body={"business_request_id": "c1-s1"},
    )
    assert {"tenant": "chaos", "key": "k1"} in rules(record.check())["replay_differs"]


def test_undecided_answers_are_not_compared(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.operation(
        "replay",
        "POST",
        "/v1/tenants/chaos/scheduled-starts",
        [
            (None, None),
            (503, {"error": {"code": "store_unavailable"}}),
            (202, {"status": "in_progress"}),
            (201, start_view(state="scheduled", dispatch=None)),
        ],
        key="k1",
        body={"business_request_id": "c1-s1"},
    )
    assert not record.check().violations


def test_a_quota_exceeded_in_a_sample_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    append_line(tmp_path / SAMPLES, {"t": 5.0, "tenant": "quota", "pending": 3})
    assert {"t": 5.0} in rules(record.check())["quota_exceeded"]


def test_webhook_copies_with_different_bytes_or_never_answered_are_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["deliveries"] = {
        "whk_1": [
            {"id": "dlv_1", "event_id": "evt_1", "status": "delivered", "attempts": 2},
            {"id": "dlv_2", "event_id": "evt_2", "status": "pending", "attempts": 3},
        ]
    }
    for text, action in (
        ('{"event_id": "evt_1", "n": 1}', "500"),
        ('{"event_id": "evt_1", "n": 2}', "200"),
    ):
        append_line(
            tmp_path / RECEIVER,
            {
                "event_id": "evt_1",
                "signature": None,
                "sha256": str(hash(text)),
                "body": text,
                "action": action,
            },
        )
    found = rules(record.check())
    assert {"event": "evt_1"} in found["event_bytes_differ"]
    assert {"event": "evt_1"} in found["event_badly_signed"]
    assert {"event": "evt_2", "delivery": "dlv_2"} in found["event_never_received"]
    assert {"event": "evt_2", "delivery": "dlv_2"} in found["delivery_not_delivered"]


def test_follow_through_twice_for_one_occurrence_is_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    record.space["notifications"] = [
        {"id": "ntf_1", "kind": "regression", "occurrence_id": "occ_1"},
        {"id": "ntf_2", "kind": "regression", "occurrence_id": "occ_1"},
    ]
    assert {"occurrence": "occ_1"} in rules(record.check())["follow_through_repeated"]


def test_runs_of_a_skip_schedule_that_overlap_are_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    schedule = {"id": "sch_1", "overlap": "skip"}
    record.space["schedules"] = [schedule]
    occurrences = []
    for number, (created, ended) in enumerate(
        [
            ("2030-01-01T00:00:03.000Z", "2030-01-01T00:00:05.000Z"),
            ("2030-01-01T00:00:04.000Z", "2030-01-01T00:00:06.000Z"),
        ],
        1,
    ):
        occurrence_id = f"occ_{number}"
        occurrences.append(
            {
                "id": occurrence_id,
                "schedule_id": "sch_1",
                "occurrence_at": created,
                "state": "dispatched",
                "run_id": f"run_s{number}",
                "follow_through": {"status": "no_policy"},
            }
        )
        record.space["runs"].append(
            run_view(
                id=f"run_s{number}",
                origin={"source": "schedule", "id": occurrence_id, "schedule_id": "sch_1"},
                created_at=created,
                ended_at=ended,
                result=None,
                state="failed",
            )
        )
    record.space["occurrences"] = {"sch_1": occurrences}
    assert {"schedule": "sch_1"} in rules(record.check())["overlap_violated"]


def test_an_operation_never_decided_and_work_left_undone_are_reported(tmp_path: Path) -> None:
    record = Record(tmp_path)
    op = record.operation(
        "create",
        "POST",
        "/v1/tenants/chaos/scheduled-starts",
        [(503, None)],
        key="k9",
        body={"business_request_id": "c1-s9"},
        ended=False,
    )
    record.space["runs"] = [run_view(state="running", result=None)]
    found = rules(record.check())
    assert {"op": op, "key": "k9"} in found["never_decided"]
    assert {"run": RUN} in found["not_settled"]


def test_a_superseded_attempt_that_begins_after_a_later_one_is_reported(tmp_path: Path) -> None:
    """What seed 102 found: attempt 2's body began 0.18 s after attempt 3's, when its
    frozen worker thawed (docs/reliability.md)."""
    record = Record(tmp_path)
    (tmp_path / BODIES).write_text("")
    later = "c" * 32
    record.space["runs"] = [run_view(attempts=3, result={"nonce": later, "attempt": 3})]
    record.fault(
        {"id": 1, "kind": "pause_worker", "target": "worker-1", "pids": [4242], "t": DUE_T}
    )
    record.body(body("begin", attempt=3, nonce=later, t=DUE_T + 5.0, pid=5151))
    record.body(body("begin", attempt=2, nonce="b" * 32, t=DUE_T + 5.2, concurrent=True))
    record.body(body("end", attempt=3, nonce=later, t=DUE_T + 5.6, pid=5151))
    found = rules(record.check())
    assert found["stale_attempt_began"] == [{"run": RUN}]
    assert "run_twice" not in found and "concurrent_bodies" not in found
