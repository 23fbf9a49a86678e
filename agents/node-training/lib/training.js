'use strict';
// The training agent's rules: does every worker hold each required training, valid for the permit's
// window? — the same contract as the Python training agent (specialist_svc/agents/training.py).
//
// Two operations, chosen by the input's `operation`: `verify` (the default) and `worker_training`.
//
// verify — input `permit_id`, `valid_from`, `valid_until`, `required_trainings`, `workers[].worker_id`.
// One `training.getStatus` call per worker (concurrently), asking only for the required course codes.
// One subject per worker x course, "worker:<id>/<course>". A certificate is valid for the permit when
// the LMS says COMPLETED, it was completed on or before the permit's first day and it is valid until
// at least its last day (inclusive). No clock is read: the same data always gives the same answer.
//
//   what the LMS says                          verdict  statements
//   a certificate valid for the window         PASS     FACT TRAINING_VALID
//   expired before the window starts           FAIL     FACT TRAINING_EXPIRED (with the date)
//   expires inside the window                  FAIL     FACT TRAINING_EXPIRES_DURING_PERMIT
//   completed after the window starts          FAIL     FACT TRAINING_NOT_YET_VALID + INFERENCE FUTURE_DATED_RECORD
//   status REVOKED / EXPIRED / other           FAIL     FACT TRAINING_REVOKED / TRAINING_EXPIRED / TRAINING_NOT_COMPLETED
//   no record of the course                    FAIL     FACT TRAINING_MISSING
//   the same certificate recorded twice,       as the   INFERENCE DUPLICATE_CERTIFICATE_RECORDS naming the record used
//   identically                                record   (the lowest record id)
//   records of one certificate that disagree   UNKNOWN  a FACT per record, INFERENCE CONFLICTING_CERTIFICATES and an
//   on the verdict                                      entry of result.data_conflicts — never a guess
//   ... disagree, each giving the same verdict as them  a FACT per record + INFERENCE CONFLICTING_CERTIFICATES
//   ... disagree, one of them incomplete       UNKNOWN  UNCERTAINTY CONFLICTING_CERTIFICATES + a FACT per record
//   a record without usable dates              UNKNOWN  UNCERTAINTY TRAINING_RECORD_INCOMPLETE
//   worker unknown to the LMS                  UNKNOWN  FACT WORKER_UNKNOWN_TO_LMS + UNCERTAINTY UNKNOWN_WORKER
//   LMS timeout / unavailable / bad answer     UNKNOWN  UNCERTAINTY LMS_TIMEOUT / LMS_UNAVAILABLE / LMS_MALFORMED (PARTIAL)
//
// Several certificates of one course: any one valid for the window passes (the latest is cited, the
// others noted as INFERENCE CERTIFICATE_SUPERSEDED), unless records conflict. A certificate is
// identified by its certificate_id; records without one are grouped by their dates. A worker the LMS
// does not know: the agent asks the work-permit agent (handoff `confirm-assignment`, purpose
// permit.assess) to confirm the worker is on the permit, answering WAITING first; called again with
// the outcome, it says what came of it. The trainings stay UNKNOWN either way.
//
// worker_training — input `worker_id`, `training_code`, `on_date`: had the training expired by that
// day? The same rules for one subject, except that a certificate expires on its valid_until.
// result.training = {worker_id, training_code, on_date, state, valid_until}, state one of VALID,
// EXPIRED, MISSING, REVOKED, NOT_COMPLETED, NOT_YET_VALID, CONFLICT, INCOMPLETE, WORKER_UNKNOWN,
// UNREADABLE.

const {
  Verdict, CallFailure, ResultBuilder, TaskInputInvalid, callOrFailure, callsOrFailures, token, isId, isoDate, addDays,
  canonical, requireStr, strList, runGuarded, handoff, waiting, handoffFailure, derivedVerdict,
} = require('./rules');

const AGENT_ID = 'training-agent';
const CAPABILITY = 'training.getStatus';
const CAPABILITIES = [CAPABILITY];
const OPERATIONS = ['verify', 'worker_training'];
const COMPLETED = 'COMPLETED';
const RECORD_FIELDS = ['record_id', 'course_code', 'course_title', 'status', 'completed_on', 'valid_until',
  'certificate_id', 'issuer', 'issuer_id'];
