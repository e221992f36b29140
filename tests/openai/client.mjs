// The official openai npm client against a running tierkv serve:
// models, chat, streaming chat (with usage), legacy completions, and the
// client's own error classes for a 400 and a 401.
// Env: TIERKV_URL (http://127.0.0.1:PORT), TIERKV_API_KEY.
import OpenAI from 'openai';

const baseURL = `${process.env.TIERKV_URL}/v1`;
const apiKey = process.env.TIERKV_API_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
let pass = 0;
let fail = 0;

function check(cond, what) {
  if (cond) {
    pass++;
  } else {
    fail++;
    console.log(`FAIL: ${what}`);
  }
}

async function run(name, fn) {
  try {
    await fn();
  } catch (e) {
    fail++;
    console.log(`FAIL: ${name}: ${e?.constructor?.name} ${e?.status ?? ''} ${e?.message}`);
  }
}

let model = 'stories260K';
const messages = [
  { role: 'system', content: 'You are a storyteller.' },
  { role: 'user', content: 'Tell me about Lily.' },
];

await run('models', async () => {
  const list = await client.models.list();
  check(list.data.length === 1 && typeof list.data[0].id === 'string', 'models.list has one model');
  model = list.data[0].id;
});

let plain = null;
await run('chat', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 32, temperature: 0 });
  const c = r.choices[0];
  check(r.object === 'chat.completion', `object ${r.object}`);
  check(c.message.role === 'assistant', `role ${c.message.role}`);
  check(typeof c.message.content === 'string' && c.message.content.length > 0, 'non-empty content');
  check(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens && r.usage.completion_tokens > 0,
    `usage ${JSON.stringify(r.usage)}`);
  plain = c.message.content;
});

await run('chat stream', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 32, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (ch.delta?.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  check(chunks > 2, `${chunks} chunks`);
  check(text === plain, `streamed text equals the plain one: ${JSON.stringify(text)} vs ${JSON.stringify(plain)}`);
  check(['stop', 'length'].includes(finish), `stream finish_reason ${finish}`);
  check(usage && usage.completion_tokens > 0, `stream usage ${JSON.stringify(usage)}`);
});

await run('completions', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  check(r.choices[0].text.startsWith(', there was a little girl'), `completion text ${JSON.stringify(r.choices[0].text)}`);
});

await run('bad request', async () => {
  try {
    await client.chat.completions.create({ model, messages, temperature: 7 });
    check(false, 'temperature 7 accepted');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400, `400 BadRequestError, got ${e?.constructor?.name}`);
    check(e.param === 'temperature', `error param ${e.param}`);
  }
});

await run('bad key', async () => {
  const other = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  try {
    await other.models.list();
    check(false, 'wrong key accepted');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, `401 AuthenticationError, got ${e?.constructor?.name}`);
  }
});

console.log(`${pass} passed, ${fail} failed`);
process.exit(fail === 0 && pass > 0 ? 0 : 1);
