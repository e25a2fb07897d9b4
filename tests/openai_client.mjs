// Drives `spattn serve` with the official OpenAI client for Node, as a user's program would:
// completions and chat completions, each whole and streamed. Prints one JSON object with the
// texts, the usages and what the stream delivered; tests/serve/test_serve_openai.cpp checks it.
// Usage: node openai_client.mjs OPENAI_PACKAGE_DIR BASE_URL
import { pathToFileURL } from "node:url";
import path from "node:path";

const [pkgDir, baseURL] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(path.join(pkgDir, "index.mjs")).href);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });

const prompt = "Once upon a time";
const messages = [
  { role: "system", content: "You tell stories." },
  { role: "user", content: "Tell me about a cat." },
];
const common = { model: "stories260K.gguf", max_tokens: 16, temperature: 0 };
const out = {};

const c = await client.completions.create({ ...common, prompt });
out.completion = c.choices[0].text;
out.completion_usage = c.usage;
out.completion_finish = c.choices[0].finish_reason;

let text = "", chunks = 0, progress = 0, usage = null;
for await (const ch of await client.completions.create({ ...common, prompt, stream: true })) {
  ++chunks;
  if (!ch.choices || ch.choices.length === 0) ++progress;  // llama-server's prompt_progress
  else text += ch.choices[0].text ?? "";
  if (ch.usage) usage = ch.usage;
}
out.completion_stream = text;
out.completion_stream_chunks = chunks;
out.completion_stream_usage = usage;

const chat = await client.chat.completions.create({ ...common, messages });
out.chat = chat.choices[0].message.content;
out.chat_role = chat.choices[0].message.role;

text = "";
let role = null;
for await (const ch of await client.chat.completions.create({ ...common, messages, stream: true })) {
  const d = ch.choices?.[0]?.delta;
  if (d?.role) role = d.role;
  if (d?.content) text += d.content;
}
out.chat_stream = text;
out.chat_stream_role = role;

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
process.stdout.write(JSON.stringify(out));
