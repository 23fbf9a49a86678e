'use strict';
// The agent over gRPC: agentmesh.v1.SpecialistService (RunTask, DescribeAgent) and grpc.health.v1
// behind mTLS with the agent's own certificate, the capability client (InvokeCapability with the
// task's grant and principal) and the record of every refusal in the audit log.
//
// Every call: the caller's identity is its client certificate's one SPIFFE URI SAN (identity.js),
// or the call is UNAUTHENTICATED NO_PEER_IDENTITY; the caller table allows SpecialistService to
// the supervisor only and health to any mesh identity, else PERMISSION_DENIED CALLER_NOT_ALLOWED.
// Both, and every refusal of RunTask (agent.js), carry a google.rpc.ErrorInfo and are recorded as
// ACCESS_DENIED under the agent's identity (when an audit address is given).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const mesh = require('../../../clients/node/lib/mesh')({ grpc, protoLoader, protobuf });
const { CapabilityError } = require('./rules');
const { Refusal, ResultSchemaViolation } = require('./agent');
const { peerIdentity, callerAllowed } = require('./identity');

const FILES = [
  'agentmesh/v1/specialist_service.proto',
  'agentmesh/v1/capability_service.proto',
  'agentmesh/v1/audit_service.proto',
  'grpc/health/v1/health.proto',
];
const SPECIALIST = 'agentmesh.v1.SpecialistService';
const HEALTH_REASON = 'agentmesh-health-reason';
const TRACEPARENT_RE = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const EXECUTION_ID = 'agentmesh.execution_id';
const CORRELATION_ID = 'agentmesh.correlation_id';

let contracts = null;
let grantType = null;

/** The contracts this agent speaks (grpc-js package object), loaded once from proto/. */
function loadContracts() {
  if (contracts === null) contracts = mesh.loadContracts(FILES);
  return contracts;
}

/** A TaskGrant from its deterministic encoding (SignedTaskGrant.grant); throws when the bytes are not one. */
function decodeGrant(bytes) {
  if (grantType === null) {
    const root = new protobuf.Root();
    root.resolvePath = (origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(mesh.PROTO_DIR, target));
    root.loadSync('agentmesh/v1/common.proto', { keepCase: true });
    grantType = root.lookupType('agentmesh.v1.TaskGrant');
  }
  return grantType.toObject(grantType.decode(bytes), { enums: String, longs: String, defaults: true, arrays: true });
}

// --- results as the contract carries them --------------------------------------------------------

/** An AgentResult with its Structs (result, evidence data, action parameters) as @grpc/proto-loader takes them. */
function toProtoResult(result) {
  return {
    ...result,
    result: mesh.jsonToStruct(result.result),
    evidence: result.evidence.map((e) => {
      const { data, ...ref } = e;
      return data === null || data === undefined ? ref : { ...ref, data: mesh.jsonToStruct(data) };
    }),
    requested_actions: result.requested_actions.map((a) => ({ ...a, parameters: mesh.jsonToStruct(a.parameters) })),
  };
}

/** A HandoffOutcome with its result's Struct as plain JSON. */
function fromProtoOutcome(outcome) {
  const result = outcome.result ? { ...outcome.result, result: mesh.structToJson(outcome.result.result) } : null;
  return { ...outcome, result };
}

// --- trace context --------------------------------------------------------------------------------

/**
 * The outgoing trace headers of a task: `traceparent` with the incoming trace id (or the task's
 * TraceContext.trace_id) and a span id of this agent's own, and the mesh ids in W3C `baggage`.
 */
function traceMetadata(incoming, trace) {
  const md = new grpc.Metadata();
  const received = incoming ? incoming.get('traceparent').map(String)[0] : undefined;
  const match = received ? TRACEPARENT_RE.exec(received) : null;
  const traceId = match ? match[1] : (/^[0-9a-f]{32}$/.test(trace.trace_id || '') ? trace.trace_id : null);
  if (traceId && !/^0+$/.test(traceId)) {
    md.set('traceparent', `00-${traceId}-${crypto.randomBytes(8).toString('hex')}-${match ? match[3] : '01'}`);
  }
  const baggage = [[EXECUTION_ID, trace.execution_id], [CORRELATION_ID, trace.correlation_id]]
    .filter(([, value]) => value).map(([key, value]) => `${key}=${encodeURIComponent(value)}`);
  if (baggage.length) md.set('baggage', baggage.join(','));
  return md;
}

// --- the capability client ------------------------------------------------------------------------

