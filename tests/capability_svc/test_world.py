"""World files: full validation before any write, errors naming line and field."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from capability_svc.errors import WorldFormatError
from capability_svc.internal_runtime import InternalStore
from capability_svc.world import load_world, parse_world

SMALL = """\
format: agentmesh-world/v1
tenants:
  - id: acme
    name: ACME
    workers:
      - id: W-1
        name: Ana
        job_title: Electrician
        company: ACME
    permits:
      - id: WP-1
        title: Job
        site: Plant
        work_type: ELECTRICAL
        status: PENDING_RELEASE
        valid_from: 2026-11-01
        valid_until: 2026-12-01
        requested_by: alice
        required_trainings: [NR-10]
        workers:
          - {id: W-1, role: EXECUTOR}
"""


def dump(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table, for before/after comparisons."""
    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def write(tmp_path: Path, text: str, name: str = "world.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_demo_world_loads(store: InternalStore, demo_world: Path) -> None:
    assert store.tenants() == ["acme", "globex"]
    summary = load_world(demo_world, store)  # loading again replaces, it does not duplicate
    assert summary.tenants == ("acme", "globex")
    assert summary.permits == 21
    assert summary.workers == 27
    assert summary.lms_workers == 25
    scope = store.scope("acme")
    permit = scope.get_permit("WP-10231")
    assert permit is not None and permit.status == "PENDING_RELEASE"
    assert scope.required_trainings("WP-10231") == ["NR-10", "NR-35"]
    assert store.scope("globex").get_permit("WP-20001") is not None


def test_demo_world_has_the_required_scenarios(demo_world: Path) -> None:
    world = parse_world(demo_world)
    acme = next(t for t in world.tenants if t.id == "acme")
    globex = next(t for t in world.tenants if t.id == "globex")
    permits = {p.id: p for p in acme.permits}
    for pid in ("WP-10231", "WP-10232", "WP-10233", "WP-10234"):
        assert pid in permits
    assert "WP-20001" in {p.id for p in globex.permits}
    lms = {w.worker_id: w.trainings for w in acme.lms.workers}
    # WP-10232: a worker's NR-10 expired on 2026-08-15.
    expired = [
        r for w in permits["WP-10232"].workers for r in lms.get(w.id, [])
        if r.course_code == "NR-10" and str(r.valid_until) == "2026-08-15"
    ]
    assert expired
    # WP-10233: a failing compliance item.
    items = [i for c in permits["WP-10233"].checklists for i in c.items]
    assert any(i.status == "FAIL" and i.subject for i in items)
    # WP-10234: every worker's LMS lookup is configured to time out.
    assert all(acme.lms.faults[w.id].mode == "timeout" for w in permits["WP-10234"].workers)
    assert any(w.medical_notes for w in acme.workers)
    # An unknown worker: assigned to a permit but absent from the LMS.
    assigned = {w.id for p in acme.permits for w in p.workers}
    assert assigned - set(lms)
    # WP-10241 loses a release, WP-10244 applies it in part; both are otherwise
    # clean: every worker has a valid LMS record of every required training.
    assert permits["WP-10241"].simulate.verification_failure == "lost_write"
    assert permits["WP-10244"].simulate.verification_failure == "partial_write"
    for pid in ("WP-10241", "WP-10244"):
        permit = permits[pid]
        assert permit.status == "PENDING_RELEASE" and permit.risks and permit.checklists
        assert all(c.in_place for r in permit.risks for c in r.controls)
        assert all(i.status == "PASS" for c in permit.checklists for i in c.items)
        for worker in permit.workers:
            assert worker.id not in acme.lms.faults
            valid = {r.course_code for r in lms[worker.id]
                     if r.status == "COMPLETED" and str(r.valid_until) > "2026-12-14"}
            assert set(permit.required_trainings) <= valid
    assert all(p.simulate.verification_failure is None for p in acme.permits if p.id not in ("WP-10241", "WP-10244"))


@pytest.mark.parametrize(("value", "mode"), [
    ("false", None), ("true", "lost_write"), ("lost_write", "lost_write"), ("partial_write", "partial_write")])
def test_simulated_verification_failure_modes(tmp_path: Path, store: InternalStore, value: str,
                                              mode: str | None) -> None:
    world = parse_world(write(tmp_path, SMALL + f"        simulate: {{verification_failure: {value}}}\n"))
    assert world.tenants[0].permits[0].simulate.verification_failure == mode
    load_world(write(tmp_path, SMALL + f"        simulate: {{verification_failure: {value}}}\n"), store)
    permit = store.scope("acme").get_permit("WP-1")
    assert permit is not None and permit.simulate_failure == mode


def test_unknown_simulated_failure_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, SMALL + "        simulate: {verification_failure: half_write}\n"))
    assert info.value.field == "tenants[0].permits[0].simulate.verification_failure"
    assert info.value.line == 22
    assert "expected one of false, true, lost_write, partial_write" in info.value.message