const CONFIRM_ASSIGNMENT = 'confirm-assignment';
const WORK_PERMIT_AGENT = 'work-permit-agent';

const State = Object.freeze({
  VALID: 'VALID',
  EXPIRED: 'EXPIRED',
  EXPIRES_DURING_PERMIT: 'EXPIRES_DURING_PERMIT',
  NOT_YET_VALID: 'NOT_YET_VALID',
  REVOKED: 'REVOKED',
  STATUS_EXPIRED: 'STATUS_EXPIRED',
  NOT_COMPLETED: 'NOT_COMPLETED',
  INCOMPLETE: 'INCOMPLETE',
  CONFLICT: 'CONFLICT',
});
const FAILING = new Set([State.EXPIRED, State.EXPIRES_DURING_PERMIT, State.NOT_YET_VALID, State.REVOKED,
  State.STATUS_EXPIRED, State.NOT_COMPLETED]);

/** What a certificate must cover: a permit's window, or (worker_training) the day on_date. */
class Window {
  constructor(start, end, onDate = false) {
    this.start = start;
    this.end = end;
    this.onDate = onDate;
  }

  toString() {
    return `${this.start}..${this.end}`;
  }

  /** A certificate whose valid_until is before this day has expired (for on_date: it expires on its valid_until). */
  get expiredBefore() {
    return this.onDate ? addDays(this.start, 1) : this.start;
  }

  requirement(say) {
    return this.onDate ? say('after {day}', { day: this.start }) : say('for the permit window {window}', { window: String(this) });
  }
}

/** One LMS record as received (data) and the index of its evidence. */
class TrainingRecord {
  constructor(fields, evidence) {
    this.fields = fields;
    this.evidence = evidence;
  }

  get recordId() { return String(this.fields.record_id || ''); }

  get status() { return String(this.fields.status || ''); }

  get completedOn() { return isoDate(this.fields.completed_on); }

  get validUntil() { return isoDate(this.fields.valid_until); }

  /** What a duplicate must repeat exactly (free text excluded: it decides nothing). */
  content() {
    return canonical([this.status, this.fields.completed_on, this.fields.valid_until, this.fields.certificate_id]);
  }
}

function byRecordId(a, b) {
  return a.recordId < b.recordId ? -1 : a.recordId > b.recordId ? 1 : 0;
}

/** One certificate as the LMS recorded it, possibly in several records. */
class Certificate {
  constructor(records) {
    this.records = records;
  }

  /** Identical duplicates: the lowest record id, so the choice never varies. */
  get representative() {
    return [...this.records].sort(byRecordId)[0];
  }

  get conflicting() {
    return new Set(this.records.map((r) => r.content())).size > 1;
  }

  state(window) {
    if (this.conflicting) return State.CONFLICT;
    const rec = this.representative;
    if (rec.status === 'REVOKED') return State.REVOKED;
    if (rec.status === 'EXPIRED') return State.STATUS_EXPIRED;
    if (rec.status !== COMPLETED) return State.NOT_COMPLETED;
    const completed = rec.completedOn;
    const until = rec.validUntil;
    if (completed === null || until === null || until < completed) return State.INCOMPLETE;
    if (until < window.expiredBefore) return State.EXPIRED;
    if (completed > window.start) return State.NOT_YET_VALID;
    if (until < window.end) return State.EXPIRES_DURING_PERMIT;
    return State.VALID;
  }

  sortKey() {
    const rec = this.representative;
    return [rec.validUntil || '', rec.completedOn || '', rec.recordId];
  }
}

/** Descending by (valid_until, completed_on, record_id): the latest first. */
function latestFirst(a, b) {
  const ka = a.sortKey();
  const kb = b.sortKey();
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] !== kb[i]) return ka[i] < kb[i] ? 1 : -1;
  }
  return 0;
}

function certificates(records) {
  const groups = new Map();
  for (const rec of records) {
    const cert = rec.fields.certificate_id;
    const key = typeof cert === 'string' && cert
      ? canonical(['certificate', cert]) : canonical(['dates', rec.fields.completed_on, rec.fields.valid_until]);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(rec);
  }
  return [...groups.values()].map((group) => new Certificate(group));
}

function permitWindow(data) {
  const start = isoDate(data.valid_from);
  const end = isoDate(data.valid_until);
  if (start === null || end === null || end < start) return null;
  return new Window(start, end);
}

