'use strict';
// What every Node.js program of the mesh shares — a client (clients/node) as much as an agent
// (agents/node-training): loading the contracts from proto/, mTLS credentials from a mesh home,
// the DNS name a mesh server's certificate carries, unary and streamed calls as promises, and
// google.rpc.Status errors (decoded from, and encoded into, `grpc-status-details-bin`).
//
// It is a factory over the gRPC modules the caller has installed, so that a program uses one
// copy of @grpc/grpc-js throughout: credentials, clients and metadata made by one copy are not
// recognised by another (`instanceof`), and each program has its own node_modules.
//
//   const am = require('.../clients/node/lib/mesh')({
//     grpc: require('@grpc/grpc-js'), protoLoader: require('@grpc/proto-loader'), protobuf: require('protobufjs'),
//   });

const fs = require('node:fs');
const path = require('node:path');

/** The repository's proto/ directory (override with AGENTMESH_PROTO_DIR). */
const PROTO_DIR = process.env.AGENTMESH_PROTO_DIR || path.resolve(__dirname, '..', '..', '..', 'proto');

/** google.rpc.ErrorInfo.domain of every agentmesh error. */
const ERROR_DOMAIN = 'agentmesh.local';

/** The trust domain of every mesh identity. */
const TRUST_DOMAIN = 'agentmesh.local';

const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';

/** Options of @grpc/proto-loader: enums as their names, 64-bit numbers as strings, defaults filled in. */
const LOADER_OPTIONS = Object.freeze({ keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });

