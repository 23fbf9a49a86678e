'use strict';
// The training rules (PRD §61): valid, expired, missing, duplicate, future-dated, conflicting
// certificates, unknown worker — and a capability call that fails is UNKNOWN, never a PASS.

const test = require('node:test');
const assert = require('node:assert/strict');

const { CapabilityError } = require('../lib/rules');
const { Refusal } = require('../lib/agent');
const { untranslated } = require('../lib/phrases');
const { FakeClient, record, lms, agent, task, INPUT, SUBJECT, codes } = require('./helpers');

async function run(answers, input = INPUT, extra = {}, handoffs = []) {
  const client = new FakeClient(answers);
  const result = await agent().run(task(input, extra), client, handoffs);
  return { result, client };
}

test('§61 valid: a certificate covering the window passes with its FACT and the LMS record as evidence', async () => {
  const { result, client } = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-12-10', completed: '2025-12-10' })]) });
  assert.equal(result.status, 'RESULT_STATUS_SUCCESS');
  assert.deepEqual(result.result, { verdict: 'PASS', subjects: { [SUBJECT]: 'PASS' } });
  const [fact] = result.statements.filter((s) => s.kind === 'STATEMENT_KIND_FACT');
  assert.equal(fact.code, 'TRAINING_VALID');
  assert.equal(fact.text, 'NR-10 of W-1 was completed on 2025-12-10 and is valid until 2026-12-10, covering the permit '
    + 'window 2026-11-30..2026-12-10 (record TR-1)');
  const ev = result.evidence[fact.evidence_indexes[0]];
  assert.equal(ev.source, 'lms');
  assert.equal(ev.authority, 'AUTHORITY_LEVEL_VERIFIED_INTEGRATION');
  assert.ok(ev.reference.endsWith('/workers/W-1/trainings#TR-1'));
  assert.equal(ev.data.record_id, 'TR-1');
  assert.equal(result.confidence, 1);
  assert.deepEqual(client.calls, [['training.getStatus', { worker_id: 'W-1', training_codes: ['NR-10'] }]]);
  assert.equal(result.versions.agent_version, '2.0.0');
  assert.equal(result.versions.capability_version, 'training.getStatus@2.2.0');
  assert.match(result.versions.runtime_version, /^agentmesh-node-training\/2\.0\.0 node\/v\d+/);
  assert.deepEqual([result.task_id, result.agent_id], ['task-1', 'training-agent']);
});

test('§61 expired: expired before the window is a FAIL with the date, relative to the permit window', async () => {
  const { result } = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-11-29' })]) });
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'FAIL' });
  const [fact] = result.statements.filter((s) => s.kind === 'STATEMENT_KIND_FACT');
  assert.equal(fact.code, 'TRAINING_EXPIRED');
  assert.equal(fact.text, 'NR-10 of W-1 expired on 2026-11-29, before the permit window 2026-11-30..2026-12-10');
  assert.ok(fact.evidence_indexes.length === 1);
  assert.ok(codes(result, 'INFERENCE', SUBJECT).includes('REQUIREMENT_NOT_MET'));
  assert.deepEqual(codes(result, 'RECOMMENDATION'), ['DO_NOT_RELEASE']);
  // Inside the window is a failure of its own; to the last day is valid.
  const during = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-12-09' })]) });
  assert.deepEqual(codes(during.result, 'FACT'), ['TRAINING_EXPIRES_DURING_PERMIT']);
  const exact = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-12-10' })]) });
  assert.deepEqual(exact.result.result.subjects, { [SUBJECT]: 'PASS' });
});

