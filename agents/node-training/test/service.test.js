'use strict';
// The pieces around the rules: what RunTask refuses, the caller's identity, the principal and trace
// sent with each capability call, results encoded as the contract's messages, and the command line.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const protobuf = require('protobufjs');

const { Refusal, TrainingAgent, loadManifest } = require('../lib/agent');
const {
  principalFor, traceMetadata, toProtoResult, decodeGrant, loadContracts, mesh, CapabilityClient,
} = require('../lib/service');
const { subjectAltNames, parseSpiffeId, callerAllowed, SUPERVISOR } = require('../lib/identity');
const { FakeClient, record, lms, task, INPUT } = require('./helpers');
const { CapabilityError } = require('../lib/rules');

const SERVER = path.join(__dirname, '..', 'server.js');

function grantBytes(fields) {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(mesh.PROTO_DIR, target));
  root.loadSync('agentmesh/v1/common.proto', { keepCase: true });
  const TaskGrant = root.lookupType('agentmesh.v1.TaskGrant');
  return Buffer.from(TaskGrant.encode(TaskGrant.create(fields)).finish());
}

const AGENT = new TrainingAgent(loadManifest(), { decodeGrant });
const GRANT = {
  grant: grantBytes({ task_id: 'task-1', tenant_id: 'acme', audience: 'spiffe://agentmesh.local/agent/training-agent',
    execution_id: 'exe-1', capabilities: ['training.getStatus'] }),
  signature: Buffer.from('sig'), key_id: 'k1', record_signature: Buffer.from('rsig'),
};

function refusal(fn, reason, code, field) {
  assert.throws(fn, (err) => err instanceof Refusal && err.reason === reason && err.code === code && err.field === field);
}

test('RunTask admits a task only for this agent, with its own grant, for this task and tenant, input in its schema', () => {
  const grant = AGENT.admit(task(INPUT), GRANT);
  assert.equal(grant.execution_id, 'exe-1');
  refusal(() => AGENT.admit(task(INPUT, { target_agent_id: 'risk-agent' }), GRANT), 'TASK_AGENT_MISMATCH', 'INVALID_ARGUMENT', 'task.target_agent_id');
  refusal(() => AGENT.admit(task(INPUT, { task_id: '' }), GRANT), 'MISSING_FIELD', 'INVALID_ARGUMENT', 'task.task_id');
  refusal(() => AGENT.admit(task(INPUT), { grant: Buffer.alloc(0) }), 'GRANT_MISSING', 'INVALID_ARGUMENT', 'grant');
  refusal(() => AGENT.admit(task(INPUT), { grant: Buffer.from([0xff, 0xff, 0xff]) }), 'GRANT_MALFORMED', 'INVALID_ARGUMENT', 'grant');
  const other = { ...GRANT, grant: grantBytes({ task_id: 'task-1', tenant_id: 'acme', audience: 'spiffe://agentmesh.local/agent/risk-agent' }) };
  refusal(() => AGENT.admit(task(INPUT), other), 'GRANT_AUDIENCE_MISMATCH', 'PERMISSION_DENIED', 'grant');
  refusal(() => AGENT.admit(task(INPUT, { task_id: 'task-2' }), GRANT), 'GRANT_TASK_MISMATCH', 'INVALID_ARGUMENT', 'grant');
  refusal(() => AGENT.admit(task(INPUT, { tenant_id: 'globex' }), GRANT), 'GRANT_TENANT_MISMATCH', 'INVALID_ARGUMENT', 'grant');
  refusal(() => AGENT.admit(task({ ...INPUT, extra: 1 }), GRANT), 'TASK_INPUT_INVALID', 'INVALID_ARGUMENT', 'task.input');
});

