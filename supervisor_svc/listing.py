"""Listing the executions a user may read (``SupervisorService.ListExecutions``).

The executions of the caller's tenant, most recently changed first, a page at a
time. Which ones the caller sees is the policy engine's decision: one
READ_EXECUTION decision per distinct requester met on the way
(:meth:`ExecutionGuard.may_read_all_of`) — the execution policies decide on the
requester and the caller's roles (``policy_svc/policies/execution.cedar``).
Executions of other tenants are never looked at. An execution left out was not
asked for, so nothing is refused or recorded for it; a policy engine that does
not answer refuses the whole list (UNAVAILABLE ``POLICY_UNAVAILABLE``, audited).

The page token is opaque to callers: the keyset (``updated_at``, execution id)
of the last execution looked at, so a page that had to skip many executions the
caller may not read still ends after a bounded scan (:data:`MAX_SCANNED`) and
the next page goes on from there.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from agentmesh import assertion, errors
from agentmesh.v1 import supervisor_service_pb2 as pb
from supervisor_svc.executions import ExecutionStore
from supervisor_svc.privacy import ExecutionGuard, requester_of

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
MAX_SCANNED = 1000
"""At most this many stored executions are looked at for one page."""
_BATCH = 100


def encode_token(updated_at: str, execution_id: str) -> str:
    """The page token for "after this execution"."""
    return base64.urlsafe_b64encode(f"{updated_at}|{execution_id}".encode()).decode()


def decode_token(token: str) -> tuple[str, str] | None:
    """The keyset a page token names; None for the first page. INVALID_ARGUMENT if it is not one of ours."""
    if not token:
        return None
    try:
        updated_at, sep, execution_id = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        sep, updated_at, execution_id = "", "", ""
    if not (sep and updated_at and execution_id):
        raise errors.InvalidArgument("page_token is not a token this service issued", reason="PAGE_TOKEN_INVALID",
                                     field="page_token")
    return updated_at, execution_id


def page_size_of(request: pb.ListExecutionsRequest) -> int:
    """The page size asked for (0 → the default); INVALID_ARGUMENT outside 0..100."""
    if not 0 <= request.page_size <= MAX_PAGE_SIZE:
        raise errors.InvalidArgument(f"page_size must be between 0 and {MAX_PAGE_SIZE}", reason="PAGE_SIZE_INVALID",
                                     field="page_size")
    return request.page_size or DEFAULT_PAGE_SIZE


def list_visible(store: ExecutionStore, guard: ExecutionGuard, user: assertion.UserIdentity,
                 request: pb.ListExecutionsRequest,
                 snapshot: Callable[[assertion.UserIdentity, str], pb.Execution]) -> pb.ListExecutionsResponse:
    """One page of the executions ``user`` may read (see the module docstring).

    ``snapshot`` gives each as the user may see it (the live copy of a running one; the
    confirmation token only to its requester).
    """
    size = page_size_of(request)
    after = decode_token(request.page_token)
    allowed: dict[str, bool] = {}
    found: list[pb.Execution] = []
    scanned = 0
    last: tuple[str, str] | None = None
    while len(found) < size and scanned < MAX_SCANNED:
        rows = store.page(user.tenant_id, after=after, limit=min(_BATCH, MAX_SCANNED - scanned))
        if not rows:
            return pb.ListExecutionsResponse(executions=found)
        for updated_at, execution in rows:
            scanned += 1
            last = after = (updated_at, execution.execution_id)
            requester = requester_of(execution)
            if requester not in allowed:
                allowed[requester] = guard.may_read_all_of(user, requester)
            if allowed[requester]:
                try:
                    found.append(snapshot(user, execution.execution_id))
                except errors.NotFound:
                    continue  # gone meanwhile
            if len(found) == size:
                break
    assert last is not None
    # There may be more; a last page that is exactly full costs the caller one empty page.
    return pb.ListExecutionsResponse(executions=found, next_page_token=encode_token(*last))
