// OpenAI's Responses API on kvstash's KV cache (issue 35), through the official OpenAI Node SDK
// against a running `kvstash serve` (a generated model, Qwen2.5's chat template): 6 turns of a
// 1,500-token conversation chained by previous_response_id, each turn's prompt served from the KV
// cache up to the previous turn's end (usage.input_tokens_details.cached_tokens); streaming through
// the SDK's stream helper; a function call forced by tool_choice and its output sent back; a
// json_schema text format; retrieve, delete, and 404s. Exits non-zero on the first failure.
//
//   node responses_api.mjs http://127.0.0.1:PORT
import OpenAI from "openai";
import { VERSION } from "openai/version";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "unused", maxRetries: 0, timeout: 120_000 });
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

// 1. Six turns of a conversation that starts with a 1,500-token document.
const words = [];
for (let i = 0; words.join(" ").length < 6500; i++) words.push(`fact${i % 83} note${(i * 5) % 71}`);
let previous = null;
let previousTotal = 0;
for (let turn = 0; turn < 6; turn++) {
  const input = turn === 0 ? "Document: " + words.join(" ") + "\nQuestion 0?" : `Follow-up question ${turn}?`;
  const r = await client.responses.create({
    model, input, instructions: "Answer briefly.", max_output_tokens: 8, temperature: 0,
    ...(previous ? { previous_response_id: previous.id } : {}),
  });
  check(r.object === "response" && r.id.startsWith("resp_"), "a response object: " + JSON.stringify(r).slice(0, 300));
  check(["completed", "incomplete"].includes(r.status), "status " + r.status);
  check(r.output.length >= 1 && r.output[0].type === "message", "a message output item");
  check(typeof r.output_text === "string", "the SDK's output_text");
  check(r.previous_response_id === (previous ? previous.id : null), "previous_response_id echoed");
  const u = r.usage;
  if (turn === 0) {
    check(u.input_tokens >= 1400 && u.input_tokens <= 4000, "the first turn holds the document: " + JSON.stringify(u));
  } else {
    // Everything before this turn's new input was computed by the previous turn (its prompt and
    // its answer): served from the KV cache, less at most the blocks holding the answer's last tokens.
    check(u.input_tokens > previousTotal, `turn ${turn} carries the history: ${u.input_tokens} <= ${previousTotal}`);
    check(u.input_tokens_details.cached_tokens >= previousTotal - 32,
          `turn ${turn}: ${u.input_tokens_details.cached_tokens} cached of ${u.input_tokens} (previous turn's total ${previousTotal})`);
  }
  previousTotal = u.input_tokens + u.output_tokens;
  previous = r;
}

// 2. Retrieve, delete, and the 404s.
const got = await client.responses.retrieve(previous.id);
check(got.id === previous.id && JSON.stringify(got.output) === JSON.stringify(previous.output), "retrieve returns the stored response");
await client.responses.del(previous.id);
for (const call of [() => client.responses.retrieve(previous.id),
                    () => client.responses.create({ model, input: "x", previous_response_id: previous.id }),
                    () => client.responses.create({ model, input: "x", previous_response_id: "resp_unknown" })]) {
  try {
    await call();
    fail("a deleted or unknown response was found");
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, "a 404: " + e);
  }
}

// 3. Streaming: the SDK's helper assembles the same answer (greedy) from the event stream.
const plain = await client.responses.create({ model, input: "Say something.", max_output_tokens: 10, temperature: 0, store: false });
const events = [];
const stream = client.responses.stream({ model, input: "Say something.", max_output_tokens: 10, temperature: 0, store: false });
stream.on("event", (e) => events.push(e.type));
const streamed = await stream.finalResponse();
// (This SDK's stream helper sets no output_text: the text is read from the output items.)
const textOf = (r) => r.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
check(textOf(streamed) === plain.output_text, `streamed ${JSON.stringify(textOf(streamed))} != ${JSON.stringify(plain.output_text)}`);
check(events[0] === "response.created" && events.includes("response.output_text.delta"), "events " + events.join(","));
try {
  await client.responses.retrieve(plain.id);
  fail("store: false was stored");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, "store: false keeps nothing: " + e);
}

// 4. A function call forced by tool_choice, then its output in the next turn.
const tools = [{
  type: "function", name: "lookup", description: "Look a fact up", strict: true,
  parameters: { type: "object", properties: { topic: { type: "string", enum: ["a", "b"] }, depth: { type: "integer", minimum: 1, maximum: 3 } },
                required: ["topic", "depth"], additionalProperties: false },
}];
const callTurn = await client.responses.create({ model, input: "Look it up.", tools, tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 300, temperature: 1 });
const call = callTurn.output.find((o) => o.type === "function_call");
check(call && call.name === "lookup", "a function_call item: " + JSON.stringify(callTurn.output));
const args = JSON.parse(call.arguments);
check(["a", "b"].includes(args.topic) && Number.isInteger(args.depth) && args.depth >= 1 && args.depth <= 3, "arguments valid: " + call.arguments);
const after = await client.responses.create({
  model, previous_response_id: callTurn.id, tools, max_output_tokens: 8, temperature: 0,
  input: [{ type: "function_call_output", call_id: call.call_id, output: "the answer is 42" }],
});
check(after.status === "completed" || after.status === "incomplete", "the turn after the call: " + after.status);
check(after.usage.input_tokens_details.cached_tokens > 0, "the call's turn is reused: " + JSON.stringify(after.usage));

// 5. A json_schema text format: the output parses and validates.
const schemaTurn = await client.responses.create({
  model, input: "A person as JSON.", max_output_tokens: 200, temperature: 1,
  text: { format: { type: "json_schema", name: "person", strict: true,
                    schema: { type: "object", properties: { age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["age"], additionalProperties: false } } },
});
if (schemaTurn.status === "completed") {
  const person = JSON.parse(schemaTurn.output_text);
  check(Number.isInteger(person.age) && person.age >= 0 && person.age <= 120 && Object.keys(person).length === 1, "schema-valid: " + schemaTurn.output_text);
}

console.log(`openai-responses ${VERSION}: ${checks} checks passed`);
