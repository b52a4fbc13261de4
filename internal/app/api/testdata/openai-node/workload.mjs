// A plain SDK's workload against llmq's gateway, run by
// TestGatewayOpenAINodeWorkload (gateway_node_test.go): AGENTS agents
// each make CALLS sequential calls with no llmq header, the SDK's retries
// set by MAX_RETRIES and its timeout by TIMEOUT_MS (unset: the SDK's
// defaults). Prints one JSON object:
// the calls that succeeded, those that failed, and the failures by
// status and code.
import OpenAI from 'openai';

const opts = { baseURL: process.env.LLMQ_BASE_URL, apiKey: process.env.LLMQ_API_KEY };
if (process.env.MAX_RETRIES !== undefined) opts.maxRetries = Number(process.env.MAX_RETRIES);
if (process.env.TIMEOUT_MS !== undefined) opts.timeout = Number(process.env.TIMEOUT_MS);
const client = new OpenAI(opts);
const agents = Number(process.env.AGENTS);
const calls = Number(process.env.CALLS);
const out = { ok: 0, failed: 0, errors: {} };

async function agent(a) {
  for (let i = 0; i < calls; i++) {
    try {
      await client.chat.completions.create({
        model: 'gpt-4o-mini',
        max_tokens: 32,
        messages: [{ role: 'user', content: `agent ${a} step ${i}: summarise the last step` }],
      });
      out.ok++;
    } catch (e) {
      out.failed++;
      const key = e instanceof OpenAI.APIError ? `${e.status} ${e.code ?? ''}` : String(e);
      out.errors[key] = (out.errors[key] ?? 0) + 1;
    }
  }
}

await Promise.all(Array.from({ length: agents }, (_, a) => agent(a)));
process.stdout.write(JSON.stringify(out));
