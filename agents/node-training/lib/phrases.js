'use strict';
// Statements in the language the user asked in (AgentTask.locale), from data: every statement's
// text is an English template with named values, `say('Permit {permit_id} ...', {permit_id})`;
// phrases/<language>.yaml maps the template to the same sentence in that language, with the same
// {names}. A template a catalog lacks stays English. Codes, subjects, evidence and verdicts never
// depend on the language. (The same scheme as the Python specialists, with this agent's own files.)

const fs = require('node:fs');
const path = require('node:path');
const yaml = require('js-yaml');

const DEFAULT = 'en';
const DIR = path.join(__dirname, '..', 'phrases');
const catalogs = new Map();
const missing = new Set();

/** The catalog a BCP 47 tag reads from: 'pt-BR' -> 'pt'; an unknown or empty tag -> English. */
function languageOf(locale) {
  const language = String(locale || DEFAULT).replace(/_/g, '-').split('-', 1)[0].toLowerCase();
  return language === DEFAULT || fs.existsSync(path.join(DIR, `${language}.yaml`)) ? language : DEFAULT;
}

/** English template -> the template in `language` (empty for English). */
function catalog(language) {
  if (language === DEFAULT) return {};
  if (!catalogs.has(language)) {
    const file = path.join(DIR, `${language}.yaml`);
    const data = yaml.load(fs.readFileSync(file, 'utf8')) || {};
    if (typeof data !== 'object' || Array.isArray(data)
        || !Object.entries(data).every(([k, v]) => typeof k === 'string' && typeof v === 'string')) {
      throw new Error(`${file}: expected a mapping of English template to translation`);
    }
    catalogs.set(language, data);
  }
  return catalogs.get(language);
}

function fill(text, values) {
  return text.replace(/\{\{|\}\}|\{(\w+)\}/g, (match, name) => {
    if (match === '{{') return '{';
    if (match === '}}') return '}';
    if (!Object.prototype.hasOwnProperty.call(values, name)) throw new Error(`no value for {${name}} in ${JSON.stringify(text)}`);
    return String(values[name]);
  });
}

/** A `say(template, values)` answering in `locale`'s language. */
function speaker(locale) {
  const language = languageOf(locale);
  const texts = catalog(language);
  const say = (template, values = {}) => {
    let text = template;
    if (language !== DEFAULT) {
      if (Object.prototype.hasOwnProperty.call(texts, template)) text = texts[template];
      else missing.add(`${language}\u0000${template}`);
    }
    return fill(text, values);
  };
  say.language = language;
  return say;
}

/** [language, template] pairs asked for that no catalog had, since the process started (for tests). */
function untranslated() {
  return [...missing].map((key) => key.split('\u0000'));
}

module.exports = { DEFAULT, languageOf, catalog, speaker, untranslated };