/**
 * The principal this agent acts as: the one received, naming this agent and carrying this task's grant.
 * The delegation chain received (["user:acme/alice", "svc:supervisor", ...]) is extended with
 * agent:<id> unless it already ends there; an empty chain stays empty (the capability service then
 * derives it from the grant).
 */
function principalFor(received, signed, { agentId, agentVersion, executionId }) {
  const principal = { ...(received || {}) };
  principal.agent_id = agentId;
  principal.agent_version = agentVersion;
  principal.execution_id = executionId || principal.execution_id || '';
  const chain = [...(principal.delegation_chain || [])];
  const me = `agent:${agentId}`;
  if (chain.length && chain[chain.length - 1] !== me) chain.push(me);
  principal.delegation_chain = chain;
  const key = (g) => [g.grant, g.signature, g.record_signature].map((b) => Buffer.from(b || []).toString('base64'))
    .concat(g.key_id || '').join('.');
  const grants = [...(principal.grants || [])];
  if (signed && signed.grant && signed.grant.length && !grants.some((g) => key(g) === key(signed))) grants.push(signed);
  principal.grants = grants;
  return principal;
}

/** Most calls in one InvokeCapabilities (the capability service takes up to 16). */
const MAX_BATCH = 16;

/** The CapabilityError of a failed call, from its decoded status (mesh.decodeError / decodeStatus). */
function failedCall(e) {
  return new CapabilityError(e.codeName, e.reason, e.message || e.codeName);
}

/**
 * Calls CapabilityService.InvokeCapability for one task (InvokeCapabilities for reads sent together):
 * with the grant received (unchanged), the principal, the trace ids, and a deadline of what is left of the incoming call's, less a reserve to
 * answer in. No call leaves once the task's RunTask has ended (cancelled, or its caller gone).
 */
class CapabilityClient {
  constructor(stub, { grant, principal, trace, metadata, deadline, isActive }) {
    this.stub = stub;
    this.grant = grant;
    this.principal = principal;
    this.trace = trace;
    this.metadata = metadata;
    this.deadline = deadline; // ms since the epoch, or Infinity
    this.isActive = isActive;
    this.policyVersions = new Set();
    this.knowledgeVersions = new Set();
    this.stopped = false;
  }

  async call(capabilityId, input, idempotencyKey = '') {
    const timeoutMs = this.timeLeft(capabilityId);
    let response;
    try {
      ({ response } = await mesh.call(this.stub, 'InvokeCapability', this.request(capabilityId, input, idempotencyKey),
        { deadlineMs: timeoutMs, metadata: this.metadata.clone() }));
    } catch (err) {
      throw failedCall(mesh.decodeError(err));
    }
    return this.answer(response);
  }

  /**
   * Independent reads together: CapabilityService.InvokeCapabilities, at most MAX_BATCH calls in one
   * round trip (more go in several). `calls` is [[capabilityId, input], ...]; resolves to one entry per
   * call, in order: its answer ({output, evidence}, as `call` gives it) or its own CapabilityError. Each
   * call is governed as it is alone; a mutation never goes here. When the round trip itself fails, or
   * no time is left, every call of it holds that error: nothing was answered. Never rejects.
   */
  async callAll(calls) {
    if (calls.length === 1) {
      try {
        return [await this.call(calls[0][0], calls[0][1])];
      } catch (err) {
        if (err instanceof CapabilityError) return [err];
        throw err;
      }
    }
    const batches = [];
    for (let i = 0; i < calls.length; i += MAX_BATCH) batches.push(this.sendTogether(calls.slice(i, i + MAX_BATCH)));
    return (await Promise.all(batches)).flat();
  }

  async sendTogether(calls) {
    let timeoutMs;
    try {
      timeoutMs = this.timeLeft(calls.map(([capabilityId]) => capabilityId).join(', '));
    } catch (err) {
      return calls.map(() => err);
    }
    const request = { calls: calls.map(([capabilityId, input]) => this.request(capabilityId, input, '')) };
    let response;
    try {
      ({ response } = await mesh.call(this.stub, 'InvokeCapabilities', request,
        { deadlineMs: timeoutMs, metadata: this.metadata.clone() }));
    } catch (err) {
      const failed = failedCall(mesh.decodeError(err));
      return calls.map(() => failed);
    }
    const results = response.results || [];
    if (results.length !== calls.length) {
      const malformed = new CapabilityError('UNAVAILABLE', 'CAPABILITY_ANSWER_MALFORMED',
        `the capability service answered ${results.length} results for ${calls.length} calls`);
      return calls.map(() => malformed);
    }
    return results.map((r) => (r.outcome === 'response' ? this.answer(r.response) : failedCall(mesh.decodeStatus(r.error))));
  }

