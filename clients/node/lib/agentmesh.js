'use strict';
// A Node.js client of the agentmesh mesh, built from the contracts in proto/ only:
// @grpc/proto-loader reads the .proto files at run time, @grpc/grpc-js speaks
// gRPC over mTLS, protobufjs decodes the google.rpc.Status of an error. No code
// generated for Python is used. The shared part (contracts, credentials, errors)
// is lib/mesh.js, which the Node.js agents use too.
//
// Identity: the mesh authenticates the calling service by its client certificate
// (one SPIFFE URI SAN, spiffe://agentmesh.local/client/NAME) and verifies the
// server by the DNS SAN derived from its SPIFFE id (supervisor.svc.agentmesh.local).
// The end user travels in each request as a signed user assertion, which a real
// platform service gets from the identity provider (in development:
// `agentmesh token issue --tenant acme --user alice`).

const mesh = require('./mesh')({
  grpc: require('@grpc/grpc-js'),
  protoLoader: require('@grpc/proto-loader'),
  protobuf: require('protobufjs'),
});

/** Initial metadata of Analyze: the execution id, sent before any task runs. */
const EXECUTION_ID_METADATA = 'agentmesh-execution-id';

const SERVICE_FILES = [
  'agentmesh/v1/supervisor_service.proto',
  'agentmesh/v1/decision_center_service.proto',
  'agentmesh/v1/agent_registry_service.proto',
  'grpc/health/v1/health.proto',
];

/**
 * Loads the client's contracts: returns the grpc-js package object (agentmesh.v1.*, grpc.health.v1.*).
 * Enums come as their full names (EXECUTION_STATUS_SUCCEEDED), 64-bit numbers as strings,
 * unset fields with their defaults, a oneof's case in its name (e.g. `event`).
 */
function loadContracts(protoDir = mesh.PROTO_DIR) {
  return mesh.loadContracts(SERVICE_FILES, protoDir);
}

module.exports = {
  PROTO_DIR: mesh.PROTO_DIR,
  ERROR_DOMAIN: mesh.ERROR_DOMAIN,
  EXECUTION_ID_METADATA,
  loadContracts,
  homeFiles: mesh.homeFiles,
  mtlsCredentials: mesh.mtlsCredentials,
  serverName: mesh.serverName,
  connect: mesh.connect,
  call: mesh.call,
  collect: mesh.collect,
  decodeError: mesh.decodeError,
};
