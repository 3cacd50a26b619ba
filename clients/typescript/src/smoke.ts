// The TypeScript client's smoke test against a running agent (run by services/e2e/tests/clients.rs):
// submit a task, follow its server-sent events, answer its question, approve its held action, wait for the
// end, then fetch a step's screenshot. Every call goes through openapi-fetch typed by the `paths` that
// openapi-typescript generated from the agent's /openapi.json (./schema.ts); a call the document does not
// describe, or a body of the wrong shape, does not compile.
//
// Environment: UFO_URL (the agent's REST base URL), UFO_TOKEN (an API key), UFO_REQUEST (the task),
// UFO_ANSWER (the answer to give), UFO_REASON (the approval's reason), UFO_SCREENSHOT_OUT (where to write
// the screenshot). Prints one line per event and a JSON summary last; exits 1 on any failure.

import { writeFileSync } from "node:fs";
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type EventView = components["schemas"]["EventView"];
type StreamEnd = components["schemas"]["StreamEnd"];

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

/** A call's data, or an Error carrying the API's {code, message}. */
function ok<T>(what: string, result: { data?: T; error?: unknown; response: Response }): T {
  if (result.data === undefined) {
    throw new Error(`${what}: HTTP ${result.response.status} ${JSON.stringify(result.error)}`);
  }
  return result.data;
}

/** The messages of an SSE stream: `event:` name, `id:` and the joined `data:` lines. */
async function* messages(body: ReadableStream<Uint8Array>) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let id = "";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue; // a keep-alive comment
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = text;
        else if (field === "id") id = text;
        else if (field === "data") data.push(text);
      }
      if (data.length > 0) yield { event, id, data: data.join("\n") };
    }
  }
}

async function main() {
  const client = createClient<paths>({
    baseUrl: env("UFO_URL"),
    headers: { Authorization: `Bearer ${env("UFO_TOKEN")}` },
  });

  const submitted = ok(
    "submit",
    await client.POST("/v1/tasks", { body: { request: env("UFO_REQUEST") } }),
  );
  const id = submitted.id;
  console.log(`task ${id} ${submitted.status}`);
  const path = { params: { path: { id } } };

  const stream = await client.GET("/v1/tasks/{id}/events", { ...path, parseAs: "stream" });
  if (!stream.response.ok || !stream.data) {
    throw new Error(`events: HTTP ${stream.response.status}`);
  }
  const kinds: string[] = [];
  let answered = 0;
  let approved = 0;
  let end: StreamEnd | undefined;
  for await (const message of messages(stream.data as ReadableStream<Uint8Array>)) {
    if (message.event === "error") throw new Error(`event stream: ${message.data}`);
    if (message.event === "end") {
      end = JSON.parse(message.data) as StreamEnd;
      break;
    }
    const event = JSON.parse(message.data) as EventView;
    if (String(event.seq) !== message.id || event.kind !== message.event) {
      throw new Error(`message ${message.id}/${message.event} carries event ${event.seq}/${event.kind}`);
    }
    kinds.push(event.kind);
    console.log(`#${event.seq} ${event.kind}`);
    if (event.kind === "question_asked") {
      const task = ok("get", await client.GET("/v1/tasks/{id}", path));
      const after = ok(
        "answer",
        await client.POST("/v1/tasks/{id}/answers", {
          ...path,
          body: {
            answers: task.pending_questions.map(() => env("UFO_ANSWER")),
            question_ids: task.pending_questions.map((q) => q.id),
          },
        }),
      );
      answered += task.pending_questions.length;
      console.log(`answered ${task.pending_questions.map((q) => q.question).join(" / ")}: ${after.status}`);
    }
    if (event.kind === "action_held") {
      const task = ok("get", await client.GET("/v1/tasks/{id}", path));
      const held = task.held_action;
      if (!held) throw new Error(`action_held, but the task holds nothing: ${JSON.stringify(task)}`);
      const after = ok(
        "confirm",
        await client.POST("/v1/tasks/{id}/confirmation", {
          ...path,
          body: { approve: true, action_id: held.id, reason: env("UFO_REASON") },
        }),
      );
      approved += 1;
      console.log(`approved ${held.function} on ${held.target_name}: ${after.status}`);
    }
  }
  if (!end) throw new Error("the event stream closed without `end`");
  if (end.status !== "finished") throw new Error(`the task ended ${end.status}: ${end.result}`);

  const page = ok("steps", await client.GET("/v1/tasks/{id}/steps", path));
  const step = page.steps.find((s) => s.screenshots.includes("clean"));
  if (!step) throw new Error("no step has a clean screenshot");
  const shot = await client.GET("/v1/tasks/{id}/steps/{n}/screenshot", {
    params: { path: { id, n: step.step }, query: { kind: "clean" } },
    parseAs: "arrayBuffer",
  });
  if (!shot.response.ok || !shot.data) throw new Error(`screenshot: HTTP ${shot.response.status}`);
  const bytes = new Uint8Array(shot.data as ArrayBuffer);
  const type = shot.response.headers.get("content-type");
  if (type !== "image/png" || bytes[1] !== 0x50 || bytes[2] !== 0x4e || bytes[3] !== 0x47) {
    throw new Error(`step ${step.step}'s screenshot is not a PNG (${type})`);
  }
  writeFileSync(env("UFO_SCREENSHOT_OUT"), bytes);

  console.log(
    JSON.stringify({
      id,
      status: end.status,
      result: end.result,
      last_seq: end.last_seq,
      kinds,
      answered,
      approved,
      screenshot_step: step.step,
      screenshot_bytes: bytes.length,
    }),
  );
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? (e.stack ?? e.message) : e);
  process.exit(1);
});
