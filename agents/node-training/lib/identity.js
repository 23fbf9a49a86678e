'use strict';
// Who is calling: the SPIFFE id of the TLS peer, read from its verified client certificate only
// (never from a request field or a header), and the deny-by-default caller table of this agent.
//
// A peer is a mesh identity when its certificate (verified by the TLS handshake against the mesh
// CA) carries exactly one URI SAN of the form spiffe://agentmesh.local/<svc|agent|client>/<name>,
// is not itself a CA, and was issued by the mesh CA directly (the mesh CA issues workload
// certificates only: a leaf of an intermediate is not a mesh identity).

const crypto = require('node:crypto');

const TRUST_DOMAIN = 'agentmesh.local';
const KINDS = ['svc', 'agent', 'client'];
const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** The SPIFFE id of the supervisor, the only caller of SpecialistService. */
const SUPERVISOR = `spiffe://${TRUST_DOMAIN}/svc/supervisor`;

/** {kind, name} of a canonical mesh SPIFFE id, or null. */
function parseSpiffeId(text) {
  const prefix = `spiffe://${TRUST_DOMAIN}/`;
  if (typeof text !== 'string' || !text.startsWith(prefix)) return null;
  const parts = text.slice(prefix.length).split('/');
  if (parts.length !== 2 || !KINDS.includes(parts[0]) || !NAME_RE.test(parts[1])) return null;
  return { kind: parts[0], name: parts[1] };
}

/**
 * The entries of an X509Certificate's subjectAltName ("URI:spiffe://..., DNS:x"), as [type, value].
 * Node quotes a value holding a comma or a quote as a JSON string; anything else unparsable is null.
 */
function subjectAltNames(text) {
  if (!text) return [];
  const out = [];
  let rest = text;
  while (rest.length) {
    const m = /^([A-Za-z ]+):/.exec(rest);
    if (!m) return null;
    rest = rest.slice(m[0].length);
    let value;
    if (rest.startsWith('"')) {
      const end = /^"(?:[^"\\]|\\.)*"/.exec(rest);
      if (!end) return null;
      try {
        value = JSON.parse(end[0]);
      } catch {
        return null;
      }
      rest = rest.slice(end[0].length);
    } else {
      const comma = rest.indexOf(', ');
      value = comma < 0 ? rest : rest.slice(0, comma);
      rest = comma < 0 ? '' : rest.slice(comma);
    }
    out.push([m[1], value]);
    if (rest.startsWith(', ')) rest = rest.slice(2);
    else if (rest.length) return null;
  }
  return out;
}

/**
 * The caller's SPIFFE id from a grpc-js server call, or null when the peer is not a mesh identity.
 * @param {object} call a grpc-js server call (getAuthContext: grpc-js >= 1.10)
 * @param {crypto.X509Certificate} ca the mesh CA
 */
function peerIdentity(call, ca) {
  const auth = typeof call.getAuthContext === 'function' ? call.getAuthContext() : null;
  const peer = auth && auth.sslPeerCertificate;
  if (!peer || !peer.raw) return null;
  let cert;
  try {
    cert = new crypto.X509Certificate(peer.raw);
  } catch {
    return null;
  }
  if (cert.ca || !cert.checkIssued(ca) || !cert.verify(ca.publicKey)) return null;
  const sans = subjectAltNames(cert.subjectAltName);
  if (sans === null) return null;
  const uris = sans.filter(([type]) => type === 'URI').map(([, value]) => value);
  if (uris.length !== 1 || parseSpiffeId(uris[0]) === null) return null;
  return uris[0];
}

/**
 * Which identity may call which method of this agent (deny by default), as the mesh's caller table
 * (agentmesh/access_policy.yaml) says for an agent: health from any mesh identity, SpecialistService
 * from the supervisor only.
 */
function callerAllowed(method, caller) {
  if (method.startsWith('/grpc.health.v1.Health/')) return parseSpiffeId(caller) !== null;
  if (method.startsWith('/agentmesh.v1.SpecialistService/')) return caller === SUPERVISOR;
  return false;
}

module.exports = { TRUST_DOMAIN, SUPERVISOR, parseSpiffeId, subjectAltNames, peerIdentity, callerAllowed };