  /** The deadline of a call made now, in ms: what is left of the task's, less a reserve to answer in. */
  timeLeft(what) {
    if (!this.isActive()) {
      this.stopped = true;
      throw new CapabilityError('ABORTED', 'TASK_CANCELLED',
        `the task was cancelled or its caller is gone; ${what} was not called`);
    }
    if (!Number.isFinite(this.deadline)) return 30000;
    const left = this.deadline - Date.now();
    const timeoutMs = left - Math.min(250, Math.max(left, 0) * 0.1);
    if (timeoutMs <= 0) throw new CapabilityError('DEADLINE_EXCEEDED', 'TASK_DEADLINE_EXCEEDED', `no time left to call ${what}`);
    return timeoutMs;
  }

  /** One InvokeCapabilityRequest under this task's grant (unchanged), principal and trace. */
  request(capabilityId, input, idempotencyKey) {
    return {
      grant: this.grant, capability_id: capabilityId, input: mesh.jsonToStruct(input), idempotency_key: idempotencyKey,
      principal: this.principal, trace: this.trace,
    };
  }

  /** What an InvokeCapabilityResponse means for the rules: {output, evidence}; its versions are remembered. */
  answer(response) {
    if (response.decision && response.decision.policy_version) this.policyVersions.add(response.decision.policy_version);
    if (response.knowledge_version) this.knowledgeVersions.add(response.knowledge_version);
    const evidence = (response.evidence || []).map((ref) => ({
      source: ref.source, reference: ref.reference, authority: ref.authority, fetched_at: ref.fetched_at || null,
      capability: ref.capability, data: ref.data ? mesh.structToJson(ref.data) : null,
    }));
    return { output: mesh.structToJson(response.output), evidence };
  }
}

/**
 * One RunTask, transport aside: admits the request (agent.js), builds the principal and trace of the
 * task's capability calls, runs the rules with the client `makeClient({grant, principal, trace})`
 * returns, and answers the RunTaskResponse as the contract carries it.
 */
async function runTask(agent, request, makeClient) {
  const task = { ...(request.task || {}), input: mesh.structToJson(request.task && request.task.input) };
  const grant = agent.admit(task, request.grant);
  const trace = { ...(request.trace || {}) };
  trace.execution_id = trace.execution_id || task.execution_id || grant.execution_id;
  trace.correlation_id = trace.correlation_id || task.correlation_id || '';
  const principal = principalFor(request.principal, request.grant, {
    agentId: agent.agentId, agentVersion: agent.version, executionId: task.execution_id || grant.execution_id,
  });
  const client = makeClient({ grant: request.grant, principal, trace });
  const outcomes = (request.handoff_outcomes || []).map(fromProtoOutcome);
  const result = await agent.run(task, client, outcomes);
  result.versions.policy_version = [...client.policyVersions].sort().join(',');
  result.versions.knowledge_version = [...client.knowledgeVersions].sort().join(',');
  return { response: { result: toProtoResult(result) }, client, task };
}

// --- refusals in the audit log --------------------------------------------------------------------

const PLAIN = /^[A-Za-z0-9_.:[\]-]+$/;

function plain(value, limit) {
  return value.length <= limit && PLAIN.test(value) ? value : 'invalid';
}

/**
 * Records refusals as ACCESS_DENIED under this agent's identity (AuditService.AppendRecord, which
 * takes only ACCESS_DENIED records from an agent). A record the audit service does not take at once
 * is retried in the background (1 s, 2 s, ... up to 30 s between tries, for up to 10 minutes); the
 * refusal stands whatever happens to its record.
 */
class RefusalRecorder {
  constructor(stub, agentId, log) {
    this.stub = stub;
    this.agentId = agentId;
    this.log = log;
    this.pending = new Set();
  }

