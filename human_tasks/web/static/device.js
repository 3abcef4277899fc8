/* Device rules every participant's computer must meet, checked on the consent page before anyone
 * consents or reads instructions (the task page checks them again with a longer refresh measure). Each
 * rule says what to change, in the participant's words. The rules come from `cuebench serve`
 * (--min-window, --refresh-hz, --browsers, --allow-touch), as JSON in #device-rules, with the words in the
 * study's language (the catalogue's device_* texts, cuebench/words); the defaults, the browser families and
 * their names come from Python (task/constants.js), as the server judges them again. An ES module: it runs
 * after the page is parsed, before the task's own modules (it comes first in the page). */
import { BROWSER_FAMILIES, BROWSER_NAMES, DEFAULT_MIN_WINDOW, DEFAULT_REFRESH_HZ } from "./task/constants.js";

const element = document.getElementById("device-rules");
const RULES = Object.assign({ minWidth: DEFAULT_MIN_WINDOW[0], minHeight: DEFAULT_MIN_WINDOW[1],
                              minHz: DEFAULT_REFRESH_HZ[0], maxHz: DEFAULT_REFRESH_HZ[1], browsers: [],
                              allowTouch: false },
                            element ? JSON.parse(element.dataset.rules) : {});
const WORDS = element && element.dataset.words ? JSON.parse(element.dataset.words) : {};
const REFRESH_FRAMES = 60; // about a second at 60 Hz: enough for the median interval

/* The browser family of a user agent: the first of BROWSER_FAMILIES whose pattern it matches, else "other". */
function browserOf(userAgent) {
  const found = BROWSER_FAMILIES.find(([, pattern]) => new RegExp(pattern).test(userAgent));
  return found ? found[0] : "other";
}

/* ``text`` with each {name} replaced by values[name] (the task's words.js fills its texts the same way). */
function fill(text, values) {
  return text.replace(/\{(\w+)\}/g, (place, name) => (values && name in values ? String(values[name]) : place));
}

function say(key, values) {
  return key in WORDS ? fill(WORDS[key], values) : key;
}

/* What is wrong with this device and what to do about it, or null when it is fit. ``size`` is
 * { width, height, screen_width, screen_height } in CSS pixels; ``pointer`` is { fine, touch };
 * ``browser`` a family of browserOf (default: this browser's); ``hz`` the measured refresh rate (undefined:
 * not measured). */
function deviceProblem(size, pointer, browser = browserOf(navigator.userAgent), hz = undefined) {
  if (!RULES.allowTouch && pointer && pointer.touch && !pointer.fine) {
    return { reason: "phone or tablet (touch screen, no mouse)", fix: say("device_touch") };
  }
  if (RULES.browsers.length && browser && !RULES.browsers.includes(browser)) {
    const allowed = RULES.browsers.map((b) => BROWSER_NAMES[b] || b).join(say("device_or"));
    return { reason: `browser not allowed (${BROWSER_NAMES[browser] || browser})`,
             fix: say(RULES.browsers.length > 1 ? "device_browser_many" : "device_browser_one", { allowed }) };
  }
  // the window, not the screen: the images and the grid are drawn in the window, and a small window on a
  // large screen shows them as cramped as a small screen would (the screen's size is stored, not judged)
  if (size.width < RULES.minWidth || size.height < RULES.minHeight) {
    return { reason: `window too small (${size.width}x${size.height})`,
             fix: say("device_size", { min_width: RULES.minWidth, min_height: RULES.minHeight, width: size.width,
                                       height: size.height }) };
  }
  if (hz != null && (hz < RULES.minHz || hz > RULES.maxHz)) {
    return { reason: `refresh rate ${hz.toFixed(1)} Hz`,
             fix: say("device_refresh", { hz: hz.toFixed(0), min: RULES.minHz, max: RULES.maxHz }) };
  }
  return null;
}

function measure() {
  return {
    size: { width: window.innerWidth, height: window.innerHeight,
            screen_width: screen.width, screen_height: screen.height },
    pointer: { fine: window.matchMedia("(any-pointer: fine)").matches,
               touch: navigator.maxTouchPoints > 0 || window.matchMedia("(any-pointer: coarse)").matches },
    browser: browserOf(navigator.userAgent),
  };
}

/* The refresh rate from the median of REFRESH_FRAMES animation-frame intervals; resolves undefined when
 * the page draws no frames (a hidden tab): the task page's check then decides. */
function measureHz() {
  return new Promise((resolve) => {
    const intervals = [];
    let last = null;
    const step = (t) => {
      if (last !== null) intervals.push(t - last);
      last = t;
      if (intervals.length < REFRESH_FRAMES) return requestAnimationFrame(step);
      const sorted = intervals.slice().sort((a, b) => a - b);
      resolve(1000 / sorted[Math.floor(sorted.length / 2)]);
    };
    requestAnimationFrame(step);
    setTimeout(() => resolve(undefined), 5000);
  });
}

/* On the consent page: a device that fails keeps the form hidden and says what to change; it is
 * checked again when the window is resized, so a participant who maximises the window goes on. */
function guardConsent() {
  const form = document.getElementById("consent-form");
  const notice = document.getElementById("device-check");
  if (!form || !notice) return;
  let hz;
  const update = () => {
    const { size, pointer, browser } = measure();
    const problem = deviceProblem(size, pointer, browser, hz);
    form.hidden = problem !== null;
    notice.hidden = problem === null;
    notice.dataset.reason = problem ? problem.reason : "";
    document.getElementById("device-fix").textContent = problem ? problem.fix : "";
  };
  update();
  window.addEventListener("resize", update);
  measureHz().then((measured) => { hz = measured; update(); document.body.dataset.refreshChecked = "1"; });
}

window.cuebenchDevice = { RULES, deviceProblem, measure, browserOf, fill };
guardConsent();
