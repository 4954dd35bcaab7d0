"""``punctual notifications`` and ``punctual webhooks`` over HTTP (SPEC CR-4, API.md
"Notifications and webhooks"): what a schedule tells people, and where it sends it. The
shared options, output and exit codes are in ``punctual.cli.remote``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from punctual.cli.remote import (
    CursorOpt,
    KeyOpt,
    LimitOpt,
    OrderOpt,
    Remote,
    block,
    emit,
    last_error,
    mutation_key,
    order_of,
    session,
    table,
    tenant_command,
)

if TYPE_CHECKING:
    from punctual.resources import Notification, Webhook

notifications_app = typer.Typer(help="Your notifications (over HTTP).", no_args_is_help=True)
webhooks_app = typer.Typer(
    help="The tenant's webhooks and their deliveries (over HTTP, admins).", no_args_is_help=True
)

WebhookIdArg = Annotated[str, typer.Argument(help="The webhook's id.", show_default=False)]
EventsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--event",
        help="A kind to send (regression, schedule_auto_disabled, finalize_timed_out, "
        "start_failed); repeatable; default: every kind.",
        show_default=False,
    ),
]
SecretOpt = Annotated[
    str | None,
    typer.Option(
        help="Signing secret, or @FILE to read it from a file (keeps it out of the shell "
        "history); never shown again.",
        show_default=False,
    ),
]


# --------------------------------------------------------------------------- notifications


@tenant_command(notifications_app.command("list"))
def notifications_list(
    remote: Remote,
    as_json: bool,
    unread: Annotated[bool, typer.Option("--unread", help="Only those not read yet.")] = False,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """Your notifications, newest first."""
    with session(remote, as_json) as client:
        page = client.list_notifications(
            unread=unread, limit=limit, cursor=cursor, order=order_of(order)
        )
    rows = [notification_row(n) for n in page.items]
    headers = ("ID", "CREATED", "KIND", "READ", "SCHEDULE", "TITLE")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no notifications"))


def notification_row(notification: Notification) -> tuple[Any, ...]:
    return (
        notification.id,
        notification.created_at,
        notification.kind,
        notification.read_at is not None,
        notification.schedule_id,
        notification.title,
    )


@tenant_command(notifications_app.command("read"))
def notifications_read(
    remote: Remote,
    as_json: bool,
    notification_id: Annotated[
        str, typer.Argument(help="The notification's id.", show_default=False)
    ],
    idempotency_key: KeyOpt = None,
) -> None:
    """Mark one of your notifications read, and show it whole."""
    with session(remote, as_json) as client:
        notification = client.mark_notification_read(
            notification_id, idempotency_key=mutation_key(idempotency_key)
        )
    emit(notification, as_json, notification_block(notification))


def notification_block(notification: Notification) -> list[str]:
    return block(
        f"notification {notification.id} [{notification.kind}]",
        [
            ("title", notification.title),
            ("text", notification.text),
            ("schedule", notification.schedule_id),
            ("occurrence", notification.occurrence_id),
            ("run", notification.run_id),
            ("details", notification.details or None),
            ("created at", notification.created_at),
            ("read at", notification.read_at),
        ],
    )


# --------------------------------------------------------------------------- webhooks


def secret_of(value: str | None) -> str | None:
    """``--secret``'s value; ``@FILE`` reads it (without its trailing newline)."""
    if value is None or not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text().rstrip("\r\n")
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {value[1:]}: {exc}", param_hint="--secret") from exc


def webhook_block(webhook: Webhook) -> list[str]:
    return block(
        f"webhook {webhook.id}",
        [
            ("url", webhook.url),
            ("events", ", ".join(webhook.events) or "every kind"),
            ("created at", webhook.created_at),
        ],
    )


@tenant_command(webhooks_app.command("create"))
def webhooks_create(
    remote: Remote,
    as_json: bool,
    address: Annotated[
        str,
        typer.Argument(metavar="URL", help="The http(s) address to POST to.", show_default=False),
    ],
    event: EventsOpt = None,
    secret: SecretOpt = None,
    idempotency_key: KeyOpt = None,
) -> None:
    """Send the tenant's notifications to a URL (a Slack or Mattermost incoming webhook
    works as it is); deliveries are signed when it has a secret."""
    with session(remote, as_json) as client:
        webhook = client.create_webhook(
            url=address,
            events=event or None,
            secret=secret_of(secret),
            idempotency_key=mutation_key(idempotency_key),
        )
    emit(webhook, as_json, webhook_block(webhook))


