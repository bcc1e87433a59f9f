// llama.cpp's tokenizer as an oracle for lattice's (tests/engine/tokenizer_llamacpp_test.cc),
// through node-llama-cpp's prebuilt CPU binaries (never built here).
//
//   node tokenizer_oracle.mjs MANIFEST.json
//     MANIFEST: [{"model": "a.gguf", "strings": ["...", ...]}, ...]
//     -> {"results": [{"rows": [{"plain": [...], "special": [...], "detok": "..."} per string]} per model]}
//
// plain: llama_tokenize(add_special=false, parse_special=false); special: parse_special=true;
// detok: llama_detokenize(plain) without rendering special tokens. One process for all
// models: starting node and llama.cpp is the slow part. Exit code 3 with a line
// "unavailable: ..." when llama.cpp cannot be loaded here (the test then skips).
import fs from "node:fs";

const [manifestPath] = process.argv.slice(2);
if (!manifestPath) {
  process.stderr.write("usage: tokenizer_oracle.mjs MANIFEST.json\n");
  process.exit(2);
}
let llama;
try {
  const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");
  llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
} catch (e) {
  process.stdout.write(`unavailable: ${e.message}\n`);
  process.exit(3);
}
const manifest = JSON.parse(fs.readFileSync(manifestPath, "utf8"));
const results = [];
for (const {model: modelPath, strings} of manifest) {
  const model = await llama.loadModel({modelPath, gpuLayers: 0, vocabOnly: true});
  const rows = strings.map((s) => {
    const plain = Array.from(model.tokenize(s, false));
    const special = Array.from(model.tokenize(s, true));
    return {plain, special, detok: model.detokenize(plain, false)};
  });
  await model.dispose();
  results.push({rows});
}
process.stdout.write(JSON.stringify({results}) + "\n");
