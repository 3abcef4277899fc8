/* Device rules every participant's computer must meet, checked on the consent page before anyone
 * consents or reads instructions (the task page checks them again with the refresh rate). Each rule
 * says what to change, in the participant's words. */
(function () {
  "use strict";
  const RULES = { minWidth: 800, minHeight: 600 };

  /* What is wrong with this device and what to do about it, or null when it is fit. ``size`` is
   * { width, height, screen_width, screen_height } in CSS pixels; ``pointer`` is { fine, touch }. */
  function deviceProblem(size, pointer) {
    if (pointer && pointer.touch && !pointer.fine) {
      return { reason: "phone or tablet (touch screen, no mouse)",
               fix: "Please use a computer with a mouse or trackpad and a keyboard: the study does not run on " +
                    "phones or tablets." };
    }
    if (Math.max(size.width, size.screen_width) < RULES.minWidth ||
        Math.max(size.height, size.screen_height) < RULES.minHeight) {
      return { reason: `screen too small (${size.screen_width}x${size.screen_height})`,
               fix: `Please make the browser window at least ${RULES.minWidth} \u00d7 ${RULES.minHeight} pixels ` +
                    `(it is ${size.width} \u00d7 ${size.height} now): maximise it, or use a computer with a larger ` +
                    "screen." };
    }
    return null;
  }

  function measure() {
    return {
      size: { width: window.innerWidth, height: window.innerHeight,
              screen_width: screen.width, screen_height: screen.height },
      pointer: { fine: window.matchMedia("(any-pointer: fine)").matches,
                 touch: navigator.maxTouchPoints > 0 || window.matchMedia("(any-pointer: coarse)").matches },
    };
  }

  /* On the consent page: a device that fails keeps the form hidden and says what to change; it is
   * checked again when the window is resized, so a participant who maximises the window goes on. */
  function guardConsent() {
    const form = document.getElementById("consent-form");
    const notice = document.getElementById("device-check");
    if (!form || !notice) return;
    const update = () => {
      const { size, pointer } = measure();
      const problem = deviceProblem(size, pointer);
      form.hidden = problem !== null;
      notice.hidden = problem === null;
      notice.dataset.reason = problem ? problem.reason : "";
      document.getElementById("device-fix").textContent = problem ? problem.fix : "";
    };
    update();
    window.addEventListener("resize", update);
  }

  window.cuebenchDevice = { RULES, deviceProblem, measure };
  guardConsent();
})();
