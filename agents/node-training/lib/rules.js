'use strict';
// Building blocks of an agent's rules, free of any transport: the capability port, what a failed
// call means for an analysis, and a builder of contract-shaped results.
//
// The rules reach data only through a capability client: `await client.call(capabilityId, input)`
// answers {output, evidence} (the capability's output as plain JSON and the evidence references the
// capability service built from its provenance) or throws a CapabilityError (the gRPC status name,
// the ErrorInfo reason, the message). `classify` turns such an error into what it means:
//
//   DEADLINE_EXCEEDED                       uncertain  UNCERTAINTY <SYSTEM>_TIMEOUT, subject UNKNOWN
//   UNAVAILABLE (5xx, connection, circuit)  uncertain  UNCERTAINTY <SYSTEM>_UNAVAILABLE
//   UNAVAILABLE / INTERNAL (bad answer)     uncertain  UNCERTAINTY <SYSTEM>_MALFORMED
//   UNAVAILABLE (policy / audit down)       uncertain  UNCERTAINTY GOVERNANCE_UNAVAILABLE
//   RESOURCE_EXHAUSTED, ABORTED, INTERNAL   uncertain  UNCERTAINTY CAPABILITY_FAILED
//   NOT_FOUND (the record)                  not_found  the agent's own "not found" rule
//   PERMISSION_DENIED, UNAUTHENTICATED      fatal      FAILED, error_reason NOT_AUTHORISED: ...
//   FAILED_PRECONDITION                     fatal      FAILED, CAPABILITY_REFUSED: ...
//   INVALID_ARGUMENT, UNIMPLEMENTED, ...    fatal      FAILED, CAPABILITY_REJECTED: ...
//
// Nothing is ever invented in place of an answer that did not come: a subject whose data could not
// be read is UNKNOWN with an UNCERTAINTY naming why. Statement texts are the agent's own words plus
// values that pass `token` or `isoDate`; free text from a source (a course title, an issuer) is data,
// copied into an evidence reference's `data` and nowhere else.

const TOKEN_RE = /^[A-Za-z0-9][A-Za-z0-9._/:-]{0,63}$/;
const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;
const ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

const Verdict = Object.freeze({ PASS: 'PASS', FAIL: 'FAIL', UNKNOWN: 'UNKNOWN' });
const SEVERITY = { PASS: 0, UNKNOWN: 1, FAIL: 2 };
const KINDS = {
  FACT: 'STATEMENT_KIND_FACT',
  INFERENCE: 'STATEMENT_KIND_INFERENCE',
  RECOMMENDATION: 'STATEMENT_KIND_RECOMMENDATION',
  UNCERTAINTY: 'STATEMENT_KIND_UNCERTAINTY',
};

/** A failed capability call, as the rules see it. `code` is the gRPC status name. */
class CapabilityError extends Error {
  constructor(code, reason, message) {
    super(message || code);
    this.code = code;
    this.reason = reason || code;
  }
}

/** The task input lacks what the rules need; `field` names it (relative to task.input). */
class TaskInputInvalid extends Error {
  constructor(message, field) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

/** The analysis cannot be done at all; the result is FAILED with error_reason `CODE: detail`. */
class AgentFailed extends Error {
  constructor(code, detail, payload = {}) {
    super(`${code}: ${detail}`);
    this.code = code;
    this.detail = detail;
    this.payload = payload;
  }

  get errorReason() {
    return `${this.code}: ${this.detail}`;
  }
}

/** What a failed capability call means for the analysis: kind uncertain | not_found | fatal. */
class CallFailure {
  constructor(kind, code, detail) {
    this.kind = kind;
    this.code = code;
    this.detail = detail;
  }

