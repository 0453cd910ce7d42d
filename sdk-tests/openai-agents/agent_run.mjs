// The OpenAI Agents SDK (@openai/agents) running an agent with one function tool against
// `kvstash serve` through the Responses API (issue 35): the model is made to call the tool
// (toolChoice "required"; the SDK resets it to "auto" after the call), the call's arguments
// must validate against the tool's schema (the SDK parses them with zod), the tool's result goes
// back as a function_call_output item, and the run must finish with a final output of the agent's
// output type. Random
// weights: only constrained decoding makes the call valid, so every check can fail. Tracing is
// off (nothing leaves the machine). Exits non-zero on the first failure.
//
//   node agent_run.mjs http://127.0.0.1:PORT
import OpenAI from "openai";
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

const baseURL = process.argv[2] + "/v1";
setTracingDisabled(true);
setOpenAIAPI("responses");
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 120_000 }));

let checks = 0;
function check(condition, message) {
  checks++;
  if (!condition) {
    console.error("FAIL: " + message);
    process.exit(1);
  }
}

const calls = [];
const getWeather = tool({
  name: "get_weather",
  description: "The weather in a city.",
  parameters: z.object({ city: z.string().min(1).max(12), unit: z.enum(["c", "f"]) }),
  async execute({ city, unit }) {
    calls.push({ city, unit });
    return `It is 21 degrees ${unit === "c" ? "Celsius" : "Fahrenheit"} in ${city}.`;
  },
});

// The final answer's type: the SDK asks for it as text.format json_schema, which the server decodes
// under, so a model with random weights still ends its answer (free text would run to max tokens).
const Report = z.object({ sky: z.enum(["sunny", "cloudy", "rainy"]), degrees: z.number().int().min(-40).max(50) });

for (let seed = 1; seed <= 3; seed++) {
  calls.length = 0;
  const agent = new Agent({
    name: "weather",
    instructions: "Answer weather questions with the get_weather tool.",
    model: "tiny",
    tools: [getWeather],
    modelSettings: { toolChoice: "required", temperature: 1, maxTokens: 400, providerData: { seed } },
    outputType: Report,
  });
  const result = await run(agent, "What is the weather in Paris?", { maxTurns: 4 });
  check(calls.length >= 1, `seed ${seed}: the tool was never called`);
  for (const c of calls) {
    check(typeof c.city === "string" && c.city.length >= 1 && [...c.city].length <= 12, `seed ${seed}: city ${JSON.stringify(c.city)}`);
    check(c.unit === "c" || c.unit === "f", `seed ${seed}: unit ${JSON.stringify(c.unit)}`);
  }
  const items = result.newItems.map((i) => i.type);
  check(items.includes("tool_call_item"), `seed ${seed}: no tool_call_item in ${items}`);
  check(items.includes("tool_call_output_item"), `seed ${seed}: the tool's result did not go back (${items})`);
  const report = Report.safeParse(result.finalOutput);
  check(report.success, `seed ${seed}: the final output ${JSON.stringify(result.finalOutput)} is not a Report`);
  check(typeof result.lastResponseId === "string" && result.lastResponseId.startsWith("resp"),
        `seed ${seed}: last response id ${result.lastResponseId}`);
}
console.log(`@openai/agents against ${baseURL}: ${checks} checks passed`);
