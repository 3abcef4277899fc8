/* What happens to the page during a trial (focus, visibility, fullscreen, late answers), sent with the answer. */
let trialEvents = [];

export const logEvent = (type, detail) => trialEvents.push(Object.assign({ type, t: performance.now() }, detail || {}));

/* The events since the last call, and a fresh list for the next trial. */
export function takeEvents() {
  const taken = trialEvents;
  trialEvents = [];
  return taken;
}

window.addEventListener("blur", () => logEvent("blur"));
window.addEventListener("focus", () => logEvent("focus"));
document.addEventListener("visibilitychange", () => logEvent("visibility", { state: document.visibilityState }));
document.addEventListener("fullscreenchange", () =>
  logEvent(document.fullscreenElement ? "fullscreen_enter" : "fullscreen_exit"));