  failed() {
    return new AgentFailed(this.code, this.detail);
  }
}

const SYSTEMS = {
  'training.getStatus': 'LMS',
  'workPermit.get': 'PERMIT_REGISTRY',
  'knowledge.search': 'KNOWLEDGE',
};
const MALFORMED_REASONS = new Set([
  'EXTERNAL_MALFORMED', 'EXTERNAL_MALFORMED_JSON', 'EXTERNAL_CONTENT_TYPE', 'EXTERNAL_SCHEMA_INVALID',
  'EXTERNAL_RESPONSE_MISMATCH', 'EXTERNAL_TOO_LARGE', 'OUTPUT_INVALID',
]);
const GOVERNANCE_REASONS = new Set(['POLICY_UNAVAILABLE', 'AUDIT_UNAVAILABLE']);

/** The status class of a code, as the mesh's clients read it (a cancelled call is aborted, an unknown one internal). */
function statusClass(code) {
  if (code === 'CANCELLED') return 'ABORTED';
  if (['UNKNOWN', 'OUT_OF_RANGE', 'DATA_LOSS'].includes(code)) return 'INTERNAL';
  return code;
}

/** Maps a failed capability call to its meaning (see the top of this file). */
function classify(err, capabilityId) {
  const system = SYSTEMS[capabilityId] || 'CAPABILITY';
  const code = statusClass(err.code);
  const detail = `${capabilityId} ${err.reason}: ${err.message}`;
  if (code === 'DEADLINE_EXCEEDED') return new CallFailure('uncertain', `${system}_TIMEOUT`, detail);
  if (MALFORMED_REASONS.has(err.reason) && (code === 'UNAVAILABLE' || code === 'INTERNAL')) {
    return new CallFailure('uncertain', `${system}_MALFORMED`, detail);
  }
  if (code === 'UNAVAILABLE') {
    if (GOVERNANCE_REASONS.has(err.reason)) return new CallFailure('uncertain', 'GOVERNANCE_UNAVAILABLE', detail);
    return new CallFailure('uncertain', `${system}_UNAVAILABLE`, detail);
  }
  if (['RESOURCE_EXHAUSTED', 'ABORTED', 'INTERNAL'].includes(code)) {
    return new CallFailure('uncertain', 'CAPABILITY_FAILED', detail);
  }
  if (code === 'NOT_FOUND') {
    if (err.reason === 'CAPABILITY_NOT_FOUND') return new CallFailure('fatal', 'CAPABILITY_REJECTED', detail);
    return new CallFailure('not_found', 'RESOURCE_NOT_FOUND', detail);
  }
  if (code === 'PERMISSION_DENIED' || code === 'UNAUTHENTICATED') return new CallFailure('fatal', 'NOT_AUTHORISED', detail);
  if (code === 'FAILED_PRECONDITION') return new CallFailure('fatal', 'CAPABILITY_REFUSED', detail);
  return new CallFailure('fatal', 'CAPABILITY_REJECTED', detail);
}

/** One capability call; a fatal failure throws AgentFailed, others are returned as a CallFailure. */
async function callOrFailure(client, capabilityId, input) {
  try {
    return await client.call(capabilityId, input);
  } catch (err) {
    if (!(err instanceof CapabilityError)) throw err;
    const failure = classify(err, capabilityId);
    if (failure.kind === 'fatal') throw failure.failed();
    return failure;
  }
}

/**
 * Independent reads in one round trip (the client's callAll; a client without one, such as a test's
 * fake, makes the calls side by side): each its answer or what its failure means, in order; a fatal
 * failure of any throws AgentFailed, as callOrFailure does. `calls` is [[capabilityId, input], ...].
 */
async function callsOrFailures(client, calls) {
  const answers = typeof client.callAll === 'function' ? await client.callAll(calls)
    : await parallelMap(async ([capabilityId, input]) => {
      try {
        return await client.call(capabilityId, input);
      } catch (err) {
        if (err instanceof CapabilityError) return err;
        throw err;
      }
    }, calls);
  return answers.map((answer, i) => {
    if (!(answer instanceof CapabilityError)) return answer;
    const failure = classify(answer, calls[i][0]);
    if (failure.kind === 'fatal') throw failure.failed();
    return failure;
  });
}

// --- plain values ---------------------------------------------------------------------------------

/** `value` if it is a short identifier (letters, digits, ._/:-), else `fallback`: free text never enters a statement. */
function token(value, fallback = '<unreadable>') {
  return typeof value === 'string' && TOKEN_RE.test(value) ? value : fallback;
}

/** Whether `value` is a record id as the capabilities accept it. */
function isId(value) {
  return typeof value === 'string' && ID_RE.test(value);
}

/** A YYYY-MM-DD calendar date (as that string), or null for anything else (null, text, bad dates). */
function isoDate(value) {
  if (typeof value !== 'string' || !DATE_RE.test(value)) return null;
  const [y, m, d] = value.split('-').map(Number);
  if (y < 1) return null;
  const date = new Date(Date.UTC(2000, m - 1, d));
  date.setUTCFullYear(y);
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d ? value : null;
}

/** The ISO date `days` after `day` (an ISO date). */
function addDays(day, days) {
  const [y, m, d] = day.split('-').map(Number);
  const date = new Date(Date.UTC(2000, m - 1, d));
  date.setUTCFullYear(y);
  date.setUTCDate(date.getUTCDate() + days);
  return `${String(date.getUTCFullYear()).padStart(4, '0')}-${String(date.getUTCMonth() + 1).padStart(2, '0')}-`
    + String(date.getUTCDate()).padStart(2, '0');
}

/** `[await fn(x) for x of items]`, at most `limit` at once, results in input order. */
async function parallelMap(fn, items, limit = 8) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/** A canonical JSON text (keys sorted), to compare plain data. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value === undefined ? null : value);
}

function requireStr(data, name) {
  const value = data[name];
  if (typeof value !== 'string' || !value) throw new TaskInputInvalid('a non-empty string is required', name);
  return value;
}

/** A list of strings, deduplicated in order (absent -> empty). */
function strList(data, name) {
  const value = data[name] === undefined ? [] : data[name];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new TaskInputInvalid('a list of strings is expected', name);
  }
  return [...new Set(value)];
}

