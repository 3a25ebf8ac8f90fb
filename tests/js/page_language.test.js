// The server's marked texts shown in one language (assets/js/page_language.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { localize } from "../../assets/js/page_language.js";

const EN = "\u2062", ZH = "\u2063", JOINT = "\u2064", END = "\u2061";
const marked = (en, zh, joint = " · ") => `${EN}${en}${JOINT}${joint}${ZH}${zh}${END}`;

test("a marked text shows one language, or both joined, and never its marks", () => {
  const text = `▶ ${marked("Resume", "继续")}`;
  assert.equal(localize(text, "en").text, "▶ Resume");
  assert.equal(localize(text, "zh").text, "▶ 继续");
  assert.equal(localize(text, "both").text, "▶ Resume · 继续");
});

test("a text with no marks is shown as written in every language", () => {
  for (const lang of ["en", "zh", "both"]) assert.equal(localize("A1 · 502", lang).text, "A1 · 502");
});

test("a run carried across nodes (Markdown's bold) ends where its mark says", () => {
  // "**Title**: about\n\n**标题**：关于" as Markdown draws it: five text nodes.
  const nodes = [EN, "Title", `: about${JOINT}`, `${ZH}`, "标题", `：关于${END}`];
  const shown = (lang) => {
    let mark = END;
    return nodes.map((n) => { const out = localize(n, lang, mark); mark = out.mark; return out.text; }).join("|");
  };
  assert.equal(shown("en"), "|Title|: about|||");
  assert.equal(shown("zh"), "||||标题|：关于");
});

test("two marked texts in one line keep the text between them", () => {
  const text = `${marked("Fired 3", "已发送 3 个")}: A1, B2 ${marked("(capped)", "（已限额）")}`;
  assert.equal(localize(text, "en").text, "Fired 3: A1, B2 (capped)");
  assert.equal(localize(text, "zh").text, "已发送 3 个: A1, B2 （已限额）");
});