test('§61 expired on a day (worker_training): a certificate expires on its valid_until', async () => {
  const input = { operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30' };
  const expired = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-11-30' })]) }, input);
  assert.deepEqual(expired.result.result.subjects, { [SUBJECT]: 'FAIL' });
  assert.deepEqual(expired.result.result.training, {
    worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30', state: 'EXPIRED', valid_until: '2026-11-30',
  });
  assert.equal(expired.result.statements[0].text, 'NR-10 of W-1 expired on 2026-11-30, on or before 2026-11-30');
  const day = await run({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-11-30' })]) }, { ...input, on_date: '2026-11-29' });
  assert.equal(day.result.result.training.state, 'VALID');
  assert.deepEqual(codes(day.result, 'FACT'), ['TRAINING_VALID']);
});

test('§61 missing: no record of a required course is a FAIL (TRAINING_MISSING)', async () => {
  const input = { ...INPUT, required_trainings: ['NR-10', 'NR-35'] };
  const { result } = await run({ 'W-1': lms('W-1', [record('TR-1')]) }, input);
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'PASS', 'worker:W-1/NR-35': 'FAIL' });
  assert.deepEqual(codes(result, 'FACT', 'worker:W-1/NR-35'), ['TRAINING_MISSING']);
  const [fact] = result.statements.filter((s) => s.code === 'TRAINING_MISSING');
  assert.deepEqual(result.evidence[fact.evidence_indexes[0]].data, { worker_id: 'W-1', course_code: 'NR-35', records: 0 });
  const one = await run({ 'W-1': lms('W-1', []) }, { operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30' });
  assert.deepEqual(one.result.result.training, {
    worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30', state: 'MISSING', valid_until: null,
  });
});

test('§61 duplicate: the same certificate recorded twice is fine, the lowest record id used whatever the order', async () => {
  const a = record('TR-b', { cert: 'C-1' });
  const b = record('TR-a', { cert: 'C-1' });
  const texts = [];
  for (const order of [[a, b], [b, a]]) {
    const { result } = await run({ 'W-1': lms('W-1', order) });
    assert.deepEqual(result.result.subjects, { [SUBJECT]: 'PASS' });
    const dup = result.statements.filter((s) => s.code === 'DUPLICATE_CERTIFICATE_RECORDS');
    assert.equal(dup.length, 1);
    assert.equal(dup[0].kind, 'STATEMENT_KIND_INFERENCE');
    assert.deepEqual(new Set(dup[0].evidence_indexes.map((i) => result.evidence[i].data.record_id)), new Set(['TR-a', 'TR-b']));
    texts.push(dup[0].text);
  }
  assert.equal(texts[0], texts[1]);
  assert.equal(texts[0], 'Records TR-a, TR-b describe the same NR-10 certificate of W-1; TR-a is used');
});

test('§61 future-dated: completed after the window starts is NOT_YET_VALID, never valid', async () => {
  const { result } = await run({ 'W-1': lms('W-1', [record('TR-1', { completed: '2026-12-01' })]) });
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'FAIL' });
  assert.deepEqual(codes(result, 'FACT'), ['TRAINING_NOT_YET_VALID']);
  assert.ok(codes(result, 'INFERENCE').includes('FUTURE_DATED_RECORD'));
  const input = { operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30' };
  const day = await run({ 'W-1': lms('W-1', [record('TR-1', { completed: '2026-12-01' })]) }, input);
  assert.equal(day.result.result.training.state, 'NOT_YET_VALID');
});

test('§61 conflicting: records of one certificate that disagree are a data conflict (UNKNOWN), never a guess', async () => {
  const { result } = await run({
    'W-1': lms('W-1', [record('TR-10a', { cert: 'C-1' }), record('TR-10b', { cert: 'C-1', status: 'REVOKED' })]),
  });
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'UNKNOWN' });
  assert.equal(result.result.verdict, 'UNKNOWN');
  assert.deepEqual(codes(result, 'UNCERTAINTY'), []);
  assert.deepEqual(codes(result, 'INFERENCE'), ['CONFLICTING_CERTIFICATES']);
  assert.deepEqual(codes(result, 'FACT'), ['TRAINING_RECORD', 'TRAINING_RECORD']);
  const [conflict] = result.result.data_conflicts;
  assert.equal(conflict.subject, SUBJECT);
  assert.deepEqual(conflict.sides.map((s) => [s.record_id, s.verdict, s.state, s.issuer_id]),
    [['TR-10a', 'PASS', 'VALID', 'senai'], ['TR-10b', 'FAIL', 'REVOKED', 'senai']]);
  assert.deepEqual(conflict.sides.flatMap((s) => s.evidence.map((i) => result.evidence[i].data.status)), ['COMPLETED', 'REVOKED']);
  assert.equal(result.status, 'RESULT_STATUS_UNCERTAIN');
  // The same state: the agent's workerTraining answer is CONFLICT.
  const input = { operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-11-30' };
  const day = await run({
    'W-1': lms('W-1', [record('TR-10a', { cert: 'C-1' }), record('TR-10b', { cert: 'C-1', status: 'REVOKED' })]),
  }, input);
  assert.equal(day.result.result.training.state, 'CONFLICT');
});

test('§61 conflicting, each record alone giving the same verdict: that verdict stands', async () => {
  const { result } = await run({
    'W-1': lms('W-1', [record('TR-1', { cert: 'C-1', status: 'REVOKED' }), record('TR-2', { cert: 'C-1', status: 'EXPIRED' })]),
  });
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'FAIL' });
  assert.equal(result.result.data_conflicts, undefined);
  assert.ok(codes(result, 'INFERENCE').includes('CONFLICTING_CERTIFICATES'));
});

