/* Talking to the server: JSON requests retried with back-off, and the local queue that posts every
 * answer until the server acknowledges it. */
import { session, sleep, statusEl } from "./dom.js";
import { say } from "./words.js";

export const api = session.api;
export const BACKOFF_MS = { first: 500, max: 30000 };
export const REQUEST_TIMEOUT_MS = 15000; // a request unanswered this long counts as a network error and is retried
const QUEUE_KEY = "cuebench-queue:" + session.token;

export async function requestJSON(url, options) {
  const response = await fetch(url, Object.assign({ headers: { "Content-Type": "application/json" },
                                                    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }, options));
  const body = await response.json().catch(() => ({}));
  return { status: response.status, ok: response.ok, body };
}
export async function withRetry(call) {
  for (let wait = BACKOFF_MS.first; ; wait = Math.min(wait * 2, BACKOFF_MS.max)) {
    try {
      const result = await call();
      if (result.status < 500 && result.status !== 429) return result;
    } catch (err) { /* network error: retry */ }
    statusEl.textContent = say("connection_retry");
    await sleep(wait);
  }
}
export const postJSON = (url, body) => withRetry(() => requestJSON(url, { method: "POST", body: JSON.stringify(body) }));

/* Unsent trials live in localStorage (index -> payload) so a reload or a crash loses
 * nothing; they are posted oldest first and removed only when the server answers.
 * A 4xx other than 429 is final (the server named the problem), anything else retries. */
export const queue = (() => { try { return JSON.parse(localStorage.getItem(QUEUE_KEY)) || {}; } catch (e) { return {}; } })();
export const refused = [];
/* The outcome of a session the server ended early (serve --time-limit, --end-on-failed-attention). */
export const ended = { outcome: null };
let flushing = null;
const saveQueue = () => localStorage.setItem(QUEUE_KEY, JSON.stringify(queue));
export function enqueue(index, payload) {
  queue[index] = payload;
  saveQueue();
  flush();
}
async function drain() {
  while (Object.keys(queue).length) {
    const index = Math.min(...Object.keys(queue).map(Number));
    const result = await postJSON(`${api}/trial/${index}`, queue[index]);
    if (!result.ok) refused.push({ index, status: result.status, error: result.body.error });
    if (result.body.outcome) ended.outcome = result.body.outcome;
    delete queue[index];
    saveQueue();
    statusEl.textContent = "";
  }
}
export function flush() {
  if (!flushing) flushing = drain().finally(() => { flushing = null; });
  return flushing;
}
/* An answer the next trial depends on (adaptive QUEST+ trials): posted, and retried, before going on. */
export async function postNow(trial, payload) {
  const result = await postJSON(trial.post, payload);
  if (!result.ok) refused.push({ index: trial.index, status: result.status, error: result.body.error });
  if (result.body.outcome) ended.outcome = result.body.outcome;
  statusEl.textContent = "";
}