def test_schema_1_file_is_migrated(tmp_path: Path, demo_world: Path) -> None:
    # A file written before failure modes existed: a 0/1 lost-write flag.
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE tenants (tenant_id TEXT PRIMARY KEY, name TEXT NOT NULL, loaded_from TEXT NOT NULL,"
        " loaded_at TEXT NOT NULL);"
        "CREATE TABLE permits (tenant_id TEXT NOT NULL, permit_id TEXT NOT NULL, title TEXT NOT NULL,"
        " description TEXT NOT NULL, site TEXT NOT NULL, work_type TEXT NOT NULL, status TEXT NOT NULL,"
        " valid_from TEXT NOT NULL, valid_until TEXT NOT NULL, requested_by TEXT NOT NULL, released_at TEXT,"
        " released_by TEXT, release_reason TEXT, updated_at TEXT, updated_by TEXT,"
        " simulate_lost_write INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (tenant_id, permit_id));"
        "INSERT INTO tenants VALUES ('acme', 'ACME', 'old.yaml', '2026-11-01T00:00:00Z');"
        "INSERT INTO permits VALUES ('acme', 'WP-1', 'Job', '', 'Plant', 'ELECTRICAL', 'PENDING_RELEASE',"
        " '2026-11-01', '2026-12-01', 'alice', NULL, NULL, NULL, NULL, NULL, 1);"
        "PRAGMA user_version = 1;")
    conn.close()
    store = InternalStore(path)
    permit = store.scope("acme").get_permit("WP-1")
    assert permit is not None and permit.simulate_failure == "lost_write"
    load_world(demo_world, store)  # and the demo world loads into it
    permit = store.scope("acme").get_permit("WP-10244")
    assert permit is not None and permit.simulate_failure == "partial_write"


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "reason"),
    [
        ("valid_until: 2026-12-01", "valid_until: 2026-13-01",
         "tenants[0].permits[0].valid_until", 17, "WORLD_FIELD_INVALID"),
        ("valid_until: 2026-12-01", "valid_until: 20261201",
         "tenants[0].permits[0].valid_until", 17, "WORLD_FIELD_INVALID"),
        ("valid_until: 2026-12-01", "valid_until: 2026-10-01",
         "tenants[0].permits[0].valid_until", 17, "WORLD_FIELD_INVALID"),
        ("status: PENDING_RELEASE", "status: OPEN",
         "tenants[0].permits[0].status", 15, "WORLD_FIELD_INVALID"),
        ("        company: ACME\n", "        company: ACME\n        badge: 7\n",
         "tenants[0].workers[0].badge", 10, "WORLD_FIELD_INVALID"),
        ("        name: Ana\n", "", "tenants[0].workers[0].name", 6, "WORLD_FIELD_INVALID"),
        ("{id: W-1, role: EXECUTOR}", "{id: W-9, role: EXECUTOR}",
         "tenants[0].permits[0].workers[0].id", 21, "WORLD_REFERENCE_INVALID"),
        ("  - id: acme", "  - id: ACME", "tenants[0].id", 3, "WORLD_FIELD_INVALID"),
        ("format: agentmesh-world/v1", "format: agentmesh-world/v2", "format", 1,
         "WORLD_FIELD_INVALID"),
        ("required_trainings: [NR-10]", "required_trainings: [NR-10, NR-10]",
         "tenants[0].permits[0].required_trainings[1]", 19, "WORLD_DUPLICATE_ID"),
        ("        name: Ana\n", "        name: Ana\n        name: Bia\n",
         "tenants[0].workers[0].name", 8, "WORLD_SYNTAX_INVALID"),
        ("work_type: ELECTRICAL", "work_type: [ELECTRICAL", None, None, "WORLD_SYNTAX_INVALID"),
        ("        company: ACME\n", "        company: ACME\n        employment_status: FIRED\n",
         "tenants[0].workers[0].employment_status", 10, "WORLD_FIELD_INVALID"),
        ("        company: ACME\n", "        company: ACME\n        medical: {exam_date: 2026-05-01,"
         " valid_until: 2026-04-01}\n", "tenants[0].workers[0].medical.valid_until", 10, "WORLD_FIELD_INVALID"),
        ("        company: ACME\n", "        company: ACME\n        medical:\n          exam_date: 2026-05-01\n"
         "          valid_until: 2027-05-01\n          fit_for: [ELECTRICAL]\n          unfit_for: [ELECTRICAL]\n",
         "tenants[0].workers[0].medical.unfit_for[0]", 14, "WORLD_FIELD_INVALID"),
        ("        company: ACME\n", "        company: ACME\n        medical: {exam_date: 2026-05-01,"
         " valid_until: 2027-04-01, fit_for: [electrical]}\n", "tenants[0].workers[0].medical.fit_for[0]", 10,
         "WORLD_FIELD_INVALID"),
    ],
)
def test_malformed_world_names_line_and_field_and_loads_nothing(
    tmp_path: Path,
    store: InternalStore,
    old: str,
    new: str,
    field: str | None,
    line: int | None,
    reason: str,
) -> None:
    assert old in SMALL
    path = write(tmp_path, SMALL.replace(old, new, 1))
    before = dump(store.path)
    with pytest.raises(WorldFormatError) as info:
        load_world(path, store)
    err = info.value
    assert err.reason == reason
    assert err.file == str(path)
    if field is not None:
        assert err.field == field
        assert err.line == line
        assert f"{path}:{line}" in str(err)
    else:
        assert err.line is not None
    assert dump(store.path) == before


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    text = SMALL + """\
      - id: WP-1
        title: Again
        site: Plant
        work_type: ELECTRICAL
        status: DRAFT
        valid_from: 2026-11-01
        valid_until: 2026-12-01
        requested_by: alice
"""
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, text))
    assert info.value.reason == "WORLD_DUPLICATE_ID"
    assert info.value.field == "tenants[0].permits[1].id"
    assert info.value.line == 22


