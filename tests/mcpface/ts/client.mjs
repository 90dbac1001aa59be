// The MCP TypeScript SDK's client against `toolsrv mcp --http` (tests/mcpface/test_ts_sdk.py).
// argv: URL TOKEN TOOLS_DIR.  Prints one JSON object of what it saw; every wait is bounded.
import fs from "node:fs";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token, toolsDir] = process.argv.slice(2);
// (the timer is unref'd: a wait that was met must not keep node alive for its bound)
const bounded = (p, ms, what) => Promise.race([p, new Promise((_, no) =>
  setTimeout(() => no(new Error(`no ${what} within ${ms} ms`)), ms).unref())]);
const out = {};
let changed;
const listChanged = new Promise((yes) => { changed = yes; });
const client = new Client({ name: "ts-sdk-test", version: "1.0" }, {
  listChanged: { tools: { autoRefresh: true, onChanged: (err, tools) =>
    changed(err ? `error: ${err}` : tools.map((t) => t.name)) } } });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } } });
await client.connect(transport);
out.capabilities = client.getServerCapabilities();

// annotations and output schemas
const listed = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t]));
out.pure = { title: listed.pure.title, annotations: listed.pure.annotations };
out.wipe = listed.wipe.annotations;
out.statsSchema = listed.stats.outputSchema;

// structured content (the SDK validates it against the listed outputSchema)
const stats = await client.callTool({ name: "stats", arguments: {} });
out.stats = { isError: stats.isError, structuredContent: stats.structuredContent };

// prompts
out.prompts = (await client.listPrompts()).prompts.map((p) => p.name);
out.prompt = (await client.getPrompt({ name: "pure" })).messages[0].content.text;

// the log as a resource, with updates once subscribed
let updated;
const gotUpdate = new Promise((yes) => { updated = yes; });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated(n.params.uri));
out.resources = (await client.listResources()).resources.map((r) => r.uri);
await client.subscribeResource({ uri: "toolsrv://agent/log" });
await client.callTool({ name: "pure", arguments: { from: "ts" } });
out.updated = await bounded(gotUpdate, 30000, "resources/updated");
out.log = (await client.readResource({ uri: "toolsrv://agent/log" })).contents[0].text;

// progress: a 9 s call under a 6 s timeout survives when progress resets it ...
const seen = [];
const slow = await client.callTool({ name: "slow", arguments: {} }, undefined, {
  timeout: 6000, resetTimeoutOnProgress: true, onprogress: (p) => seen.push(p) });
out.slow = { text: slow.content[0].text, progress: seen };
// ... and fails without the reset (what a 60 s default did to a 70 s build)
try {
  await client.callTool({ name: "slow", arguments: {} }, undefined, { timeout: 6000 });
  out.slowWithoutReset = "answered";
} catch (e) {
  out.slowWithoutReset = String(e.message || e);
}

// list_changed over HTTP: the SDK calls its handler only when the capability says so
fs.writeFileSync(path.join(toolsDir, "ts_newcomer.meta"),
  JSON.stringify({ description: "added by the ts test", cmd: "cat" }));
out.changedTo = await bounded(listChanged, 30000, "tools list_changed");
await client.close();
console.log(JSON.stringify(out));
