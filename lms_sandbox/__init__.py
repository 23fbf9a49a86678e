"""Sandbox LMS: a stand-alone HTTP service serving training records, with fault injection.

It plays the *external* learning-management system in development and tests,
so it shares no code with the mesh: it reads the ``lms`` sections of a world
data file and serves them over plain HTTP (stdlib only). Faults — latency,
timeout, 5xx, malformed JSON, oversized bodies, hostile text — are configured
per worker in the data file or switched at run time through ``/admin/faults``,
which requires the sandbox's bearer admin token (``--admin-token-file``).

Run it with ``python -m lms_sandbox --port 0 --data agentmesh/data/demo_world.yaml``.
"""

from lms_sandbox.data import LmsData, LmsDataError, load_lms_data
from lms_sandbox.faults import HOSTILE_ISSUER, HOSTILE_TITLE, Fault, FaultMode, FaultTable
from lms_sandbox.server import LmsSandbox

__all__ = [
    "HOSTILE_ISSUER",
    "HOSTILE_TITLE",
    "Fault",
    "FaultMode",
    "FaultTable",
    "LmsData",
    "LmsDataError",
    "LmsSandbox",
    "load_lms_data",
]
