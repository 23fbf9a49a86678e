#!/usr/bin/env node
'use strict';
// training-agent 2.0.0 in Node.js: serves agentmesh.v1.SpecialistService and grpc health over mTLS
// with its own certificate. Run `node server.js --help`.

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');

const { TrainingAgent, loadManifest, MANIFEST } = require('./lib/agent');
const { AgentServer, decodeGrant } = require('./lib/service');
const { subjectAltNames } = require('./lib/identity');

const USAGE = `usage: node agents/node-training/server.js --home HOME --listen HOST:PORT --capability HOST:PORT
                                         [--audit HOST:PORT] [--identity KIND-NAME] [--manifest FILE]
                                         [--address-file FILE]

training-agent 2.0.0, the training specialist of agentmesh in Node.js (grpc-js): serves
agentmesh.v1.SpecialistService (RunTask, DescribeAgent) and grpc.health.v1.Health over mTLS with its
own certificate, takes tasks from the supervisor only (spiffe://agentmesh.local/svc/supervisor), and
reads trainings through CapabilityService.InvokeCapability with each task's grant.

options (each also from the environment variable named in brackets):
  --home HOME            the mesh home: HOME/trust/ca.pem and HOME/workloads/IDENTITY/{cert,key}.pem
                         [AGENTMESH_HOME]
  --listen HOST:PORT     where to listen; port 0 picks a free one [AGENTMESH_LISTEN]
  --capability HOST:PORT the capability service (verified as capability.svc.agentmesh.local)
                         [AGENTMESH_CAPABILITY]
  --audit HOST:PORT      the audit service, where every refusal is recorded as ACCESS_DENIED under
                         the agent's identity; without it refusals are only logged [AGENTMESH_AUDIT]
  --identity KIND-NAME   the identity directory under HOME/workloads (default agent-training-agent);
                         its certificate must carry the manifest's SPIFFE id. Issue it with
                         agentmesh certs issue --spiffe-id spiffe://agentmesh.local/agent/training-agent
  --manifest FILE        the agent manifest (default: manifest.yaml next to this file)
  --address-file FILE    write {"address": "HOST:PORT"} there once listening (for port 0)
  -h, --help             show this help and exit

It prints "listening on HOST:PORT" once it serves, and stops on SIGTERM or SIGINT (exit 0).
Exit codes: 0 stopped; 2 bad usage, a missing or unusable certificate or manifest, a port in use.`;

class UsageError extends Error {}

const ADDRESS_RE = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

function address(name, value, { allowZero }) {
  const m = ADDRESS_RE.exec(value || '');
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535 || (port === 0 && !allowZero)) {
    throw new UsageError(`--${name}: expected HOST:PORT${allowZero ? ' (port 0: any free one)' : ''}, got ${JSON.stringify(value)}`);
  }
  return value;
}

function options(argv, env) {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        home: { type: 'string' },
        listen: { type: 'string' },
        capability: { type: 'string' },
        audit: { type: 'string' },
        identity: { type: 'string' },
        manifest: { type: 'string' },
        'address-file': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new UsageError(err.message);
  }
  if (parsed.help) return { help: true };
  const home = parsed.home || env.AGENTMESH_HOME;
  if (!home) throw new UsageError('--home (or AGENTMESH_HOME) is required');
  const listen = parsed.listen || env.AGENTMESH_LISTEN;
  if (!listen) throw new UsageError('--listen (or AGENTMESH_LISTEN) is required');
  const capability = parsed.capability || env.AGENTMESH_CAPABILITY;
  if (!capability) throw new UsageError('--capability (or AGENTMESH_CAPABILITY) is required');
  const audit = parsed.audit || env.AGENTMESH_AUDIT || null;
  const identity = parsed.identity || 'agent-training-agent';
  if (!/^(svc|agent|client)-[a-z0-9][a-z0-9._-]{0,62}$/.test(identity)) {
    throw new UsageError(`--identity: expected KIND-NAME (e.g. agent-training-agent), got ${JSON.stringify(identity)}`);
  }
  return {
    home: path.resolve(home),
    listen: address('listen', listen, { allowZero: true }),
    capability: address('capability', capability, { allowZero: false }),
    audit: audit === null ? null : address('audit', audit, { allowZero: false }),
    identity,
    manifest: path.resolve(parsed.manifest || MANIFEST),
    addressFile: parsed['address-file'] ? path.resolve(parsed['address-file']) : null,
  };
}