function workerIds(data) {
  const workers = data.workers;
  if (!Array.isArray(workers)) throw new TaskInputInvalid('a list of {worker_id} is required', 'workers');
  const ids = workers.map((w, i) => {
    const wid = w && typeof w === 'object' && !Array.isArray(w) ? w.worker_id : undefined;
    if (typeof wid !== 'string' || !wid) throw new TaskInputInvalid('worker_id is required', `workers[${i}].worker_id`);
    return wid;
  });
  return [...new Set(ids)];
}

function wellFormed(output, workerId) {
  const trainings = output.trainings;
  return output.worker_id === workerId && typeof output.worker_known === 'boolean' && Array.isArray(trainings)
    && trainings.every((t) => t !== null && typeof t === 'object' && !Array.isArray(t));
}

/** Applies the rules to one worker's LMS answer. */
class Judge {
  constructor(out, window, say) {
    this.out = out;
    this.window = window;
    this.say = say;
    this.dataConflicts = [];
  }

  /** Judges each course of one worker; returns {course: {state, validUntil}}. */
  worker(lookup, courses) {
    const { out, say } = this;
    const wid = lookup.workerId;
    const subjects = courses.map((c) => `worker:${wid}/${c}`);
    const shown = token(wid);
    const unreadable = Object.fromEntries(courses.map((c) => [c, { state: 'UNREADABLE', validUntil: null }]));
    if (lookup.answer === null) {
      for (const subject of subjects) {
        out.judge(subject, Verdict.UNKNOWN);
        out.uncertainty('WORKER_ID_INVALID', say('The worker id cannot be looked up in the LMS'), { subject });
      }
      return unreadable;
    }
    if (lookup.answer instanceof CallFailure) {
      let failure = lookup.answer;
      if (failure.kind === 'not_found') failure = new CallFailure('uncertain', 'WORKER_NOT_FOUND', failure.detail);
      out.unanswered(failure, subjects, say('The LMS record of {shown}', { shown }));
      return unreadable;
    }
    const { output, evidence: refs } = lookup.answer;
    if (!refs.length || !wellFormed(output, wid)) {
      const code = refs.length ? 'LMS_MALFORMED' : 'EVIDENCE_MISSING';
      out.unanswered(new CallFailure('uncertain', code, `${CAPABILITY}: unusable answer for ${shown}`),
        subjects, say('The LMS record of {shown}', { shown }));
      return unreadable;
    }
    const ref = refs[0];
    if (!output.worker_known) {
      const ev = out.evidence(ref, { data: { worker_id: wid, worker_known: false } });
      for (const subject of subjects) {
        out.judge(subject, Verdict.UNKNOWN);
        out.fact('WORKER_UNKNOWN_TO_LMS', say('The LMS has no worker {shown}', { shown }), { subject, evidence: [ev] });
        out.uncertainty('UNKNOWN_WORKER',
          say('Trainings of {shown} cannot be verified: the LMS does not know the worker', { shown }),
          { subject, evidence: [ev] });
      }
      return Object.fromEntries(courses.map((c) => [c, { state: 'WORKER_UNKNOWN', validUntil: null }]));
    }
    const records = new Map();
    for (const rec of output.trainings) {
      const fields = Object.fromEntries(RECORD_FIELDS.map((name) => [name, rec[name] === undefined ? null : rec[name]]));
      const code = fields.course_code;
      if (!courses.includes(code)) continue; // only the permit's required courses are judged
      const ev = out.evidence(ref, { part: String(fields.record_id || ''), data: fields });
      if (!records.has(String(code))) records.set(String(code), []);
      records.get(String(code)).push(new TrainingRecord(fields, ev));
    }
    return Object.fromEntries(courses.map((course) => [course, this.course(wid, course, records.get(course) || [], ref)]));
  }

