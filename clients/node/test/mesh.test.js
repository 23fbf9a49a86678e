'use strict';
// Runs against a real mesh over mTLS (started by tests/integration/test_node_client.py):
//   AGENTMESH_HOME        the mesh home (trust bundle and this client's certificate)
//   AGENTMESH_SUPERVISOR  host:port of the supervisor
//   AGENTMESH_IDENTITY    this client's identity directory under HOME/workloads (e.g. client-node-client)
//   AGENTMESH_ASSERTION   a signed user assertion of acme/alice (role analyst)

const test = require('node:test');
const assert = require('node:assert/strict');
const am = require('../lib/agentmesh');

function env(name) {
  const value = process.env[name];
  assert.ok(value, `${name} must be set (see the top of this file)`);
  return value;
}

const home = env('AGENTMESH_HOME');
const address = env('AGENTMESH_SUPERVISOR');
const userAssertion = env('AGENTMESH_ASSERTION');
const contracts = am.loadContracts();
const credentials = am.mtlsCredentials(am.homeFiles(home, env('AGENTMESH_IDENTITY')));
const server = am.serverName('svc', 'supervisor');
const supervisor = am.connect(contracts.agentmesh.v1.SupervisorService, address, credentials, server);
const health = am.connect(contracts.grpc.health.v1.Health, address, credentials, server);

async function refusal(promise) {
  try {
    await promise;
  } catch (err) {
    return am.decodeError(err);
  }
  assert.fail('the call was expected to fail');
}

test('health: the supervisor answers SERVING over mTLS', async () => {
  const { response } = await am.call(health, 'Check', { service: 'agentmesh.v1.SupervisorService' });
  assert.equal(response.status, 'SERVING');
});

test('Analyze, then WatchExecution to its end', async () => {
  const { response, metadata } = await am.call(supervisor, 'Analyze', {
    user_assertion: userAssertion,
    request_text: 'Analyze permit WP-10232 and tell me if it can be released',
    tenant_id: 'acme',
    detach: true,
  });
  const started = response.execution;
  assert.match(started.execution_id, /^exe-/);
  assert.deepEqual(metadata.get(am.EXECUTION_ID_METADATA), [started.execution_id]);
  assert.equal(started.intent, 'EXECUTION_INTENT_ANALYZE_PERMIT');
  assert.equal(started.actor_type, 'ACTOR_TYPE_USER');

  const events = await am.collect(supervisor, 'WatchExecution', {
    user_assertion: userAssertion, execution_id: started.execution_id,
  });
  assert.ok(events.length >= 2, `events: ${events.map((e) => e.event)}`);
  assert.equal(events[0].event, 'EXECUTION_EVENT_SNAPSHOT');
  assert.equal(events.at(-1).event, 'EXECUTION_EVENT_EXECUTION_FINISHED');
  const done = events.at(-1).execution;
  const tasks = new Map(done.graph.nodes.map((n) => [n.task_id, n.target_agent_id]));
  for (const e of events.filter((x) => x.event.startsWith('EXECUTION_EVENT_TASK_'))) {
    assert.equal(tasks.get(e.task_id), e.agent_id, `a task event names its task's agent: ${e.task_id}`);
  }
  assert.equal(done.execution_id, started.execution_id);
  assert.equal(done.status, 'EXECUTION_STATUS_SUCCEEDED');
  assert.equal(done.decision, 'ANALYSIS_DECISION_NOT_RECOMMENDED');
  const training = done.results.find((r) => r.agent_id === 'training-agent');
  const expired = training.statements.find((s) => s.code === 'TRAINING_EXPIRED');
  assert.equal(expired.kind, 'STATEMENT_KIND_FACT');
  assert.ok(expired.evidence_indexes.length > 0, 'a FACT cites its evidence');
  assert.equal(training.evidence[expired.evidence_indexes[0]].source, 'lms');
});

test('an error decoded from grpc-status-details-bin: google.rpc.Status with ErrorInfo', async () => {
  const mismatch = await refusal(am.call(supervisor, 'Analyze', {
    user_assertion: userAssertion,
    request_text: 'Analyze permit WP-10231 and tell me if it can be released',
    tenant_id: 'globex',
  }));
  assert.equal(mismatch.codeName, 'PERMISSION_DENIED');
  assert.equal(mismatch.reason, 'TENANT_MISMATCH');
  assert.equal(mismatch.domain, am.ERROR_DOMAIN);
  assert.equal(mismatch.field, 'tenant_id');

  const unknown = await refusal(am.call(supervisor, 'Analyze', {
    user_assertion: userAssertion, request_text: 'Good morning', tenant_id: 'acme',
  }));
  assert.deepEqual([unknown.codeName, unknown.reason, unknown.field],
    ['INVALID_ARGUMENT', 'UNKNOWN_INTENT', 'request_text']);

  const missing = await refusal(am.call(supervisor, 'GetExecution', {
    user_assertion: userAssertion, execution_id: 'exe-0000000000000000',
  }));
  assert.deepEqual([missing.codeName, missing.reason, missing.field],
    ['NOT_FOUND', 'EXECUTION_NOT_FOUND', 'execution_id']);

  const forged = await refusal(am.call(supervisor, 'GetExecution', {
    user_assertion: `${userAssertion}x`, execution_id: 'exe-0000000000000000',
  }));
  assert.equal(forged.codeName, 'UNAUTHENTICATED');
  assert.equal(forged.field, 'user_assertion');
  assert.match(forged.reason, /^ASSERTION_/);
});
