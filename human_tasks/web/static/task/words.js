/* The words of the task screens, from the catalogue the server sends in the plan (human_tasks/words/en.json);
 * a trial's own words (its prompt) come with the trial, from its card. */
let catalogue = {};

export function setWords(words) {
  catalogue = words || {};
}

/* The text under ``key`` with each {name} replaced by values[name] (escape what came from outside first). */
export function say(key, values) {
  const text = catalogue[key];
  if (text === undefined) return key;
  return text.replace(/\{(\w+)\}/g, (place, name) => (values && name in values ? String(values[name]) : place));
}
