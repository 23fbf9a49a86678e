'use strict';
// A Node.js client of the agentmesh mesh, built from the contracts in proto/ only:
// @grpc/proto-loader reads the .proto files at run time, @grpc/grpc-js speaks
// gRPC over mTLS, protobufjs decodes the google.rpc.Status of an error. No code
// generated for Python is used.
//
// Identity: the mesh authenticates the calling service by its client certificate
// (one SPIFFE URI SAN, spiffe://agentmesh.local/client/NAME) and verifies the
// server by the DNS SAN derived from its SPIFFE id (supervisor.svc.agentmesh.local).
// The end user travels in each request as a signed user assertion, which a real
// platform service gets from the identity provider (in development:
// `agentmesh token issue --tenant acme --user alice`).

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

/** The repository's proto/ directory (override with AGENTMESH_PROTO_DIR). */
const PROTO_DIR = process.env.AGENTMESH_PROTO_DIR || path.resolve(__dirname, '..', '..', '..', 'proto');

/** google.rpc.ErrorInfo.domain of every agentmesh error. */
const ERROR_DOMAIN = 'agentmesh.local';

/** Initial metadata of Analyze: the execution id, sent before any task runs. */
const EXECUTION_ID_METADATA = 'agentmesh-execution-id';

const SERVICE_FILES = [
  'agentmesh/v1/supervisor_service.proto',
  'agentmesh/v1/decision_center_service.proto',
  'agentmesh/v1/agent_registry_service.proto',
  'grpc/health/v1/health.proto',
];

/**
 * Loads the contracts: returns the grpc-js package object (agentmesh.v1.*, grpc.health.v1.*).
 * Enums come as their full names (EXECUTION_STATUS_SUCCEEDED), 64-bit numbers as strings,
 * unset fields with their defaults, a oneof's case in its name (e.g. `event`).
 */
function loadContracts(protoDir = PROTO_DIR) {
  const definition = protoLoader.loadSync(SERVICE_FILES, {
    includeDirs: [protoDir],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition);
}

/** The identity files of a mesh home: trust bundle, and the certificate and key of `identity` (KIND-NAME). */
function homeFiles(home, identity) {
  return {
    ca: path.join(home, 'trust', 'ca.pem'),
    cert: path.join(home, 'workloads', identity, 'cert.pem'),
    key: path.join(home, 'workloads', identity, 'key.pem'),
  };
}

/** mTLS channel credentials from PEM files: the mesh CA, this client's certificate and key. */
function mtlsCredentials({ ca, cert, key }) {
  return grpc.credentials.createSsl(fs.readFileSync(ca), fs.readFileSync(key), fs.readFileSync(cert));
}

/** The DNS name a mesh server's certificate carries for its SPIFFE id: svc/supervisor -> supervisor.svc.agentmesh.local. */
function serverName(kind, name) {
  return `${name}.${kind}.agentmesh.local`;
}

/**
 * A client of one service on one mesh process.
 * @param {Function} Service e.g. contracts.agentmesh.v1.SupervisorService
 * @param {string} address host:port
 * @param {grpc.ChannelCredentials} credentials from mtlsCredentials
 * @param {string} server the server's DNS SAN, e.g. serverName('svc', 'supervisor')
 */
function connect(Service, address, credentials, server) {
  return new Service(address, credentials, {
    'grpc.ssl_target_name_override': server,
    'grpc.default_authority': server,
  });
}

/** Calls a unary method as a promise; resolves to {response, metadata} (the response's initial metadata). */
function call(client, method, request, { deadlineMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    let metadata = new grpc.Metadata();
    const c = client[method](request, { deadline: Date.now() + deadlineMs }, (err, response) => {
      if (err) reject(err);
      else resolve({ response, metadata });
    });
    c.on('metadata', (md) => { metadata = md; });
  });
}

/** Reads a server stream to its end; resolves to the list of messages. */
function collect(client, method, request, { deadlineMs = 60000 } = {}) {
  return new Promise((resolve, reject) => {
    const messages = [];
    const stream = client[method](request, { deadline: Date.now() + deadlineMs });
    stream.on('data', (m) => messages.push(m));
    stream.on('error', reject);
    stream.on('end', () => resolve(messages));
  });
}

let statusTypes = null;

function loadStatusTypes(protoDir = PROTO_DIR) {
  if (statusTypes === null) {
    const root = new protobuf.Root();
    // google/protobuf/*.proto are protobufjs's own; the rest comes from proto/.
    root.resolvePath = (origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(protoDir, target));
    root.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
    statusTypes = {
      Status: root.lookupType('google.rpc.Status'),
      ErrorInfo: root.lookupType('google.rpc.ErrorInfo'),
    };
  }
  return statusTypes;
}

/**
 * The structured error of a failed call, decoded from its `grpc-status-details-bin`
 * trailer (a google.rpc.Status whose details hold a google.rpc.ErrorInfo):
 * {code, codeName, message, reason, domain, metadata, field}. `reason` is null when the
 * trailer is missing (e.g. the server could not be reached: UNAVAILABLE from the channel).
 */
function decodeError(err) {
  const out = {
    code: err.code,
    codeName: Object.keys(grpc.status).find((k) => grpc.status[k] === err.code) || String(err.code),
    message: err.details,
    reason: null,
    domain: null,
    metadata: {},
    field: null,
  };
  const raw = err.metadata ? err.metadata.get('grpc-status-details-bin') : [];
  if (!raw.length) return out;
  const { Status, ErrorInfo } = loadStatusTypes();
  const status = Status.toObject(Status.decode(raw[0]), { defaults: true });
  out.message = status.message || out.message;
  for (const detail of status.details) {
    if (detail.type_url === 'type.googleapis.com/google.rpc.ErrorInfo') {
      const info = ErrorInfo.toObject(ErrorInfo.decode(detail.value), { defaults: true });
      out.reason = info.reason;
      out.domain = info.domain;
      out.metadata = info.metadata || {};
      out.field = out.metadata.field || null;
      break;
    }
  }
  return out;
}

module.exports = {
  PROTO_DIR,
  ERROR_DOMAIN,
  EXECUTION_ID_METADATA,
  loadContracts,
  homeFiles,
  mtlsCredentials,
  serverName,
  connect,
  call,
  collect,
  decodeError,
};
