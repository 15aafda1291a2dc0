// Knob controls generated from the JSON Schema of each knob section (GET /knobs/schema):
// a new knob, detector or mode gets a control without editing this file. Values are
// sent as typed and validated by the service exactly like the config file; a rejected
// value shows the service's message beside the field it names.
import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { ApiError, api, errorText } from '../api.ts';
import { duration } from '../format.ts';
import { type KnobSection, S } from '../state.ts';

export interface JsonSchema {
  type?: string | string[];
  enum?: unknown[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  default?: unknown;
}

type Kind = 'object' | 'enum' | 'boolean' | 'integer' | 'number' | 'duration' | 'list' | 'string' | 'json';

/** The control a schema gets; `nullable` when null is allowed (an empty field sends null). */
export function kindOf(s: JsonSchema): { kind: Kind; nullable: boolean; s: JsonSchema } {
  if (s.anyOf) {
    const rest = s.anyOf.filter((x) => x.type !== 'null');
    if (rest.length === 1) return { ...kindOf(rest[0]), nullable: rest.length < s.anyOf.length };
    const types = rest.map((x) => x.type);
    if (types.includes('number') && types.includes('string') && rest.length === 2)
      return { kind: 'duration', nullable: rest.length < s.anyOf.length, s };
    return { kind: 'json', nullable: false, s };
  }
  const t = s.type;
  if (Array.isArray(t)) {
    const nullable = t.includes('null');
    if (t.includes('number') && t.includes('string')) return { kind: 'duration', nullable, s };
    const only = t.filter((x) => x !== 'null');
    if (only.length === 1) return { ...kindOf({ ...s, type: only[0] }), nullable };
    return { kind: 'json', nullable, s };
  }
  if (t === 'object' && s.properties && Object.keys(s.properties).length) return { kind: 'object', nullable: false, s };
  if (s.enum) return { kind: 'enum', nullable: false, s };
  if (t === 'boolean' || t === 'integer' || t === 'number' || t === 'string') return { kind: t, nullable: false, s };
  if (t === 'array' && s.items?.type === 'string') return { kind: 'list', nullable: false, s };
  return { kind: 'json', nullable: false, s };
}

function show(kind: Kind, v: unknown): string {
  if (v === null || v === undefined) return '';
  if (kind === 'duration' && typeof v === 'number') return duration(v);
  if (kind === 'list' && Array.isArray(v)) return v.join(', ');
  if (kind === 'json') return JSON.stringify(v);
  return String(v);
}

/** What the operator typed, as close to config as possible; the service decides if it is valid. */
function parse(kind: Kind, nullable: boolean, text: string): unknown {
  const t = text.trim();
  if (nullable && t === '') return null;
  if (kind === 'integer' || kind === 'number') return /^-?\d+(\.\d+)?(e-?\d+)?$/i.test(t) ? Number(t) : t;
  if (kind === 'duration') return /^\d+$/.test(t) ? Number(t) : t;
  if (kind === 'list')
    return t
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  if (kind === 'json') {
    try {
      return JSON.parse(t);
    } catch {
      return t;
    }
  }
  return text;
}

const get = (o: unknown, path: string[]) =>
  path.reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), o);

const nest = (path: string[], value: unknown): unknown => path.reduceRight<unknown>((v, k) => ({ [k]: v }), value);

/** Field path -> the service's message; `saved` is the last field that was accepted. */
const errors = new Map<string, string>();
let saved = '';
let general = '';

const setIn = (o: Record<string, unknown>, path: string[], value: unknown): Record<string, unknown> => {
  const [k, ...rest] = path;
  return { ...o, [k]: rest.length ? setIn((o[k] as Record<string, unknown>) ?? {}, rest, value) : value };
};

async function submit(section: string, path: string[], value: unknown, onChange: () => void): Promise<boolean> {
  const full = [section, ...path].join('.');
  const before = S.knobs;
  // Shown at once so a redraw before the answer keeps the new value; the answer or the undo replaces it.
  S.knobs = setIn(S.knobs, [section, ...path], value);
  try {
    S.knobs = await api<Record<string, unknown>>('PATCH', '/knobs', nest([section, ...path], value));
    errors.clear();
    general = '';
    saved = full;
    onChange();
    return true;
  } catch (e) {
    S.knobs = before;
    errors.clear();
    saved = '';
    const problems = e instanceof ApiError ? e.problems : [];
    for (const p of problems) errors.set(p.path, p.message);
    if (!problems.length) errors.set(full, errorText(e));
    else if (!errors.has(full)) errors.set(full, `rejected: ${problems.map((p) => p.path).join(', ')}`);
    general = problems.length ? problems.map((p) => `${p.path}: ${p.message}`).join('; ') : '';
    onChange();
    return false;
  }
}

