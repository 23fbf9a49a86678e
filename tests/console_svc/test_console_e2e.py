"""The web console end to end: real processes, real mTLS, the dev IdP, headless Chromium.

alice asks for the release of WP-10231 and watches it run; bob approves in the
Decision Center; alice confirms; the permit is RELEASED (read back from the
capability service's store). bob cannot approve his own request (the refusal and its
reason are shown). Another tenant's execution is not there for globex. An operator
sees the audit trail as a tree and verifies it; a user without the role is refused.
Data with markup is shown as text and never runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from agentmesh.config import MeshConfig
from agentmesh.launcher import demo_world
from capability_svc.internal_runtime import InternalStore
from capability_svc.world import load_world

from .conftest import WAIT_S, console_url

pytestmark = pytest.mark.integration

RELEASE_WP_10231 = "Analyze permit WP-10231 and release it if everything is fine"
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"


def permit_status(cfg: MeshConfig, permit_id: str) -> str:
    permit = InternalStore(cfg.mesh_home.data / "internal.db").scope("acme").get_permit(permit_id)
    assert permit is not None
    return permit.status


@pytest.fixture()
def world(console_mesh: MeshConfig) -> Iterator[MeshConfig]:
    """The demo world before and after each test (releases never leak into the next)."""
    store = InternalStore(console_mesh.mesh_home.data / "internal.db")
    load_world(demo_world(), store)
    yield console_mesh
    load_world(demo_world(), store)


class Person:
    """Someone using the console in their own browser."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.d = driver
        self.base = base

    def wait(self, condition: Callable[[WebDriver], Any], what: str) -> Any:
        # The page reloads itself when an execution stops running: an element found just before is then gone,
        # which is not an answer, so the condition is asked again on the new page.
        return WebDriverWait(self.d, WAIT_S, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,)).until(
            condition, message=f"waiting for {what}")

    def open(self, path: str) -> None:
        self.d.get(self.base + path)

    def by_id(self, element_id: str) -> Any:
        return self.wait(lambda d: d.find_element(By.ID, element_id), f"#{element_id}")

    def text(self, element_id: str) -> str:
        return str(self.by_id(element_id).text)

    def has(self, element_id: str) -> bool:
        return bool(self.d.find_elements(By.ID, element_id))

    def sign_in(self, tenant: str, user: str) -> Person:
        self.open("/login")
        self.by_id("sign-in").click()
        self.by_id(f"user-{tenant}-{user}").click()  # the dev identity provider's page
        self.wait(lambda d: d.find_elements(By.ID, "signed-in-as") and
                  d.find_element(By.ID, "signed-in-as").text == user, f"{user} signed in")
        assert self.text("tenant") == tenant
        return self

    def ask(self, text: str) -> str:
        """Starts an analysis from the executions page; its execution id."""
        self.open("/executions")
        self.by_id("request_text").send_keys(text)
        self.by_id("analyze").click()
        self.wait(lambda d: "/executions/exe-" in d.current_url, "the execution's page")
        return self.text("execution-id")

    def status_becomes(self, status: str) -> None:
        self.wait(lambda d: d.find_elements(By.ID, "status") and d.find_element(By.ID, "status").text == status,
                  f"status {status}")

    def not_pwned(self) -> None:
        assert self.d.execute_script("return window.pwned === undefined") is True


@pytest.fixture()
def people(world: MeshConfig, browser: Callable[[], WebDriver]) -> Callable[[str, str], Person]:
    base = console_url(world)
    return lambda tenant, user: Person(browser(), base).sign_in(tenant, user)


def test_alice_asks_bob_approves_alice_confirms_and_wp_10231_is_released(
        world: MeshConfig, people: Callable[[str, str], Person]) -> None:
    alice = people("acme", "alice")
    execution_id = alice.ask(RELEASE_WP_10231)
    # Live progress: the page loaded while the team was working and follows it as it happens.
    alice.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#live-log li"), "live progress lines")
    alice.status_becomes("AWAITING_REVIEW")  # the script reloaded the page when the execution stopped running
    assert alice.text("decision") == "RECOMMENDED_FOR_RELEASE"
    assert alice.text("action-state") == "AWAITING_APPROVAL"
    boxes = alice.d.find_elements(By.CSS_SELECTOR, "#dag [data-task] .task-status")
    assert len(boxes) == 4 and {b.text for b in boxes} == {"COMPLETED"}
    assert not alice.has("confirm"), "nothing to confirm before the approval"
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"

    bob = people("acme", "bob")
    bob.open("/reviews")
    bob.by_id("reviews").find_element(By.CSS_SELECTOR, f'tr[data-execution="{execution_id}"] a').click()
    assert bob.text("review-kind") == "ACTION_APPROVAL"
    assert bob.text("review-requester") == "alice"
    assert bob.text("action-resource") == "WP-10231"
    bob.by_id("form-approve").find_element(By.NAME, "reason").send_keys(f"evidence checked {HOSTILE}")
    bob.by_id("approve").click()
    bob.by_id("decided")
    assert bob.text("review-status") == "APPROVED"
    assert f"evidence checked {HOSTILE}" in bob.text("history"), "the reason is shown as text"
    bob.not_pwned()
    assert not bob.has("confirm"), "the reviewer never gets the requester's confirmation"

    alice.open(f"/executions/{execution_id}")
    alice.status_becomes("AWAITING_CONFIRMATION")
    assert "bob" in alice.text("action-approved-by")
    assert "Release WP-10231 now?" in alice.text("confirm-form")
    alice.by_id("confirm").click()
    alice.status_becomes("SUCCEEDED")
    assert alice.text("action-state") == "SUCCEEDED"
    assert alice.text("action-outcome") == "released and verified"
    assert alice.text("action-verified") == "yes"
    assert permit_status(world, "WP-10231") == "RELEASED"