test('the caller is its certificate\'s one SPIFFE URI SAN; only the supervisor may call SpecialistService', () => {
  assert.deepEqual(subjectAltNames('URI:spiffe://agentmesh.local/svc/supervisor, DNS:supervisor.svc.agentmesh.local'),
    [['URI', 'spiffe://agentmesh.local/svc/supervisor'], ['DNS', 'supervisor.svc.agentmesh.local']]);
  assert.deepEqual(subjectAltNames('URI:"spiffe://a, b"'), [['URI', 'spiffe://a, b']]);
  assert.equal(subjectAltNames('nonsense'), null);
  assert.deepEqual(parseSpiffeId('spiffe://agentmesh.local/agent/training-agent'), { kind: 'agent', name: 'training-agent' });
  for (const bad of ['spiffe://other.domain/svc/supervisor', 'spiffe://agentmesh.local/svc/a/b', 'spiffe://agentmesh.local/user/x']) {
    assert.equal(parseSpiffeId(bad), null, bad);
  }
  assert.ok(callerAllowed('/agentmesh.v1.SpecialistService/RunTask', SUPERVISOR));
  assert.ok(callerAllowed('/agentmesh.v1.SpecialistService/DescribeAgent', SUPERVISOR));
  for (const caller of ['spiffe://agentmesh.local/client/operator', 'spiffe://agentmesh.local/agent/risk-agent',
    'spiffe://agentmesh.local/svc/capability']) {
    assert.ok(!callerAllowed('/agentmesh.v1.SpecialistService/RunTask', caller), caller);
    assert.ok(callerAllowed('/grpc.health.v1.Health/Check', caller), caller);
  }
  assert.ok(!callerAllowed('/agentmesh.v1.CapabilityService/InvokeCapability', SUPERVISOR), 'deny by default');
});

