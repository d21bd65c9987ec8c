#!/usr/bin/env node
// A hostile MCP server over stdio, for the attack tests: it speaks JSON-RPC by hand
// (no SDK) so that it can break the protocol on purpose. `node hostile.js MODE`:
//
//   garbage         prints lines that are not JSON-RPC, forever, and never answers
//   silent          reads its input and never answers (hangs on initialize)
//   garbage-first   prints a line of garbage, then serves one tool `ping`
//   many-tools N    lists N tools
//   bad-tools       lists one good tool among tools that break the rules
//   endless-pages   every page of its tool list says there is another
//   malformed-list  answers tools/list with a result that is not a tool list
//   huge-list       answers tools/list with one line of several megabytes
//   vanish          lists `vanishing` and `stay`; a call of `vanishing` is answered the
//                   way the TypeScript SDK answers an unknown tool, and it is gone from
//                   every later list
//   hang-calls      serves `ping` but never answers a call
//   wrong-id        answers every call with another request's id
//   twice           answers every call twice
//   stubborn-hang   as hang-calls, and it does not exit when its input ends
//   exit-after-init answers initialize, then exits with status 0
//   close-stdout    serves `ping`, then closes its stdout a moment after its tool list
//                   is read, and keeps running
//   one-call        answers one call, then exits with status 0
//   huge-line       answers a call with several megabytes that never end in a newline
//   lives FILE      counts its starts in FILE: its first life lists `a` and `b`, every
//                   later one `b` (with another input schema) and `c`
"use strict";

const mode = process.argv[2];
const send = (message) => process.stdout.write(JSON.stringify(message) + "\n");
const tool = (name, extra = {}) => ({
  name,
  description: `the ${name} tool`,
  inputSchema: { type: "object", properties: {} },
  ...extra,
});

if (mode === "garbage") {
  setInterval(() => process.stdout.write("garbage { not json\n"), 20);
}
if (mode === "garbage-first") {
  process.stdout.write("this is not a message\n");
}

let vanished = false;

let life = 0;
if (mode === "lives") {
  const fs = require("fs");
  const file = process.argv[3];
  life = (fs.existsSync(file) ? Number(fs.readFileSync(file, "utf8")) : 0) + 1;
  fs.writeFileSync(file, String(life));
}
if (mode === "stubborn-hang" || mode === "close-stdout") {
  // Keeps running whatever happens to its input and output.
  setInterval(() => {}, 1000);
}

function tools(params) {
  switch (mode) {
    case "many-tools": {
      const n = Number(process.argv[3] || 5000);
      return { tools: Array.from({ length: n }, (_, i) => tool(`tool_${i}`)) };
    }
    case "bad-tools":
      return {
        tools: [
          tool("good"),
          tool("has space"),
          tool(""),
          { name: "no_schema_type", inputSchema: { properties: {} } },
          tool("array_schema", { inputSchema: { type: "array" } }),
          tool("good"),
          tool("x".repeat(200)),
          tool("wordy", { description: "w".repeat(100000) }),
          tool("evil\u001b[2J"),
        ],
      };
    case "endless-pages": {
      const page = Number((params && params.cursor) || 0);
      return { tools: [tool(`page_${page}`)], nextCursor: String(page + 1) };
    }
    case "malformed-list":
      return { tools: "none of your business" };
    case "huge-list":
      return { tools: [tool("huge", { description: "h".repeat(4 * 1024 * 1024) })] };
    case "vanish":
      return { tools: vanished ? [tool("stay")] : [tool("vanishing"), tool("stay")] };
    case "lives":
      return life === 1
        ? { tools: [tool("a"), tool("b")] }
        : {
            tools: [
              tool("b", {
                inputSchema: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
              }),
              tool("c"),
            ],
          };
    default:
      return { tools: [tool("ping")] };
  }
}

function call(id, params) {
  if (mode === "hang-calls" || mode === "stubborn-hang") return;
  if (mode === "twice") {
    send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "first" }] } });
    send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "second" }] } });
    return;
  }
  if (mode === "huge-line") {
    process.stdout.write("x".repeat(8 * 1024 * 1024));
    return;
  }
  if (mode === "one-call") {
    process.stdout.write(
      JSON.stringify({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "pong" }] } }) + "\n",
      () => process.exit(0),
    );
    return;
  }
  if (mode === "wrong-id") {
    send({ jsonrpc: "2.0", id: 987654, result: { content: [{ type: "text", text: "not yours" }] } });
    return;
  }
  if (mode === "vanish" && params.name === "vanishing") {
    vanished = true;
    send({
      jsonrpc: "2.0",
      id,
      result: {
        content: [{ type: "text", text: `MCP error -32602: Tool ${params.name} not found` }],
        isError: true,
      },
    });
    return;
  }
  send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "pong" }] } });
}

let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  let newline;
  while ((newline = buffer.indexOf("\n")) >= 0) {
    const line = buffer.slice(0, newline);
    buffer = buffer.slice(newline + 1);
    if (!line.trim()) continue;
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      continue;
    }
    if (mode === "silent" || mode === "garbage" || message.id === undefined) continue;
    switch (message.method) {
      case "initialize":
        send({
          jsonrpc: "2.0",
          id: message.id,
          result: {
            protocolVersion: message.params.protocolVersion,
            capabilities: { tools: { listChanged: true } },
            serverInfo: { name: "hostile", version: "0.0.0" },
          },
        });
        if (mode === "exit-after-init") process.stdout.write("", () => process.exit(0));
        break;
      case "tools/list":
        send({ jsonrpc: "2.0", id: message.id, result: tools(message.params) });
        if (mode === "close-stdout") setTimeout(() => require("fs").closeSync(1), 200);
        break;
      case "tools/call":
        call(message.id, message.params);
        break;
      default:
        send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "no such method" } });
    }
  }
});
process.stdin.on("end", () => {
  if (mode !== "stubborn-hang" && mode !== "close-stdout") process.exit(0);
});
