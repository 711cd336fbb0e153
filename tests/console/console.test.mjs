// The relay's web console in a real browser: Debian's chromium driven by Playwright, against a
// running relay with the built-in simulator. Run by `cargo xtask console`, which starts the
// relay and sets RELAY_BASE_URL, RELAY_KEY and RELAY_ADMIN_TOKEN; CONSOLE_SCREENSHOTS names a
// directory to write a screenshot of each page into.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = need('RELAY_BASE_URL').replace(/\/$/, '');
const apiKey = need('RELAY_KEY');
const adminToken = need('RELAY_ADMIN_TOKEN');
const shots = process.env.CONSOLE_SCREENSHOTS || '';
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT = 60_000;

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run this through cargo xtask console)`);
  return value;
}

/** Console errors and uncaught exceptions of the page: any one fails the run. */
const problems = [];

async function step(name, fn) {
  const started = Date.now();
  process.stderr.write(`console test: ${name} … `);
  await fn();
  process.stderr.write(`ok (${Date.now() - started} ms)\n`);
  assert.deepEqual(problems, [], `the page reported errors during "${name}"`);
}

async function shot(page, name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true, animations: 'disabled', caret: 'hide' });
}

async function go(page, view) {
  await page.goto(`${base}/console/#/${view}`);
  await page.locator(`#view[data-view="${view}"]`).waitFor();
}

