// SPDX-License-Identifier: Apache-2.0
// e2e.test.mjs — the browser client (web/) in real headless Chromium
// (Debian's /usr/bin/chromium driven by playwright-core), against the real
// stack and stages that test_browser.sh started. Node's test runner.
//
// 1. Record three answers with Chromium's fake microphone (an espeak-ng WAV),
//    using the keyboard for one; upload what MediaRecorder produced (WebM/Opus,
//    decoded by the preflight stage); three graded results appear, are
//    announced in the aria-live region; once the first GET shows the view
//    the page follows the server-sent events (EventSource on .../events)
//    and polls no more; the results process is SIGKILLed and restarted
//    mid-way and the stream resumes with Last-Event-ID; a revisit (reload)
//    shows them again without recording.
// 2. A large answer goes up in S3 multipart parts; parts after the first are
//    held back by request interception, the page is reloaded mid-upload, the
//    same file is chosen again and only the missing parts are sent. The
//    event stream is refused here (404, as from a server or proxy without
//    it), so the page falls back to polling: no polls while the tab is
//    hidden; all three answers graded.
// 3. An answer never uploaded: after 30 s (the page's clock fast-forwarded)
//    the page says the user may leave and come back; still "waiting".
// Screenshots go to ART_DIR. Inputs come from the environment (see
// test_browser.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

const env = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} is not set`); return v; };
const PAGE = env('PAGE_URL'), RESULTS = env('RESULTS_URL'), ART = env('ART_DIR');
// the test user's API key, handed to the page the way an embedding app
// would: in the URL fragment, which the page moves to sessionStorage
const KEY = env('SLUICE_API_KEY');
const PAGE_AUTH = `${PAGE}#credential=${encodeURIComponent(KEY)}`;
const SPEECH = env('SPEECH_WAV'), BIG = env('BIG_WAV'), OUT = env('OUT_DIR');
const STAGES = env('STAGES_TOOL'); // tools/stages: kills and restarts a stage
const { chromium } = createRequire(`${env('PW_DIR')}/`)('playwright-core');
const PHONE = { width: 390, height: 844 };

async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
           `--use-file-for-fake-audio-capture=${SPEECH}`, '--autoplay-policy=no-user-gesture-required'],
  });
}

async function newPage(browser, opts = {}) {
  const context = await browser.newContext({ viewport: PHONE, deviceScaleFactor: 1, hasTouch: true });
  if (opts.clock) await context.clock.install({ time: Date.now() });
  const page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') console.log(`[page] ${m.text()}`); });
  page.on('pageerror', (e) => console.log(`[page error] ${e.message}`));
  return { context, page };
}

const shot = (page, name) => page.screenshot({ path: `${ART}/${name}.png`, fullPage: true });

async function gradedCount(page) {
  return page.locator('#result-list .result[data-state="done"] .score strong').count();
}

// every control has an accessible name, every file input a label; no
// horizontal scrolling on a phone-sized screen
async function checkAccessible(page) {
  const problems = await page.evaluate(() => {
    const out = [];
    for (const b of document.querySelectorAll('button'))
      if (!b.hidden && !(b.textContent.trim() || b.getAttribute('aria-label'))) out.push(`unnamed button ${b.outerHTML}`);
    for (const i of document.querySelectorAll('input'))
      if (!document.querySelector(`label[for="${i.id}"]`) && !i.getAttribute('aria-label')) out.push(`unlabelled input ${i.id}`);
    for (const p of document.querySelectorAll('progress'))
      if (!p.getAttribute('aria-label')) out.push('unlabelled progress');
    if (!document.querySelector('[aria-live]')) out.push('no aria-live region');
    if (document.documentElement.scrollWidth > window.innerWidth) out.push(`scrolls sideways: ${document.documentElement.scrollWidth}px`);
    return out;
  });
  assert.deepEqual(problems, []);
}

