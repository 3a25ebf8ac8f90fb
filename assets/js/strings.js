// The viewer's language and the strings table (assets/strings.json, served by viz as
// /batchscope/strings.json). Every string the views, cards, header and banners show comes from
// the table's "views" section; "both" (the default) shows "English · Chinese".

export const LANGUAGES = ["both", "en", "zh"];
const STORAGE_KEY = "batchscope.lang";

// t(key, vars) for ``lang``: the entry's template with {name} filled from ``vars`` (a value that
// is itself translated, t.pair(key), fills each language with its own words). An unknown key is
// shown as itself, so a missing string is visible rather than blank.
// t.parts(key, vars) gives the shown languages apart ([en, zh] for "both"), for texts that may
// wrap between them; t.short(key, vars) joins them with "/" (a word or two: "waiting/..." for the counts).
export function translator(table, lang = "both") {
  const parts = (key, vars = {}) => {
    const entry = table[key];
    if (!entry) return [key];
    const en = fill(entry.en, vars, "en"), zh = fill(entry.zh, vars, "zh");
    if (lang === "en") return [en];
    if (lang === "zh") return [zh];
    return en === zh ? [en] : [en, zh];
  };
  const t = (key, vars) => parts(key, vars).join(" · ");
  t.parts = parts;
  t.short = (key, vars) => parts(key, vars).join("/");
  t.has = (key) => Object.prototype.hasOwnProperty.call(table, key);
  t.pair = (key, vars = {}) => (table[key]
    ? { en: fill(table[key].en, vars, "en"), zh: fill(table[key].zh, vars, "zh") } : { en: key, zh: key });
  t.lang = lang;
  return t;
}

function fill(template, vars, lang) {
  return String(template).replace(/\{(\w+)\}/g, (match, name) => {
    if (!(name in vars)) return match;
    const value = vars[name];
    return String(value !== null && typeof value === "object" ? value[lang] : value);
  });
}

export async function loadStrings(fetchImpl = fetch) {
  const response = await fetchImpl("/batchscope/strings.json", { cache: "no-cache" });
  if (!response.ok) throw new Error(`strings.json: HTTP ${response.status}`);
  return (await response.json()).views;
}

export function savedLanguage(storage) {
  const lang = storage && storage.getItem(STORAGE_KEY);
  return LANGUAGES.includes(lang) ? lang : "both";
}

export function saveLanguage(storage, lang) {
  if (storage) storage.setItem(STORAGE_KEY, lang);
}
