/* The task page's elements, the state marker on <body> (what a test or a screenshot reads), text
 * screens over the canvas and the one key handler the current screen installs. */
import { logEvent } from "./events.js";

export const $ = (id) => document.getElementById(id);
export const session = $("session").dataset; // token and API path, from the page (no inline script: the CSP forbids it)
export const screenEl = $("screen");
export const gridEl = $("grid");
export const statusEl = $("status");

/* What a key press does now (null: nothing); each screen sets and clears it. */
export const keys = { handler: null };
document.addEventListener("keydown", (e) => { if (keys.handler) keys.handler(e); });

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function state(name, index) {
  document.body.dataset.state = name;
  if (index !== undefined) document.body.dataset.trialIndex = String(index);
}

/* Show a text screen and wait for its button (or the space bar). The click is a user
 * gesture, so it is also where fullscreen is (re-)requested. */
export function showScreen(html, button, name) {
  state(name);
  screenEl.innerHTML = html + (button ? `<p><button id="continue">${button}</button></p>` : "");
  screenEl.hidden = false;
  if (!button) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      keys.handler = null;
      if (!document.fullscreenElement && document.documentElement.requestFullscreen) {
        document.documentElement.requestFullscreen().catch(() => logEvent("fullscreen_denied"));
      }
      screenEl.hidden = true;
      resolve();
    };
    $("continue").addEventListener("click", done, { once: true });
    keys.handler = (e) => { if (e.code === "Space") { e.preventDefault(); done(); } };
  });
}