test('record three answers with the fake microphone and see three grades', { timeout: 150_000 }, async () => {
  const browser = await launch();
  try {
    const { page } = await newPage(browser);
    // every poll in order, with what it sent and what came back (the page
    // polls one request at a time, so the order is the page's own)
    const polls = [], streams = [], byRequest = new Map();
    page.on('request', (r) => {
      if (r.url().startsWith(`${RESULTS}/v1/submissions/`) && r.url().includes('/events?')) {
        const x = { after: polls.length, lastEventId: null };
        streams.push(x); // Last-Event-ID is added by the network stack: allHeaders() has it
        r.allHeaders().then((h) => { x.lastEventId = h['last-event-id'] || null; }, () => {});
      } else if (r.url().startsWith(`${RESULTS}/v1/submissions/`) && r.method() === 'GET') {
        const p = { inm: r.headers()['if-none-match'] || null, status: null, etag: null };
        polls.push(p);
        byRequest.set(r, p);
      }
    });
    page.on('response', (r) => {
      const p = byRequest.get(r.request());
      if (p) { p.status = r.status(); p.etag = r.headers().etag || null; }
    });
    await page.goto(PAGE_AUTH);
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await checkAccessible(page);
    assert.equal(await page.locator('#send').isDisabled(), true, 'send is disabled without answers');
    for (const no of [1, 2, 3]) {
      const q = page.locator(`.question[data-no="${no}"]`), rec = q.locator('.record');
      if (no === 2) { await rec.focus(); await page.keyboard.press('Enter'); } // keyboard
      else await rec.click();
      await q.locator('.record[aria-pressed="true"]').waitFor();
      await page.waitForTimeout(4500);
      if (no === 2) await page.keyboard.press('Enter'); else await rec.click();
      await page.locator(`.question[data-no="${no}"][data-answer="ready"]`).waitFor({ timeout: 15_000 });
      // what MediaRecorder produced, not converted in the page (preflight
      // decodes it): Opus at 32 kbit/s, ~4 KB a second where the 16 kHz WAV
      // the page used to make was 32 KB a second
      const status = await q.locator('.status').textContent();
      assert.match(status, /answer-\d\.webm/);
      const size = await page.evaluate((n) => answers.get(n).blob.size, no);
      console.log(`recorded answer ${no}: ${size} bytes of WebM/Opus for ~4.5 s (${Math.round(size / 4.5 * 60)} bytes/min)`);
      assert.ok(size > 4000 && size < 40_000, `recorded ${size} bytes for ~4.5 s`);
    }
    await shot(page, '1-recorded');
    await page.locator('#send').click();
    // mid-way, the results process crashes (SIGKILL) and comes back: the
    // page's EventSource reconnects by itself with Last-Event-ID
    const events = await page.evaluate(() => new Promise((resolve) => {
      const t = setInterval(() => { if (poll.es && poll.es.readyState === EventSource.OPEN) { clearInterval(t); resolve(true); } }, 50);
      setTimeout(() => { clearInterval(t); resolve(false); }, 60_000);
    }));
    assert.ok(events, 'the event stream opened');
    execFileSync(STAGES, ['kill', 'results'], { stdio: 'inherit' });
    await page.waitForTimeout(1000);
    execFileSync(STAGES, ['scale', 'results', '1'], { stdio: 'inherit' });
    await page.waitForFunction(() => document.querySelectorAll('.question[data-upload="done"]').length === 3,
                               null, { timeout: 30_000 });
    assert.equal(await page.locator('.question progress').evaluateAll((ps) => ps.every((p) => p.value === 100)), true);
    await shot(page, '1-uploaded');
    await page.waitForFunction(() => document.querySelectorAll('#result-list .result[data-state="done"] .score strong').length === 3,
                               null, { timeout: 120_000 });
    await shot(page, '1-graded');
    const scores = await page.locator('#result-list .result .score strong').allTextContents();
    assert.equal(scores.length, 3);
    for (const s of scores) assert.ok(Number(s) >= 0 && Number(s) <= 100, `score ${s}`);
    const transcripts = await page.locator('#result-list .transcript').allTextContents();
    assert.equal(transcripts.filter((t) => t.replace(/[“”]/g, '').trim().length > 0).length, 3, 'three transcripts');
    // each answer's criteria with their evidence; fluency from the timing preflight measured
    const fluency = await page.locator('#result-list .criteria tr', { hasText: 'fluency' }).allTextContents();
    assert.equal(fluency.length, 3, 'a fluency row per answer');
    for (const f of fluency) assert.match(f, /words per minute over [0-9.]+ s of speaking/);
    assert.equal(await page.locator('#result-list .criteria tr').count(), 15, 'five criteria per answer');
    const announced = await page.locator('#announcer p').allTextContents();
    assert.equal(announced.filter((t) => /^Question \d graded: \d+ out of 100/.test(t)).length, 3, announced.join(' | '));
    assert.ok(polls.length >= 1, `polled ${polls.length} times`);
    assert.equal(polls[0].inm, null, 'the first poll has no ETag to send');
    // polls until the view is there (a 404 or 503 before it), then one
    // event stream brings every change: the stt stage takes seconds, so the
    // grades came by the stream, not by polls
    const first200 = polls.findIndex((p) => p.status === 200);
    assert.ok(first200 >= 0, `a poll saw the view (${JSON.stringify(polls)})`);
    // the ETag names the view's version; only a view caught between
    // materialize's first write (the submission's meta) and its first
    // versioned apply has none yet, and results then names its body's hash
    // (stages/results/results.c): a poll can land in that window
    assert.match(polls[first200].etag, /^"(\d+-\d+-[0-9a-f]{8}|[0-9a-f]{32})"$/, 'the ETag names the version or the body');
    assert.ok(streams.length >= 2, `the stream reconnected after the crash (${JSON.stringify(streams)})`);
    assert.equal(streams[0].after, first200 + 1, `the stream opened after the first 200 (${JSON.stringify(polls)})`);
    assert.equal(streams[0].lastEventId, null, 'the first connection starts from nothing');
    // attempts while results was down never reached it (no headers sent);
    // the one that did resumes from the last event the page had
    assert.match(streams.at(-1).lastEventId || '', /^\d+$/,
                 `the reconnect resumes with Last-Event-ID (${JSON.stringify(streams)})`);
    assert.equal(polls.length, first200 + 1, `no polls after the stream opened (${JSON.stringify(polls)})`);
    await page.waitForFunction(() => document.querySelector('#poll-status').textContent === 'All answers are finished.',
                               null, { timeout: 10_000 }); // the stream's "complete" event
    // the progress shown is the pipeline's stages by name (view.stages), so
    // a stage an operator adds appears without a page change
    const shown = await page.evaluate(() => {
      const li = document.querySelector('#result-list .result[data-no="1"]');
      renderView({ stages: ['awaiting_upload', 'queued', 'moderating', 'done'],
                   questions: [{ no: 1, state: 'moderating', updated_at_ms: 0 }] });
      return li.querySelector('.pending')?.textContent;
    });
    assert.equal(shown, 'step 3 of 4: moderating…');
    const sub = await page.evaluate(() => JSON.parse(localStorage.getItem('sluice.submission')));
    assert.match(sub.id, /^[0-9a-f-]{36}$/);
    assert.ok(sub.token.length > 10);
    // the view from the API agrees with the page
    const view = await (await fetch(sub.results_url, { headers: { Authorization: `Bearer ${sub.token}` } })).json();
    assert.deepEqual(view.questions.map((q) => Math.round(q.grade.score)).map(String), scores);
    assert.deepEqual(view.stages, ['awaiting_upload', 'queued', 'checking', 'transcribing', 'grading', 'done']);
    // a revisit shows the results again, with no recording
    await page.reload();
    await page.waitForFunction(() => document.querySelectorAll('#result-list .result[data-state="done"] .score strong').length === 3,
                               null, { timeout: 15_000 });
    assert.equal(await page.locator('#results').isVisible(), true);
    assert.equal(await page.locator('#send').isVisible(), false);
    await checkAccessible(page);
    await shot(page, '1-revisit');
  } finally {
    await browser.close();
  }
});

