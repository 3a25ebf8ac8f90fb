// The four views: the element each is drawn into and its pure figure builder.
import { attention } from "./attention.js";
import { blockTables } from "./block_tables.js";
import { timing } from "./timing.js";
import { tokenLayout } from "./token_layout.js";

export const VIEWS = [
  { id: "bs-token-layout", key: "layout", build: tokenLayout },
  { id: "bs-block-tables", key: "blocks", build: blockTables },
  { id: "bs-attention", key: "attention", build: attention },
  { id: "bs-timing", key: "timing", build: timing },
];
