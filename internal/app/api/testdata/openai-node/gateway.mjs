// The official OpenAI Node SDK against llmq's gateway, run by
// TestGatewayOpenAINode (gateway_node_test.go), which checks what it
// prints: one JSON object with what each call saw. The SDK's own retries
// are off, so a 429 reaches the script as it was sent.
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.LLMQ_BASE_URL, apiKey: process.env.LLMQ_API_KEY, maxRetries: 0 });
const request = (content) => ({
  model: 'gpt-4o-mini',
  max_tokens: 32,
  messages: [{ role: 'user', content }],
});
const out = {};

// A deadline llmq cannot meet: the SDK announces its 60 s timeout.
try {
  await client.chat.completions.create(request('hi'), { timeout: 60_000 });
  out.deadline = { status: 200 };
} catch (e) {
  if (!(e instanceof OpenAI.APIError)) throw e;
  out.deadline = { status: e.status, code: e.code, type: e.type, retry_after: e.headers?.get('retry-after') ?? null };
}

// A completion, with the job's id from the response headers.
const { data: completion, response } = await client.chat.completions.create(request('what is a token bucket?')).withResponse();
out.completion = {
  job_id: response.headers.get('x-llmq-job-id'),
  id: completion.id,
  content: completion.choices[0].message.content,
  completion_tokens: completion.usage.completion_tokens,
};

// A stream: the chunks put together.
const { data: stream, response: streamed } = await client.chat.completions
  .create({ ...request('name three queues'), stream: true })
  .withResponse();
let content = '';
let finish = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  for (const choice of chunk.choices) {
    content += choice.delta?.content ?? '';
    finish = choice.finish_reason ?? finish;
  }
}
out.stream = { job_id: streamed.headers.get('x-llmq-job-id'), content, finish_reason: finish, chunks };

process.stdout.write(JSON.stringify(out));