test('a large answer resumes after a reload mid-upload, sending only the missing parts', { timeout: 180_000 }, async () => {
  const browser = await launch();
  try {
    const { page } = await newPage(browser);
    // no event stream here: the page must fall back to polling
    let refused = 0;
    await page.route((u) => u.pathname.endsWith('/events'), (route) => {
      refused++;
      route.fulfill({ status: 404, contentType: 'application/json',
                      headers: { 'Access-Control-Allow-Origin': '*' },
                      body: '{"error":{"code":"not_found","message":"no such endpoint"}}' });
    });
    await page.goto(PAGE_AUTH);
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await page.setInputFiles('#file-1', BIG);
    await page.setInputFiles('#file-2', SPEECH);
    await page.setInputFiles('#file-3', SPEECH);
    // storage gets part 1; later parts are held until the page goes away
    // (a held request is never continued: the reload cancels it, as closing
    // the tab would)
    const held = [];
    let holding = true, partHeld;
    const heldOne = new Promise((resolve) => { partHeld = resolve; });
    const isPart = (u) => u.searchParams.has('partNumber') && u.searchParams.has('uploadId');
    await page.route(isPart, (route) => {
      const n = Number(new URL(route.request().url()).searchParams.get('partNumber'));
      if (n === 1 || !holding) route.continue(); else { held.push(n); partHeld(); }
    });
    await page.locator('#send').click();
    await page.waitForFunction(() => {
      const sub = JSON.parse(localStorage.getItem('sluice.submission') || 'null');
      const rec = sub && JSON.parse(localStorage.getItem(`sluice.upload.${sub.id}.1`) || 'null');
      return rec && rec.parts.length === 1;
    }, null, { timeout: 60_000 });
    await page.waitForFunction(() => document.querySelectorAll('.question[data-upload="done"]').length === 2,
                               null, { timeout: 30_000 });
    // the page asks for part 2 once part 1 is stored; wait for that request
    // (held, never answered) rather than for a fixed time
    await Promise.race([heldOne, new Promise((_, reject) =>
      setTimeout(() => reject(new Error('part 2 was never requested')), 60_000))]);
    assert.deepEqual(held, [2], 'part 2 was held back');
    const progressBefore = await page.locator('.question[data-no="1"] progress').evaluate((p) => p.value);
    assert.ok(progressBefore > 0 && progressBefore < 100, `progress ${progressBefore}%`);
    await shot(page, '2-mid-upload');

    const parts = [];
    page.on('request', (r) => {
      const u = new URL(r.url());
      if (r.method() === 'PUT' && isPart(u)) parts.push(Number(u.searchParams.get('partNumber')));
    });
    await page.reload();
    holding = false;
    await page.locator('.question[data-no="1"][data-upload="interrupted"]').waitFor();
    assert.match(await page.locator('.question[data-no="1"] .status').textContent(), /after 1 part/);
    assert.equal(await page.locator('.question[data-upload="done"]').count(), 2);
    await shot(page, '2-after-reload');
    await page.setInputFiles('#file-1', BIG);
    await page.locator('.question[data-no="1"][data-upload="done"]').waitFor({ timeout: 60_000 });
    assert.deepEqual(parts.sort(), [2, 3], 'only the missing parts were sent');
    const sub = await page.evaluate(() => JSON.parse(localStorage.getItem('sluice.submission')));
    assert.equal(await page.evaluate((k) => localStorage.getItem(k), `sluice.upload.${sub.id}.1`), null,
                 'the finished upload is forgotten');
    writeFileSync(`${OUT}/resumed-key`, sub.questions.find((q) => q.no === 1).key);

    // no polling while the tab is hidden; polling again at once when shown
    let polls = 0;
    page.on('request', (r) => { if (r.url().startsWith(`${RESULTS}/v1/`) && r.method() === 'GET') polls++; });
    const setHidden = (h) => page.evaluate((hidden) => {
      Object.defineProperty(document, 'hidden', { value: hidden, configurable: true });
      document.dispatchEvent(new Event('visibilitychange'));
    }, h);
    await setHidden(true);
    polls = 0;
    await page.waitForTimeout(5000);
    assert.equal(polls, 0, 'polled while hidden');
    const shownPoll = page.waitForRequest((r) => r.url().startsWith(`${RESULTS}/v1/`) && r.method() === 'GET',
                                          { timeout: 10_000 });
    await setHidden(false);
    await shownPoll; // throws when the page does not poll again once shown
    assert.ok(polls >= 1, 'polled when shown again');

    await page.waitForFunction(() => document.querySelectorAll('#result-list .result[data-state="done"] .score strong').length === 3,
                               null, { timeout: 150_000 });
    assert.ok(refused >= 1, 'the page tried the event stream first');
    await shot(page, '2-graded');
  } finally {
    await browser.close();
  }
});

