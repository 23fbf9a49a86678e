'use strict';
// Fakes for the rules' tests: LMS answers shaped as training.getStatus returns them, and a capability
// client that answers from a table and remembers each call.

const { CapabilityError } = require('../lib/rules');
const { TrainingAgent, loadManifest } = require('../lib/agent');

const REF = (workerId) => ({
  source: 'lms',
  reference: `http://lms.test/v1/tenants/acme/workers/${workerId}/trainings`,
  authority: 'AUTHORITY_LEVEL_VERIFIED_INTEGRATION',
  fetched_at: { seconds: '1796029200', nanos: 0 },
  capability: 'training.getStatus@2.2.0',
  data: null,
});

function record(recordId, {
  code = 'NR-10', status = 'COMPLETED', completed = '2025-01-10', until = '2027-01-10', cert = null,
  title = 'NR-10 Basic electrical safety', issuer = 'SENAI', issuerId = 'senai',
} = {}) {
  return {
    record_id: recordId, course_code: code, course_title: title, status, completed_on: completed, valid_until: until,
    certificate_id: cert, issuer, issuer_id: issuerId,
  };
}

function lms(workerId, records = [], { known = true } = {}) {
  return { worker_id: workerId, worker_known: known, trainings: records };
}

/** A capability client answering training.getStatus per worker id: an LMS output or a CapabilityError. */
class FakeClient {
  constructor(answers = {}) {
    this.answers = answers;
    this.calls = [];
  }

  async call(capabilityId, input) {
    this.calls.push([capabilityId, input]);
    const answer = this.answers[input.worker_id];
    if (answer === undefined) throw new CapabilityError('NOT_FOUND', 'RESOURCE_NOT_FOUND', `'${input.worker_id}' not found`);
    if (answer instanceof CapabilityError) throw answer;
    return { output: answer, evidence: [REF(input.worker_id)] };
  }
}

function agent() {
  return new TrainingAgent(loadManifest(), { decodeGrant: () => ({}), clock: () => new Date('2026-11-30T09:00:00Z') });
}

/** A task for the agent with `input`. */
function task(input, extra = {}) {
  return { task_id: 'task-1', target_agent_id: 'training-agent', tenant_id: 'acme', input, locale: '', ...extra };
}

const INPUT = Object.freeze({
  permit_id: 'WP-1', valid_from: '2026-11-30', valid_until: '2026-12-10', required_trainings: ['NR-10'],
  workers: [{ worker_id: 'W-1' }],
});
const SUBJECT = 'worker:W-1/NR-10';

function codes(result, kind, subject) {
  return result.statements.filter((s) => s.kind === `STATEMENT_KIND_${kind}` && (subject === undefined || s.subject === subject))
    .map((s) => s.code);
}

module.exports = { FakeClient, record, lms, agent, task, INPUT, SUBJECT, codes, REF };
