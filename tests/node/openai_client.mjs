// The official `openai` npm client against `lattice serve`, for tests/serve/client_process_test.cc.
//   node openai_client.mjs basic BASE_URL KEY        chat and completions, streamed and not; models; a bad key
//   node openai_client.mjs concurrent BASE_URL KEY N N streamed chats alone, then all at once (temperature 0)
//   node openai_client.mjs abort BASE_URL KEY        a stream dropped after 3 chunks; /health afterwards
//   node openai_client.mjs streams BASE_URL KEY N T  N streamed chats of T tokens at once (ignore_eos): each one's
//                                                    text, finish, usage, longest pause between pieces of
//                                                    text and the piece it came before, every piece's arrival (Unix ms)
// Prints one JSON object on stdout; exits 1 with the error on stderr if a call throws.
import OpenAI from "openai";

const [mode, baseURL, apiKey, arg] = process.argv.slice(2);
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 60000 });
const model = "lattice";

async function streamChat(content, extra = {}) {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content }], stream: true, temperature: 0, max_tokens: 16, ...extra,
  });
  let text = "", finish = null, usage = null, chunks = 0, role = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.role) role = c.delta.role;
      if (c.delta?.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks, role };
}

async function health() {
  const r = await fetch(baseURL + "/health", { signal: AbortSignal.timeout(10000) });
  return r.json();
}

async function basic() {
  const out = {};
  const chat = await client.chat.completions.create({
    model, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }],
    max_tokens: 8, temperature: 0, seed: 7,
  });
  out.chat = { object: chat.object, text: chat.choices[0].message.content, role: chat.choices[0].message.role,
               finish: chat.choices[0].finish_reason, usage: chat.usage, id: chat.id };
  out.chat_stream = await streamChat("hello", { max_completion_tokens: 8, stream_options: { include_usage: true } });
  const cmpl = await client.completions.create({ model, prompt: "once upon a time", max_tokens: 6, temperature: 0 });
  out.completion = { object: cmpl.object, text: cmpl.choices[0].text, finish: cmpl.choices[0].finish_reason, usage: cmpl.usage };
  const cstream = await client.completions.create({ model, prompt: "once upon a time", max_tokens: 6, temperature: 0, stream: true });
  let ctext = "";
  for await (const chunk of cstream) for (const c of chunk.choices) ctext += c.text ?? "";
  out.completion_stream = { text: ctext };
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);
  try {
    await new OpenAI({ baseURL: baseURL + "/v1", apiKey: "wrong", maxRetries: 0 }).models.list();
    out.bad_key = { status: 200 };
  } catch (e) {
    out.bad_key = { status: e.status, type: e.error?.type ?? e.type };
  }
  try {
    await client.chat.completions.create({ model, messages: [], max_tokens: 4 });
    out.bad_request = { status: 200 };
  } catch (e) {
    out.bad_request = { status: e.status, message: e.message };
  }
  return out;
}

async function concurrent(n) {
  const prompts = Array.from({ length: n }, (_, i) => `request number ${i} says hi`);
  const alone = [];
  for (const p of prompts) alone.push(await streamChat(p, { max_tokens: 24 }));
  const t0 = Date.now();
  const together = await Promise.all(prompts.map((p) => streamChat(p, { max_tokens: 24 })));
  return { alone, together, together_ms: Date.now() - t0, health: await health() };
}

async function abort() {
  const ac = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages: [{ role: "user", content: "go on forever" }], stream: true, max_tokens: 8000, ignore_eos: true, temperature: 0 },
    { signal: ac.signal });
  let chunks = 0;
  try {
    for await (const _ of stream) if (++chunks >= 3) ac.abort();
  } catch (e) {
    if (e.name !== "AbortError" && !(e instanceof OpenAI.APIUserAbortError)) throw e;
  }
  const t0 = Date.now();
  let h = await health();
  while ((h.active > 0 || h.requests_cancelled < 1) && Date.now() - t0 < 10000) {
    await new Promise((r) => setTimeout(r, 50));
    h = await health();
  }
  const freed_ms = Date.now() - t0;
  const after = await streamChat("and now me", { max_tokens: 4 });
  return { chunks, freed_ms, health: h, after };
}

async function streams(n, tokens) {
  // Once every stream has its first piece, stderr says so: a test that kills a rank waits for
  // this line, so each stream has text from before the kill (a slot can be busy on its prompt
  // while no piece has reached the client yet).
  let started = 0;
  const first = () => { if (++started === n) process.stderr.write("every stream decodes\n"); };
  const one = async (i) => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: "user", content: `stream ${i} goes on` }], stream: true, temperature: 0,
      max_tokens: tokens, ignore_eos: true, stream_options: { include_usage: true },
    });
    // Pauses between pieces of text (the wait for the first one is the prompt's, not a pause).
    let text = "", finish = null, usage = null, last = null, max_gap_ms = 0, max_gap_at = 0, pieces = 0;
    const at_ms = [];  // each piece's arrival (Unix ms)
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta?.content) {
          const now = Date.now();
          if (last !== null && now - last > max_gap_ms) max_gap_ms = now - last, max_gap_at = pieces;
          last = now;
          pieces++;
          at_ms.push(now);
          if (pieces === 1) first();
          text += c.delta.content;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    return { text, finish, usage, max_gap_ms, max_gap_at, at_ms };
  };
  return { streams: await Promise.all(Array.from({ length: n }, (_, i) => one(i))) };
}

try {
  let out;
  if (mode === "basic") out = await basic();
  else if (mode === "concurrent") out = await concurrent(Number(arg ?? 8));
  else if (mode === "abort") out = await abort();
  else if (mode === "streams") out = await streams(Number(arg ?? 4), Number(process.argv[6] ?? 64));
  else throw new Error("unknown mode " + mode);
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (e) {
  process.stderr.write(String(e?.stack ?? e) + "\n");
  process.exit(1);
}
