// llama.cpp as an oracle for lattice's engine tests, through node-llama-cpp's prebuilt CPU
// binaries (never built here: getLlama({build: "never"})).
//
//   node llamacpp_oracle.mjs greedy MODEL.gguf TOKENS N     -> {"tokens": [N greedy ids]}
//   node llamacpp_oracle.mjs logprobs MODEL.gguf TOKENS     -> {"logprobs": [[vocab floats] per position]}
//   node llamacpp_oracle.mjs steps MODEL.gguf TOKENS N      -> {"tokens": [N greedy ids],
//                                                               "logprobs": [[vocab floats] per step]}
//
// TOKENS is a comma-separated list of token ids, fed as is (no BOS added, no tokenizer), so
// the comparison does not depend on tokenization. logprobs[i] is log softmax of llama.cpp's
// logits after TOKENS[0..i]: the logits up to a per-position constant. In steps mode,
// logprobs[s] is the same for the distribution tokens[s] was picked from: step 0 after the
// prompt (one batch), step s > 0 after decoding tokens[s-1] alone.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [mode, modelPath, tokenList, nArg] = process.argv.slice(2);
if (!mode || !modelPath || !tokenList) {
  process.stderr.write("usage: llamacpp_oracle.mjs greedy|logprobs MODEL TOKENS [N]\n");
  process.exit(2);
}
const tokens = tokenList.split(",").filter((s) => s.length > 0).map((s) => Number.parseInt(s, 10));

const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const n = Number.parseInt(nArg ?? "0", 10);
// f32 KV cache and no flash attention: the closest llama.cpp gets to an exact forward pass
// (lattice keeps its cache in f32 too). LLAMACPP_KV_TYPE=F16 (with LLAMACPP_FLASH_ATTN=1)
// instead runs llama.cpp's own defaults, as llama-completion does, to tell divergences caused
// by its f16 cache from the rest (docs/NUMERICS.md).
const kvType = process.env.LLAMACPP_KV_TYPE ?? "F32";
const context = await model.createContext({
  contextSize: Math.max(256, tokens.length + n + 16), threads: 1, batchSize: 512,
  flashAttention: process.env.LLAMACPP_FLASH_ATTN === "1",
  experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType});
const sequence = context.getSequence();

// One row of log-probabilities, indexed by token id (null where the probability underflowed).
function logprobRow(probs) {
  let maxId = 0;
  for (const id of probs.keys()) maxId = Math.max(maxId, id);
  const row = new Array(maxId + 1).fill(null);
  for (const [id, p] of probs) row[id] = p > 0 ? Math.log(p) : null;
  return row;
}

if (mode === "greedy" || mode === "steps") {
  const withRows = mode === "steps";
  const next = {generateNext: {token: true, probabilities: withRows}};
  const out = [];
  const rows = [];
  let input = tokens.map((t, i) => (i === tokens.length - 1 ? [t, next] : t));
  for (let step = 0; step < n; ++step) {
    const res = await sequence.controlledEvaluate(input);
    const got = res[input.length - 1]?.next;
    if (got?.token == null) throw new Error(`no token at step ${step}`);
    if (withRows) {
      if (!got.probabilities) throw new Error(`no probabilities at step ${step}`);
      rows.push(logprobRow(got.probabilities));
    }
    out.push(got.token);
    input = [[got.token, next]];
  }
  process.stdout.write(JSON.stringify(withRows ? {tokens: out, logprobs: rows} : {tokens: out}) + "\n");
} else if (mode === "logprobs") {
  const input = tokens.map((t) => [t, {generateNext: {probabilities: true}}]);
  const res = await sequence.controlledEvaluate(input);
  const rows = [];
  for (let i = 0; i < input.length; ++i) {
    const probs = res[i]?.next?.probabilities;
    if (!probs) throw new Error(`no probabilities at position ${i}`);
    rows.push(logprobRow(probs));
  }
  process.stdout.write(JSON.stringify({logprobs: rows}) + "\n");
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
await context.dispose();
await model.dispose();