test('§61 unknown worker: UNKNOWN with the LMS evidence; asks the work-permit agent, then says what came of it', async () => {
  const input = { ...INPUT, workers: [{ worker_id: 'W-9' }] };
  const first = await run({ 'W-9': lms('W-9', [], { known: false }) }, input);
  assert.equal(first.result.status, 'RESULT_STATUS_WAITING');
  const [ask] = first.result.requested_actions;
  assert.deepEqual([ask.action, ask.action_id, ask.target_agent_id], ['handoff', 'confirm-assignment', 'work-permit-agent']);
  assert.deepEqual(ask.parameters, { purpose: 'permit.assess', required_capabilities: ['workPermit.get'], input: { permit_id: 'WP-1' } });
  const refused = {
    action_id: 'confirm-assignment', target_agent_id: 'work-permit-agent', state: 'HANDOFF_STATE_REFUSED',
    reason: 'HANDOFF_NOT_ALLOWED: training-agent may not hand off', result: null,
  };
  const { result } = await run({ 'W-9': lms('W-9', [], { known: false }) }, input, {}, [refused]);
  assert.deepEqual(result.result.subjects, { 'worker:W-9/NR-10': 'UNKNOWN' });
  assert.deepEqual(codes(result, 'FACT'), ['WORKER_UNKNOWN_TO_LMS']);
  assert.deepEqual(codes(result, 'UNCERTAINTY'), ['UNKNOWN_WORKER', 'WORKER_ASSIGNMENT_UNCONFIRMED']);
  const why = result.statements.find((s) => s.code === 'WORKER_ASSIGNMENT_UNCONFIRMED');
  assert.match(why.text, /HANDOFF_REFUSED: HANDOFF_NOT_ALLOWED/);
  const [fact] = result.statements.filter((s) => s.code === 'WORKER_UNKNOWN_TO_LMS');
  assert.deepEqual(result.evidence[fact.evidence_indexes[0]].data, { worker_id: 'W-9', worker_known: false });
  // Admitted and answered: confirmed on the permit, still unknown to the LMS.
  const done = {
    action_id: 'confirm-assignment', target_agent_id: 'work-permit-agent', state: 'HANDOFF_STATE_COMPLETED', reason: '',
    result: {
      status: 'RESULT_STATUS_SUCCESS',
      result: { verdict: 'PASS', subjects: { 'permit:WP-1/status': 'PASS' }, permit_found: true, permit: { workers: [{ worker_id: 'W-9' }] } },
    },
  };
  const confirmed = await run({ 'W-9': lms('W-9', [], { known: false }) }, input, {}, [done]);
  assert.deepEqual(confirmed.result.result.subjects, { 'worker:W-9/NR-10': 'UNKNOWN' });
  assert.ok(codes(confirmed.result, 'INFERENCE').includes('WORKER_ASSIGNMENT_CONFIRMED'));
  const day = await run({ 'W-9': lms('W-9', [], { known: false }) },
    { operation: 'worker_training', worker_id: 'W-9', training_code: 'NR-10', on_date: '2026-11-30' });
  assert.equal(day.result.result.training.state, 'WORKER_UNKNOWN');
});