  record({ reason, field, caller, method, task = {} }) {
    const record = {
      event_type: 'AUDIT_EVENT_TYPE_ACCESS_DENIED',
      outcome: 'AUDIT_OUTCOME_DENIED',
      reason_codes: [plain(reason, 128), ...(field ? [`field=${plain(field, 256)}`] : []), `caller=${caller || 'none'}`,
        `method=${method}`],
      agent_id: this.agentId,
      task_id: task.task_id || '',
      tenant_id: task.tenant_id || '',
      execution_id: task.execution_id || '',
      correlation_id: task.correlation_id || '',
    };
    const started = Date.now();
    const attempt = (delayMs) => {
      const done = mesh.call(this.stub, 'AppendRecord', { record }, { deadlineMs: 5000 }).then(() => {
        this.pending.delete(done);
      }, (err) => {
        this.pending.delete(done);
        const e = mesh.decodeError(err);
        if (Date.now() - started > 600000 || !['UNAVAILABLE', 'DEADLINE_EXCEEDED'].includes(e.codeName)) {
          this.log(`the refusal ${reason} of ${method} was not recorded in audit: ${e.codeName} ${e.reason || ''}`);
          return;
        }
        setTimeout(() => attempt(Math.min(delayMs * 2, 30000)), delayMs).unref();
      });
      this.pending.add(done);
    };
    attempt(1000);
  }

  /** Resolves once every record asked for so far has been taken or given up on (for a clean stop). */
  async settled() {
    while (this.pending.size) await Promise.allSettled([...this.pending]);
  }
}

// --- the server -----------------------------------------------------------------------------------

/**
 * The agent's gRPC server. `agent`: a TrainingAgent; `tls`: {ca, cert, key} PEM file paths;
 * `capability`: host:port of the capability service; `audit`: host:port of the audit service or null.
 */
class AgentServer {
  constructor(agent, { tls, capability, audit = null, log = (line) => process.stderr.write(`${line}\n`) }) {
    this.agent = agent;
    this.log = log;
    const c = loadContracts();
    const pem = (file) => fs.readFileSync(file);
    this.caPem = pem(tls.ca);
    this.ca = new crypto.X509Certificate(this.caPem);
    const channel = grpc.credentials.createSsl(this.caPem, pem(tls.key), pem(tls.cert));
    this.serverCredentials = grpc.ServerCredentials.createSsl(this.caPem,
      [{ private_key: pem(tls.key), cert_chain: pem(tls.cert) }], true);
    this.capability = mesh.connect(c.agentmesh.v1.CapabilityService, capability, channel, mesh.serverName('svc', 'capability'));
    this.capabilityHealth = mesh.connect(c.grpc.health.v1.Health, capability, channel, mesh.serverName('svc', 'capability'));
    this.recorder = audit
      ? new RefusalRecorder(mesh.connect(c.agentmesh.v1.AuditService, audit, channel, mesh.serverName('svc', 'audit')),
        agent.agentId, log)
      : null;
    this.health = { status: 'NOT_SERVING', reason: 'starting' };
    this.watchers = new Set();
    this.failedProbes = 0;
    this.server = new grpc.Server();
    this.server.addService(c.agentmesh.v1.SpecialistService.service, {
      RunTask: this.guard(`/${SPECIALIST}/RunTask`, (call, caller) => this.runTask(call, caller)),
      DescribeAgent: this.guard(`/${SPECIALIST}/DescribeAgent`, async () => ({ agent: this.describe() })),
    });
    this.server.addService(c.grpc.health.v1.Health.service, {
      Check: this.guard('/grpc.health.v1.Health/Check', async (call) => this.check(call)),
      Watch: (call) => this.watch(call),
    });
  }

  /** A unary handler behind the identity check and the caller table; every refusal recorded. */
  guard(method, handler) {
    return (call, callback) => {
      const caller = peerIdentity(call, this.ca);
      if (caller === null) {
        return this.refuse(callback, mesh.meshError('UNAUTHENTICATED',
          'a client certificate with exactly one mesh SPIFFE id is required', 'NO_PEER_IDENTITY'), { method, caller: '' });
      }
      if (!callerAllowed(method, caller)) {
        return this.refuse(callback, mesh.meshError('PERMISSION_DENIED', `${caller} may not call ${method}`, 'CALLER_NOT_ALLOWED',
          { metadata: { caller, method } }), { method, caller });
      }
      return Promise.resolve().then(() => handler(call, caller)).then((response) => {
        if (response && response.trailers) callback(null, response.message, response.trailers);
        else callback(null, response);
      }, (err) => {
        if (err instanceof Refusal) {
          return this.refuse(callback, mesh.meshError(err.code, err.message, err.reason, { field: err.field }),
            { method, caller, task: (call.request && call.request.task) || {} });
        }
        if (err instanceof ResultSchemaViolation) {
          this.log(`${method}: ${err.message}`);
          return callback(mesh.meshError('INTERNAL', err.message, 'RESULT_SCHEMA_VIOLATION'));
        }
        this.log(`${method} failed: ${err && err.stack ? err.stack : err}`);
        return callback(mesh.meshError('INTERNAL', 'the agent failed; see its log', 'INTERNAL'));
      });
    };
  }