  course(wid, course, records, ref) {
    const { out, say, window } = this;
    const subject = `worker:${wid}/${course}`;
    const worker = token(wid);
    const who = say('{course} of {worker}', { course, worker });
    if (!records.length) {
      const ev = out.evidence(ref, { data: { worker_id: wid, course_code: course, records: 0 } });
      out.judge(subject, Verdict.FAIL);
      out.fact('TRAINING_MISSING', say('The LMS holds no {course} record for {worker}', { course, worker }),
        { subject, evidence: [ev] });
      out.inference('REQUIREMENT_NOT_MET', say('{worker} does not meet the {course} requirement', { worker, course }),
        { subject });
      return { state: 'MISSING', validUntil: null };
    }
    const certs = certificates(records);
    for (const cert of certs) {
      if (cert.records.length > 1 && !cert.conflicting) {
        const ids = [...cert.records].sort(byRecordId).map((r) => token(r.recordId)).join(', ');
        out.inference('DUPLICATE_CERTIFICATE_RECORDS',
          say('Records {ids} describe the same {course} certificate of {worker}; {record_id} is used',
            { ids, course, worker, record_id: token(cert.representative.recordId) }),
          { subject, evidence: cert.records.map((r) => r.evidence) });
      }
    }
    const states = certs.map((cert) => [cert, cert.state(window)]);
    const conflicts = states.filter(([, s]) => s === State.CONFLICT).map(([c]) => c);
    const valid = states.filter(([, s]) => s === State.VALID).map(([c]) => c).sort(latestFirst);
    const incomplete = states.filter(([, s]) => s === State.INCOMPLETE).map(([c]) => c);
    if (conflicts.length) return this.conflict(wid, course, subject, who, conflicts);
    if (valid.length) {
      const best = valid[0];
      out.judge(subject, Verdict.PASS);
      this.stateFact(who, subject, best, State.VALID);
      for (const cert of certs) {
        if (cert !== best) {
          out.inference('CERTIFICATE_SUPERSEDED',
            say('{record}; not needed, {record_id} is valid for the permit',
              { record: this.recordText(who, cert.representative), record_id: token(best.representative.recordId) }),
            { subject, evidence: [cert.representative.evidence] });
        }
      }
      return { state: 'VALID', validUntil: best.representative.validUntil };
    }
    if (incomplete.length) {
      out.judge(subject, Verdict.UNKNOWN);
      for (const [cert, state] of states) {
        if (FAILING.has(state)) this.stateFact(who, subject, cert, state);
      }
      for (const cert of incomplete) {
        out.uncertainty('TRAINING_RECORD_INCOMPLETE',
          say('{record}: its dates are missing or unusable, so its validity cannot be established',
            { record: this.recordText(who, cert.representative) }),
          { subject, evidence: [cert.representative.evidence] });
      }
      return { state: 'INCOMPLETE', validUntil: null };
    }
    out.judge(subject, Verdict.FAIL);
    const ordered = [...states].sort((a, b) => latestFirst(a[0], b[0]));
    for (const [cert, state] of ordered) this.stateFact(who, subject, cert, state);
    out.inference('REQUIREMENT_NOT_MET',
      say('{worker} does not meet the {course} requirement {requirement}',
        { worker, course, requirement: window.requirement(say) }),
      { subject });
    const [latest, state] = ordered[0];
    return { state: state === State.STATUS_EXPIRED ? State.EXPIRED : state, validUntil: latest.representative.validUntil };
  }