def test_bob_cannot_approve_his_own_request_and_is_told_why(world: MeshConfig,
                                                            people: Callable[[str, str], Person]) -> None:
    bob = people("acme", "bob")
    execution_id = bob.ask(RELEASE_WP_10231)
    bob.status_becomes("AWAITING_REVIEW")
    bob.open("/reviews")
    bob.by_id("reviews").find_element(By.CSS_SELECTOR, f'tr[data-execution="{execution_id}"] a').click()
    assert bob.text("review-requester") == "bob"
    bob.by_id("approve").click()
    assert bob.text("refusal-reason") == "OWN_REQUEST"
    assert "PERMISSION_DENIED" in bob.text("refusal")
    assert "review.own_request" in bob.text("refusal-message")
    assert bob.text("review-status") == "OPEN"
    assert permit_status(world, "WP-10231") == "PENDING_RELEASE"


def test_other_tenants_do_not_see_it_operators_see_its_trail_and_markup_stays_text(
        world: MeshConfig, people: Callable[[str, str], Person]) -> None:
    alice = people("acme", "alice")
    execution_id = alice.ask(f"Analyze permit WP-10232 and tell me if it can be released {HOSTILE}")
    alice.status_becomes("SUCCEEDED")
    assert HOSTILE in alice.text("request-text")
    alice.not_pwned()
    assert alice.text("decision") == "NOT_RECOMMENDED"

    gina = people("globex", "gina")
    gina.open("/executions")
    gina.by_id("executions")
    assert not gina.d.find_elements(By.CSS_SELECTOR, f'tr[data-execution="{execution_id}"]')
    gina.open(f"/executions/{execution_id}")
    assert gina.text("refusal-reason") == "EXECUTION_NOT_FOUND"
    assert "NOT_FOUND" in gina.text("refusal")

    carol = people("acme", "carol")
    assert not carol.has("nav-operator")
    carol.open(f"/operator/trail/{execution_id}")
    assert carol.text("refusal-reason") == "CONSOLE_OPERATOR_ROLE_REQUIRED"

    olga = people("acme", "olga")
    olga.open(f"/executions/{execution_id}")
    olga.by_id("audit-trail").click()
    trail = olga.text("trail")
    assert f"execution {execution_id}" in trail and "user:acme/alice" in trail and "svc:supervisor" in trail
    assert "capability:training.getStatus" in trail and "policy: ALLOW" in trail
    assert int(olga.text("record-count")) > 10
    olga.by_id("verify-trail").click()
    assert olga.text("verify-summary").startswith("OK:"), olga.text("verification")
    assert "inclusion proofs verified" in olga.text("verification")
    olga.not_pwned()

    olga.open("/operator")
    olga.by_id("kill-scope").send_keys("CAPABILITY")
    olga.by_id("kill-target").send_keys("training.external.update")
    olga.by_id("kill-reason").send_keys("LMS write incident")
    olga.by_id("kill").click()
    row = olga.wait(lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-switch="CAPABILITY:training.external.update"]'),
                    "the kill switch in force")[0]
    assert "LMS write incident (by acme/olga in the console)" in row.text and "svc/console" in row.text
    row.find_element(By.NAME, "reason").send_keys("incident over")
    row.find_element(By.CSS_SELECTOR, "button.switch-off").click()
    olga.by_id("no-switches")


def test_the_console_is_supervised_like_every_role(console_mesh: MeshConfig,
                                                   people: Callable[[str, str], Person]) -> None:
    import os
    import signal

    from agentmesh import launcher

    def console_row() -> dict[str, Any]:
        return next(r for r in launcher.status(console_mesh) if r["name"] == "console")

    before = console_row()
    assert before["health"] == "SERVING" and before["spiffe_id"] == "spiffe://agentmesh.local/svc/console"
    assert before["address"] == console_url(console_mesh)
    os.kill(int(before["pid"]), signal.SIGKILL)
    WebDriverWait(None, WAIT_S, poll_frequency=0.2).until(
        lambda _: (lambda r: r["pid"] != before["pid"] and r["health"] == "SERVING")(console_row()),
        message="the console restarted and SERVING")
    after = console_row()
    assert after["restarts"] == before["restarts"] + 1 and after["address"] == before["address"]
    people("acme", "alice").open("/executions")  # signing in works again (sessions were in the old process)
