'use strict';
// The training agent without any transport: its manifest, what it checks before it takes a task,
// the rules run through a capability client, and the result stamped with ids, time and versions.
//
// RunTask refuses, before doing anything (the same table as the Python specialists):
//
//   INVALID_ARGUMENT   TASK_AGENT_MISMATCH      the task targets another agent (task.target_agent_id)
//   INVALID_ARGUMENT   MISSING_FIELD            no task.task_id
//   INVALID_ARGUMENT   GRANT_MISSING            no grant
//   INVALID_ARGUMENT   GRANT_MALFORMED          the grant's body is not a TaskGrant
//   PERMISSION_DENIED  GRANT_AUDIENCE_MISMATCH  the grant is for another identity than this agent's
//   INVALID_ARGUMENT   GRANT_TASK_MISMATCH      the grant is for another task
//   INVALID_ARGUMENT   GRANT_TENANT_MISMATCH    the grant is for another tenant
//   INVALID_ARGUMENT   TASK_INPUT_INVALID       task.input breaks the input schema (field task.input.<path>)
//
// The grant's signature is verified where it grants something: by the capability service, on every
// call this agent makes with it. A refused or failed capability call is not an error of RunTask but
// part of the result (FAILED with error_reason, or an UNCERTAINTY).

const fs = require('node:fs');
const path = require('node:path');
const yaml = require('js-yaml');

const training = require('./training');
const { TaskInputInvalid } = require('./rules');
const { compile, fieldPath } = require('./schema');
const { speaker } = require('./phrases');

const MANIFEST = path.join(__dirname, '..', 'manifest.yaml');
const RUNTIME = `agentmesh-node-training/${require('../package.json').version} node/${process.version}`;

/** A refusal of RunTask: the gRPC status name, the ErrorInfo reason and the field it names. */
class Refusal extends Error {
  constructor(code, reason, message, field = null) {
    super(message);
    this.code = code;
    this.reason = reason;
    this.field = field;
  }
}

/** A result that breaks the manifest's output schema: a bug, so nothing half-right is returned. */
class ResultSchemaViolation extends Error {}

function loadManifest(file = MANIFEST) {
  const data = yaml.load(fs.readFileSync(file, 'utf8'));
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw new Error(`${file}: a manifest must be a mapping`);
  for (const name of ['agent_id', 'version', 'name', 'description', 'domains', 'capabilities', 'input_schema',
    'output_schema', 'status', 'risk_profile', 'cost']) {
    if (data[name] === undefined) throw new Error(`${file}: ${name} is required`);
  }
  if (data.agent_id !== training.AGENT_ID) throw new Error(`${file}: agent_id must be ${training.AGENT_ID}, not ${data.agent_id}`);
  const missing = training.CAPABILITIES.filter((c) => !data.capabilities.includes(c));
  if (missing.length) throw new Error(`${file}: the rules call ${missing.join(', ')}, which the manifest does not register`);
  const spiffeId = `spiffe://agentmesh.local/agent/${data.agent_id}`;
  if (data.spiffe_id !== undefined && data.spiffe_id !== spiffeId) throw new Error(`${file}: spiffe_id must be ${spiffeId}`);
  return { ...data, spiffe_id: spiffeId, source: file };
}

class TrainingAgent {
  /**
   * @param {object} manifest from loadManifest
   * @param {{decodeGrant: function(Buffer): object, clock?: function(): Date}} options
   *   decodeGrant: a TaskGrant from its bytes (throws when they are not one)
   */
  constructor(manifest, { decodeGrant, clock = () => new Date() }) {
    this.manifest = manifest;
    this.decodeGrant = decodeGrant;
    this.clock = clock;
    this.checkInput = compile(manifest.input_schema, 'input_schema');
    this.checkOutput = compile(manifest.output_schema, 'output_schema');
  }

  get agentId() { return this.manifest.agent_id; }

  get spiffeId() { return this.manifest.spiffe_id; }

  get version() { return this.manifest.version; }

  /** The task's input as plain data, checked against the input schema; throws a TASK_INPUT_INVALID refusal. */
  taskInput(input) {
    const [error] = this.checkInput(input);
    if (error) {
      const field = fieldPath('task.input', error.path);
      throw new Refusal('INVALID_ARGUMENT', 'TASK_INPUT_INVALID', `${field}: ${error.message}`, field);
    }
    return input;
  }