  /**
   * Records of one certificate that disagree: each record is judged on its own. Different verdicts are
   * a data conflict for the supervisor (by issuer authority, else a human); the same verdict stands.
   */
  conflict(wid, course, subject, who, conflicts) {
    const { out, say, window } = this;
    const worker = token(wid);
    const records = conflicts.flatMap((cert) => cert.records).sort(byRecordId);
    const sides = records.map((r) => [r, new Certificate([r]).state(window)]);
    const verdicts = new Set(sides.map(([, state]) => (state === State.VALID ? Verdict.PASS
      : FAILING.has(state) ? Verdict.FAIL : Verdict.UNKNOWN)));
    for (const rec of records) {
      out.fact('TRAINING_RECORD', this.recordText(who, rec), { subject, evidence: [rec.evidence] });
    }
    const ids = records.map((r) => token(r.recordId)).join(', ');
    const evidence = records.map((r) => r.evidence);
    if (verdicts.has(Verdict.UNKNOWN)) {
      out.judge(subject, Verdict.UNKNOWN);
      out.uncertainty('CONFLICTING_CERTIFICATES',
        say('The LMS records {ids} of one {course} certificate of {worker} contradict each other '
          + 'and one of them cannot be judged; the certificate\'s status cannot be established', { ids, course, worker }),
        { subject, evidence });
      out.recommendation('CONFIRM_WITH_ISSUER',
        say('Confirm the {course} certificate of {worker} with its issuer', { course, worker }), { subject });
      return { state: 'CONFLICT', validUntil: null };
    }
    if (verdicts.size === 1) {
      const [verdict] = verdicts;
      out.judge(subject, verdict);
      out.inference('CONFLICTING_CERTIFICATES',
        say('The LMS records {ids} of one {course} certificate of {worker} disagree, but each of '
          + 'them alone gives {verdict}', { ids, course, worker, verdict }),
        { subject, evidence });
      if (verdict === Verdict.FAIL) {
        out.inference('REQUIREMENT_NOT_MET',
          say('{worker} does not meet the {course} requirement {requirement}',
            { worker, course, requirement: window.requirement(say) }),
          { subject });
        return { state: 'CONFLICT', validUntil: null };
      }
      return { state: 'VALID', validUntil: null };
    }
    out.judge(subject, Verdict.UNKNOWN);
    out.inference('CONFLICTING_CERTIFICATES',
      say('The LMS records {ids} of one {course} certificate of {worker} contradict each other: one '
        + 'would pass, another fail; a data conflict for their issuers\' authority to decide', { ids, course, worker }),
      { subject, evidence });
    out.recommendation('CONFIRM_WITH_ISSUER',
      say('Confirm the {course} certificate of {worker} with its issuer', { course, worker }), { subject });
    const issuer = (rec) => (isId(rec.fields.issuer_id) ? rec.fields.issuer_id : null);
    this.dataConflicts.push({
      subject,
      sides: sides.map(([rec, state]) => ({
        record_id: token(rec.recordId),
        state,
        verdict: state === State.VALID ? Verdict.PASS : Verdict.FAIL,
        issuer_id: issuer(rec),
        evidence: [rec.evidence],
      })),
    });
    return { state: 'CONFLICT', validUntil: null };
  }

  recordText(who, rec) {
    const { say } = this;
    const dates = [[', completed {date}', rec.completedOn], [', valid until {date}', rec.validUntil]]
      .filter(([, value]) => value).map(([template, value]) => say(template, { date: value })).join('');
    return say('LMS record {record_id} of {who}: status {status}',
      { record_id: token(rec.recordId), who, status: token(rec.status, say('unrecognised')) }) + dates;
  }

  stateFact(who, subject, cert, state) {
    const { out, say, window: w } = this;
    const rec = cert.representative;
    const ev = cert.records.map((r) => r.evidence);
    const until = rec.validUntil || '?';
    const completed = rec.completedOn || '?';
    const recordId = token(rec.recordId);
    let texts = {
      [State.VALID]: ['TRAINING_VALID', () => say('{who} was completed on {completed} and is valid until {until}, covering '
        + 'the permit window {window} (record {record_id})', { who, completed, until, window: String(w), record_id: recordId })],
      [State.EXPIRED]: ['TRAINING_EXPIRED', () => say('{who} expired on {until}, before the permit window {window}',
        { who, until, window: String(w) })],
      [State.EXPIRES_DURING_PERMIT]: ['TRAINING_EXPIRES_DURING_PERMIT', () => say(
        '{who} expires on {until}, inside the permit window {window}', { who, until, window: String(w) })],
      [State.NOT_YET_VALID]: ['TRAINING_NOT_YET_VALID', () => say('{who} is recorded as completed on {completed}, after '
        + 'the permit window starts ({start}): not yet valid', { who, completed, start: w.start })],
      [State.REVOKED]: ['TRAINING_REVOKED', () => say('{who}: the LMS records the certificate as REVOKED', { who })],
      [State.STATUS_EXPIRED]: ['TRAINING_EXPIRED', () => say('{who}: the LMS records the certificate as EXPIRED', { who })],
      [State.NOT_COMPLETED]: ['TRAINING_NOT_COMPLETED', () => say('{who}: the LMS status is {status}, not {completed_status}',
        { who, status: token(rec.status, say('unrecognised')), completed_status: COMPLETED })],
    };
    if (w.onDate) {
      const day = w.start;
      texts = {
        ...texts,
        [State.VALID]: ['TRAINING_VALID', () => say('{who} was completed on {completed} and is valid until {until}: '
          + 'it had not expired by {day} (record {record_id})', { who, completed, until, day, record_id: recordId })],
        [State.EXPIRED]: ['TRAINING_EXPIRED', () => say('{who} expired on {until}, on or before {day}', { who, until, day })],
        [State.NOT_YET_VALID]: ['TRAINING_NOT_YET_VALID', () => say('{who} is recorded as completed on {completed}, after '
          + '{day}: not yet valid on that day', { who, completed, day })],
      };
    }
    const [code, text] = texts[state];
    out.fact(code, text(), { subject, evidence: ev });
    if (state === State.NOT_YET_VALID) {
      const note = w.onDate
        ? say('The record is dated after that day: a scheduled course or a data-entry error; either way it does not cover that day')
        : say('The record is dated after the permit starts: a scheduled course or a data-entry error; either way it does '
          + 'not cover the permit');
      out.inference('FUTURE_DATED_RECORD', note, { subject, evidence: ev });
    }
  }
}

