"""``agentmesh events``: send a platform event to the supervisor (the stand-in for the event fabric).

``agentmesh events training-expired --tenant T --worker W --training NR-10 --expired-on 2026-11-30``
    Sends HandleEvent as the platform caller (mTLS identity, no user): the
    supervisor starts a SYSTEM-actor execution that only reads, and prints its
    report and the resources it recommends acting on (a human decides in the
    Decision Center). Without ``--event-id`` the id is derived from the event's
    fields, so sending the same event again is recognised as a duplicate and
    shows the execution the first one started.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentmesh.config import MeshConfig

EVENT_NAMESPACE = uuid.UUID("6f1d1f0e-4a39-5d0e-9a53-6167656e746d")
"""UUIDv5 namespace of derived event ids; fixed, so the same event always gets the same id."""


def register(sub: Any, common: argparse.ArgumentParser, out: argparse.ArgumentParser) -> None:
    """Adds ``agentmesh events training-expired`` to the command tree."""
    events = sub.add_parser(
        "events", help="send platform events that start SYSTEM-actor executions",
        description="Send a platform event to the supervisor as the platform caller (the stand-in for the event "
                    "fabric). The supervisor starts a SYSTEM-actor execution that only reads and recommends.")
    esub = events.add_subparsers(dest="events_command", required=True, metavar="SUBCOMMAND")
    p = esub.add_parser(
        "training-expired", parents=[common, out],
        help="a worker's training expired: start a SYSTEM analysis of the permits it affects",
        description="Send a TrainingExpired event (as the platform caller, no user). The supervisor starts a "
                    "SYSTEM-actor execution (TrainingExpirationScanner) that only reads and recommends; the "
                    "report and the recommended resources are printed. The same event (same --event-id, or the "
                    "same fields without it) starts one execution only; a re-send says 'duplicate' and shows "
                    "that execution. Exits 1 when refused.")
    p.add_argument("--tenant", required=True, help="the tenant the worker belongs to")
    p.add_argument("--worker", required=True, help="the worker id, e.g. W-1001")
    p.add_argument("--training", required=True, help="the training code, e.g. NR-10")
    p.add_argument("--expired-on", required=True, type=_iso_date, metavar="YYYY-MM-DD",
                   help="the day the training expired")
    p.add_argument("--event-id", help="the event's id (default: derived from the fields above)")
    p.add_argument("--correlation-id", help="correlation id to carry (default: the supervisor makes one)")
    p.set_defaults(handler=cmd_events_training_expired)


def _iso_date(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not an ISO date (YYYY-MM-DD): {text!r}") from err


def training_expired_event_id(tenant: str, worker: str, training: str, expired_on: str) -> str:
    """The derived id of a TrainingExpired event: equal fields, equal id."""
    key = "\x1f".join(("training_expired", tenant, worker, training, expired_on))
    return f"evt-{uuid.uuid5(EVENT_NAMESPACE, key)}"


def cmd_events_training_expired(args: argparse.Namespace, cfg: MeshConfig) -> int:
    from agentmesh.identities import PLATFORM_CLI
    from agentmesh.v1 import supervisor_service_pb2 as sup_pb2
    from agentmesh.v1 import supervisor_service_pb2_grpc as sup_grpc
    from agentmesh_cli.common import exchange, execution_dict, print_execution, program

    event_id = args.event_id or training_expired_event_id(args.tenant, args.worker, args.training, args.expired_on)
    req = sup_pb2.HandleEventRequest(
        event_id=event_id, tenant_id=args.tenant, correlation_id=args.correlation_id or "",
        training_expired=sup_pb2.TrainingExpired(worker_id=args.worker, training_code=args.training,
                                                 expired_on=args.expired_on))
    resp = exchange(cfg, "supervisor", sup_grpc.SupervisorServiceStub, lambda stub: stub.HandleEvent(req),
                    PLATFORM_CLI)
    ex = resp.execution
    if args.json:
        print(json.dumps({"event_id": event_id, "duplicate": resp.duplicate, "execution": execution_dict(ex)},
                         indent=2))
        return 0
    if resp.duplicate:
        print(f"duplicate: event {event_id} was already handled; this is the execution it started\n")
    else:
        print(f"event {event_id}: started execution {ex.execution_id}\n")
    print_execution(ex)
    if ex.recommended_resources:
        print(f"\nto decide on the recommendation: {program(args)} reviews list --execution {ex.execution_id} "
              f"--tenant {args.tenant} --user REVIEWER")
    return 0