test('after 30 s the page says the user may leave and come back', { timeout: 60_000 }, async () => {
  // a submission whose answer is never uploaded: it stays "waiting"
  const r = await fetch(`${PAGE}v1/submissions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ questions: [{ no: 1, content_type: 'audio/wav', size: 1000, prompt: 'Never answered' }] }),
  });
  assert.equal(r.status, 201);
  const c = await r.json();
  const browser = await launch();
  try {
    const { page } = await newPage(browser, { clock: true });
    await page.goto(PAGE);
    await page.evaluate((s) => localStorage.setItem('sluice.submission', JSON.stringify(s)), {
      id: c.submission_id, token: c.results_token, results_url: c.results_url, accepted_at_ms: Date.now(),
      questions: [{ no: 1, prompt: 'Never answered', size: 1000, type: 'audio/wav', name: 'a.wav',
                    url: c.questions[0].url, headers: c.questions[0].headers, key: c.questions[0].object_key,
                    uploaded: false }],
    });
    await page.reload();
    await page.locator('#result-list .result[data-no="1"]').waitFor();
    assert.equal(await page.locator('#leave-note').isVisible(), false, 'no note at first');
    await page.clock.fastForward(31_000);
    await page.locator('#leave-note').waitFor({ state: 'visible', timeout: 10_000 });
    assert.match(await page.locator('#result-list .result[data-no="1"]').textContent(), /waiting for the upload/);
    assert.match(await page.locator('.question[data-no="1"] .status').textContent(), /Choose the same file again/);
    await shot(page, '3-leave-note');
  } finally {
    await browser.close();
  }
});