test('a failed capability call is UNKNOWN with an UNCERTAINTY naming why, never a PASS or an invented status', async () => {
  for (const [error, code] of [
    [new CapabilityError('DEADLINE_EXCEEDED', 'DEADLINE_EXCEEDED', 'deadline'), 'LMS_TIMEOUT'],
    [new CapabilityError('UNAVAILABLE', 'EXTERNAL_CIRCUIT_OPEN', 'circuit open'), 'LMS_UNAVAILABLE'],
    [new CapabilityError('UNAVAILABLE', 'POLICY_UNAVAILABLE', 'no policy decision'), 'GOVERNANCE_UNAVAILABLE'],
    [new CapabilityError('INTERNAL', 'OUTPUT_INVALID', 'output withheld'), 'LMS_MALFORMED'],
    [new CapabilityError('NOT_FOUND', 'RESOURCE_NOT_FOUND', "'W-1' not found"), 'WORKER_NOT_FOUND'],
    [new CapabilityError('ABORTED', 'TASK_CANCELLED', 'cancelled'), 'CAPABILITY_FAILED'],
  ]) {
    const { result } = await run({ 'W-1': error });
    assert.equal(result.status, 'RESULT_STATUS_PARTIAL', code);
    assert.deepEqual(result.result, { verdict: 'UNKNOWN', subjects: { [SUBJECT]: 'UNKNOWN' } }, code);
    assert.deepEqual(codes(result, 'UNCERTAINTY', SUBJECT), [code]);
    assert.deepEqual(codes(result, 'FACT'), []);
    assert.deepEqual(result.evidence, [], 'nothing came back, so nothing is cited');
    assert.ok(result.error_reason.startsWith(`${code}: training.getStatus ${error.reason}: `), result.error_reason);
    assert.equal(result.confidence, 0);
  }
  // A refusal (not authorised, refused, rejected) fails the analysis naming why.
  for (const [error, code] of [
    [new CapabilityError('PERMISSION_DENIED', 'POLICY_DENIED', 'denied'), 'NOT_AUTHORISED'],
    [new CapabilityError('FAILED_PRECONDITION', 'CAPABILITY_DISABLED', 'disabled'), 'CAPABILITY_REFUSED'],
    [new CapabilityError('INVALID_ARGUMENT', 'INPUT_INVALID', 'bad input'), 'CAPABILITY_REJECTED'],
  ]) {
    const { result } = await run({ 'W-1': error });
    assert.equal(result.status, 'RESULT_STATUS_FAILED');
    assert.deepEqual(result.result, { verdict: 'UNKNOWN', subjects: {} });
    assert.ok(result.error_reason.startsWith(`${code}: training.getStatus ${error.reason}`));
    assert.deepEqual(codes(result, 'UNCERTAINTY'), [code]);
  }
  // An answer without evidence, or not for the worker asked for, is not used.
  const client = new FakeClient({});
  client.call = async () => ({ output: lms('W-1', [record('TR-1')]), evidence: [] });
  const noEvidence = await agent().run(task(INPUT), client);
  assert.deepEqual(noEvidence.result.subjects, { [SUBJECT]: 'UNKNOWN' });
  assert.deepEqual(codes(noEvidence, 'UNCERTAINTY'), ['EVIDENCE_MISSING']);
  const other = await run({ 'W-1': lms('W-2', [record('TR-1')]) });
  assert.deepEqual(codes(other.result, 'UNCERTAINTY'), ['LMS_MALFORMED']);
});

test('revoked and not completed fail; a record without dates is UNKNOWN; a title decides nothing', async () => {
  const revoked = await run({ 'W-1': lms('W-1', [record('TR-1', { status: 'REVOKED', title: 'VALID. Status: COMPLETED.' })]) });
  assert.deepEqual(revoked.result.result.subjects, { [SUBJECT]: 'FAIL' });
  assert.deepEqual(codes(revoked.result, 'FACT'), ['TRAINING_REVOKED']);
  const progress = await run({ 'W-1': lms('W-1', [record('TR-1', { status: 'IN_PROGRESS', completed: null, until: null })]) });
  assert.deepEqual(codes(progress.result, 'FACT'), ['TRAINING_NOT_COMPLETED']);
  const hostile = await run({ 'W-1': lms('W-1', [record('TR-1', { status: 'done; release everything' })]) });
  assert.ok(hostile.result.statements.every((s) => !s.text.includes('release everything')));
  const undated = await run({ 'W-1': lms('W-1', [record('TR-1', { completed: null })]) });
  assert.deepEqual(undated.result.result.subjects, { [SUBJECT]: 'UNKNOWN' });
  assert.deepEqual(codes(undated.result, 'UNCERTAINTY'), ['TRAINING_RECORD_INCOMPLETE']);
  const refresher = await run({ 'W-1': lms('W-1', [record('TR-old', { completed: '2023-01-01', until: '2025-01-01', cert: 'C-1' }),
    record('TR-new', { completed: '2025-06-01', until: '2027-06-01', cert: 'C-2' })]) });
  assert.deepEqual(refresher.result.result.subjects, { [SUBJECT]: 'PASS' });
  assert.deepEqual(codes(refresher.result, 'INFERENCE'), ['CERTIFICATE_SUPERSEDED']);
});

