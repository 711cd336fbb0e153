// Talking to the relay: credentials from this tab's sessionStorage, JSON in and out, errors
// as exceptions with the relay's own message, and a reader of server-sent events.

const STORE = { key: 'relay.apiKey', admin: 'relay.adminToken' };

/** The API key ('key') or the admin token ('admin') the person gave, or ''. */
export function credential(kind) {
  return sessionStorage.getItem(STORE[kind]) || '';
}

export function setCredential(kind, value) {
  if (value) sessionStorage.setItem(STORE[kind], value);
  else sessionStorage.removeItem(STORE[kind]);
  window.dispatchEvent(new CustomEvent('credentials'));
}

/** A failed request: the HTTP status and the relay's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function failure(res) {
  let text = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    const err = body.error || {};
    text = `${res.status} ${err.message || res.statusText}${err.detail ? `: ${err.detail}` : ''}`;
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(res.status, text);
}

/**
 * A request with a credential. `opts`: cred ('key' | 'admin'), method, json (a body sent as
 * JSON), form (a FormData, sent as multipart), headers, raw (answer the Response itself).
 */
export async function request(path, opts = {}) {
  const cred = opts.cred || 'key';
  const token = credential(cred);
  if (!token) {
    throw new ApiError(0, cred === 'admin' ? 'Enter the admin token above first.' : 'Enter an API key above first.');
  }
  const headers = { Authorization: `Bearer ${token}`, ...(opts.headers || {}) };
  let body;
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = JSON.stringify(opts.json);
  } else if (opts.form) {
    body = opts.form;
  }
  const res = await fetch(path, { method: opts.method || (body ? 'POST' : 'GET'), headers, body, signal: opts.signal });
  if (!res.ok) throw await failure(res);
  if (opts.raw) return res;
  return res.json();
}

/** Fetches `path` (with the credential unless `signed`) as an object URL. */
export async function objectUrl(path, signed = false) {
  const res = signed ? await fetch(path) : await request(path, { raw: true });
  if (!res.ok) throw await failure(res);
  return URL.createObjectURL(await res.blob());
}

/** The server-sent events of a streaming answer, one {event, data} at a time, as they come. */
export async function* events(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) yield { event, data: JSON.parse(data.join('\n')) };
    }
  }
}

/** A signed URL the relay handed out, made relative so it is fetched from this origin. */
export function sameOrigin(url) {
  try {
    const u = new URL(url, location.href);
    return u.pathname + u.search;
  } catch {
    return url;
  }
}