// --- results --------------------------------------------------------------------------------------

/** The verdict a set of subject verdicts implies: FAIL if any fails; UNKNOWN if any is unknown or there are none. */
function derivedVerdict(subjects) {
  const values = new Set(Object.values(subjects));
  if (values.has(Verdict.FAIL)) return Verdict.FAIL;
  if (values.size === 0 || values.has(Verdict.UNKNOWN)) return Verdict.UNKNOWN;
  return Verdict.PASS;
}

/**
 * Collects subjects, statements and evidence and builds a contract-shaped result:
 * {status, result (plain JSON), evidence, statements, confidence, error_reason, requested_actions}.
 * Status: SUCCESS when every subject is PASS/FAIL and nothing is uncertain; PARTIAL when a
 * capability call could not be answered (`unanswered`); UNCERTAIN when something else could not be
 * established. Evidence is {source, reference, authority, fetched_at, capability, data}, `data`
 * plain JSON or null.
 */
class ResultBuilder {
  constructor(say) {
    this.say = say;
    this.subjectVerdicts = new Map();
    this.statements = [];
    this.evidenceList = [];
    this.evidenceKeys = new Map();
    this.unansweredFailures = [];
  }

  /** Adds (once) an evidence reference derived from a capability's provenance; returns its index. */
  evidence(ref, { part = '', data } = {}) {
    const item = {
      source: ref.source || '', reference: ref.reference || '', authority: ref.authority || 'AUTHORITY_LEVEL_UNSPECIFIED',
      fetched_at: ref.fetched_at || null, capability: ref.capability || '', data: ref.data === undefined ? null : ref.data,
    };
    if (part && token(part, '') && item.reference) item.reference = `${item.reference}#${part}`;
    if (data !== undefined) item.data = data;
    const key = canonical(item);
    if (!this.evidenceKeys.has(key)) {
      this.evidenceKeys.set(key, this.evidenceList.length);
      this.evidenceList.push(item);
    }
    return this.evidenceKeys.get(key);
  }

  statement(kind, code, text, { subject = '', evidence = [] } = {}) {
    this.statements.push({
      kind: KINDS[kind], code, text, subject, evidence_indexes: [...new Set(evidence)].sort((a, b) => a - b),
    });
  }

  fact(code, text, opts) { this.statement('FACT', code, text, opts); }

  inference(code, text, opts) { this.statement('INFERENCE', code, text, opts); }

  recommendation(code, text, { subject = '' } = {}) { this.statement('RECOMMENDATION', code, text, { subject }); }

  uncertainty(code, text, opts) { this.statement('UNCERTAINTY', code, text, opts); }

  /** Sets a subject's verdict; judged twice, the graver one stands (FAIL > UNKNOWN > PASS). */
  judge(subject, verdict) {
    const current = this.subjectVerdicts.get(subject);
    if (current === undefined || SEVERITY[verdict] > SEVERITY[current]) this.subjectVerdicts.set(subject, verdict);
  }

  /** A capability call got no usable answer: each subject is UNKNOWN with an UNCERTAINTY. */
  unanswered(failure, subjects, what) {
    this.unansweredFailures.push(failure);
    for (const subject of subjects) {
      this.judge(subject, Verdict.UNKNOWN);
      this.uncertainty(failure.code, this.say('{what} could not be read ({code}); no status is assumed',
        { what, code: failure.code }), { subject });
    }
  }

