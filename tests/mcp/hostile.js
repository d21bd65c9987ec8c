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
//
// For the adversarial tests (`adversarial.rs`):
//
//   list-changed-hang FILE  serves `ping`; a moment after its first tool list it says its
//                   list changed, and never answers a later tools/list (it writes FILE
//                   when asked)
//   stderr-binary   writes a byte that is not UTF-8 to stderr, then a line to stderr at
//                   every call of `ping`; `die` writes "fatal: the reason" and exits 3
//   stderr-flood N  a call of `ping` writes N bytes to stderr without a newline, then
//                   answers
//   fat-tool        lists `fat`, whose title, output schema and annotations are a
//                   megabyte each (its description and input schema are small)
//   tool-named NAME lists one tool named NAME
//   renaming        every tool list has one tool of a new name, and each list is followed
//                   by a notice that the list changed
//   record FILE     appends every line it reads to FILE; `hang` is never answered, `ping`
//                   is
//   chatty          before answering a call: progress and log notifications, requests of
//                   its own to the client, a cancellation of the call, and an answer with
//                   another id
//   bad-results     each tool answers with a result that is not a tool result (its name
//                   says which)
//   rpc-errors      `internal` answers JSON-RPC error -32603, `invalid` -32602
//   exit-mid-list   its tool list has two pages; asked for the second, it exits with 4
//   secret-errors ARGS...  `rpc_secret` answers a JSON-RPC error, `tool_secret` an
//                   `isError` result, `invalid_secret` invalid parameters (-32602), each
//                   saying a URL with a password, a `key=`, a bearer token, and its own
//                   arguments after the mode (its command line's secrets, said back)
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
let lists = 0;
let calls = 0;
const fs = require("fs");
if (mode === "stderr-binary") {
  process.stderr.write(Buffer.from([0xff, 0xfe, 0x0a]));
}

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
    case "stderr-binary":
      return { tools: [tool("ping"), tool("die")] };
    case "fat-tool": {
      const mb = "m".repeat(1024 * 1024);
      return {
        tools: [
          tool("fat", {
            title: mb,
            outputSchema: { type: "object", description: mb },
            annotations: { title: mb },
          }),
        ],
      };
    }
    case "tool-named":
      return { tools: [tool(process.argv[3])] };
    case "renaming":
      return { tools: [tool(`t_${lists}`)] };
    case "record":
      return { tools: [tool("ping"), tool("hang")] };
    case "bad-results":
      return {
        tools: ["list_shaped", "content_string", "content_bogus", "null_result", "error_string"].map(
          (n) => tool(n),
        ),
      };
    case "rpc-errors":
      return { tools: [tool("internal"), tool("invalid")] };
    case "secret-errors":
      return { tools: [tool("rpc_secret"), tool("tool_secret"), tool("invalid_secret")] };
    case "exit-mid-list":
      if (params && params.cursor) {
        process.exit(4);
      }
      return { tools: [tool("first")], nextCursor: "2" };
    default:
      return { tools: [tool("ping")] };
  }
}

const BAD_RESULTS = {
  list_shaped: { tools: [] },
  content_string: { content: "not a list" },
  content_bogus: { content: [{ type: "nonsense", payload: 1 }] },
  null_result: null,
  error_string: { content: [], isError: "yes" },
};

function call(id, params) {
  calls += 1;
  if (mode === "hang-calls" || mode === "stubborn-hang") return;
  if (mode === "record" && params.name === "hang") return;
  if (mode === "stderr-binary") {
    if (params.name === "die") {
      process.stderr.write("fatal: the reason\n", () => process.exit(3));
      return;
    }
    process.stderr.write(`call ${calls}\n`);
  }
  if (mode === "stderr-flood") {
    const n = Number(process.argv[3]);
    const chunk = "x".repeat(1024 * 1024);
    let left = n;
    const more = () => {
      while (left > 0) {
        const piece = left >= chunk.length ? chunk : chunk.slice(0, left);
        left -= piece.length;
        if (!process.stderr.write(piece)) {
          process.stderr.once("drain", more);
          return;
        }
      }
      process.stderr.write("", () =>
        send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "pong" }] } }),
      );
    };
    more();
    return;
  }
  if (mode === "chatty") {
    const token = params._meta && params._meta.progressToken;
    for (let i = 0; i < 2000; i++) {
      if (token !== undefined) {
        send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: i, total: 2000 } });
      }
      send({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: `log ${i}` } });
    }
    send({ jsonrpc: "2.0", id: "s1", method: "ping" });
    send({ jsonrpc: "2.0", id: "s2", method: "roots/list" });
    send({
      jsonrpc: "2.0",
      id: "s3",
      method: "sampling/createMessage",
      params: { messages: [{ role: "user", content: { type: "text", text: "hi" } }], maxTokens: 5 },
    });
    send({ jsonrpc: "2.0", id: "s4", method: "elicitation/create", params: { message: "?", requestedSchema: { type: "object", properties: {} } } });
    send({ jsonrpc: "2.0", id: "s5", method: "no/such/method", params: {} });
    send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: "the server says so" } });
    send({ jsonrpc: "2.0", id: 4242424, result: { content: [{ type: "text", text: "not yours" }] } });
    send({ jsonrpc: "2.0", id: 4242425, error: { code: -32603, message: "not yours either" } });
    send({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "pong" }] } });
    return;
  }
  if (mode === "bad-results") {
    send({ jsonrpc: "2.0", id, result: BAD_RESULTS[params.name] });
    return;
  }
  if (mode === "rpc-errors") {
    const code = params.name === "invalid" ? -32602 : -32603;
    send({ jsonrpc: "2.0", id, error: { code, message: `the ${params.name} error` } });
    return;
  }
  if (mode === "secret-errors") {
    const said =
      "upstream https://bob:hunter2@api.example.com/v1?key=QUERYSECRET failed; " +
      "Authorization: Bearer sk-TOKENSECRET; started as " + process.argv.slice(3).join(" ");
    if (params.name === "tool_secret") {
      send({ jsonrpc: "2.0", id, result: { isError: true, content: [{ type: "text", text: said }] } });
    } else {
      const code = params.name === "invalid_secret" ? -32602 : -32000;
      send({ jsonrpc: "2.0", id, error: { code, message: said } });
    }
    return;
  }
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
    if (mode === "record") fs.appendFileSync(process.argv[3], line + "\n");
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
        lists += 1;
        if (mode === "list-changed-hang" && lists > 1) {
          fs.writeFileSync(process.argv[3], "asked again");
          break;
        }
        send({ jsonrpc: "2.0", id: message.id, result: tools(message.params) });
        if (mode === "list-changed-hang" && lists === 1) {
          setTimeout(() => send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" }), 300);
        }
        if (mode === "renaming") {
          send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
        }
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