const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.on('pageerror', (e) => problems.push(`uncaught exception: ${e.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    // A relay without /metrics answers it 404, and the browser logs every failed load; the
    // page itself must say "metrics unavailable" then, which the metrics step checks.
    const url = msg.location().url || '';
    if (/Failed to load resource.*404/.test(msg.text()) && new URL(url, base).pathname === '/metrics') return;
    problems.push(`console error: ${msg.text()} (${url})`);
  });

  await step('the console is served without a credential, with its headers', async () => {
    for (const path of ['/console', '/console/']) {
      const res = await fetch(`${base}${path}`);
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get('content-type'), /^text\/html/, path);
      assert.match(res.headers.get('content-security-policy'), /default-src 'none'.*script-src 'self'/, path);
      assert.equal(res.headers.get('cache-control'), 'no-cache', path);
      assert.match(await res.text(), /<title>Relay console<\/title>/, path);
    }
    const js = await fetch(`${base}/console/app.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type'), /^text\/javascript/);
    const again = await fetch(`${base}/console/app.js`, { headers: { 'if-none-match': js.headers.get('etag') } });
    assert.equal(again.status, 304);
    assert.match((await fetch(`${base}/console/console.css`)).headers.get('content-type'), /^text\/css/);
    assert.equal((await fetch(`${base}/console/nope.js`)).status, 404);
  });

  await step('the API key goes into sessionStorage, never into the URL', async () => {
    await go(page, 'playground');
    await page.fill('#api-key', apiKey);
    await page.click('#key-form button[type=submit]');
    await page.locator('#key-state.set').waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('relay.apiKey')), apiKey);
    assert.ok(!page.url().includes(apiKey));
  });

  await step('(1) a first-format video submitted from the playground plays in the page', async () => {
    await page.fill('#prompt', 'a heron takes off over a misty lake');
    await page.selectOption('#size', '640x360');
    await page.click('#submit');
    await page.locator('#task-id', { hasText: 'video_' }).waitFor();
    await playing(page);
    assert.match(await page.getAttribute('#download-video', 'href'), /^blob:/);
    assert.match(await page.getAttribute('#download-still', 'href'), /^blob:/);
  });

  await step('a second-format video plays too, from its signed URL', async () => {
    await page.check('input[name=format][value=gen]');
    await page.selectOption('#gen-model', 'gen2-lite');
    await page.selectOption('#resolution', '480p');
    await page.fill('#prompt', 'waves rolling onto a beach at dusk');
    await page.click('#submit');
    await page.locator('#task-id', { hasText: 'gen_' }).waitFor();
    await playing(page);
    assert.match(await page.locator('#download-still').innerText(), /last frame/);
    await page.locator('#view table tbody tr').nth(1).waitFor();
    await shot(page, 'playground');
  });

  await step('an asset uploaded to a new library turns active', async () => {
    await go(page, 'assets');
    await page.fill('#library-name', 'campaign shots');
    await page.click('#library-form button[type=submit]');
    await page.locator('#asset-form').waitFor();
    const png = await page.screenshot({ clip: { x: 0, y: 0, width: 96, height: 54 } });
    await page.setInputFiles('#asset-file', { name: 'first.png', mimeType: 'image/png', buffer: png });
    await page.selectOption('#asset-type', 'image');
    await page.click('#asset-form button[type=submit]');
    await page.locator('#asset-list .badge[data-status="active"]').waitFor();
    await shot(page, 'assets');
  });

  await step('(2) a chat answer streams in, growing before the stream ends', async () => {
    await go(page, 'chat');
    await page.fill('#chat-sim', 'delay_ms=2500');
    await page.fill('#chat-input', 'Hello there relay, tell me how streaming works in a few words please');
    // Record the answer's length each time it changes while it is still streaming.
    await page.evaluate(() => {
      window.seenLengths = [];
      new MutationObserver(() => {
        const answer = document.querySelector('.answer.streaming');
        if (answer && answer.textContent.length) window.seenLengths.push(answer.textContent.length);
      }).observe(document.getElementById('chat-log'), { subtree: true, childList: true, characterData: true });
    });
    await page.click('#chat-send');
    await page.locator('.answer[data-done]').waitFor();
    assert.equal(await page.getAttribute('.answer', 'data-done'), 'true');
    const lengths = await page.evaluate(() => window.seenLengths);
    assert.ok(new Set(lengths).size >= 2, `the answer did not grow while streaming: ${JSON.stringify(lengths)}`);
    const final = (await page.locator('.answer').innerText()).length;
    assert.ok(Math.min(...lengths) < final, 'no partial answer was shown before the end');
    await page.locator('#chat-usage', { hasText: 'output' }).waitFor();
    await shot(page, 'chat');
  });

  let newKeyId;
  await step('(3) a key created in the operator view works against the API', async () => {
    await go(page, 'keys');
    await page.fill('#admin-token', adminToken);
    await page.click('#admin-form button[type=submit]');
    await page.locator('#key-list table').waitFor();
    await page.fill('#key-name', 'console test');
    await page.fill('#key-quota', '1000');
    await page.click('#key-create-submit');
    const secret = (await page.locator('#new-key').innerText()).trim();
    assert.match(secret, /^sk-relay-[0-9a-f]{64}$/);
    const res = await fetch(`${base}/v1/videos`, { headers: { Authorization: `Bearer ${secret}` } });
    assert.equal(res.status, 200, `GET /v1/videos with the new key: ${res.status}`);
    // Change it from the page: a top-up and a rate limit, read back through the admin API.
    await page.locator('#key-list tr', { hasText: 'console test' }).getByRole('button', { name: 'Open' }).click();
    await page.fill('#edit-add', '500');
    await page.fill('#edit-rps', '5');
    await page.fill('#edit-burst', '10');
    await page.click('#key-edit button[type=submit]');
    await page.locator('#key-edit .note.info', { hasText: 'Saved' }).waitFor();
    const keys = await (await fetch(`${base}/admin/keys`, { headers: { Authorization: `Bearer ${adminToken}` } })).json();
    const key = keys.data.find((k) => k.name === 'console test');
    newKeyId = key.id;
    assert.equal(key.quota_remaining, 1500);
    assert.deepEqual(key.rate_limit, { rps: 5, burst: 10 });
    // The first key's ledger shows the videos' pre-deductions and settlements.
    await page.locator('#key-list tr', { hasText: 'first key' }).getByRole('button', { name: 'Open' }).click();
    await page.locator('#ledger td', { hasText: 'prededuct' }).first().waitFor();
    // The picture shows where the secret appears, not the secret.
    await page.locator('#new-key').evaluate((el) => { el.textContent = `sk-relay-${'•'.repeat(16)}`; });
    await shot(page, 'keys');
  });

  await step('tasks across keys, filtered', async () => {
    await go(page, 'tasks');
    await page.locator('#task-list tbody tr').nth(1).waitFor();
    await page.selectOption('#filter-status', 'succeeded');
    await page.click('#task-filter button[type=submit]');
    await page.locator('#task-list tbody tr').first().waitFor();
    const statuses = await page.locator('#task-list .badge').allInnerTexts();
    assert.ok(statuses.length >= 2 && statuses.every((s) => s === 'completed' || s === 'succeeded'), statuses.join());
    await page.selectOption('#filter-status', '');
    await page.fill('#filter-key', newKeyId);
    await page.click('#task-filter button[type=submit]');
    await page.locator('#task-list .empty').waitFor();
    await page.fill('#filter-key', '');
    await page.click('#task-filter button[type=submit]');
    await page.locator('#task-list tbody tr').nth(1).waitFor();
    await shot(page, 'tasks');
  });

  await step('(4) channels, and metrics shown or said to be unavailable, without a page error', async () => {
    await go(page, 'channels');
    await page.locator('#channel-list .badge[data-status="healthy"]').first().waitFor();
    // The simulator's Test button: the admin endpoint's answer, shown as text, and kept
    // across the table's refreshes.
    await page.locator('#channel-list tr', { hasText: 'simulator' }).getByRole('button', { name: 'Test' }).click();
    const tested = page.locator('#channel-list .test-result[data-state="ok"]');
    await tested.waitFor();
    assert.match(await tested.innerText(), /^ok: built in/);
    const shown = await tested.elementHandle();
    await page.waitForFunction((el) => !el.isConnected, shown, { timeout: 15_000 });
    assert.match(await tested.innerText(), /^ok: built in/);
    await page.locator('#metrics:not([data-state="loading"])').waitFor();
    const state = await page.getAttribute('#metrics', 'data-state');
    if (state === 'unavailable') {
      assert.match(await page.locator('#metrics-unavailable').innerText(), /Metrics unavailable/);
    } else {
      // A second poll gives the rates and the sparklines their first line.
      await page.locator('[data-metric="requests"] .spark polyline').waitFor({ timeout: 15_000 });
    }
    process.stderr.write(`(metrics ${state}) `);
    await shot(page, 'channels');
  });

  await step('the metrics charts from a sample exposition: parsed, summed, rated, drawn', async () => {
    // Stands in for the relay's /metrics, so that the parser and the charts are checked
    // whether or not this relay serves it: every poll, the counters grow by fixed steps.
    let polls = 0;
    await page.route(`${base}/metrics`, (route) => {
      polls += 1;
      return route.fulfill({ status: 200, contentType: 'text/plain; version=0.0.4', body: exposition(polls) });
    });
    await go(page, 'channels');
    // The view may still show the relay's own figures: wait for the stand-in's first poll
    // (47 open connections is the stand-in's mark).
    await page.waitForFunction(() => {
      const shown = document.querySelector('[data-metric="connections"] .metric-value');
      return shown && shown.innerText.trim() === '47';
    }, null, { timeout: 20_000 });
    assert.equal(await metric(page, 'tasks'), '5');
    // Rates and histogram means need a second poll of the stand-in (one between the relay's
    // own last poll and the stand-in's first means nothing); the sparklines a third.
    await page.waitForFunction(() => {
      const shown = document.querySelector('[data-metric="latency"] .metric-value');
      return shown && shown.innerText.trim() === '25 ms';
    }, null, { timeout: 20_000 });
    await page.locator('[data-metric="requests"] .spark polyline').waitFor({ timeout: 20_000 });
    if (shots) {
      // A few more polls, for a picture with some line in it.
      await page.waitForFunction(() => {
        const line = document.querySelector('[data-metric="requests"] .spark polyline');
        return line && line.getAttribute('points').split(' ').length >= 5;
      }, null, { timeout: 30_000 });
    }
    const requests = parseFloat(await metric(page, 'requests'));
    assert.ok(requests > 5 && requests < 200, `requests/s ${requests}`);
    assert.equal(await metric(page, 'latency'), '25 ms');
    assert.equal(await metric(page, 'lag'), '0.50 s');
    assert.ok(parseFloat(await metric(page, 'errors')) > 0);
    assert.match(await page.locator('#metrics').innerText(), /Channel health:\s*simulator\s*healthy/);
    await shot(page, 'metrics');
    await page.unroute(`${base}/metrics`);
  });

  assert.ok(!page.url().includes(apiKey) && !page.url().includes(adminToken));
  await context.close();
  process.stderr.write('console test: passed\n');
} catch (err) {
  process.stderr.write(`\nconsole test: FAILED: ${err.stack || err}\n`);
  if (problems.length) process.stderr.write(`page errors:\n  ${problems.join('\n  ')}\n`);
  process.exitCode = 1;
} finally {
  await browser.close();
}