  refuse(callback, err, { method, caller, task = {} }) {
    if (this.recorder) this.recorder.record({ reason: err.reason, field: err.field, caller, method, task });
    callback(err);
  }

  describe() {
    const definition = this.agent.definition();
    return {
      ...definition,
      input_schema: mesh.jsonToStruct(definition.input_schema),
      output_schema: mesh.jsonToStruct(definition.output_schema),
    };
  }

  async runTask(call) {
    const deadline = call.getDeadline();
    const { response, client, task } = await runTask(this.agent, call.request, ({ grant, principal, trace }) => (
      new CapabilityClient(this.capability, {
        grant, principal, trace, metadata: traceMetadata(call.metadata, trace),
        deadline: deadline instanceof Date ? deadline.getTime() : Number(deadline),
        isActive: () => !call.cancelled,
      })));
    if (client.stopped) this.log(`task ${task.task_id} stopped: its call ended (cancelled, or the supervisor is gone)`);
    return response;
  }

  check(call) {
    const service = call.request.service || '';
    if (service !== '' && service !== SPECIALIST) {
      throw new Refusal('NOT_FOUND', 'SERVICE_NOT_FOUND', `no health status for ${service}`, 'service');
    }
    const trailers = new grpc.Metadata();
    if (this.health.reason) trailers.set(HEALTH_REASON, this.health.reason);
    return { message: { status: this.health.status }, trailers };
  }

  watch(call) {
    const caller = peerIdentity(call, this.ca);
    const method = '/grpc.health.v1.Health/Watch';
    if (caller === null || !callerAllowed(method, caller)) {
      const err = caller === null
        ? mesh.meshError('UNAUTHENTICATED', 'a client certificate with exactly one mesh SPIFFE id is required', 'NO_PEER_IDENTITY')
        : mesh.meshError('PERMISSION_DENIED', `${caller} may not call ${method}`, 'CALLER_NOT_ALLOWED', { metadata: { caller, method } });
      if (this.recorder) this.recorder.record({ reason: err.reason, field: null, caller: caller || '', method });
      call.emit('error', err);
      return;
    }
    const send = () => call.write({ status: this.health.status });
    send();
    this.watchers.add(send);
    call.on('cancelled', () => this.watchers.delete(send));
  }

  /** Health is true: SERVING only while the capability service (this agent's one required peer) answers SERVING. */
  async probe() {
    let status;
    let reason = '';
    try {
      const { response } = await mesh.call(this.capabilityHealth, 'Check', { service: '' }, { deadlineMs: 1000 });
      status = response.status;
    } catch (err) {
      status = `UNREACHABLE (${mesh.decodeError(err).codeName})`;
    }
    if (status === 'SERVING') this.failedProbes = 0;
    else this.failedProbes += 1;
    const serving = status === 'SERVING' || (this.failedProbes === 1 && this.health.status === 'SERVING');
    if (!serving) reason = `peer capability: ${status}`;
    const next = { status: serving ? 'SERVING' : 'NOT_SERVING', reason };
    const changed = next.status !== this.health.status;
    this.health = next;
    if (changed) for (const send of this.watchers) send();
  }

  /** Binds `address` (host:port; port 0 picks a free one); resolves to the bound host:port. */
  listen(address) {
    const host = address.slice(0, address.lastIndexOf(':'));
    return new Promise((resolve, reject) => {
      this.server.bindAsync(address, this.serverCredentials, (err, port) => {
        if (err) return reject(err);
        this.probe().catch(() => {});
        this.timer = setInterval(() => this.probe().catch(() => {}), 1000);
        return resolve(`${host}:${port}`);
      });
    });
  }

  /** Stops taking calls, lets those under way finish (at most `graceMs`), flushes refusal records. */
  async stop(graceMs = 5000) {
    clearInterval(this.timer);
    await new Promise((resolve) => {
      const force = setTimeout(() => { this.server.forceShutdown(); resolve(); }, graceMs);
      this.server.tryShutdown(() => { clearTimeout(force); resolve(); });
    });
    if (this.recorder) {
      await Promise.race([this.recorder.settled(), new Promise((resolve) => { setTimeout(resolve, graceMs).unref(); })]);
    }
    this.capability.close();
    this.capabilityHealth.close();
  }
}

module.exports = {
  AgentServer, CapabilityClient, RefusalRecorder, runTask, principalFor, traceMetadata, toProtoResult, fromProtoOutcome,
  decodeGrant, loadContracts, mesh,
};
