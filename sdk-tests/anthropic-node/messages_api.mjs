// kvstash's Messages API and prompt caching through the official Anthropic TypeScript SDK
// (issue 35), against a running `kvstash serve` (a generated model, Qwen2.5's chat template, an API
// key sent as x-api-key): messages, streaming, a tool-use round trip (forced by tool_choice, so the
// server's constrained decoding makes the call valid whatever the random weights say), count_tokens,
// errors in Anthropic's shape, and a 2,000-token system prompt under cache_control whose first
// request reports it created and whose next one reports it read. Exits non-zero on the first failure.
//
//   node messages_api.mjs http://127.0.0.1:PORT API_KEY
import Anthropic from "@anthropic-ai/sdk";
import { VERSION } from "@anthropic-ai/sdk/version";

const client = new Anthropic({ baseURL: process.argv[2], apiKey: process.argv[3], maxRetries: 0, timeout: 120_000 });
const model = "tiny";
let checks = 0;

function fail(message) {
  console.error("FAIL: " + message);
  process.exit(1);
}
function check(condition, message) {
  checks++;
  if (!condition) fail(message);
}

// 1. A plain message.
const plain = await client.messages.create({
  model, max_tokens: 12, temperature: 0, messages: [{ role: "user", content: "Say hello." }],
});
check(plain.type === "message" && plain.role === "assistant", "a message answer: " + JSON.stringify(plain));
check(plain.model === model, "model echoed");
check(["end_turn", "max_tokens"].includes(plain.stop_reason), "stop_reason " + plain.stop_reason);
check(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0 && plain.usage.output_tokens <= 12, "usage " + JSON.stringify(plain.usage));
check(plain.content.every((b) => b.type === "text"), "text blocks only");

// 2. The same request streamed: the SDK assembles the same text (greedy) from Anthropic's events.
const events = [];
const stream = client.messages.stream({
  model, max_tokens: 12, temperature: 0, messages: [{ role: "user", content: "Say hello." }],
});
stream.on("streamEvent", (e) => events.push(e.type));
const streamed = await stream.finalMessage();
const text = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
check(text(streamed) === text(plain), `streamed text ${JSON.stringify(text(streamed))} != ${JSON.stringify(text(plain))}`);
check(events[0] === "message_start" && events.at(-1) === "message_stop", "event order " + events.join(","));
check(events.includes("message_delta"), "a message_delta");
check(streamed.usage.output_tokens === plain.usage.output_tokens, "streamed usage " + JSON.stringify(streamed.usage));

// 3. Tool use: a forced call, its result, the next turn.
const tools = [{
  name: "get_weather",
  description: "The weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", enum: ["Paris", "Tokyo", "Lima"] }, days: { type: "integer", minimum: 1, maximum: 7 } },
    required: ["city", "days"],
    additionalProperties: false,
  },
}];
function valid_input(input) {
  return input && ["Paris", "Tokyo", "Lima"].includes(input.city) && Number.isInteger(input.days) && input.days >= 1 &&
    input.days <= 7 && Object.keys(input).length === 2;
}
for (let seed = 0; seed < 5; seed++) {
  const call = await client.messages.create({
    model, max_tokens: 400, temperature: 1, tools, tool_choice: { type: "any", disable_parallel_tool_use: true },
    messages: [{ role: "user", content: `Weather please (${seed})` }],
  });
  const use = call.content.find((b) => b.type === "tool_use");
  check(call.stop_reason === "tool_use", "stop_reason tool_use: " + JSON.stringify(call));
  check(use && use.name === "get_weather" && valid_input(use.input), "a valid tool_use block: " + JSON.stringify(call.content));
  const next = await client.messages.create({
    model, max_tokens: 8, temperature: 0, tools,
    messages: [
      { role: "user", content: `Weather please (${seed})` },
      { role: "assistant", content: call.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "18 degrees, sunny" }] },
    ],
  });
  const total = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
  check(next.type === "message" && total(next.usage) > total(call.usage) + 10, "the round trip's next turn holds the call and its result: " + JSON.stringify(next.usage));
}
// A named tool, streamed: the SDK assembles the input from input_json_delta events.
const named = await client.messages.stream({
  model, max_tokens: 400, temperature: 1, tools, tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
  messages: [{ role: "user", content: "Weather?" }],
}).finalMessage();
const namedUse = named.content.find((b) => b.type === "tool_use");
check(namedUse && valid_input(namedUse.input), "a streamed named tool call: " + JSON.stringify(named.content));

// 4. Errors in Anthropic's shape.
try {
  await client.messages.create({ model, max_tokens: 8, messages: [{ role: "user", content: "hi" }], thinking: { type: "enabled", budget_tokens: 1024 } });
  fail("thinking was accepted");
} catch (e) {
  check(e instanceof Anthropic.BadRequestError, "a 400 for thinking: " + e);
  check(e.error?.type === "error" && e.error?.error?.type === "invalid_request_error", "Anthropic's error shape: " + JSON.stringify(e.error));
  check(String(e.error?.error?.message).includes("thinking"), "the error names thinking");
}
try {
  await new Anthropic({ baseURL: process.argv[2], apiKey: "wrong", maxRetries: 0 }).messages.create({
    model, max_tokens: 8, messages: [{ role: "user", content: "hi" }],
  });
  fail("a wrong key was accepted");
} catch (e) {
  check(e instanceof Anthropic.AuthenticationError, "a 401 for a wrong key: " + e);
}

// 5. Prompt caching: a 2,000-token system prompt under a breakpoint.
const words = [];
for (let i = 0; words.join(" ").length < 9000; i++) words.push(`policy${i % 97} clause${(i * 7) % 89}`);
const system = [{ type: "text", text: "Rules: " + words.join(" "), cache_control: { type: "ephemeral", ttl: "1h" } }];
const counted = await client.messages.countTokens({ model, system, messages: [{ role: "user", content: "Question one?" }] });
check(counted.input_tokens >= 1800 && counted.input_tokens <= 4000, "count_tokens " + counted.input_tokens);
const first = await client.messages.create({ model, max_tokens: 4, temperature: 0, system, messages: [{ role: "user", content: "Question one?" }] });
const u1 = first.usage;
check(u1.cache_read_input_tokens === 0, "first request read nothing: " + JSON.stringify(u1));
check(u1.cache_creation_input_tokens >= 0.9 * (counted.input_tokens - 20) && u1.cache_creation_input_tokens <= counted.input_tokens,
      `first request created about the system prompt (${counted.input_tokens} tokens in all): ` + JSON.stringify(u1));
check(u1.input_tokens + u1.cache_creation_input_tokens + u1.cache_read_input_tokens === counted.input_tokens,
      "the three counts add up to count_tokens: " + JSON.stringify(u1));
const second = await client.messages.create({ model, max_tokens: 4, temperature: 0, system, messages: [{ role: "user", content: "Another, different question?" }] });
const u2 = second.usage;
check(u2.cache_read_input_tokens === u1.cache_creation_input_tokens, "second request read what the first created: " + JSON.stringify(u2));
check(u2.cache_creation_input_tokens === 0, "second request created nothing: " + JSON.stringify(u2));
// Streamed, the same counts arrive in message_delta.
const third = await client.messages.stream({ model, max_tokens: 4, temperature: 0, system, messages: [{ role: "user", content: "A third question?" }] }).finalMessage();
check(third.usage.cache_read_input_tokens === u1.cache_creation_input_tokens, "a streamed request reads it too: " + JSON.stringify(third.usage));

console.log(`anthropic-node ${VERSION}: ${checks} checks passed`);