/** The shown value of a metrics card. */
async function metric(page, id) {
  return (await page.locator(`[data-metric="${id}"] .metric-value`).innerText()).trim();
}

/** A Prometheus exposition of the relay's families as it might look at poll `n`. */
function exposition(n) {
  const wave = Math.round(20 * (1 + Math.sin(n)));
  return [
    '# HELP relay_http_requests_total HTTP requests by route and status.',
    '# TYPE relay_http_requests_total counter',
    `relay_http_requests_total{route="POST /v1/videos",status="200"} ${90 * n + wave}`,
    `relay_http_requests_total{route="GET /v1/videos/{task_id}",status="200"} ${60 * n}`,
    `relay_http_requests_total{route="POST /v1/messages",status="500"} ${n}`,
    '# TYPE relay_http_request_duration_seconds histogram',
    `relay_http_request_duration_seconds_bucket{route="POST /v1/videos",le="+Inf"} ${40 * n}`,
    `relay_http_request_duration_seconds_sum{route="POST /v1/videos"} ${n}`,
    `relay_http_request_duration_seconds_count{route="POST /v1/videos"} ${40 * n}`,
    'relay_open_connections 47',
    `relay_tasks{format="videos",status="queued"} 2`,
    `relay_tasks{format="videos",status="running"} 1`,
    `relay_tasks{format="generations",status="running"} 2`,
    `relay_tasks{format="videos",status="succeeded"} ${10 * n}`,
    `relay_upstream_calls_total{channel="simulator",outcome="ok"} ${30 * n + wave}`,
    'relay_channel_healthy{channel="simulator"} 1',
    `relay_poller_lag_seconds_sum ${5 * n}`,
    `relay_poller_lag_seconds_count ${10 * n}`,
    `relay_chat_tokens_total{model="sim-chat",kind="input"} ${200 * n + 10 * wave}`,
    `relay_chat_tokens_total{model="sim-chat",kind="output"} ${300 * n}`,
    `relay_chat_credits_total{model="sim-chat"} ${n}`,
    `relay_ledger_credits_total{kind="prededuct"} ${50 * n + wave}`,
    `relay_rate_limited_total{scope="key"} ${n % 3 === 0 ? n : n - 1}`,
    '',
  ].join('\n');
}

/** Waits until the page's player has a decoded frame (readyState >= 2, HAVE_CURRENT_DATA). */
async function playing(page) {
  await page.waitForFunction(() => {
    const v = document.querySelector('#player');
    return v && v.readyState >= 2 && v.videoWidth > 0;
  }, null, { timeout: WAIT });
}
