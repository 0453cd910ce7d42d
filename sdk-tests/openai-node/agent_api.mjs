// kvstash's agent API through the official OpenAI Node SDK (issue 33), against a running
// `kvstash serve` (a generated model, Qwen2.5's chat template): tool calls with tool_choice
// "required" and a named function, the SDK's stream helper assembling a call, response_format
// json_schema and json_object, n: 3 (whole and streamed), models.retrieve. Random weights: only the server's constrained decoding makes the
// answers valid, so every check below can fail. Exits non-zero on the first failure.
//
//   node agent_api.mjs http://127.0.0.1:PORT [single]
import OpenAI from "openai";
import { VERSION } from "openai/version";

const baseURL = process.argv[2] + "/v1";
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 });
const model = "tiny";
// "single": required calls with parallel_tool_calls false (the runs with other templates). With
// random weights nothing but max_tokens ends a run of parallel calls in some syntaxes (Hermes 3's
// and Mistral's markup spelled in ordinary tokens): one call per answer keeps the checks about
// validity, not length.
const parallel = process.argv[3] === "single" ? { parallel_tool_calls: false } : {};
let checks = 0;

function fail(message) {
  console.error("FAIL: " + message);
  process.exit(1);
}
function check(condition, message) {
  checks++;
  if (!condition) fail(message);
}

// A small validator for the schemas below (an independent check of what the grammar produced).
function validates(value, schema, path = "$") {
  if (schema.enum) return schema.enum.includes(value) ? null : `${path}: ${JSON.stringify(value)} not in enum`;
  switch (schema.type) {
    case "object": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) return `${path}: not an object`;
      for (const key of schema.required ?? []) if (!(key in value)) return `${path}: missing ${key}`;
      for (const [key, v] of Object.entries(value)) {
        const sub = schema.properties?.[key];
        if (!sub) {
          if (schema.additionalProperties === false) return `${path}: unexpected ${key}`;
          continue;
        }
        const why = validates(v, sub, `${path}.${key}`);
        if (why) return why;
      }
      return null;
    }
    case "array": {
      if (!Array.isArray(value)) return `${path}: not an array`;
      if (schema.minItems !== undefined && value.length < schema.minItems) return `${path}: too few items`;
      if (schema.maxItems !== undefined && value.length > schema.maxItems) return `${path}: too many items`;
      for (let i = 0; i < value.length; i++) {
        const why = validates(value[i], schema.items, `${path}[${i}]`);
        if (why) return why;
      }
      return null;
    }
    case "string":
      if (typeof value !== "string") return `${path}: not a string`;
      if (schema.minLength !== undefined && [...value].length < schema.minLength) return `${path}: too short`;
      if (schema.maxLength !== undefined && [...value].length > schema.maxLength) return `${path}: too long`;
      return null;
    case "integer":
      if (!Number.isInteger(value)) return `${path}: not an integer`;
      if (schema.minimum !== undefined && value < schema.minimum) return `${path}: below minimum`;
      if (schema.maximum !== undefined && value > schema.maximum) return `${path}: above maximum`;
      return null;
    case "boolean":
      return typeof value === "boolean" ? null : `${path}: not a boolean`;
    default:
      return `${path}: schema type ${schema.type} not known to this validator`;
  }
}

const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string", minLength: 1, maxLength: 12 }, unit: { enum: ["c", "f"] } },
                  required: ["city", "unit"], additionalProperties: false } } },
  { type: "function", function: { name: "add", description: "Adds two integers.",
    parameters: { type: "object", properties: { a: { type: "integer", minimum: -100, maximum: 100 }, b: { type: "integer", minimum: 0, maximum: 9 } },
                  required: ["a", "b"], additionalProperties: false } } },
];
const messages = [{ role: "user", content: "What is the weather in Paris, and 2 + 3?" }];

function checkCall(call, context, name) {
  check(call.type === "function", `${context}: call type ${call.type}`);
  const tool = tools.find((t) => t.function.name === call.function.name);
  check(tool !== undefined, `${context}: a call of an undeclared function ${call.function.name}`);
  if (name) check(call.function.name === name, `${context}: called ${call.function.name}, not ${name}`);
  let args;
  try {
    args = JSON.parse(call.function.arguments);
  } catch (e) {
    fail(`${context}: arguments are not JSON: ${call.function.arguments}`);
  }
  const why = validates(args, tool.function.parameters);
  check(why === null, `${context}: ${why} in ${call.function.arguments}`);
  check(typeof call.id === "string" && call.id.length > 0, `${context}: no call id`);
}

// 1. tool_choice "required": 20 sampled requests (temperature 1, different seeds).
for (let seed = 1; seed <= 20; seed++) {
  const r = await client.chat.completions.create({ model, messages, tools, tool_choice: "required", temperature: 1, seed, max_tokens: 1000, ...parallel });
  const choice = r.choices[0];
  check(choice.finish_reason === "tool_calls", `required, seed ${seed}: finish_reason ${choice.finish_reason}`);
  check((choice.message.tool_calls ?? []).length >= 1, `required, seed ${seed}: no tool_calls in ${JSON.stringify(choice.message)}`);
  for (const call of choice.message.tool_calls) checkCall(call, `required, seed ${seed}`);
}

