// Renders the service's own OpenAPI document (/openapi.json) as a reference page: operations by tag,
// their parameters, bodies and responses, and the schemas. No dependencies and no other host, so the
// docs work offline; the document itself stays the single source of truth.
'use strict';
(() => {
  const root = document.getElementById('docs');
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const refName = (ref) => ref.split('/').pop();
  // A schema in one line: `TaskView`, `string (uuid)`, `array of StepView`, `integer ≥ 1`.
  function type(s) {
    if (!s) return 'any';
    if (s.$ref) return h('a', { href: '#schema-' + refName(s.$ref) }, refName(s.$ref));
    const alts = s.oneOf || s.anyOf || s.allOf;
    if (alts) return alts.map((a, i) => [i ? ' | ' : '', type(a)]);
    let t = Array.isArray(s.type) ? s.type.filter((x) => x !== 'null').join(' | ') + (s.type.includes('null') ? '?' : '') : (s.type || 'object');
    if (s.type === 'array' || (Array.isArray(s.type) && s.type.includes('array'))) return ['array of ', type(s.items)];
    const notes = [];
    if (s.format) notes.push(s.format);
    if (s.enum) notes.push('one of ' + s.enum.join(', '));
    if (s.minimum !== undefined) notes.push('≥ ' + s.minimum);
    if (s.maximum !== undefined) notes.push('≤ ' + s.maximum);
    if (s.minLength !== undefined) notes.push('min length ' + s.minLength);
    if (s.maxLength !== undefined) notes.push('max length ' + s.maxLength);
    return t + (notes.length ? ` (${notes.join(', ')})` : '');
  }
  function content(c) {
    if (!c) return null;
    return Object.entries(c).map(([mime, v]) => h('div', {}, h('code', {}, mime), ' ', type(v.schema)));
  }
  function operation(path, method, op) {
    const params = op.parameters || [];
    return h('section', { class: 'card', id: op.operationId || `${method}-${path}` },
      h('h2', {}, h('code', {}, method.toUpperCase() + ' ' + path)),
      op.summary ? h('p', {}, op.summary) : null,
      op.description && op.description !== op.summary ? h('p', { class: 'muted' }, op.description) : null,
      op.security && op.security.every((s) => !Object.keys(s).length) ? h('p', { class: 'muted' }, 'No authentication.') : null,
      params.length ? h('table', {}, h('tr', {}, ['parameter', 'in', 'type', 'description'].map((c) => h('th', {}, c))),
        params.map((p) => h('tr', {}, h('td', {}, h('code', {}, p.name), p.required ? ' *' : ''), h('td', {}, p.in), h('td', {}, type(p.schema)), h('td', {}, p.description || '')))) : null,
      op.requestBody ? h('div', {}, h('span', { class: 'label' }, 'body '), content(op.requestBody.content)) : null,
      h('table', {}, h('tr', {}, ['status', 'meaning', 'body'].map((c) => h('th', {}, c))),
        Object.entries(op.responses || {}).map(([code, r]) => h('tr', {}, h('td', {}, code), h('td', {}, r.description || ''), h('td', {}, content(r.content))))));
  }
  function schema(name, s) {
    const props = Object.entries(s.properties || {});
    const required = new Set(s.required || []);
    return h('section', { class: 'card', id: 'schema-' + name }, h('h2', {}, name),
      s.description ? h('p', { class: 'muted' }, s.description) : null,
      props.length ? h('table', {}, props.map(([p, v]) => h('tr', {}, h('td', {}, h('code', {}, p), required.has(p) ? ' *' : ''), h('td', {}, type(v)), h('td', {}, v.description || ''))))
        : h('p', {}, type(s)));
  }
  fetch('/openapi.json').then((r) => r.json()).then((doc) => {
    const byTag = new Map();
    for (const [path, item] of Object.entries(doc.paths || {})) {
      for (const [method, op] of Object.entries(item)) {
        const tag = (op.tags || ['other'])[0];
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push(operation(path, method, op));
      }
    }
    const schemas = Object.entries(doc.components?.schemas || {}).sort(([a], [b]) => a.localeCompare(b));
    root.replaceChildren(h('div', {},
      h('h1', {}, `${doc.info.title} ${doc.info.version || ''}`),
      doc.info.description ? h('p', {}, doc.info.description) : null,
      h('p', { class: 'muted' }, 'Authenticate with ', h('code', {}, 'Authorization: Bearer <API key>'), '. Errors are ', h('code', {}, '{code, message}'), '. The raw document: ', h('a', { href: '/openapi.json' }, '/openapi.json'), '.'),
      [...byTag].map(([tag, ops]) => [h('h1', { id: 'tag-' + tag }, tag), ops]),
      h('h1', {}, 'Schemas'), schemas.map(([n, s]) => schema(n, s))));
  }).catch((e) => root.replaceChildren(h('p', { class: 'error' }, 'cannot load /openapi.json: ' + e.message)));
})();
