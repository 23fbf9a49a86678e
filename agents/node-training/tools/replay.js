'use strict';
// Runs one RunTask of the Node.js training agent against recorded capability answers, for the parity
// test with the Python agent (tests/specialist_svc/test_node_training_parity.py).
//
// stdin: {"request": base64 RunTaskRequest, "answers": [{"capability", "input" (JSON), "response":
// base64 InvokeCapabilityResponse} | {"capability", "input", "error": {"code", "reason", "message"}}]}
// stdout: {"response": base64 RunTaskResponse, "calls": [[capability, input], ...]} or
// {"refusal": {"code", "reason", "field"}, "calls": [...]}. The request and the answers go through the
// same decoding as on the wire (the contracts loaded by @grpc/proto-loader).

const { TrainingAgent, loadManifest, Refusal } = require('../lib/agent');
const { runTask, CapabilityClient, decodeGrant, loadContracts } = require('../lib/service');
const { CapabilityError, canonical } = require('../lib/rules');

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const { request, answers } = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const c = loadContracts();
  const runTaskMethod = c.agentmesh.v1.SpecialistService.service.RunTask;
  const invoke = c.agentmesh.v1.CapabilityService.service.InvokeCapability;
  const agent = new TrainingAgent(loadManifest(), { decodeGrant });
  const calls = [];
  const replayed = (capabilityId, input) => {
    calls.push([capabilityId, input]);
    const found = answers.find((a) => a.capability === capabilityId && canonical(a.input) === canonical(input));
    if (!found) throw new Error(`no recorded answer for ${capabilityId} ${canonical(input)}`);
    return found;
  };
  const makeClient = (fields) => {
    const client = new CapabilityClient(null, { ...fields, metadata: null, deadline: Infinity, isActive: () => true });
    client.call = async (capabilityId, input) => {
      const found = replayed(capabilityId, input);
      if (found.error) throw new CapabilityError(found.error.code, found.error.reason, found.error.message);
      return client.answer(invoke.responseDeserialize(Buffer.from(found.response, 'base64')));
    };
    // Reads sent together are replayed as the calls they carry, each from its own recorded answer.
    client.callAll = (batch) => Promise.all(batch.map(([capabilityId, input]) => client.call(capabilityId, input)
      .catch((err) => {
        if (err instanceof CapabilityError) return err;
        throw err;
      })));
    return client;
  };
  try {
    const { response } = await runTask(agent, runTaskMethod.requestDeserialize(Buffer.from(request, 'base64')), makeClient);
    process.stdout.write(JSON.stringify({ response: runTaskMethod.responseSerialize(response).toString('base64'), calls }));
  } catch (err) {
    if (!(err instanceof Refusal)) throw err;
    process.stdout.write(JSON.stringify({ refusal: { code: err.code, reason: err.reason, field: err.field }, calls }));
  }
}

main().catch((err) => {
  process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
  process.exitCode = 1;
});