  /**
   * What RunTask checks before anything runs (see the top of this file); returns the grant's body.
   * @param {object} task the AgentTask (input as plain JSON)
   * @param {object} signed the SignedTaskGrant
   */
  admit(task, signed) {
    if (task.target_agent_id !== this.agentId) {
      throw new Refusal('INVALID_ARGUMENT', 'TASK_AGENT_MISMATCH',
        `this process runs ${this.agentId}, not ${task.target_agent_id || '<none>'}`, 'task.target_agent_id');
    }
    if (!task.task_id) throw new Refusal('INVALID_ARGUMENT', 'MISSING_FIELD', 'task.task_id is required', 'task.task_id');
    if (!signed || !signed.grant || !signed.grant.length) {
      throw new Refusal('INVALID_ARGUMENT', 'GRANT_MISSING', 'a task grant is required', 'grant');
    }
    let grant;
    try {
      grant = this.decodeGrant(signed.grant);
    } catch {
      throw new Refusal('INVALID_ARGUMENT', 'GRANT_MALFORMED', 'grant body is not a TaskGrant', 'grant');
    }
    if (grant.audience !== this.spiffeId) {
      throw new Refusal('PERMISSION_DENIED', 'GRANT_AUDIENCE_MISMATCH', 'the grant was issued to another identity', 'grant');
    }
    if (grant.task_id !== task.task_id) throw new Refusal('INVALID_ARGUMENT', 'GRANT_TASK_MISMATCH', 'the grant is for another task', 'grant');
    if (task.tenant_id && grant.tenant_id !== task.tenant_id) {
      throw new Refusal('INVALID_ARGUMENT', 'GRANT_TENANT_MISMATCH', 'the grant is for another tenant', 'grant');
    }
    this.taskInput(task.input);
    return grant;
  }

  /**
   * Runs the rules on one admitted task; the stamped result (plain JSON in `result`, evidence `data`
   * and action `parameters`). `client` is the capability port; `handoffs` the outcomes of the
   * handoffs asked for when the task is called again after WAITING.
   */
  async run(task, client, handoffs = []) {
    const data = this.taskInput(task.input);
    const context = {
      say: speaker(task.locale),
      handoffs: Object.fromEntries(handoffs.map((h) => [h.action_id, h])),
      again: handoffs.length > 0,
    };
    let result;
    try {
      result = await training.run(data, client, context);
    } catch (err) {
      if (err instanceof TaskInputInvalid) {
        const field = `task.input.${err.field}`;
        throw new Refusal('INVALID_ARGUMENT', 'TASK_INPUT_INVALID', err.message, field);
      }
      throw err;
    }
    if (result.status !== 'RESULT_STATUS_FAILED' && result.status !== 'RESULT_STATUS_WAITING') {
      const [error] = this.checkOutput(result.result);
      if (error) throw new ResultSchemaViolation(`result breaks ${this.agentId}'s output schema at ${fieldPath('result', error.path)}: ${error.message}`);
    }
    const now = this.clock().getTime();
    const capabilities = [...new Set(result.evidence.map((e) => e.capability).filter(Boolean))].sort();
    return {
      ...result,
      task_id: task.task_id,
      agent_id: this.agentId,
      completed_at: { seconds: String(Math.floor(now / 1000)), nanos: (now % 1000) * 1e6 },
      versions: { agent_version: this.version, capability_version: capabilities.join(','), runtime_version: RUNTIME },
    };
  }

  /** The AgentDefinition of the manifest (its declared status; the supervisor's registry may differ). */
  definition() {
    const m = this.manifest;
    const risk = m.risk_profile || {};
    const deps = m.dependencies || {};
    return {
      agent_id: m.agent_id,
      version: m.version,
      name: m.name,
      description: m.description,
      domains: m.domains,
      capabilities: m.capabilities,
      knowledge_scopes: m.knowledge_scopes || [],
      input_schema: m.input_schema,
      output_schema: m.output_schema,
      allowed_delegations: m.allowed_delegations || [],
      status: `LIFECYCLE_STATUS_${m.status}`,
      risk_profile: {
        max_risk: `RISK_LEVEL_${risk.max_risk || 'UNSPECIFIED'}`,
        can_mutate: Boolean(risk.can_mutate),
        can_external_write: Boolean(risk.can_external_write),
        can_bulk_operate: Boolean(risk.can_bulk_operate),
      },
      dependencies: { capabilities: deps.capabilities || [], knowledge: deps.knowledge || [], policies: deps.policies || [] },
      spiffe_id: m.spiffe_id,
      cost: m.cost,
    };
  }
}

module.exports = { TrainingAgent, Refusal, ResultSchemaViolation, loadManifest, MANIFEST, RUNTIME };