  get subjects() {
    return Object.fromEntries(this.subjectVerdicts);
  }

  get verdict() {
    return derivedVerdict(this.subjects);
  }

  build(extra = null) {
    const verdict = this.verdict;
    const uncertain = this.statements.some((s) => s.kind === KINDS.UNCERTAINTY);
    let status;
    if (this.unansweredFailures.length) status = 'RESULT_STATUS_PARTIAL';
    else if (uncertain || verdict === Verdict.UNKNOWN) status = 'RESULT_STATUS_UNCERTAIN';
    else status = 'RESULT_STATUS_SUCCESS';
    const subjects = this.subjects;
    const known = Object.values(subjects).filter((v) => v !== Verdict.UNKNOWN).length;
    const count = Object.keys(subjects).length;
    let errorReason = '';
    if (this.unansweredFailures.length) {
      const codes = [...new Set(this.unansweredFailures.map((f) => f.code))];
      errorReason = codes.map((code) => `${code}: ${[...new Set(this.unansweredFailures
        .filter((f) => f.code === code).map((f) => f.detail))].join(', ')}`).join('; ');
    }
    return {
      status,
      result: { verdict, subjects, ...(extra || {}) },
      evidence: this.evidenceList,
      statements: this.statements,
      confidence: status === 'RESULT_STATUS_SUCCESS' ? 1.0 : (count ? known / count : 0.0),
      error_reason: errorReason,
      requested_actions: [],
    };
  }
}

/** A FAILED result: no usable analysis, error_reason says why; `result` an UNKNOWN verdict with no subjects. */
function failedResult(failure, say) {
  return {
    status: 'RESULT_STATUS_FAILED',
    result: { ...failure.payload, verdict: Verdict.UNKNOWN, subjects: {} },
    evidence: [],
    statements: [{
      kind: KINDS.UNCERTAINTY, code: failure.code, text: say('The analysis could not be done: {code}', { code: failure.code }),
      subject: '', evidence_indexes: [],
    }],
    confidence: 0,
    error_reason: failure.errorReason,
    requested_actions: [],
  };
}

/** Runs rules; an AgentFailed becomes a FAILED result. */
async function runGuarded(rules, say) {
  try {
    return await rules();
  } catch (err) {
    if (err instanceof AgentFailed) return failedResult(err, say);
    throw err;
  }
}

// --- handoffs (PRD §20): asked of the supervisor, never done by the agent -------------------------

/** A handoff request: the supervisor decides whether it runs and projects `input` for the target. */
function handoff(actionId, targetAgentId, { purpose, requiredCapabilities, input, reason }) {
  return {
    action: 'handoff', target_agent_id: targetAgentId, reason, action_id: actionId,
    parameters: { purpose, required_capabilities: [...requiredCapabilities], input: { ...input } },
  };
}

/** A WAITING result: not an answer (an UNKNOWN verdict with no subjects) until the handoffs' outcomes come. */
function waiting(...requests) {
  return {
    status: 'RESULT_STATUS_WAITING', result: { verdict: Verdict.UNKNOWN, subjects: {} }, evidence: [], statements: [],
    confidence: 0, error_reason: '', requested_actions: requests,
  };
}

/** Why a handoff brought no usable result ('' when it did); codes only, never source text. */
function handoffFailure(outcome) {
  if (!outcome) return 'HANDOFF_OUTCOME_MISSING';
  if (outcome.state === 'HANDOFF_STATE_COMPLETED') {
    const result = outcome.result || {};
    if (result.status === 'RESULT_STATUS_FAILED') {
      return `HANDOFF_RESULT_FAILED: ${String(result.error_reason || '').split(':', 1)[0]}`;
    }
    return '';
  }
  const state = String(outcome.state || 'HANDOFF_STATE_UNSPECIFIED').replace(/^HANDOFF_STATE_/, '');
  return `HANDOFF_${state}: ${String(outcome.reason || '').split(':', 1)[0]}`;
}

module.exports = {
  Verdict,
  KINDS,
  CapabilityError,
  TaskInputInvalid,
  AgentFailed,
  CallFailure,
  classify,
  callOrFailure,
  callsOrFailures,
  token,
  isId,
  isoDate,
  addDays,
  parallelMap,
  canonical,
  requireStr,
  strList,
  derivedVerdict,
  ResultBuilder,
  failedResult,
  runGuarded,
  handoff,
  waiting,
  handoffFailure,
};