/** The identity files, each readable, the leaf valid now, its key its own, carrying `spiffeId`. */
function tlsFiles(home, identity, spiffeId) {
  const files = {
    ca: path.join(home, 'trust', 'ca.pem'),
    cert: path.join(home, 'workloads', identity, 'cert.pem'),
    key: path.join(home, 'workloads', identity, 'key.pem'),
  };
  const read = (file) => {
    try {
      return fs.readFileSync(file);
    } catch (err) {
      const hint = file === files.ca ? 'is this a mesh home? (agentmesh certs init)'
        : `issue it with: agentmesh certs issue --spiffe-id ${spiffeId}`;
      throw new UsageError(`${file}: cannot read it (${err.code || err.message}); ${hint}`);
    }
  };
  let ca;
  let cert;
  try {
    ca = new crypto.X509Certificate(read(files.ca));
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`${files.ca}: not a PEM certificate`);
  }
  const certPem = read(files.cert);
  try {
    cert = new crypto.X509Certificate(certPem);
  } catch {
    throw new UsageError(`${files.cert}: not a PEM certificate`);
  }
  let key;
  try {
    key = crypto.createPrivateKey(read(files.key));
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`${files.key}: not a PEM private key`);
  }
  const now = Date.now();
  if (now < Date.parse(cert.validFrom) || now > Date.parse(cert.validTo)) {
    throw new UsageError(`${files.cert}: the certificate is not valid now (valid ${cert.validFrom} to ${cert.validTo})`);
  }
  if (!cert.checkPrivateKey(key)) throw new UsageError(`${files.key}: not the key of ${files.cert}`);
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) throw new UsageError(`${files.cert}: not issued by the mesh CA ${files.ca}`);
  const uris = (subjectAltNames(cert.subjectAltName) || []).filter(([type]) => type === 'URI').map(([, v]) => v);
  if (uris.length !== 1 || uris[0] !== spiffeId) {
    throw new UsageError(`${files.cert}: carries ${uris.join(', ') || 'no SPIFFE id'}, not the agent's ${spiffeId}`);
  }
  return files;
}

async function main(argv = process.argv.slice(2), env = process.env) {
  let opts;
  let agent;
  let files;
  try {
    opts = options(argv, env);
    if (opts.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    let manifest;
    try {
      manifest = loadManifest(opts.manifest);
    } catch (err) {
      throw new UsageError(`--manifest: ${err.message}`);
    }
    try {
      agent = new TrainingAgent(manifest, { decodeGrant });
    } catch (err) {
      throw new UsageError(`--manifest: ${opts.manifest}: ${err.message}`);
    }
    files = tlsFiles(opts.home, opts.identity, agent.spiffeId);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`node-training: ${err.message}\n${err.message.startsWith('--') ? 'see --help\n' : ''}`);
    return 2;
  }
  const log = (line) => process.stderr.write(`${new Date().toISOString()} training-agent ${agent.version}: ${line}\n`);
  const server = new AgentServer(agent, { tls: files, capability: opts.capability, audit: opts.audit, log });
  let bound;
  try {
    bound = await server.listen(opts.listen);
  } catch (err) {
    process.stderr.write(`node-training: --listen ${opts.listen}: cannot listen (${err.message})\n`);
    return 2;
  }
  if (opts.addressFile) {
    const tmp = `${opts.addressFile}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify({ address: bound, pid: process.pid }));
    fs.renameSync(tmp, opts.addressFile);
  }
  process.stdout.write(`listening on ${bound}\n`);
  log(`serving ${agent.spiffeId} on ${bound}; capability ${opts.capability}; audit ${opts.audit || 'none (refusals only logged)'}`);
  await new Promise((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  log('stopping');
  await server.stop();
  return 0;
}

if (require.main === module) {
  main().then((code) => { process.exitCode = code; }, (err) => {
    process.stderr.write(`node-training: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 1;
  });
}

module.exports = { main, options, tlsFiles, UsageError };