interface FieldProps {
  section: string;
  path: string[];
  schema: JsonSchema;
  current: unknown;
  def: unknown;
  hint?: string;
  onChange: () => void;
}

function Field({ section, path, schema, current, def, hint, onChange }: FieldProps) {
  const [draft, setDraft] = useState<string | null>(null);
  const { kind, nullable, s } = kindOf(schema);
  const full = [section, ...path].join('.');
  const id = `knob-${full.replace(/[^a-zA-Z0-9_-]/g, '-')}`;
  const err = errors.get(full);
  const send = async (v: unknown) => {
    if (await submit(section, path, v, onChange)) setDraft(null);
  };
  let control: unknown;
  if (kind === 'boolean') {
    control = html`<input type="checkbox" id=${id} data-knob=${full} checked=${current === true}
      aria-invalid=${err ? 'true' : undefined} onChange=${(e: Event) => send((e.target as HTMLInputElement).checked)} />`;
  } else if (kind === 'enum') {
    control = html`<select id=${id} data-knob=${full} value=${String(current)} aria-invalid=${err ? 'true' : undefined}
      onChange=${(e: Event) => send((e.target as HTMLSelectElement).value)}>
      ${(s.enum ?? []).map((o) => html`<option value=${String(o)} selected=${o === current}>${String(o)}</option>`)}
    </select>`;
  } else {
    const range =
      s.minimum !== undefined || s.maximum !== undefined || s.exclusiveMinimum !== undefined
        ? `${s.exclusiveMinimum !== undefined ? `> ${s.exclusiveMinimum}` : (s.minimum ?? '')}..${s.maximum ?? ''}`
        : kind === 'duration'
          ? 'ms or 90s, 5m, 1h'
          : kind === 'list'
            ? 'comma separated'
            : '';
    control = html`<input type="text" id=${id} data-knob=${full} value=${draft ?? show(kind, current)}
      inputmode=${kind === 'integer' || kind === 'number' ? 'decimal' : undefined}
      placeholder=${nullable ? 'empty: null' : range} title=${range} aria-invalid=${err ? 'true' : undefined}
      aria-describedby=${`${id}-msg`}
      onInput=${(e: Event) => setDraft((e.target as HTMLInputElement).value)}
      onChange=${(e: Event) => send(parse(kind, nullable, (e.target as HTMLInputElement).value))} />`;
  }
  const changed = JSON.stringify(current) !== JSON.stringify(def);
  return html`<tr class=${changed ? 'changed' : ''}>
    <th scope="row"><label for=${id}>${path.join('.')}</label></th>
    <td>${control}</td>
    <td class="def" title="default">${show(kind, def) || '-'}</td>
    <td id=${`${id}-msg`} class="msg">
      ${err ? html`<span class="err field-error" role="alert">${err}</span>` : saved === full ? html`<span class="ok">saved</span>` : html`<span class="hint">${hint ?? ''}</span>`}
    </td>
  </tr>`;
}

function rows(sec: KnobSection, schema: JsonSchema, path: string[], onChange: () => void): unknown[] {
  // Recurse exactly where coverage.ts schemaLeaves() does, so every leaf it counts gets a control.
  if (schema.type === 'object' && Object.keys(schema.properties ?? {}).length && path.length < 4) {
    const head = path.length
      ? [html`<tr class="group"><th colspan="4" scope="rowgroup">${path.join('.')}</th></tr>`]
      : [];
    return [
      ...head,
      ...Object.entries(schema.properties ?? {}).flatMap(([k, s]) => rows(sec, s, [...path, k], onChange)),
    ];
  }
  return [
    html`<${Field} key=${path.join('.')} section=${sec.section} path=${path} schema=${schema}
      current=${get(S.knobs[sec.section], path)} def=${get(sec.defaults, path)} hint=${sec.hints[path.join('.')]}
      onChange=${onChange} />`,
  ];
}

export function KnobsView({ onChange }: { onChange: () => void }) {
  return html`<section aria-labelledby="h-knobs">
    <h2 id="h-knobs">Knobs</h2>
    <p class="line">applied at once and persisted; Enter or Tab sets a field</p>
    ${general ? html`<p class="err" role="alert" id="knob-errors">${general}</p>` : null}
    ${S.knobSchema.map(
      (sec) => html`<table class="grid knobs" data-section=${sec.section} key=${sec.section}>
        <caption>${sec.section}${sec.owner !== sec.section ? ` (${sec.owner})` : ''}</caption>
        <thead><tr><th scope="col">knob</th><th scope="col">current</th><th scope="col">default</th><th scope="col">note</th></tr></thead>
        <tbody>${rows(sec, sec.schema as JsonSchema, [], onChange)}</tbody>
      </table>`,
    )}
  </section>`;
}
