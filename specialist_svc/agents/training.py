"""Training agent: does every worker hold each required training, valid for the permit's window?

Two operations, chosen by the input's ``operation``: ``verify`` (the default,
below) and ``worker_training`` (one worker, one course, one day; see the end).

Input (projection ``training.verify``): ``permit_id``, ``valid_from``,
``valid_until``, ``required_trainings``, ``workers[].worker_id``. One
``training.getStatus`` call per worker (concurrently), asking only for the
required course codes. One subject per worker × course, ``worker:<id>/<course>``.

A certificate is *valid for the permit* when the LMS says ``COMPLETED``, it was
completed on or before the permit's first day and it is valid until at least
its last day (``valid_until`` inclusive). The rules use nothing but the
permit window and the LMS's structured fields — no clock — so the same data
always gives the same answer.

Per worker × course (§61):

=========================================  =======  =====================================================
what the LMS says                          verdict  statements
=========================================  =======  =====================================================
a certificate valid for the window         PASS     FACT ``TRAINING_VALID``
expired before the window starts           FAIL     FACT ``TRAINING_EXPIRED`` (with the date)
expires inside the window                  FAIL     FACT ``TRAINING_EXPIRES_DURING_PERMIT``
completed after the window starts          FAIL     FACT ``TRAINING_NOT_YET_VALID`` + INFERENCE
(future-dated)                                      ``FUTURE_DATED_RECORD``
status ``REVOKED`` / ``EXPIRED`` / other   FAIL     FACT ``TRAINING_REVOKED`` / ``TRAINING_EXPIRED`` /
                                                    ``TRAINING_NOT_COMPLETED``
no record of the course                    FAIL     FACT ``TRAINING_MISSING``
the same certificate recorded twice,       as the   INFERENCE ``DUPLICATE_CERTIFICATE_RECORDS`` naming
identically                                record   the record used (lowest record id, consistently)
records of one certificate that disagree   UNKNOWN  a *data conflict*: a FACT per record, INFERENCE
on the verdict (one would pass, another             ``CONFLICTING_CERTIFICATES`` and an entry of
fail)                                               ``result.data_conflicts`` (below) — never a guess
records of one certificate that disagree,  as the   a FACT per record + INFERENCE ``CONFLICTING_CERTIFICATES``
each giving the same verdict               records
records that disagree where one is         UNKNOWN  UNCERTAINTY ``CONFLICTING_CERTIFICATES`` + a FACT per
incomplete (its verdict unknown)                    record
a record without usable dates              UNKNOWN  UNCERTAINTY ``TRAINING_RECORD_INCOMPLETE``
worker unknown to the LMS                  UNKNOWN  FACT ``WORKER_UNKNOWN_TO_LMS`` + UNCERTAINTY
                                                    ``UNKNOWN_WORKER``
LMS timeout / unavailable / bad answer     UNKNOWN  UNCERTAINTY ``LMS_TIMEOUT`` / ``LMS_UNAVAILABLE`` /
                                                    ``LMS_MALFORMED`` (result PARTIAL)
=========================================  =======  =====================================================

Several certificates of one course (e.g. an old one and a refresher): any one
valid for the window passes (the latest is cited; the others are noted as
INFERENCE ``CERTIFICATE_SUPERSEDED``), unless the records conflict, which
always leaves the subject UNKNOWN. A certificate is identified by its
``certificate_id``; records without one are grouped by their dates.

Course titles, issuers and every other free text are copied into evidence
``data`` only; no rule reads them.

A data conflict is the supervisor's to resolve (PRD §36–37), by the authority
of each record's issuer as configured for the training domain
(``evidence.issuer_authority`` in ``supervisor_svc/domains/work-permit.yaml``); when no rule
decides it, a human reviews it with both sides' evidence. ``result.data_conflicts``
lists each one: ``{subject, sides: [{record_id, verdict, state, issuer_id,
evidence}]}`` — one side per record, ``verdict`` PASS or FAIL as that record
alone would decide, ``issuer_id`` the LMS's structured issuer id (or null),
``evidence`` indexes into ``evidence``.

A worker the LMS does not know: the agent asks the work-permit agent (a handoff,
``action_id`` ``confirm-assignment``, purpose ``permit.assess``) to confirm that
the worker is on the permit, answering WAITING first; called again with the
outcome, it adds an INFERENCE ``WORKER_ASSIGNMENT_CONFIRMED`` (or UNCERTAINTY
``WORKER_ASSIGNMENT_UNCONFIRMED`` with why: the shipped manifest grants the
training agent no delegation, so the supervisor refuses it — HANDOFF_NOT_ALLOWED,
or HANDOFF_LOOP when this task was itself handed off by the work-permit agent).
The trainings stay UNKNOWN either way: the LMS holds no record of the worker.

Worker training (PRD §44, §28)
------------------------------

Input: ``operation: worker_training``, ``worker_id``, ``training_code``,
``on_date`` (``YYYY-MM-DD``): the day the training is said to have expired on
(e.g. a ``TrainingExpired`` event's ``expired_on``). Has it? One
``training.getStatus`` call for that course; the same rules as above, one
subject ``worker:<id>/<course>``, except that a certificate *expires on* its
``valid_until`` — so one whose ``valid_until`` is ``on_date`` or earlier has
expired (FAIL, FACT ``TRAINING_EXPIRED`` with its expiry date and the LMS record
as evidence), and only one completed by ``on_date`` and valid beyond it passes
(FACT ``TRAINING_VALID``). Also FAIL: ``TRAINING_MISSING``, ``TRAINING_REVOKED``,
``TRAINING_NOT_COMPLETED``, ``TRAINING_NOT_YET_VALID`` (completed after
``on_date``). UNKNOWN with an UNCERTAINTY when it cannot be read or
established (LMS timeout, unknown worker, conflicting or incomplete records).

``result.training`` = ``{worker_id, training_code, on_date, state,
valid_until}``: ``state`` one of ``VALID``, ``EXPIRED``, ``MISSING``,
``REVOKED``, ``NOT_COMPLETED``, ``NOT_YET_VALID``, ``CONFLICT``, ``INCOMPLETE``,
``WORKER_UNKNOWN``, ``UNREADABLE``; ``valid_until`` that of the certificate
the verdict rests on (null when there is none).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agentmesh.clock import utc_today
from agentmesh.result_contract import ContractViolation, ResultContract, ResultField, Verdict, check_result
from agentmesh.v1 import common_pb2
from specialist_svc.phrases import say
from specialist_svc.rules import (
    CallFailure,
    CapabilityClient,
    ResultBuilder,
    TaskContext,
    TaskInputInvalid,
    call_or_failure,
    calls_or_failures,
    handoff,
    handoff_failure,
    is_id,
    iso_date,
    require_str,
    run_guarded,
    str_list,
    token,
    waiting,
)

__all__ = ["AGENT_ID", "CAPABILITIES", "CONFIRM_ASSIGNMENT", "OPERATIONS", "run", "run_in_context"]

AGENT_ID = "training-agent"
CAPABILITY = "training.getStatus"
CAPABILITIES = (CAPABILITY,)
"""Capabilities these rules call (each must be among the agent's registered ones)."""

OPERATIONS = ("verify", "worker_training")
"""The values of the input's ``operation``; absent means ``verify``."""

COMPLETED = "COMPLETED"
"""The only LMS status that means the course was completed."""
_RECORD_FIELDS = ("record_id", "course_code", "course_title", "status", "completed_on", "valid_until",
                  "certificate_id", "issuer", "issuer_id")
CONFIRM_ASSIGNMENT = "confirm-assignment"
"""``action_id`` of the handoff asking the work-permit agent to confirm unknown workers' assignment."""
WORK_PERMIT_AGENT = "work-permit-agent"


class _State(Enum):
    VALID = "VALID"
    EXPIRED = "EXPIRED"
    EXPIRES_DURING_PERMIT = "EXPIRES_DURING_PERMIT"
    NOT_YET_VALID = "NOT_YET_VALID"
    REVOKED = "REVOKED"
    STATUS_EXPIRED = "STATUS_EXPIRED"
    NOT_COMPLETED = "NOT_COMPLETED"
    INCOMPLETE = "INCOMPLETE"
    CONFLICT = "CONFLICT"


_FAILING = {_State.EXPIRED, _State.EXPIRES_DURING_PERMIT, _State.NOT_YET_VALID, _State.REVOKED,
            _State.STATUS_EXPIRED, _State.NOT_COMPLETED}


@dataclass(frozen=True)
class _Window:
    """What a certificate must cover: a permit's window, or (``worker_training``) the day ``on_date``."""

    start: dt.date
    end: dt.date
    on_date: bool = False
    """``start`` = ``end`` is the day a training is said to have expired on, not a permit window."""

    def __str__(self) -> str:
        return f"{self.start.isoformat()}..{self.end.isoformat()}"

    @property
    def expired_before(self) -> dt.date:
        """A certificate whose ``valid_until`` is before this day has expired.

        For a permit window its first day: a certificate is valid through its
        ``valid_until``. For ``on_date`` the day after: the question is whether
        the training expired on that day or earlier, and a certificate expires
        on its ``valid_until`` (as every ``TRAINING_EXPIRED`` text says).
        """
        return self.start + dt.timedelta(days=1) if self.on_date else self.start

    @property
    def requirement(self) -> str:
        """How ``REQUIREMENT_NOT_MET`` names the window."""
        if self.on_date:
            return say("after {day}", day=self.start.isoformat())
        return say("for the permit window {window}", window=str(self))


@dataclass(frozen=True)
class _Finding:
    """What one worker × course came to, for a structured result."""

    state: str
    valid_until: dt.date | None = None
    """That of the certificate the verdict rests on."""


@dataclass(frozen=True)
class _Record:
    fields: dict[str, Any]
    """The LMS record as received: data."""
    evidence: int

    @property
    def record_id(self) -> str:
        return str(self.fields.get("record_id") or "")

    @property
    def status(self) -> str:
        return str(self.fields.get("status") or "")

    @property
    def completed_on(self) -> dt.date | None:
        return iso_date(self.fields.get("completed_on"))

    @property
    def valid_until(self) -> dt.date | None:
        return iso_date(self.fields.get("valid_until"))

    def content(self) -> tuple[Any, ...]:
        """What a duplicate must repeat exactly (free text excluded: it decides nothing)."""
        return (self.status, self.fields.get("completed_on"), self.fields.get("valid_until"),
                self.fields.get("certificate_id"))


@dataclass(frozen=True)
class _Certificate:
    """One certificate as the LMS recorded it, possibly in several records."""

    records: tuple[_Record, ...]

    @property
    def representative(self) -> _Record:
        # Identical duplicates: pick the lowest record id, so the choice never varies.
        return min(self.records, key=lambda r: r.record_id)

    @property
    def conflicting(self) -> bool:
        return len({r.content() for r in self.records}) > 1

    def state(self, window: _Window) -> _State:
        if self.conflicting:
            return _State.CONFLICT
        rec = self.representative
        if rec.status == "REVOKED":
            return _State.REVOKED
        if rec.status == "EXPIRED":
            return _State.STATUS_EXPIRED
        if rec.status != COMPLETED:
            return _State.NOT_COMPLETED
        completed, until = rec.completed_on, rec.valid_until
        if completed is None or until is None or until < completed:
            return _State.INCOMPLETE
        if until < window.expired_before:
            return _State.EXPIRED
        if completed > window.start:
            return _State.NOT_YET_VALID
        if until < window.end:
            return _State.EXPIRES_DURING_PERMIT
        return _State.VALID

    def sort_key(self) -> tuple[str, str, str]:
        rec = self.representative
        until, completed = rec.valid_until, rec.completed_on
        return (until.isoformat() if until else "", completed.isoformat() if completed else "", rec.record_id)


def _certificates(records: Sequence[_Record]) -> list[_Certificate]:
    groups: dict[tuple[Any, ...], list[_Record]] = {}
    for rec in records:
        cert = rec.fields.get("certificate_id")
        key: tuple[Any, ...] = ("certificate", cert) if isinstance(cert, str) and cert else (
            "dates", rec.fields.get("completed_on"), rec.fields.get("valid_until"))
        groups.setdefault(key, []).append(rec)
    return [_Certificate(tuple(group)) for group in groups.values()]


@dataclass(frozen=True)
class _Lookup:
    worker_id: str
    answer: tuple[dict[str, Any], list[common_pb2.EvidenceReference]] | CallFailure | None
    """None: the worker id could not even be asked for."""


def _window(data: Mapping[str, Any]) -> _Window | None:
    start, end = iso_date(data.get("valid_from")), iso_date(data.get("valid_until"))
    if start is None or end is None or end < start:
        return None
    return _Window(start, end)


def _worker_ids(data: Mapping[str, Any]) -> list[str]:
    workers = data.get("workers")
    if not isinstance(workers, list):
        raise TaskInputInvalid("a list of {worker_id} is required", field="workers")
    ids: list[str] = []
    for i, w in enumerate(workers):
        wid = w.get("worker_id") if isinstance(w, Mapping) else None
        if not isinstance(wid, str) or not wid:
            raise TaskInputInvalid("worker_id is required", field=f"workers[{i}].worker_id")
        ids.append(wid)
    return list(dict.fromkeys(ids))


def _well_formed(output: Mapping[str, Any], worker_id: str) -> bool:
    trainings = output.get("trainings")
    return (output.get("worker_id") == worker_id and isinstance(output.get("worker_known"), bool)
            and isinstance(trainings, list) and all(isinstance(t, Mapping) for t in trainings))


class _Judge:
    """Applies the rules to one worker's LMS answer."""

    def __init__(self, out: ResultBuilder, window: _Window) -> None:
        self.out = out
        self.window = window
        self.data_conflicts: list[dict[str, Any]] = []
        """``result.data_conflicts``: records of one certificate whose verdicts differ."""

    def worker(self, lookup: _Lookup, courses: Sequence[str]) -> dict[str, _Finding]:
        """Judges each course of one worker; returns what each came to."""
        wid = lookup.worker_id
        subjects = [f"worker:{wid}/{c}" for c in courses]
        shown = token(wid)
        unreadable = {c: _Finding("UNREADABLE") for c in courses}
        if lookup.answer is None:
            for subject in subjects:
                self.out.judge(subject, Verdict.UNKNOWN)
                self.out.uncertainty("WORKER_ID_INVALID", say("The worker id cannot be looked up in the LMS"),
                                     subject=subject)
            return unreadable
        if isinstance(lookup.answer, CallFailure):
            failure = lookup.answer
            if failure.kind == "not_found":
                failure = CallFailure("uncertain", "WORKER_NOT_FOUND", failure.detail)
            self.out.unanswered(failure, subjects, say("The LMS record of {shown}", shown=shown))
            return unreadable
        output, refs = lookup.answer
        if not refs or not _well_formed(output, wid):
            code = "LMS_MALFORMED" if refs else "EVIDENCE_MISSING"
            self.out.unanswered(CallFailure("uncertain", code, f"{CAPABILITY}: unusable answer for {shown}"),
                                subjects, say("The LMS record of {shown}", shown=shown))
            return unreadable
        ref = refs[0]
        if not output["worker_known"]:
            ev = self.out.evidence(ref, data={"worker_id": wid, "worker_known": False})
            for subject in subjects:
                self.out.judge(subject, Verdict.UNKNOWN)
                self.out.fact(
                    "WORKER_UNKNOWN_TO_LMS",
                    say("The LMS has no worker {shown}", shown=shown),
                    subject=subject,
                    evidence=[ev],
                )
                self.out.uncertainty(
                    "UNKNOWN_WORKER",
                    say("Trainings of {shown} cannot be verified: the LMS does not know the worker", shown=shown),
                    subject=subject,
                    evidence=[ev],
                )
            return {c: _Finding("WORKER_UNKNOWN") for c in courses}
        records: dict[str, list[_Record]] = {}
        for rec in output["trainings"]:
            fields = {name: rec.get(name) for name in _RECORD_FIELDS}
            code = fields["course_code"]
            if code not in courses:
                continue  # only the permit's required courses are judged
            ev = self.out.evidence(ref, part=str(fields.get("record_id") or ""), data=fields)
            records.setdefault(str(code), []).append(_Record(fields, ev))
        return {course: self.course(wid, course, records.get(course, []), ref) for course in courses}

    def course(self, wid: str, course: str, records: Sequence[_Record], ref: common_pb2.EvidenceReference) -> _Finding:
        out, subject = self.out, f"worker:{wid}/{course}"
        who = say("{course} of {worker}", course=course, worker=token(wid))
        if not records:
            ev = out.evidence(ref, data={"worker_id": wid, "course_code": course, "records": 0})
            out.judge(subject, Verdict.FAIL)
            out.fact(
                "TRAINING_MISSING",
                say("The LMS holds no {course} record for {worker}", course=course, worker=token(wid)),
                subject=subject,
                evidence=[ev],
            )
            out.inference(
                "REQUIREMENT_NOT_MET",
                say("{worker} does not meet the {course} requirement", worker=token(wid), course=course),
                subject=subject,
            )
            return _Finding("MISSING")
        certs = _certificates(records)
        for cert in certs:
            if len(cert.records) > 1 and not cert.conflicting:
                ids = ", ".join(token(r.record_id) for r in sorted(cert.records, key=lambda r: r.record_id))
                out.inference(
                    "DUPLICATE_CERTIFICATE_RECORDS",
                    say(
                        "Records {ids} describe the same {course} certificate of {worker}; {record_id} is used",
                        ids=ids,
                        course=course,
                        worker=token(wid),
                        record_id=token(cert.representative.record_id),
                    ),
                    subject=subject,
                    evidence=[r.evidence for r in cert.records],
                )
        states = [(cert, cert.state(self.window)) for cert in certs]
        conflicts = [c for c, s in states if s is _State.CONFLICT]
        valid = sorted((c for c, s in states if s is _State.VALID), key=_Certificate.sort_key, reverse=True)
        incomplete = [c for c, s in states if s is _State.INCOMPLETE]
        if conflicts:
            return self._conflict(wid, course, subject, who, conflicts)
        if valid:
            best = valid[0]
            out.judge(subject, Verdict.PASS)
            self._state_fact(who, subject, best, _State.VALID)
            for cert in certs:
                if cert is not best:
                    out.inference(
                        "CERTIFICATE_SUPERSEDED",
                        say(
                            "{record}; not needed, {record_id} is valid for the permit",
                            record=self._record_text(who, cert.representative),
                            record_id=token(best.representative.record_id),
                        ),
                        subject=subject,
                        evidence=[cert.representative.evidence],
                    )
            return _Finding("VALID", best.representative.valid_until)
        if incomplete:
            out.judge(subject, Verdict.UNKNOWN)
            for cert, state in states:
                if state in _FAILING:
                    self._state_fact(who, subject, cert, state)
            for cert in incomplete:
                out.uncertainty(
                    "TRAINING_RECORD_INCOMPLETE",
                    say(
                        "{record}: its dates are missing or unusable, so its validity cannot be established",
                        record=self._record_text(who, cert.representative),
                    ),
                    subject=subject,
                    evidence=[cert.representative.evidence],
                )
            return _Finding("INCOMPLETE")
        out.judge(subject, Verdict.FAIL)
        ordered = sorted(states, key=lambda cs: cs[0].sort_key(), reverse=True)
        for cert, state in ordered:
            self._state_fact(who, subject, cert, state)
        out.inference(
            "REQUIREMENT_NOT_MET",
            say(
                "{worker} does not meet the {course} requirement {requirement}",
                worker=token(wid),
                course=course,
                requirement=self.window.requirement,
            ),
            subject=subject,
        )
        latest, state = ordered[0]
        name = _State.EXPIRED.value if state is _State.STATUS_EXPIRED else state.value
        return _Finding(name, latest.representative.valid_until)

    def _conflict(self, wid: str, course: str, subject: str, who: str, conflicts: Sequence[_Certificate]) -> _Finding:
        """Records of one certificate that disagree: each record is judged on its own. Different verdicts are
        a data conflict for the supervisor (by issuer authority, else a human); the same verdict stands."""
        out = self.out
        records = sorted((r for cert in conflicts for r in cert.records), key=lambda r: r.record_id)
        sides: list[tuple[_Record, _State]] = [(r, _Certificate((r,)).state(self.window)) for r in records]
        verdicts = {Verdict.PASS if state is _State.VALID else Verdict.FAIL if state in _FAILING else Verdict.UNKNOWN
                    for _, state in sides}
        for rec in records:
            out.fact("TRAINING_RECORD", self._record_text(who, rec), subject=subject, evidence=[rec.evidence])
        ids = ", ".join(token(r.record_id) for r in records)
        evidence = [r.evidence for r in records]
        if Verdict.UNKNOWN in verdicts:
            out.judge(subject, Verdict.UNKNOWN)
            out.uncertainty("CONFLICTING_CERTIFICATES",
                            say("The LMS records {ids} of one {course} certificate of {worker} contradict each other "
                                "and one of them cannot be judged; the certificate's status cannot be established",
                                ids=ids, course=course, worker=token(wid)),
                            subject=subject, evidence=evidence)
            out.recommendation("CONFIRM_WITH_ISSUER", say("Confirm the {course} certificate of {worker} with its "
                                                          "issuer", course=course, worker=token(wid)),
                               subject=subject)
            return _Finding("CONFLICT")
        if len(verdicts) == 1:
            verdict = verdicts.pop()
            out.judge(subject, verdict)
            out.inference("CONFLICTING_CERTIFICATES",
                          say("The LMS records {ids} of one {course} certificate of {worker} disagree, but each of "
                              "them alone gives {verdict}", ids=ids, course=course, worker=token(wid),
                              verdict=verdict.value),
                          subject=subject, evidence=evidence)
            if verdict is Verdict.FAIL:
                out.inference("REQUIREMENT_NOT_MET",
                              say("{worker} does not meet the {course} requirement {requirement}", worker=token(wid),
                                  course=course, requirement=self.window.requirement),
                              subject=subject)
                return _Finding("CONFLICT")
            return _Finding("VALID")
        out.judge(subject, Verdict.UNKNOWN)
        out.inference("CONFLICTING_CERTIFICATES",
                      say("The LMS records {ids} of one {course} certificate of {worker} contradict each other: one "
                          "would pass, another fail; a data conflict for their issuers' authority to decide",
                          ids=ids, course=course, worker=token(wid)),
                      subject=subject, evidence=evidence)
        out.recommendation("CONFIRM_WITH_ISSUER", say("Confirm the {course} certificate of {worker} with its "
                                                      "issuer", course=course, worker=token(wid)),
                           subject=subject)
        def issuer(rec: _Record) -> str | None:
            value = rec.fields.get("issuer_id")
            return value if is_id(value) else None

        self.data_conflicts.append({
            "subject": subject,
            "sides": [{"record_id": token(rec.record_id), "state": state.value,
                       "verdict": (Verdict.PASS if state is _State.VALID else Verdict.FAIL).value,
                       "issuer_id": issuer(rec), "evidence": [rec.evidence]} for rec, state in sides],
        })
        return _Finding("CONFLICT")

    @staticmethod
    def _record_text(who: str, rec: _Record) -> str:
        dates = "".join(
            say(template, date=value.isoformat())
            for template, value in ((", completed {date}", rec.completed_on), (", valid until {date}", rec.valid_until))
            if value
        )
        return (
            say(
                "LMS record {record_id} of {who}: status {status}",
                record_id=token(rec.record_id),
                who=who,
                status=token(rec.status, say("unrecognised")),
            )
            + dates
        )

    def _state_fact(self, who: str, subject: str, cert: _Certificate, state: _State) -> None:
        rec, w = cert.representative, self.window
        ev = [r.evidence for r in cert.records]
        until = rec.valid_until.isoformat() if rec.valid_until else "?"
        completed = rec.completed_on.isoformat() if rec.completed_on else "?"
        texts = {
            _State.VALID: (
                "TRAINING_VALID",
                say(
                    "{who} was completed on {completed} and is valid until {until}, covering the permit window "
                    "{window} (record {record_id})",
                    who=who,
                    completed=completed,
                    until=until,
                    window=str(w),
                    record_id=token(rec.record_id),
                ),
            ),
            _State.EXPIRED: (
                "TRAINING_EXPIRED",
                say("{who} expired on {until}, before the permit window {window}", who=who, until=until, window=str(w)),
            ),
            _State.EXPIRES_DURING_PERMIT: (
                "TRAINING_EXPIRES_DURING_PERMIT",
                say("{who} expires on {until}, inside the permit window {window}", who=who, until=until, window=str(w)),
            ),
            _State.NOT_YET_VALID: (
                "TRAINING_NOT_YET_VALID",
                say(
                    "{who} is recorded as completed on {completed}, after the permit window starts ({start}): not yet "
                    "valid",
                    who=who,
                    completed=completed,
                    start=w.start.isoformat(),
                ),
            ),
            _State.REVOKED: ("TRAINING_REVOKED", say("{who}: the LMS records the certificate as REVOKED", who=who)),
            _State.STATUS_EXPIRED: (
                "TRAINING_EXPIRED",
                say("{who}: the LMS records the certificate as EXPIRED", who=who),
            ),
            _State.NOT_COMPLETED: (
                "TRAINING_NOT_COMPLETED",
                say(
                    "{who}: the LMS status is {status}, not {completed_status}",
                    who=who,
                    status=token(rec.status, say("unrecognised")),
                    completed_status=COMPLETED,
                ),
            ),
        }
        if w.on_date:
            day = w.start.isoformat()
            texts.update(
                {
                    _State.VALID: (
                        "TRAINING_VALID",
                        say(
                            "{who} was completed on {completed} and is valid until {until}: "
                            "it had not expired by {day} "
                            "(record {record_id})",
                            who=who,
                            completed=completed,
                            until=until,
                            day=day,
                            record_id=token(rec.record_id),
                        ),
                    ),
                    _State.EXPIRED: (
                        "TRAINING_EXPIRED",
                        say("{who} expired on {until}, on or before {day}", who=who, until=until, day=day),
                    ),
                    _State.NOT_YET_VALID: (
                        "TRAINING_NOT_YET_VALID",
                        say(
                            "{who} is recorded as completed on {completed}, after {day}: not yet valid on that day",
                            who=who,
                            completed=completed,
                            day=day,
                        ),
                    ),
                }
            )
        code, text = texts[state]
        self.out.fact(code, text, subject=subject, evidence=ev)
        if state is _State.NOT_YET_VALID:
            text = (
                say(
                    "The record is dated after that day: a scheduled course or a data-entry error; either "
                    "way it does not cover that day"
                )
                if w.on_date
                else say(
                    "The record is dated after the permit starts: a scheduled course or a data-entry error; "
                    "either way it does not cover the permit"
                )
            )
            self.out.inference("FUTURE_DATED_RECORD", text, subject=subject, evidence=ev)


def run_in_context(data: Mapping[str, Any], client: CapabilityClient, context: TaskContext) -> common_pb2.AgentResult:
    """The operation the input names (see the module docstring).

    Raises:
        TaskInputInvalid: an unknown ``operation``, or a field the operation needs is missing or malformed.
    """
    operation = data.get("operation", "verify")
    if operation == "worker_training":
        return _worker_training(data, client)
    if operation != "verify":
        raise TaskInputInvalid(f"must be one of {', '.join(OPERATIONS)}", field="operation")
    return _verify(data, client, context)


def run(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """:func:`run_in_context` on the host's UTC date, with no handoff outcomes."""
    return run_in_context(data, client, TaskContext(today=utc_today()))


_PERMIT_ANSWER = ResultContract((ResultField("permit_found", "boolean"),
                                 ResultField("permit", "object", required_when="permit_found")))
"""What the work-permit agent's answer carries beyond verdict and subjects (the permit, when found)."""


def _assignment(out: ResultBuilder, permit_id: str, unknown: list[str],
                outcome: common_pb2.HandoffOutcome | None) -> None:
    """What the work-permit agent's answer says about the workers the LMS does not know (nothing decisive)."""
    failure = handoff_failure(outcome)
    crew: set[str] = set()
    if not failure and outcome is not None:
        try:
            permit = check_result(outcome.result, _PERMIT_ANSWER).values.get("permit") or {}
        except ContractViolation as err:
            failure, permit = f"HANDOFF_RESULT_UNUSABLE: {err.field}", {}
        for key in ("workers", "added_workers"):
            listed = permit.get(key)
            if isinstance(listed, list):
                crew |= {str(w.get("worker_id")) for w in listed if isinstance(w, Mapping)}
    for wid in unknown:
        for subject in [s for s in out.subjects if s.startswith(f"worker:{wid}/")]:
            if failure:
                out.uncertainty("WORKER_ASSIGNMENT_UNCONFIRMED",
                                say("Whether {worker} is on permit {permit_id} was not confirmed ({failure})",
                                    worker=token(wid), permit_id=token(permit_id), failure=failure),
                                subject=subject)
            elif wid in crew:
                out.inference("WORKER_ASSIGNMENT_CONFIRMED",
                              say("The work-permit agent confirms {worker} is on permit {permit_id}; the LMS holds "
                                  "no record of them", worker=token(wid), permit_id=token(permit_id)),
                              subject=subject)
            else:
                out.inference("WORKER_NOT_ON_PERMIT",
                              say("The work-permit agent does not find {worker} on permit {permit_id}",
                                  worker=token(wid), permit_id=token(permit_id)),
                              subject=subject)


def _verify(data: Mapping[str, Any], client: CapabilityClient, context: TaskContext) -> common_pb2.AgentResult:
    """The training analysis of one permit."""
    permit_id = require_str(data, "permit_id")
    courses = str_list(data, "required_trainings")
    worker_ids = _worker_ids(data)

    def rules() -> common_pb2.AgentResult:
        out = ResultBuilder()
        window = _window(data)
        if window is None:
            for wid in worker_ids:
                for course in courses:
                    subject = f"worker:{wid}/{course}"
                    out.judge(subject, Verdict.UNKNOWN)
                    out.uncertainty(
                        "PERMIT_WINDOW_UNKNOWN",
                        say(
                            "The permit's validity window is missing or invalid; training "
                            "validity cannot be judged against it"
                        ),
                        subject=subject,
                    )
            return out.build()
        if not courses or not worker_ids:
            out.inference(
                "NOTHING_TO_VERIFY",
                say(
                    "Permit {permit_id} lists no required training or no worker; nothing was checked",
                    permit_id=token(permit_id),
                ),
            )
            return out.build()
        asked = [c for c in courses if is_id(c)]
        for course in courses:
            if course not in asked:
                for wid in worker_ids:
                    subject = f"worker:{wid}/{course}"
                    out.judge(subject, Verdict.UNKNOWN)
                    out.uncertainty(
                        "COURSE_CODE_INVALID",
                        say("A required course code cannot be looked up in the LMS"),
                        subject=subject,
                    )

        # One lookup per worker, all in one round trip; an id that cannot be asked for is not sent.
        askable = [wid for wid in worker_ids if is_id(wid)] if asked else []
        answers = dict(zip(askable, calls_or_failures(
            client, [(CAPABILITY, {"worker_id": wid, "training_codes": asked}) for wid in askable]), strict=True))
        judge = _Judge(out, window)
        unknown: list[str] = []
        for found in [_Lookup(wid, answers.get(wid)) for wid in (worker_ids if asked else [])]:
            findings = judge.worker(found, asked)
            if any(f.state == "WORKER_UNKNOWN" for f in findings.values()):
                unknown.append(found.worker_id)
        if unknown and not context.again:
            # The work-permit agent may confirm the worker is on the permit; the supervisor decides (PRD §20).
            return waiting(handoff(
                CONFIRM_ASSIGNMENT, WORK_PERMIT_AGENT, purpose="permit.assess",
                required_capabilities=["workPermit.get"], input={"permit_id": permit_id},
                reason=f"Confirm that {', '.join(token(w) for w in unknown)}, unknown to the LMS, "
                       f"is on permit {token(permit_id)}"))
        if unknown:
            _assignment(out, permit_id, unknown, context.handoffs.get(CONFIRM_ASSIGNMENT))
        verdict = out.verdict
        if verdict is Verdict.FAIL:
            out.recommendation(
                "DO_NOT_RELEASE",
                say(
                    "Do not release permit {permit_id} until every worker holds the required trainings",
                    permit_id=token(permit_id),
                ),
            )
        elif verdict is Verdict.UNKNOWN:
            out.recommendation(
                "VERIFY_BEFORE_RELEASE",
                say(
                    "Establish the trainings that could not be verified before releasing permit {permit_id}",
                    permit_id=token(permit_id),
                ),
            )
        return out.build({"data_conflicts": judge.data_conflicts} if judge.data_conflicts else None)

    return run_guarded(rules)


def _worker_training(data: Mapping[str, Any], client: CapabilityClient) -> common_pb2.AgentResult:
    """One worker's one course on one day."""
    worker_id, course = require_str(data, "worker_id"), require_str(data, "training_code")
    for name, value in (("worker_id", worker_id), ("training_code", course)):
        if not is_id(value):
            raise TaskInputInvalid("not a record id", field=name)
    on_date = iso_date(data.get("on_date"))
    if on_date is None:
        raise TaskInputInvalid("a date (YYYY-MM-DD) is required", field="on_date")

    def rules() -> common_pb2.AgentResult:
        out = ResultBuilder()
        answer = call_or_failure(client, CAPABILITY, {"worker_id": worker_id, "training_codes": [course]})
        finding = _Judge(out, _Window(on_date, on_date, on_date=True)).worker(_Lookup(worker_id, answer), [course])[
            course
        ]
        return out.build(
            {
                "operation": "worker_training",
                "training": {
                    "worker_id": worker_id,
                    "training_code": course,
                    "on_date": on_date.isoformat(),
                    "state": finding.state,
                    "valid_until": finding.valid_until.isoformat() if finding.valid_until else None,
                },
            }
        )

    return run_guarded(rules)
