// Chat: /v1/messages with "stream": true, the answer shown as its events arrive.

import { request, events } from './api.js';
import { h, fill, field, say, card, val, num } from './ui.js';

export function mount(root) {
  let controller = null;
  const history = [];
  const log = h('div', { id: 'chat-log', class: 'chat-log', 'aria-live': 'polite' },
    h('p', { class: 'empty' }, 'Ask something; the answer streams in as it is written.'));
  const message = h('div', {});
  const usage = h('div', { id: 'chat-usage', class: 'dim' });
  const form = h('form', { id: 'chat-form' },
    h('div', { class: 'row' },
      field('Model', h('input', { id: 'chat-model', value: 'sim-chat' })),
      field('Max tokens', h('input', { id: 'max-tokens', type: 'number', min: 1, value: 256 })),
      field('x-relay-sim', h('input', { id: 'chat-sim', placeholder: 'e.g. delay_ms=3000' }))),
    field('System prompt', h('input', { id: 'system', placeholder: 'optional' })),
    field('Message', h('textarea', { id: 'chat-input', rows: 3, required: true, placeholder: 'Write a haiku about relays' })),
    h('div', { class: 'actions' },
      h('button', { type: 'submit', id: 'chat-send', class: 'primary' }, 'Send'),
      h('button', { type: 'button', class: 'quiet', onclick: () => {
        history.length = 0;
        fill(log, h('p', { class: 'empty' }, 'New conversation.'));
        fill(usage);
      } }, 'New conversation')),
    message);
  root.append(h('div', { class: 'grid side' }, card('Message', form), card('Conversation', log, usage)));

  const bubble = (role, text) => {
    log.querySelector('.empty')?.remove();
    const body = h('div', { class: 'text' }, text);
    log.append(h('div', { class: `bubble ${role}` }, h('span', { class: 'who' }, role), body));
    log.scrollTop = log.scrollHeight;
    return body;
  };

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const text = val(form, 'chat-input');
    if (!text) return;
    say(message, 'info', '');
    const body = {
      model: val(form, 'chat-model'),
      max_tokens: Number(val(form, 'max-tokens')) || 256,
      stream: true,
      messages: [...history, { role: 'user', content: text }],
    };
    if (val(form, 'system')) body.system = val(form, 'system');
    const headers = { 'vendor-version': '2023-06-01' };
    if (val(form, 'chat-sim')) headers['x-relay-sim'] = val(form, 'chat-sim');
    bubble('user', text);
    form.querySelector('#chat-input').value = '';
    const answer = bubble('assistant', '');
    answer.classList.add('answer', 'streaming');
    const send = form.querySelector('#chat-send');
    send.disabled = true;
    controller = new AbortController();
    let reply = '';
    try {
      const res = await request('/v1/messages', { json: body, headers, raw: true, signal: controller.signal });
      let input = 0;
      for await (const { event, data } of events(res)) {
        if (event === 'message_start') input = data.message.usage.input_tokens;
        else if (event === 'content_block_delta' && data.delta.type === 'text_delta') {
          reply += data.delta.text;
          answer.textContent = reply;
          log.scrollTop = log.scrollHeight;
        } else if (event === 'message_delta') {
          fill(usage, `stop: ${data.delta.stop_reason} · input ${num(data.usage.input_tokens ?? input)} · output ${num(data.usage.output_tokens)} tokens`);
        } else if (event === 'error') {
          throw new Error(`${data.error.type}: ${data.error.message}`);
        }
      }
      history.push({ role: 'user', content: text }, { role: 'assistant', content: reply });
      answer.dataset.done = 'true';
    } catch (err) {
      say(message, 'error', err.message);
      answer.dataset.done = 'error';
    } finally {
      answer.classList.remove('streaming');
      send.disabled = false;
      controller = null;
    }
  });
  return () => { if (controller) controller.abort(); };
}
