'use strict';
// The subset of JSON Schema (2020-12) the agent manifests use, checked without a dependency:
// type, enum, const, pattern, properties, additionalProperties, required, propertyNames, items,
// allOf, if/then/else (and the annotations title, description, $comment, default, examples).
// A schema using any other keyword is refused when it is compiled, so nothing it says is
// silently left unchecked (fail closed).
//
// `compile(schema)` returns `validate(value)` -> [{path, message}], every violation with the path
// of the offending value (['workers', 0] for input.workers[0]) as the Python agents report it.

const ANNOTATIONS = new Set(['title', 'description', '$comment', 'default', 'examples']);
const KEYWORDS = new Set(['type', 'enum', 'const', 'pattern', 'properties', 'additionalProperties', 'required',
  'propertyNames', 'items', 'allOf', 'if', 'then', 'else']);
const TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

class SchemaError extends Error {}

function typeOf(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value; // object, string, number, boolean
}

function hasType(value, type) {
  const actual = typeOf(value);
  if (type === 'integer') return actual === 'number' && Number.isInteger(value);
  return actual === type;
}

function equal(a, b) {
  if (typeOf(a) !== typeOf(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
  if (a && typeof a === 'object') {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && equal(a[k], b[k]));
  }
  return a === b;
}

function check(schema, where) {
  if (typeof schema === 'boolean') return;
  if (!schema || typeof schema !== 'object' || Array.isArray(schema)) throw new SchemaError(`${where}: a schema must be an object`);
  for (const key of Object.keys(schema)) {
    if (!KEYWORDS.has(key) && !ANNOTATIONS.has(key)) throw new SchemaError(`${where}: the keyword ${key} is not supported`);
  }
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  for (const t of types) if (!TYPES.has(t)) throw new SchemaError(`${where}.type: unknown type ${t}`);
  if (schema.pattern !== undefined) new RegExp(schema.pattern, 'u'); // throws on a bad pattern
  for (const [name, sub] of Object.entries(schema.properties || {})) check(sub, `${where}.properties.${name}`);
  for (const key of ['additionalProperties', 'propertyNames', 'items', 'if', 'then', 'else']) {
    if (schema[key] !== undefined) check(schema[key], `${where}.${key}`);
  }
  (schema.allOf || []).forEach((sub, i) => check(sub, `${where}.allOf[${i}]`));
}

function errors(schema, value, path, out) {
  if (schema === true) return out;
  if (schema === false) {
    out.push({ path, message: 'no value is allowed here' });
    return out;
  }
  if (schema.type !== undefined) {
    const types = [].concat(schema.type);
    if (!types.some((t) => hasType(value, t))) {
      out.push({ path, message: `must be of type ${types.join(' or ')}` });
      return out; // the other keywords describe values of that type
    }
  }
  if (schema.enum !== undefined && !schema.enum.some((e) => equal(e, value))) {
    out.push({ path, message: `must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}` });
  }
  if (schema.const !== undefined && !equal(schema.const, value)) {
    out.push({ path, message: `must be ${JSON.stringify(schema.const)}` });
  }
  if (schema.pattern !== undefined && typeof value === 'string' && !new RegExp(schema.pattern, 'u').test(value)) {
    out.push({ path, message: `does not match ${schema.pattern}` });
  }
  if (typeOf(value) === 'object') {
    for (const name of schema.required || []) {
      if (!Object.prototype.hasOwnProperty.call(value, name)) out.push({ path, message: `${name} is required` });
    }
    const properties = schema.properties || {};
    for (const [name, item] of Object.entries(value)) {
      if (Object.prototype.hasOwnProperty.call(properties, name)) errors(properties[name], item, [...path, name], out);
      else if (schema.additionalProperties === false) out.push({ path, message: `the property ${name} is not allowed` });
      else if (schema.additionalProperties !== undefined) errors(schema.additionalProperties, item, [...path, name], out);
      if (schema.propertyNames !== undefined && errors(schema.propertyNames, name, path, []).length) {
        out.push({ path, message: `the property ${name} is not allowed here` });
      }
    }
  }
  if (typeOf(value) === 'array' && schema.items !== undefined) {
    value.forEach((item, i) => errors(schema.items, item, [...path, i], out));
  }
  for (const sub of schema.allOf || []) errors(sub, value, path, out);
  if (schema.if !== undefined) {
    const holds = errors(schema.if, value, path, []).length === 0;
    const branch = holds ? schema.then : schema.else;
    if (branch !== undefined) errors(branch, value, path, out);
  }
  return out;
}

/** The dotted path of a value: ['workers', 0, 'worker_id'] under 'task.input' -> 'task.input.workers[0].worker_id'. */
function fieldPath(prefix, path) {
  let out = prefix;
  for (const part of path) out += typeof part === 'number' ? `[${part}]` : (out ? `.${part}` : String(part));
  return out;
}

/** Orders violations as the Python agents do (by their path, element by element as text), so the first is the same. */
function byPath(a, b) {
  const pa = a.path.map(String);
  const pb = b.path.map(String);
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    if (pa[i] !== pb[i]) return pa[i] < pb[i] ? -1 : 1;
  }
  return pa.length - pb.length;
}

/** A validator of `schema`: value -> violations, ordered by path. Throws SchemaError for a schema it cannot check. */
function compile(schema, where = 'schema') {
  check(schema, where);
  return (value) => errors(schema, value, [], []).sort(byPath);
}

module.exports = { compile, fieldPath, SchemaError };