def test_every_violation_is_listed(tmp_path: Path) -> None:
    text = SMALL.replace("status: PENDING_RELEASE", "status: OPEN").replace(
        "valid_from: 2026-11-01", "valid_from: yesterday"
    )
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, text))
    fields = [v.field for v in info.value.violations]
    assert fields == ["tenants[0].permits[0].status", "tenants[0].permits[0].valid_from"]
    assert [v.line for v in info.value.violations] == [15, 16]


def test_strict_types(tmp_path: Path) -> None:
    text = SMALL + """\
        risks:
          - {id: R-1, hazard: Shock, severity: "4", likelihood: 2}
"""
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, text))
    assert info.value.field == "tenants[0].permits[0].risks[0].severity"
    assert info.value.line == 23


def test_bad_lms_fault_is_refused(tmp_path: Path) -> None:
    text = SMALL + "    lms:\n      faults:\n        W-1: explode\n"
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, text))
    assert info.value.field == "tenants[0].lms.faults.W-1.mode"
    assert info.value.line == 24


def test_json_world(tmp_path: Path, store: InternalStore) -> None:
    data = yaml.safe_load(SMALL)
    data["tenants"][0]["id"] = "initech"
    good = write(tmp_path, json.dumps(data, default=str, indent=2), "world.json")
    summary = load_world(good, store)
    assert summary.tenants == ("initech",)
    assert store.scope("initech").get_permit("WP-1") is not None

    data["tenants"][0]["permits"][0]["status"] = "OPEN"
    bad = write(tmp_path, json.dumps(data, default=str, indent=2), "bad.json")
    with pytest.raises(WorldFormatError) as info:
        load_world(bad, store)
    assert info.value.field == "tenants[0].permits[0].status"
    assert info.value.line is not None

    broken = write(tmp_path, '{"format": "agentmesh-world/v1",\n "tenants": [}', "broken.json")
    with pytest.raises(WorldFormatError) as info:
        load_world(broken, store)
    assert info.value.reason == "WORLD_SYNTAX_INVALID"
    assert info.value.line == 2

    dup = write(tmp_path, '{"format": "a", "format": "b", "tenants": []}', "dup.json")
    with pytest.raises(WorldFormatError) as info:
        load_world(dup, store)
    assert "duplicate key" in info.value.message


def test_loading_replaces_only_the_tenants_in_the_file(
    tmp_path: Path, store: InternalStore
) -> None:
    load_world(write(tmp_path, SMALL), store)
    acme = store.scope("acme")
    assert acme.get_permit("WP-1") is not None
    # acme was replaced wholesale: the demo permits are gone...
    assert acme.get_permit("WP-10231") is None
    # ...and globex, not named in the file, is untouched.
    assert store.scope("globex").get_permit("WP-20001") is not None