function meshModule({ grpc, protoLoader, protobuf }) {
  if (!grpc || !protoLoader || !protobuf) throw new TypeError('mesh needs {grpc, protoLoader, protobuf}');

  /**
   * Loads the contracts in `files` (relative to proto/): the grpc-js package object
   * (e.g. agentmesh.v1.SupervisorService, grpc.health.v1.Health).
   */
  function loadContracts(files, protoDir = PROTO_DIR) {
    const definition = protoLoader.loadSync(files, { ...LOADER_OPTIONS, includeDirs: [protoDir] });
    return grpc.loadPackageDefinition(definition);
  }

  /** mTLS channel credentials from PEM files: the mesh CA, this program's certificate and key. */
  function mtlsCredentials({ ca, cert, key }) {
    return grpc.credentials.createSsl(fs.readFileSync(ca), fs.readFileSync(key), fs.readFileSync(cert));
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

  /**
   * Calls a unary method as a promise; resolves to {response, metadata} (the response's initial metadata).
   * `metadata` (a grpc.Metadata) is sent with the call; `onCall` receives the call object (to cancel it).
   */
  function call(client, method, request, { deadlineMs = 30000, metadata = null, onCall = null } = {}) {
    return new Promise((resolve, reject) => {
      let received = new grpc.Metadata();
      const options = { deadline: Date.now() + deadlineMs };
      const done = (err, response) => {
        if (err) reject(err);
        else resolve({ response, metadata: received });
      };
      const c = metadata ? client[method](request, metadata, options, done) : client[method](request, options, done);
      c.on('metadata', (md) => { received = md; });
      if (onCall) onCall(c);
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

  /** The name of a gRPC status code: 7 -> 'PERMISSION_DENIED'. */
  function codeName(code) {
    return Object.keys(grpc.status).find((k) => grpc.status[k] === code) || String(code);
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
      codeName: codeName(err.code),
      message: err.details,
      reason: null,
      domain: null,
      metadata: {},
      field: null,
    };
    const raw = err.metadata && typeof err.metadata.get === 'function' ? err.metadata.get('grpc-status-details-bin') : [];
    if (!raw.length) return out;
    const { Status } = loadStatusTypes();
    let status;
    try {
      status = Status.toObject(Status.decode(raw[0]), { defaults: true });
    } catch {
      return out; // not a google.rpc.Status: the code and message are all there is
    }
    return { ...decodeStatus(status), message: status.message || out.message };
  }

  /**
   * A google.rpc.Status message as a decoded object ({code, message, details: [{type_url, value}]}, e.g. a
   * batch result's `error`), in the shape of decodeError: {code, codeName, message, reason, domain, metadata,
   * field}. `reason` is null when no google.rpc.ErrorInfo is among the details.
   */
  function decodeStatus(status) {
    const out = {
      code: Number(status.code) || 0,
      codeName: codeName(Number(status.code) || 0),
      message: status.message || '',
      reason: null,
      domain: null,
      metadata: {},
      field: null,
    };
    const { ErrorInfo } = loadStatusTypes();
    for (const detail of status.details || []) {
      if (detail.type_url === ERROR_INFO_TYPE) {
        let info;
        try {
          info = ErrorInfo.toObject(ErrorInfo.decode(detail.value), { defaults: true });
        } catch {
          break; // not an ErrorInfo after all: the code and message are all there is
        }
        out.reason = info.reason;
        out.domain = info.domain;
        out.metadata = info.metadata || {};
        out.field = out.metadata.field || null;
        break;
      }
    }
    return out;
  }

  /**
   * A server's error for a grpc-js callback, as every mesh server answers (AIP-193): the status
   * `code` (a name, e.g. 'PERMISSION_DENIED'), the message, and in `grpc-status-details-bin` a
   * google.rpc.Status holding a google.rpc.ErrorInfo(reason, domain "agentmesh.local", metadata),
   * `field` naming the request field when there is one.
   */
  function meshError(code, message, reason, { field = null, metadata = {} } = {}) {
    const numeric = typeof code === 'number' ? code : grpc.status[code];
    if (numeric === undefined) throw new TypeError(`not a gRPC status code: ${code}`);
    const { Status, ErrorInfo } = loadStatusTypes();
    const infoMetadata = { ...metadata, ...(field ? { field } : {}) };
    const info = ErrorInfo.encode(ErrorInfo.create({ reason, domain: ERROR_DOMAIN, metadata: infoMetadata })).finish();
    const status = Status.encode(Status.create({
      code: numeric, message, details: [{ type_url: ERROR_INFO_TYPE, value: info }],
    })).finish();
    const trailers = new grpc.Metadata();
    trailers.set('grpc-status-details-bin', Buffer.from(status));
    const err = new Error(message);
    err.code = numeric;
    err.details = message;
    err.metadata = trailers;
    err.reason = reason;
    err.field = field;
    return err;
  }

  return {
    PROTO_DIR,
    ERROR_DOMAIN,
    TRUST_DOMAIN,
    grpc,
    loadContracts,
    homeFiles,
    mtlsCredentials,
    serverName,
    connect,
    call,
    collect,
    codeName,
    decodeError,
    decodeStatus,
    meshError,
    structToJson,
    jsonToStruct,
    valueToJson,
    jsonToValue,
  };
}

/** The identity files of a mesh home: trust bundle, and the certificate and key of `identity` (KIND-NAME). */
function homeFiles(home, identity) {
  return {
    ca: path.join(home, 'trust', 'ca.pem'),
    cert: path.join(home, 'workloads', identity, 'cert.pem'),
    key: path.join(home, 'workloads', identity, 'key.pem'),
  };
}

/** The DNS name a mesh server's certificate carries for its SPIFFE id: svc/supervisor -> supervisor.svc.agentmesh.local. */
function serverName(kind, name) {
  return `${name}.${kind}.${TRUST_DOMAIN}`;
}

const VALUE_KINDS = ['nullValue', 'numberValue', 'stringValue', 'boolValue', 'structValue', 'listValue'];

/** A google.protobuf.Value (as @grpc/proto-loader gives it, oneof `kind` named) as plain JSON. */
function valueToJson(value) {
  if (value === null || value === undefined) return null;
  // A decoded Value names its case in `kind` (oneofs: true); one built in code may only hold the field.
  const kind = value.kind || VALUE_KINDS.find((k) => value[k] !== undefined && value[k] !== null);
  switch (kind) {
    case 'numberValue': return value.numberValue;
    case 'stringValue': return value.stringValue;
    case 'boolValue': return value.boolValue;
    case 'structValue': return structToJson(value.structValue);
    case 'listValue': return ((value.listValue && value.listValue.values) || []).map(valueToJson);
    default: return null; // nullValue, or no kind at all
  }
}

/** A google.protobuf.Struct as a plain object. */
function structToJson(struct) {
  const out = {};
  for (const [key, value] of Object.entries((struct && struct.fields) || {})) out[key] = valueToJson(value);
  return out;
}

/** Plain JSON as a google.protobuf.Value (a number that is not finite cannot be one). */
function jsonToValue(value) {
  if (value === null || value === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError(`a Struct cannot hold ${value}`);
    return { numberValue: value };
  }
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(jsonToValue) } };
  if (typeof value === 'object') return { structValue: jsonToStruct(value) };
  throw new TypeError(`a Struct cannot hold a ${typeof value}`);
}

/** A plain object as a google.protobuf.Struct. */
function jsonToStruct(object) {
  const fields = {};
  for (const [key, value] of Object.entries(object || {})) fields[key] = jsonToValue(value);
  return { fields };
}

module.exports = meshModule;
module.exports.PROTO_DIR = PROTO_DIR;
module.exports.LOADER_OPTIONS = LOADER_OPTIONS;