test('the principal names this agent and carries the task grant; the trace goes on in traceparent and baggage', () => {
  const received = { agent_id: 'training-agent', agent_version: '1.0.0', execution_id: 'exe-1',
    delegation_chain: ['user:acme/alice', 'svc:supervisor', 'agent:training-agent'], grants: [GRANT] };
  const p = principalFor(received, GRANT, { agentId: 'training-agent', agentVersion: '2.0.0', executionId: 'exe-1' });
  assert.equal(p.agent_version, '2.0.0');
  assert.deepEqual(p.delegation_chain, ['user:acme/alice', 'svc:supervisor', 'agent:training-agent']);
  assert.equal(p.grants.length, 1, 'the grant already in the chain is not added twice');
  const short = principalFor({ ...received, delegation_chain: ['user:acme/alice', 'svc:supervisor'], grants: [] }, GRANT,
    { agentId: 'training-agent', agentVersion: '2.0.0', executionId: 'exe-1' });
  assert.deepEqual(short.delegation_chain.at(-1), 'agent:training-agent');
  assert.equal(short.grants.length, 1);
  const empty = principalFor({}, GRANT, { agentId: 'training-agent', agentVersion: '2.0.0', executionId: 'exe-1' });
  assert.deepEqual(empty.delegation_chain, [], 'an empty chain stays empty: the capability service derives it from the grant');

  const incoming = new mesh.grpc.Metadata();
  incoming.set('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
  const md = traceMetadata(incoming, { execution_id: 'exe-1', correlation_id: 'corr:1/2' });
  const [tp] = md.get('traceparent');
  assert.match(tp, /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
  assert.notEqual(tp, '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'a span id of its own');
  assert.deepEqual(md.get('baggage'), ['agentmesh.execution_id=exe-1,agentmesh.correlation_id=corr%3A1%2F2']);
  const fromTask = traceMetadata(new mesh.grpc.Metadata(), { trace_id: '4bf92f3577b34da6a3ce929d0e0e4736', execution_id: 'exe-1' });
  assert.match(fromTask.get('traceparent')[0], /^00-4bf92f3577b34da6a3ce929d0e0e4736-/);
});

test('a capability call sends the grant unchanged, the principal and the trace; a refusal comes back typed', async () => {
  const sent = [];
  const stub = {
    InvokeCapability(request, metadata, options, callback) {
      sent.push({ request, metadata, options });
      const call = new (require('node:events').EventEmitter)();
      setImmediate(() => {
        if (request.capability_id === 'workPermit.get') {
          callback(mesh.meshError('PERMISSION_DENIED', 'the grant does not list workPermit.get', 'GRANT_CAPABILITY_NOT_LISTED',
            { field: 'capability_id' }));
        } else {
          callback(null, {
            output: mesh.jsonToStruct(lms('W-1', [record('TR-1')])), evidence: [{ source: 'lms', reference: 'r', capability: 'training.getStatus@2.2.0' }],
            decision: { policy_version: 'policies@abc' }, knowledge_version: '',
          });
        }
      });
      return call;
    },
  };
  let active = true;
  const client = new CapabilityClient(stub, {
    grant: GRANT, principal: { agent_id: 'training-agent' }, trace: { execution_id: 'exe-1' },
    metadata: traceMetadata(null, { execution_id: 'exe-1' }), deadline: Date.now() + 10000, isActive: () => active,
  });
  const { output, evidence } = await client.call('training.getStatus', { worker_id: 'W-1', training_codes: ['NR-10'] });
  assert.equal(output.trainings[0].record_id, 'TR-1');
  assert.equal(evidence[0].capability, 'training.getStatus@2.2.0');
  assert.equal(sent[0].request.grant, GRANT, 'the grant as received');
  assert.deepEqual(mesh.structToJson(sent[0].request.input), { worker_id: 'W-1', training_codes: ['NR-10'] });
  assert.deepEqual(sent[0].metadata.get('baggage'), ['agentmesh.execution_id=exe-1']);
  assert.ok(sent[0].options.deadline <= Date.now() + 10000 - 250 + 5, 'less a reserve to answer in');
  assert.deepEqual([...client.policyVersions], ['policies@abc']);
  await assert.rejects(client.call('workPermit.get', { permit_id: 'WP-1' }),
    (err) => err.code === 'PERMISSION_DENIED' && err.reason === 'GRANT_CAPABILITY_NOT_LISTED');
  active = false;
  await assert.rejects(client.call('training.getStatus', { worker_id: 'W-1' }), (err) => err.reason === 'TASK_CANCELLED');
  assert.equal(sent.length, 2, 'no call once the task has ended');
  assert.ok(client.stopped);
});

/** A google.rpc.Status as a batch result's `error` decodes: code, message, an ErrorInfo among its details. */
function statusOf(code, message, reason, field) {
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(mesh.PROTO_DIR, target));
  root.loadSync('google/rpc/error_details.proto', { keepCase: true });
  const ErrorInfo = root.lookupType('google.rpc.ErrorInfo');
  const info = ErrorInfo.encode(ErrorInfo.create({ reason, domain: 'agentmesh.local', metadata: { field } })).finish();
  return { code: mesh.grpc.status[code], message, details: [{ type_url: 'type.googleapis.com/google.rpc.ErrorInfo', value: Buffer.from(info) }] };
}

function batchStub(answer) {
  const sent = [];
  const stub = {
    InvokeCapabilities(request, metadata, options, callback) {
      sent.push({ method: 'InvokeCapabilities', request, metadata, options });
      setImmediate(() => answer(request, callback));
      return new (require('node:events').EventEmitter)();
    },
    InvokeCapability(request, metadata, options, callback) {
      sent.push({ method: 'InvokeCapability', request, metadata, options });
      setImmediate(() => callback(null, { output: mesh.jsonToStruct(lms(request.input.fields.worker_id.stringValue)), evidence: [] }));
      return new (require('node:events').EventEmitter)();
    },
  };
  return { stub, sent };
}

function batchClient(stub, { active = () => true, deadline = Date.now() + 10000 } = {}) {
  return new CapabilityClient(stub, {
    grant: GRANT, principal: { agent_id: 'training-agent' }, trace: { execution_id: 'exe-1' },
    metadata: traceMetadata(null, { execution_id: 'exe-1' }), deadline, isActive: active,
  });
}

const lookups = (...workers) => workers.map((w) => ['training.getStatus', { worker_id: w, training_codes: ['NR-10'] }]);

test('reads sent together go in one InvokeCapabilities; each call gets its own answer or its own error', async () => {
  const { stub, sent } = batchStub((request, callback) => callback(null, {
    results: request.calls.map((c) => (mesh.structToJson(c.input).worker_id === 'W-2'
      ? { outcome: 'error', error: statusOf('NOT_FOUND', "'W-2' not found", 'RESOURCE_NOT_FOUND', 'input.worker_id') }
      : { outcome: 'response', response: { output: mesh.jsonToStruct(lms(mesh.structToJson(c.input).worker_id, [record('TR-1')])),
        evidence: [{ source: 'lms', reference: 'r', capability: 'training.getStatus@2.2.0' }], decision: { policy_version: 'policies@abc' } } })),
  }));
  const client = batchClient(stub);
  const [one, two, three] = await client.callAll(lookups('W-1', 'W-2', 'W-3'));
  assert.equal(sent.length, 1);
  assert.equal(sent[0].method, 'InvokeCapabilities');
  assert.deepEqual(sent[0].request.calls.map((c) => mesh.structToJson(c.input).worker_id), ['W-1', 'W-2', 'W-3']);
  for (const c of sent[0].request.calls) {
    assert.equal(c.grant, GRANT, 'each call under the grant as received');
    assert.equal(c.idempotency_key, '', 'reads only');
  }
  assert.deepEqual(sent[0].metadata.get('baggage'), ['agentmesh.execution_id=exe-1']);
  assert.equal(one.output.worker_id, 'W-1');
  assert.equal(three.evidence[0].capability, 'training.getStatus@2.2.0');
  assert.ok(two instanceof CapabilityError);
  assert.deepEqual([two.code, two.reason], ['NOT_FOUND', 'RESOURCE_NOT_FOUND']);
  assert.deepEqual([...client.policyVersions], ['policies@abc']);
});

test('a batch whose round trip fails gives every call that error; more than 16 go in several', async () => {
  const { stub, sent } = batchStub((request, callback) => callback(
    mesh.meshError('UNAVAILABLE', 'the capability service is restarting', 'CAPABILITY_UNAVAILABLE')));
  const answers = await batchClient(stub).callAll(lookups(...Array.from({ length: 17 }, (_, i) => `W-${i + 1}`)));
  assert.deepEqual(sent.map((s) => s.request.calls.length), [16, 1]);
  assert.equal(answers.length, 17);
  assert.ok(answers.every((a) => a instanceof CapabilityError && a.code === 'UNAVAILABLE' && a.reason === 'CAPABILITY_UNAVAILABLE'));
});

test('a batch answering fewer results than calls is nobody\'s answer', async () => {
  const { stub } = batchStub((request, callback) => callback(null, { results: [] }));
  const answers = await batchClient(stub).callAll(lookups('W-1', 'W-2'));
  assert.ok(answers.every((a) => a instanceof CapabilityError && a.reason === 'CAPABILITY_ANSWER_MALFORMED'));
});

test('no batch leaves once the task has ended or its time is up; one call goes alone', async () => {
  const { stub, sent } = batchStub(() => assert.fail('nothing is sent'));
  const cancelled = batchClient(stub, { active: () => false });
  assert.ok((await cancelled.callAll(lookups('W-1', 'W-2'))).every((a) => a instanceof CapabilityError && a.reason === 'TASK_CANCELLED'));
  assert.ok(cancelled.stopped);
  const late = batchClient(stub, { deadline: Date.now() - 1 });
  assert.ok((await late.callAll(lookups('W-1', 'W-2'))).every((a) => a.reason === 'TASK_DEADLINE_EXCEEDED'));
  assert.equal(sent.length, 0);
  const [alone] = await batchClient(stub).callAll(lookups('W-9'));
  assert.equal(alone.output.worker_id, 'W-9');
  assert.deepEqual(sent.map((s) => s.method), ['InvokeCapability']);
  assert.deepEqual(await batchClient(stub).callAll([]), []);
});

test('results encode as the contract\'s RunTaskResponse and read back the same', async () => {
  const result = await AGENT.run(task(INPUT), new FakeClient({ 'W-1': lms('W-1', [record('TR-1', { until: '2026-11-29' })]) }));
  const c = loadContracts();
  const { responseSerialize, responseDeserialize } = c.agentmesh.v1.SpecialistService.service.RunTask;
  const back = responseDeserialize(responseSerialize({ result: toProtoResult(result) })).result;
  assert.equal(back.status, 'RESULT_STATUS_SUCCESS');
  assert.deepEqual(mesh.structToJson(back.result), { verdict: 'FAIL', subjects: { 'worker:W-1/NR-10': 'FAIL' } });
  assert.equal(back.statements[0].code, 'TRAINING_EXPIRED');
  assert.equal(mesh.structToJson(back.evidence[0].data).valid_until, '2026-11-29');
  assert.equal(back.versions.agent_version, '2.0.0');
  assert.ok(Number(back.completed_at.seconds) > 0);
  const waiting = await AGENT.run(task({ ...INPUT, workers: [{ worker_id: 'W-9' }] }), new FakeClient({ 'W-9': lms('W-9', [], { known: false }) }));
  const asked = responseDeserialize(responseSerialize({ result: toProtoResult(waiting) })).result.requested_actions[0];
  assert.deepEqual(mesh.structToJson(asked.parameters).input, { permit_id: 'WP-1' });
  // The definition DescribeAgent answers is the manifest: version 2.0.0, the Python agent's schemas.
  const def = AGENT.definition();
  assert.equal(def.version, '2.0.0');
  assert.equal(def.spiffe_id, 'spiffe://agentmesh.local/agent/training-agent');
  const d = c.agentmesh.v1.SpecialistService.service.DescribeAgent;
  const described = d.responseDeserialize(d.responseSerialize({ agent: { ...def, input_schema: mesh.jsonToStruct(def.input_schema),
    output_schema: mesh.jsonToStruct(def.output_schema) } })).agent;
  assert.equal(described.risk_profile.max_risk, 'RISK_LEVEL_LOW');
  assert.deepEqual(mesh.structToJson(described.input_schema), def.input_schema);
});

test('errors carry a google.rpc.Status with ErrorInfo in grpc-status-details-bin, decoded back the same', () => {
  const err = mesh.meshError('PERMISSION_DENIED', 'no', 'CALLER_NOT_ALLOWED', { field: 'grant', metadata: { caller: 'x' } });
  const back = mesh.decodeError(err);
  assert.deepEqual([back.codeName, back.reason, back.domain, back.field, back.metadata.caller],
    ['PERMISSION_DENIED', 'CALLER_NOT_ALLOWED', 'agentmesh.local', 'grant', 'x']);
});

test('the command line: --help helps; a bad flag, a missing certificate is one line and exit 2', () => {
  const node = (args, env = {}) => spawnSync(process.execPath, [SERVER, ...args], { encoding: 'utf8', env: { PATH: process.env.PATH, ...env } });
  const help = node(['--help']);
  assert.equal(help.status, 0);
  assert.match(help.stdout, /--capability HOST:PORT/);
  assert.match(help.stdout, /agentmesh certs issue --spiffe-id spiffe:\/\/agentmesh.local\/agent\/training-agent/);
  const unknown = node(['--bogus']);
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /bogus/);
  const noHome = node(['--listen', '127.0.0.1:0', '--capability', '127.0.0.1:7403']);
  assert.equal(noHome.status, 2);
  assert.match(noHome.stderr, /--home \(or AGENTMESH_HOME\) is required/);
  const badAddress = node(['--home', '/tmp', '--listen', 'nowhere', '--capability', '127.0.0.1:7403']);
  assert.equal(badAddress.status, 2);
  assert.match(badAddress.stderr, /--listen: expected HOST:PORT/);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'node-training-'));
  const noCerts = node([], { AGENTMESH_HOME: home, AGENTMESH_LISTEN: '127.0.0.1:0', AGENTMESH_CAPABILITY: '127.0.0.1:7403' });
  assert.equal(noCerts.status, 2);
  assert.match(noCerts.stderr, /trust\/ca\.pem: cannot read it/);
  fs.rmSync(home, { recursive: true });
});