// 2. A named choice: 20 sampled requests.
for (let seed = 1; seed <= 20; seed++) {
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: { type: "function", function: { name: "add" } }, temperature: 1, seed, max_tokens: 300 });
  const calls = r.choices[0].message.tool_calls ?? [];
  check(calls.length === 1, `named, seed ${seed}: ${calls.length} calls`);
  checkCall(calls[0], `named, seed ${seed}`, "add");
}

// 3. The SDK's stream helper assembles the call from the stream.
for (let seed = 1; seed <= 3; seed++) {
  const stream = client.beta.chat.completions.stream({ model, messages, tools, tool_choice: "required", temperature: 1, seed, max_tokens: 1000, ...parallel });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  check(choice.finish_reason === "tool_calls", `stream, seed ${seed}: finish_reason ${choice.finish_reason}`);
  check((choice.message.tool_calls ?? []).length >= 1, `stream, seed ${seed}: no tool_calls`);
  for (const call of choice.message.tool_calls) checkCall(call, `stream, seed ${seed}`);
}

// 4. response_format json_schema (strict; nested objects, arrays, enums, bounded integers): 50 of 50.
const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 8 },
    age: { type: "integer", minimum: 18, maximum: 99 },
    tags: { type: "array", items: { enum: ["red", "green", "blue"] }, minItems: 1, maxItems: 3 },
    address: { type: "object", properties: { floor: { type: "integer", minimum: -2, maximum: 40 }, lift: { type: "boolean" } },
               required: ["floor", "lift"], additionalProperties: false },
  },
  required: ["name", "age", "tags", "address"],
  additionalProperties: false,
};
for (let seed = 1; seed <= 50; seed++) {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Describe a person as JSON." }], temperature: 1, seed, max_tokens: 400,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } } });
  const content = r.choices[0].message.content;
  let value;
  try {
    value = JSON.parse(content);
  } catch (e) {
    fail(`json_schema, seed ${seed}: not JSON: ${content}`);
  }
  const why = validates(value, person);
  check(why === null, `json_schema, seed ${seed}: ${why} in ${content}`);
}

// 5. json_object parses (an unbounded object may run to max_tokens: those that end are checked,
// and at least one must end).
let ended = 0;
for (let seed = 1; seed <= 5; seed++) {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Some JSON, please." }], temperature: 1, seed, max_tokens: 400,
    response_format: { type: "json_object" } });
  const choice = r.choices[0];
  if (choice.finish_reason !== "stop") continue;
  let value;
  try {
    value = JSON.parse(choice.message.content);
  } catch (e) {
    fail(`json_object, seed ${seed}: not JSON: ${choice.message.content}`);
  }
  check(typeof value === "object" && value !== null && !Array.isArray(value), `json_object, seed ${seed}: not an object`);
  ended++;
}
check(ended >= 1, "json_object: no answer of 5 ended within max_tokens");

// 6. n: 3 returns three choices with distinct indices, streamed too (each chunk names its choice),
// usage counting the prompt once; and the served model is retrievable by id.
{
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hello." }], n: 3, temperature: 1, seed: 3, max_tokens: 8 });
  check(r.choices.length === 3, `n: 3 gave ${r.choices.length} choices`);
  const indices = new Set(r.choices.map((c) => c.index));
  check(indices.size === 3 && [0, 1, 2].every((i) => indices.has(i)), `n: 3 indices ${[...indices]}`);
  const single = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hello." }], temperature: 1, seed: 3, max_tokens: 8 });
  check(r.usage.prompt_tokens === single.usage.prompt_tokens, `n: 3 counts the prompt ${r.usage.prompt_tokens} times`);
  check(r.usage.completion_tokens >= 3, `n: 3 completion_tokens ${r.usage.completion_tokens}`);
  const stream = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hello." }], n: 3, temperature: 1, seed: 3, max_tokens: 8, stream: true });
  const texts = ["", "", ""];
  for await (const chunk of stream) {
    for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? "";
  }
  for (let i = 0; i < 3; i++) {
    const whole = r.choices.find((c) => c.index === i).message.content ?? "";
    check(texts[i] === whole, `n: 3 streamed choice ${i} differs: ${JSON.stringify(texts[i])} vs ${JSON.stringify(whole)}`);
  }
  const m = await client.models.retrieve(model);
  check(m.id === model && m.object === "model", `models.retrieve: ${JSON.stringify(m)}`);
  let missing = null;
  try {
    await client.models.retrieve("no-such-model");
  } catch (e) {
    missing = e;
  }
  check(missing instanceof OpenAI.NotFoundError, `models.retrieve of an unknown id: ${missing}`);
}

console.log(`openai ${VERSION} (Node SDK) against ${baseURL}: ${checks} checks passed`);
