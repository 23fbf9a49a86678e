"""What the sandbox LMS serves after `data load`: every tenant loaded so far, the file's tenants replacing theirs."""

from __future__ import annotations

from pathlib import Path

from agentmesh import config, launcher
from lms_sandbox import load_lms_data

OTHER = """\
format: agentmesh-world/v1
tenants:
  - id: initech
    name: Initech
    lms:
      workers:
        - worker_id: W-3001
          trainings:
            - {record_id: TR-1, course_code: NR-10, course_title: NR-10, status: COMPLETED,
               completed_on: 2025-01-01, valid_until: 2027-01-01, issuer_id: senai}
"""

ACME_ONLY = """\
format: agentmesh-world/v1
tenants:
  - id: acme
    name: ACME
    lms:
      workers:
        - worker_id: W-1
          trainings: []
"""


def test_loading_one_tenant_keeps_every_other_tenants_lms_records(tmp_path: Path) -> None:
    cfg = config.load(home=str(tmp_path / "home"), environ={})
    demo = load_lms_data(launcher.lms_world(cfg))  # nothing loaded yet: the demo world
    other = tmp_path / "initech.yaml"
    other.write_text(OTHER)
    served = load_lms_data(launcher.merge_lms_world(cfg, other))
    assert launcher.lms_world(cfg) == cfg.mesh_home.data / "lms-world.yaml"
    # acme's and globex's records are exactly the demo's; initech's are added.
    for key, records in demo.records.items():
        assert served.records[key] == records
    assert served.faults == demo.faults
    assert served.trainings("initech", "W-3001") == [{
        "record_id": "TR-1", "course_code": "NR-10", "course_title": "NR-10", "status": "COMPLETED",
        "completed_on": "2025-01-01", "valid_until": "2027-01-01", "certificate_id": None, "issuer": None,
        "issuer_id": "senai"}]
    # Loading acme again replaces acme's records only: initech's and globex's stay.
    acme = tmp_path / "acme.yaml"
    acme.write_text(ACME_ONLY)
    again = load_lms_data(launcher.merge_lms_world(cfg, acme))
    assert again.trainings("acme", "W-1") == [] and again.trainings("acme", "W-1001") is None
    assert again.trainings("initech", "W-3001") == served.trainings("initech", "W-3001")
    assert again.trainings("globex", "W-1001") == demo.trainings("globex", "W-1001") is not None
