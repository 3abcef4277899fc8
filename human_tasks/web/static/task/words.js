/* The words of the task screens, from the catalogue of the study's language the server sends in the plan
 * (cuebench/words/LANG.json); a trial's own words (its prompt) come with the trial, from its card. */
let catalogue = {};

export function setWords(words) {
  catalogue = words || {};
}

/* The text under ``key`` with each {name} replaced by values[name] (escape what came from outside first). */
export function say(key, values) {
  const text = catalogue[key];
  return text === undefined ? key : window.cuebenchDevice.fill(text, values);
}