@tenant_command(webhooks_app.command("list"))
def webhooks_list(
    remote: Remote,
    as_json: bool,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """The tenant's webhooks (URLs cut after their host)."""
    with session(remote, as_json) as client:
        page = client.list_webhooks(limit=limit, cursor=cursor, order=order_of(order))
    rows = [(w.id, w.created_at, ", ".join(w.events) or "every kind", w.url) for w in page.items]
    headers = ("ID", "CREATED", "EVENTS", "URL")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no webhooks"))


@tenant_command(webhooks_app.command("get"))
def webhooks_get(remote: Remote, as_json: bool, webhook_id: WebhookIdArg) -> None:
    """Show one webhook."""
    with session(remote, as_json) as client:
        webhook = client.get_webhook(webhook_id)
    emit(webhook, as_json, webhook_block(webhook))


@tenant_command(webhooks_app.command("update"))
def webhooks_update(
    remote: Remote,
    as_json: bool,
    webhook_id: WebhookIdArg,
    address: Annotated[
        str | None,
        typer.Option(metavar="URL", help="A new http(s) address.", show_default=False),
    ] = None,
    event: EventsOpt = None,
    all_events: Annotated[
        bool, typer.Option("--all-events", help="Send every kind from now on.")
    ] = False,
    secret: SecretOpt = None,
    remove_secret: Annotated[
        bool, typer.Option("--remove-secret", help="Send unsigned deliveries from now on.")
    ] = False,
    idempotency_key: KeyOpt = None,
) -> None:
    """Change a webhook: a new --secret rotates it; what is not given stays."""
    from punctual.client import KEEP

    if event and all_events:
        raise typer.BadParameter("give --event or --all-events, not both", param_hint="--event")
    if secret is not None and remove_secret:
        raise typer.BadParameter(
            "give --secret or --remove-secret, not both", param_hint="--secret"
        )
    if address is None and not event and not all_events and secret is None and not remove_secret:
        raise typer.BadParameter(
            "nothing to change: give --address, --event, --all-events, --secret or --remove-secret"
        )
    changes: dict[str, Any] = {}
    if address is not None:
        changes["url"] = address
    if event or all_events:
        changes["events"] = event or None
    if secret is not None or remove_secret:
        changes["secret"] = secret_of(secret)
    with session(remote, as_json) as client:
        webhook = client.update_webhook(
            webhook_id,
            url=changes.get("url", KEEP),
            events=changes.get("events", KEEP),
            secret=changes.get("secret", KEEP),
            idempotency_key=mutation_key(idempotency_key),
        )
    emit(webhook, as_json, webhook_block(webhook))


@tenant_command(webhooks_app.command("delete"))
def webhooks_delete(
    remote: Remote, as_json: bool, webhook_id: WebhookIdArg, idempotency_key: KeyOpt = None
) -> None:
    """Stop sending to a webhook and forget it."""
    with session(remote, as_json) as client:
        client.delete_webhook(webhook_id, idempotency_key=mutation_key(idempotency_key))
    emit(None, as_json, f"webhook {webhook_id} deleted")


@tenant_command(webhooks_app.command("test"))
def webhooks_test(
    remote: Remote, as_json: bool, webhook_id: WebhookIdArg, idempotency_key: KeyOpt = None
) -> None:
    """Send a ``test`` event now; see it with ``webhooks deliveries``."""
    with session(remote, as_json) as client:
        queued = client.test_webhook(webhook_id, idempotency_key=mutation_key(idempotency_key))
    emit(queued, as_json, f"test event queued for webhook {webhook_id}")


@tenant_command(webhooks_app.command("deliveries"))
def webhooks_deliveries(
    remote: Remote,
    as_json: bool,
    webhook_id: WebhookIdArg,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    order: OrderOpt = None,
) -> None:
    """A webhook's deliveries, newest first: delivered, pending (with its next try) or
    failed (with why)."""
    with session(remote, as_json) as client:
        page = client.list_deliveries(webhook_id, limit=limit, cursor=cursor, order=order_of(order))
    rows = [
        (
            d.id,
            d.kind,
            d.status,
            d.attempts,
            d.last_status_code,
            d.delivered_at or d.next_attempt_at,
            last_error(d.last_error) if d.last_error else None,
        )
        for d in page.items
    ]
    headers = ("ID", "KIND", "STATUS", "ATTEMPTS", "HTTP", "DELIVERED/NEXT TRY", "LAST ERROR")
    emit(page, as_json, table(headers, rows, page.next_cursor, "no deliveries"))


@tenant_command(webhooks_app.command("redeliver"))
def webhooks_redeliver(
    remote: Remote,
    as_json: bool,
    webhook_id: WebhookIdArg,
    delivery_id: Annotated[str, typer.Argument(help="The delivery's id.", show_default=False)],
    idempotency_key: KeyOpt = None,
) -> None:
    """Send a delivery's event again (the same event id, so a receiver can tell)."""
    with session(remote, as_json) as client:
        queued = client.redeliver(
            webhook_id, delivery_id, idempotency_key=mutation_key(idempotency_key)
        )
    emit(queued, as_json, f"delivery {delivery_id} queued again")