/** The work-permit agent's answer (a handoff): its contract fields, or why it is unusable. */
function permitAnswer(result) {
  const data = result.result || {};
  const verdict = data.verdict;
  if (!Object.values(Verdict).includes(verdict)) return { error: 'result.verdict' };
  const subjects = data.subjects;
  if (!subjects || typeof subjects !== 'object' || Array.isArray(subjects)) return { error: 'result.subjects' };
  for (const [subject, value] of Object.entries(subjects)) {
    if (!Object.values(Verdict).includes(value)) return { error: `result.subjects['${subject}']` };
  }
  if (derivedVerdict(subjects) !== verdict) return { error: 'result.verdict' };
  if (typeof data.permit_found !== 'boolean') return { error: 'result.permit_found' };
  const permit = data.permit;
  if (data.permit_found && (permit === null || permit === undefined)) return { error: 'result.permit' };
  if (permit !== null && permit !== undefined
      && (typeof permit !== 'object' || Array.isArray(permit) || !Object.keys(permit).length)) {
    return { error: 'result.permit' };
  }
  return { permit: permit || {} };
}

/** What the work-permit agent's answer says about the workers the LMS does not know (nothing decisive). */
function assignment(out, say, permitId, unknown, outcome) {
  let failure = handoffFailure(outcome);
  const crew = new Set();
  if (!failure && outcome) {
    const answer = permitAnswer(outcome.result || {});
    if (answer.error) failure = `HANDOFF_RESULT_UNUSABLE: ${answer.error}`;
    else {
      for (const key of ['workers', 'added_workers']) {
        const listed = answer.permit[key];
        if (Array.isArray(listed)) {
          for (const w of listed) if (w && typeof w === 'object' && !Array.isArray(w)) crew.add(String(w.worker_id));
        }
      }
    }
  }
  for (const wid of unknown) {
    for (const subject of Object.keys(out.subjects).filter((s) => s.startsWith(`worker:${wid}/`))) {
      const values = { worker: token(wid), permit_id: token(permitId) };
      if (failure) {
        out.uncertainty('WORKER_ASSIGNMENT_UNCONFIRMED',
          say('Whether {worker} is on permit {permit_id} was not confirmed ({failure})', { ...values, failure }), { subject });
      } else if (crew.has(wid)) {
        out.inference('WORKER_ASSIGNMENT_CONFIRMED',
          say('The work-permit agent confirms {worker} is on permit {permit_id}; the LMS holds no record of them', values),
          { subject });
      } else {
        out.inference('WORKER_NOT_ON_PERMIT',
          say('The work-permit agent does not find {worker} on permit {permit_id}', values), { subject });
      }
    }
  }
}

