// Validates agui_events.jsonl (written by TestMarshalMatchesGolden) against
// @ag-ui/core's zod schemas. Not part of `go test`; run by hand after a change
// to the encoding:
//   npm install @ag-ui/core@1.0.0 zod && node validate_agui.mjs
import { readFileSync } from "node:fs";
import { EventSchemas } from "@ag-ui/core/schemas";

const lines = readFileSync(new URL("./agui_events.jsonl", import.meta.url), "utf8").trim().split("\n");
let bad = 0;
for (const line of lines) {
  const r = EventSchemas.safeParse(JSON.parse(line));
  if (!r.success) {
    bad++;
    console.error(line, JSON.stringify(r.error.issues));
  }
}
console.log(`${lines.length - bad} passed, ${bad} failed`);
process.exit(bad ? 1 : 0);