def test_empty_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, ""))
    assert info.value.reason == "WORLD_SYNTAX_INVALID"
    with pytest.raises(WorldFormatError) as info:
        parse_world(write(tmp_path, "- just\n- a list\n"))
    assert info.value.line == 1
    with pytest.raises(WorldFormatError) as info:
        parse_world(tmp_path / "missing.yaml")
    assert info.value.reason == "WORLD_SYNTAX_INVALID"


def test_documented_example_is_valid() -> None:
    import re

    from capability_svc.world import parse_world_text

    doc = Path(__file__).resolve().parents[2] / "capability_svc" / "WORLD_FORMAT.md"
    match = re.search(r"## Example\n\n```yaml\n(.*?)```", doc.read_text(), re.S)
    assert match is not None
    world = parse_world_text(match.group(1), "WORLD_FORMAT.md")
    assert world.tenants[0].permits[0].id == "WP-1"


# --- added workers, issuers, tenant definitions -------------------------------------------------------------

ADDED = SMALL.replace("""    workers:
      - id: W-1
        name: Ana
        job_title: Electrician
        company: ACME
""", """    workers:
      - id: W-1
        name: Ana
        job_title: Electrician
        company: ACME
      - id: W-2
        name: Bia
        job_title: Electrician
        company: ACME
""") + """        added_workers:
          - {id: W-2, role: EXECUTOR, added_on: 2026-11-29}
"""


def test_added_workers_are_kept_apart_from_the_planned_crew(tmp_path: Path, store: InternalStore) -> None:
    load_world(write(tmp_path, ADDED), store)
    scope = store.scope("acme")
    assert [w.worker.worker_id for w in scope.permit_workers("WP-1")] == ["W-1"]
    assert scope.permit_added_workers("WP-1") == [{"worker_id": "W-2", "permit_role": "EXECUTOR",
                                                   "added_on": "2026-11-29"}]


@pytest.mark.parametrize(("old", "new", "field", "message"), [
    ("{id: W-2, role: EXECUTOR", "{id: W-9, role: EXECUTOR", "tenants[0].permits[0].added_workers[0].id",
     "not a worker of tenant"),
    ("{id: W-2, role: EXECUTOR", "{id: W-1, role: EXECUTOR", "tenants[0].permits[0].added_workers[0].id",
     "already in the permit's workers"),
    ("added_on: 2026-11-29", "added_on: yesterday", "tenants[0].permits[0].added_workers[0].added_on", "date"),
])
def test_a_bad_added_worker_is_refused(tmp_path: Path, old: str, new: str, field: str, message: str) -> None:
    with pytest.raises(WorldFormatError) as caught:
        parse_world(write(tmp_path, ADDED.replace(old, new)))
    assert caught.value.field == field and message in str(caught.value)


def test_an_issuer_id_is_an_id(tmp_path: Path) -> None:
    record = """    lms:
      workers:
        - worker_id: W-1
          trainings:
            - {record_id: TR-1, course_code: NR-10, course_title: t, status: COMPLETED, issuer_id: ISSUER}
"""
    parse_world(write(tmp_path, SMALL + record.replace("ISSUER", "senai")))
    with pytest.raises(WorldFormatError) as caught:
        parse_world(write(tmp_path, SMALL + record.replace("ISSUER", '"SENAI plant 3"')))
    assert caught.value.field == "tenants[0].lms.workers[0].trainings[0].issuer_id"


def test_a_tenant_definition_rides_with_its_world_and_is_checked_with_its_line(tmp_path: Path) -> None:
    from capability_svc.world import world_tenant_file

    defined = SMALL.replace("    name: ACME\n", "    name: ACME\n    definition:\n"
                                                "      roles: {viewer: {capabilities: [workPermit.get]}}\n"
                                                "      agents: [work-permit-agent]\n")
    tenants = world_tenant_file(write(tmp_path, defined))
    (acme,) = tenants.definitions
    assert (acme.tenant_id, acme.display_name, list(acme.allowed_agents)) == ("acme", "ACME", ["work-permit-agent"])
    assert tenants.line_of("tenants[0].allowed_agents[0]") == 7
    assert world_tenant_file(write(tmp_path, SMALL)).definitions == []
    with pytest.raises(WorldFormatError) as caught:
        parse_world(write(tmp_path, defined.replace("agents:", "agnets:")))
    assert (caught.value.field, caught.value.line) == ("tenants[0].definition.agnets", 7)
