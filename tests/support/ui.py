"""The operator page without a browser: its forms, and a tenant with a member, a viewer
and an admin signed in through the page's own sign-in form."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

import httpx
from fastapi.testclient import TestClient

from punctual import bootstrap
from punctual.domain.permissions import Role
from punctual.usecases.tenancy import identity
from tests.support.api import Api, register_demo

SESSION = "punctual_session"


class Forms(HTMLParser):
    """The page's forms: action -> their hidden fields, and every button's text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.forms: dict[str, dict[str, str]] = {}
        self.buttons: list[str] = []
        self._action: str | None = None
        self._in_button = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form" and values.get("method") == "post":
            self._action = values["action"]
            self.forms[self._action] = {}
        elif tag == "input" and self._action is not None and values.get("type") == "hidden":
            self.forms[self._action][values["name"]] = values.get("value", "")
        elif tag == "button":
            self._in_button = True
            self.buttons.append("")

    def handle_data(self, data: str) -> None:
        if self._in_button:
            self.buttons[-1] += data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._action = None
        elif tag == "button":
            self._in_button = False


@dataclass
class Ui:
    system: bootstrap.Punctual
    client: TestClient
    member: str
    viewer: str
    admin: str

    def api(self, token: str | None = None) -> Api:
        return Api(self.client, token or self.admin, "acme")

    def sign_in(self, token: str, tenant: str = "") -> httpx.Response:
        form = Forms(self.client.get("/ui/").text).forms["/ui/sign-in"]
        return self.client.post(
            "/ui/sign-in",
            data={**form, "token": token, "tenant": tenant},
            follow_redirects=False,
        )

    def finding(self, subject: str = "st_broken", message: str = "start st_broken failed") -> str:
        with self.system.store.transaction() as tx:
            tx.findings.raise_finding(
                "acme", "start_failed", subject, "error", message, self.system.services.clock.now()
            )
            return next(f.id for f in tx.findings.latest("acme", 50) if f.subject_id == subject)

    def acknowledged(self, finding_id: str) -> bool:
        findings = self.api().get("/health").json()["findings"]
        return bool(next(f for f in findings if f["id"] == finding_id)["acknowledged"])


def make_ui(system: bootstrap.Punctual, client: TestClient) -> Ui:
    register_demo(system)
    services = system.services
    return Ui(
        system,
        client,
        member=identity.ensure_member_token(services, "acme", "mia", Role.MEMBER).token,
        viewer=identity.ensure_member_token(services, "acme", "vera", Role.VIEWER).token,
        admin=identity.ensure_member_token(services, "acme", "ada", Role.ADMIN).token,
    )
