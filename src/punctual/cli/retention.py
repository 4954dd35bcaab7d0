"""``punctual retention``: what retention sweeps would remove (SPEC RT-1), a host command.

``plan`` is the dry run of the next sweep: per tenant and kind, how many records are past
their window and covered by no hold, counted in the store as it stands; nothing is
removed. Exit codes: 0 success, 2 configuration error, 3 unknown tenant, 5 the database
is unavailable (``punctual.cli.startup`` prints the one line).
"""

from __future__ import annotations

from typing import Annotated

import typer

from punctual.cli.host import Host, emit, host_command
from punctual.domain.retention import RecordKind
from punctual.domain.timeutil import to_rfc3339
from punctual.errors import NotFound

retention_app = typer.Typer(help="Retention of terminal records (dry run).", no_args_is_help=True)


@host_command(retention_app.command("plan"))
def plan(
    host: Host,
    as_json: bool,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
) -> None:
    """Print what the next sweep would remove, per tenant and kind, removing nothing."""
    with host.system() as system:
        from punctual import bootstrap  # inside, once assembled: see punctual.cli.main
        from punctual.usecases.tenancy import retention

        if tenant is not None:
            with system.store.transaction(readonly=True) as tx:
                known = tx.identity.tenant_exists(tenant)
            if not known:
                raise NotFound(f"tenant {tenant} does not exist")
        at = system.services.clock.now()
        policy = bootstrap.retention_policy(system.settings)
        counts = retention.plan(system.services, policy, tenant, at)
    totals = {kind.value: sum(c[kind.value] for c in counts.values()) for kind in RecordKind}
    lines = [f"{'tenant':<24} {'kind':<22} {'would remove':>12}"]
    for name, kinds in counts.items():
        lines += [f"{name:<24} {kind:<22} {n:>12}" for kind, n in kinds.items() if n]
    lines.append(f"{'(all)':<24} {'total':<22} {sum(totals.values()):>12}")
    report = {"at": to_rfc3339(at), "tenants": counts, "total": totals}
    emit(report, as_json, "\n".join(lines))