async function verify(data, client, context) {
  const { say } = context;
  const permitId = requireStr(data, 'permit_id');
  const courses = strList(data, 'required_trainings');
  const workers = workerIds(data);

  return runGuarded(async () => {
    const out = new ResultBuilder(say);
    const window = permitWindow(data);
    if (window === null) {
      for (const wid of workers) {
        for (const course of courses) {
          const subject = `worker:${wid}/${course}`;
          out.judge(subject, Verdict.UNKNOWN);
          out.uncertainty('PERMIT_WINDOW_UNKNOWN', say('The permit\'s validity window is missing or invalid; training '
            + 'validity cannot be judged against it'), { subject });
        }
      }
      return out.build();
    }
    if (!courses.length || !workers.length) {
      out.inference('NOTHING_TO_VERIFY', say('Permit {permit_id} lists no required training or no worker; nothing '
        + 'was checked', { permit_id: token(permitId) }));
      return out.build();
    }
    const asked = courses.filter(isId);
    for (const course of courses) {
      if (!asked.includes(course)) {
        for (const wid of workers) {
          const subject = `worker:${wid}/${course}`;
          out.judge(subject, Verdict.UNKNOWN);
          out.uncertainty('COURSE_CODE_INVALID', say('A required course code cannot be looked up in the LMS'), { subject });
        }
      }
    }
    // Every worker's lookup in one round trip: independent reads (a worker id that is not one is not asked).
    const looked = asked.length ? workers : [];
    const ids = looked.filter(isId);
    const answers = await callsOrFailures(client, ids.map((wid) => [CAPABILITY, { worker_id: wid, training_codes: asked }]));
    const byWorker = new Map(ids.map((wid, i) => [wid, answers[i]]));
    const judge = new Judge(out, window, say);
    const unknown = [];
    for (const found of looked.map((wid) => ({ workerId: wid, answer: isId(wid) ? byWorker.get(wid) : null }))) {
      const findings = judge.worker(found, asked);
      if (Object.values(findings).some((f) => f.state === 'WORKER_UNKNOWN')) unknown.push(found.workerId);
    }
    if (unknown.length && !context.again) {
      // The work-permit agent may confirm the worker is on the permit; the supervisor decides (PRD §20).
      return waiting(handoff(CONFIRM_ASSIGNMENT, WORK_PERMIT_AGENT, {
        purpose: 'permit.assess', requiredCapabilities: ['workPermit.get'], input: { permit_id: permitId },
        reason: `Confirm that ${unknown.map((w) => token(w)).join(', ')}, unknown to the LMS, is on permit ${token(permitId)}`,
      }));
    }
    if (unknown.length) assignment(out, say, permitId, unknown, context.handoffs[CONFIRM_ASSIGNMENT]);
    const verdict = out.verdict;
    if (verdict === Verdict.FAIL) {
      out.recommendation('DO_NOT_RELEASE', say('Do not release permit {permit_id} until every worker holds the required '
        + 'trainings', { permit_id: token(permitId) }));
    } else if (verdict === Verdict.UNKNOWN) {
      out.recommendation('VERIFY_BEFORE_RELEASE', say('Establish the trainings that could not be verified before '
        + 'releasing permit {permit_id}', { permit_id: token(permitId) }));
    }
    return out.build(judge.dataConflicts.length ? { data_conflicts: judge.dataConflicts } : null);
  }, say);
}

async function workerTraining(data, client, context) {
  const { say } = context;
  const workerId = requireStr(data, 'worker_id');
  const course = requireStr(data, 'training_code');
  for (const [name, value] of [['worker_id', workerId], ['training_code', course]]) {
    if (!isId(value)) throw new TaskInputInvalid('not a record id', name);
  }
  const onDate = isoDate(data.on_date);
  if (onDate === null) throw new TaskInputInvalid('a date (YYYY-MM-DD) is required', 'on_date');

  return runGuarded(async () => {
    const out = new ResultBuilder(say);
    const answer = await callOrFailure(client, CAPABILITY, { worker_id: workerId, training_codes: [course] });
    const finding = new Judge(out, new Window(onDate, onDate, true), say).worker({ workerId, answer }, [course])[course];
    return out.build({
      operation: 'worker_training',
      training: {
        worker_id: workerId, training_code: course, on_date: onDate, state: finding.state, valid_until: finding.validUntil,
      },
    });
  }, say);
}

/**
 * The operation the input names. `context`: {say (phrases.speaker), handoffs ({action_id: outcome}),
 * again (called again after WAITING)}. Throws TaskInputInvalid for an unknown operation or a field
 * the operation needs that is missing or malformed.
 */
async function run(data, client, context) {
  const operation = data.operation === undefined ? 'verify' : data.operation;
  if (operation === 'worker_training') return workerTraining(data, client, context);
  if (operation !== 'verify') throw new TaskInputInvalid(`must be one of ${OPERATIONS.join(', ')}`, 'operation');
  return verify(data, client, context);
}

module.exports = { AGENT_ID, CAPABILITIES, OPERATIONS, CONFIRM_ASSIGNMENT, run };
