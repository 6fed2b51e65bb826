// A harnessed agent in JavaScript (Node.js >= 18, no packages): it only uses the environment and fetch.
//
// ProcessAgent(command=["node", "examples/harness/node_agent.mjs"], env_map={QUESTION: "question",
// ANSWER: "answer"}) starts it once per rollout. It asks the model the question through the rollout's
// gateway URL (AGL_OPENAI_BASE_URL, bearer AGL_KEY), posts a "note" annotation event and a reward event
// to AGL_EVENT_URL, and exits 0. Any failure exits 1, which marks the rollout failed.

const env = process.env;
const headers = { "Content-Type": "application/json", Authorization: `Bearer ${env.AGL_KEY}` };

async function post(url, body) {
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`POST ${url} -> HTTP ${response.status}: ${text}`);
  return JSON.parse(text);
}

async function main() {
  const completion = await post(`${env.AGL_OPENAI_BASE_URL}/chat/completions`, {
    model: env.AGL_MODEL || "default",
    messages: [
      { role: "system", content: "You are a careful calculator. Answer with the number only." },
      { role: "user", content: env.QUESTION },
    ],
  });
  const reply = completion.choices[0].message.content || "";
  await post(env.AGL_EVENT_URL, { event_type: "note", data: { language: "javascript", reply } });
  const reward = reply.includes(env.ANSWER) ? 1.0 : 0.0;
  await post(env.AGL_EVENT_URL, { event_type: "reward", data: { value: reward } });
  console.error(`question=${JSON.stringify(env.QUESTION)} reply=${JSON.stringify(reply)} reward=${reward}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