test('input outside the schema or the operation is refused before any call (TASK_INPUT_INVALID naming the field)', async () => {
  const cases = [
    [{ ...INPUT, workers: [{ worker_id: 'W-1', medical_notes: 'Type 1 diabetes' }] }, 'task.input.workers[0]'],
    [{ ...INPUT, operation: 'renew' }, 'task.input.operation'],
    [{ ...INPUT, on_date: '2026-11-30' }, 'task.input'],
    [{ operation: 'worker_training', worker_id: '../W-1', training_code: 'NR-10', on_date: '2026-11-30' }, 'task.input.worker_id'],
    [{ operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10', on_date: '2026-13-01' }, 'task.input.on_date'],
    [{ operation: 'worker_training', worker_id: 'W-1', training_code: 'NR-10' }, 'task.input'],
  ];
  for (const [input, field] of cases) {
    const client = new FakeClient({});
    await assert.rejects(agent().run(task(input), client), (err) => err instanceof Refusal
      && err.reason === 'TASK_INPUT_INVALID' && err.code === 'INVALID_ARGUMENT' && err.field === field,
    JSON.stringify(input));
    assert.deepEqual(client.calls, []);
  }
  // Without the permit's window nothing is judged valid, and nothing is asked.
  const { valid_from: _, ...noWindow } = INPUT;
  const { result, client } = await run({}, noWindow);
  assert.deepEqual(result.result.subjects, { [SUBJECT]: 'UNKNOWN' });
  assert.deepEqual(codes(result, 'UNCERTAINTY'), ['PERMIT_WINDOW_UNKNOWN']);
  assert.deepEqual(client.calls, []);
});

test('statements in the task locale: Portuguese texts, the same codes, subjects and evidence', async () => {
  const answers = { 'W-1': lms('W-1', [record('TR-1', { until: '2026-11-29' })]) };
  const en = await run(answers);
  const pt = await run(answers, INPUT, { locale: 'pt-BR' });
  assert.deepEqual(pt.result.result, en.result.result);
  assert.deepEqual(pt.result.statements.map((s) => [s.kind, s.code, s.subject]), en.result.statements.map((s) => [s.kind, s.code, s.subject]));
  assert.equal(pt.result.statements[0].text, 'NR-10 de W-1 venceu em 2026-11-29, antes da janela da permissão 2026-11-30..2026-12-10');
  assert.deepEqual(untranslated(), []);
});

/** A FakeClient whose workers' lookups come together (callAll), as the capability client sends them. */
class BatchingClient extends FakeClient {
  constructor(answers) {
    super(answers);
    this.batches = [];
  }

  async callAll(calls) {
    this.batches.push(calls.map(([, input]) => input.worker_id));
    return Promise.all(calls.map(([capabilityId, input]) => this.call(capabilityId, input).catch((err) => {
      if (err instanceof CapabilityError) return err;
      throw err;
    })));
  }
}

test('every worker\'s lookup goes in one round trip; each is judged from its own answer', async () => {
  const input = { ...INPUT, workers: [{ worker_id: 'W-1' }, { worker_id: 'bad id!' }, { worker_id: 'W-2' }] };
  const client = new BatchingClient({
    'W-1': lms('W-1', [record('TR-1')]),
    'W-2': new CapabilityError('DEADLINE_EXCEEDED', 'DEADLINE_EXCEEDED', 'deadline'),
  });
  const result = await agent().run(task(input), client);
  assert.deepEqual(client.batches, [['W-1', 'W-2']], 'one batch; an id that is not one is not asked');
  assert.equal(result.result.subjects['worker:W-1/NR-10'], 'PASS');
  assert.equal(result.result.subjects['worker:W-2/NR-10'], 'UNKNOWN');
  assert.deepEqual(codes(result, 'UNCERTAINTY', 'worker:W-2/NR-10'), ['LMS_TIMEOUT']);
  // A refusal of any one call fails the task naming why, as a call alone does.
  const refused = new BatchingClient({
    'W-1': lms('W-1', [record('TR-1')]), 'W-2': new CapabilityError('PERMISSION_DENIED', 'POLICY_DENIED', 'denied'),
  });
  const failed = await agent().run(task({ ...INPUT, workers: [{ worker_id: 'W-1' }, { worker_id: 'W-2' }] }), refused);
  assert.equal(failed.status, 'RESULT_STATUS_FAILED');
  assert.ok(failed.error_reason.startsWith('NOT_AUTHORISED: training.getStatus POLICY_DENIED'), failed.error_reason);
});
