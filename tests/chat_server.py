"""A small OpenAI-compatible chat-completions server for tests: canned kernels, a 429, a slow reply.

    uvicorn tests.chat_server:app --port PORT      (tests start it in a subprocess)

With CHAT_SERVER_FAIL_PROBLEMS set, requests about those problems always fail (503). It finds the bundled
problem whose source is in the prompt and answers that problem's n-th
request with ANSWERS[n % 3]: the bundled solution (correct), prose with no code (a format
failure), or another problem's solution (compiles, wrong values). The first request overall gets
a 429 (Retry-After: 0) and the second a reply slower than the client's timeout; neither advances
the problem's counter, so each problem's answers are exactly one of each kind per three samples.
GET /stats reports what was served, the most requests handled at once and each request's max_tokens (None:
the request carried none).

GET /v1/models lists the model; with CHAT_SERVER_CONTEXT=N its entry says max_model_len N (as vLLM's does), and
with CHAT_SERVER_NO_MODELS=1 the route answers 404 (a server without it). CHAT_SERVER_PLAIN=1 drops the 429 and
the slow reply; CHAT_SERVER_WORK_S sets how long each reply takes; CHAT_SERVER_LENGTH=1 marks every answer as
cut at its budget (finish_reason "length").

Answers that are no chat completion, for the client's handling of a broken server: with CHAT_SERVER_MALFORMED=text
(a 200 whose body is not JSON) or =nochoices (a 200 JSON body without `choices`), requests about the problems in
CHAT_SERVER_MALFORMED_PROBLEMS (comma-separated ids, or "all") get that answer; CHAT_SERVER_MODELS_HTML=1 answers
GET /v1/models with an HTML page.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

from kernelbench_rl.problems import load_problems
from kernelbench_rl.problems.loaders import load_solution

SLOW_S = float(os.environ.get("CHAT_SERVER_SLOW_S", "3.0"))
ONLY_PROSE = os.environ.get("CHAT_SERVER_ONLY_PROSE") == "1"  # every answer without a kernel: no evaluation cost
# Requests about these problems (comma-separated ids, or "all") always fail with a 503: a server that stays down
FAILING = set(filter(None, os.environ.get("CHAT_SERVER_FAIL_PROBLEMS", "").split(",")))
WORK_S = float(os.environ.get("CHAT_SERVER_WORK_S", "0.2"))  # every reply takes a while: requests overlap
PLAIN = os.environ.get("CHAT_SERVER_PLAIN") == "1"
CONTEXT = int(os.environ.get("CHAT_SERVER_CONTEXT", "0")) or None
NO_MODELS = os.environ.get("CHAT_SERVER_NO_MODELS") == "1"
FINISH = "length" if os.environ.get("CHAT_SERVER_LENGTH") == "1" else "stop"
MALFORMED = os.environ.get("CHAT_SERVER_MALFORMED", "")
MALFORMED_PROBLEMS = set(filter(None, os.environ.get("CHAT_SERVER_MALFORMED_PROBLEMS", "").split(",")))
MODELS_HTML = os.environ.get("CHAT_SERVER_MODELS_HTML") == "1"
PROBLEMS = load_problems(levels=[1])
WRONG_SOURCE = load_solution(next(p for p in PROBLEMS if p.id == "L1/21"))
RELU_SOURCE = load_solution(next(p for p in PROBLEMS if p.id == "L1/19"))
NO_KERNEL = "I would rather not write a kernel for this one. Good luck!"

app = FastAPI()
stats: Counter = Counter()
served: Counter = Counter()  # per problem id
in_flight = 0
budgets: list = []  # each answered request's max_tokens


def answer(problem_id: str, n: int) -> str:
    problem = next(p for p in PROBLEMS if p.id == problem_id)
    kind = 1 if ONLY_PROSE else n % 3
    solution = load_solution(problem)
    if kind == 0 and solution:
        return f"Here is the kernel.\n```python\n{solution}\n```"
    if kind in (0, 1):
        return NO_KERNEL
    wrong = RELU_SOURCE if problem_id == "L1/21" else WRONG_SOURCE
    return f"```python\n{wrong}\n```"


@app.get("/stats")
def get_stats() -> dict:
    return {**stats, "served": dict(served), "budgets": budgets}


@app.get("/v1/models")
def models() -> JSONResponse:
    if MODELS_HTML:
        return HTMLResponse("<!doctype html><html><body><h1>Welcome</h1></body></html>")
    if NO_MODELS:
        return JSONResponse({"error": {"message": "not found"}}, status_code=404)
    entry = {"id": "canned", "object": "model", "created": 0, "owned_by": "tests"}
    return JSONResponse({"object": "list", "data": [{**entry, **({"max_model_len": CONTEXT} if CONTEXT else {})}]})


@app.post("/v1/chat/completions")
async def chat(request: Request) -> JSONResponse:
    global in_flight
    body = await request.json()
    stats["requests"] += 1
    number = stats["requests"]
    if number == 1 and not PLAIN:
        stats["rate_limited"] += 1
        return JSONResponse({"error": {"message": "slow down", "type": "rate_limit"}}, status_code=429,
                            headers={"retry-after": "0"})
    prompt = "\n".join(m.get("content", "") for m in body.get("messages", []))
    problem = next((p for p in PROBLEMS if p.source.strip() in prompt), None)
    if problem is None:
        return JSONResponse({"error": {"message": "no bundled problem in the prompt"}}, status_code=400)
    if "all" in FAILING or problem.id in FAILING:
        stats["failed"] += 1
        return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
    if MALFORMED and ("all" in MALFORMED_PROBLEMS or problem.id in MALFORMED_PROBLEMS):
        stats["malformed"] += 1
        if MALFORMED == "text":
            return PlainTextResponse("upstream connect error or disconnect/reset before headers")
        return JSONResponse({"id": f"chatcmpl-{number}", "object": "chat.completion", "model": body.get("model")})
    if number == 2 and not PLAIN:
        stats["slow"] += 1
        await asyncio.sleep(SLOW_S)  # the client has given up by now; this reply is never read
        return JSONResponse({"error": {"message": "too late"}}, status_code=500)
    in_flight += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], in_flight)
    try:
        await asyncio.sleep(WORK_S)
        text = answer(problem.id, served[problem.id])
        served[problem.id] += 1
        budgets.append(body.get("max_tokens"))
    finally:
        in_flight -= 1
    prompt_tokens, completion_tokens = len(prompt) // 4, len(text) // 4
    return JSONResponse({
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": FINISH}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })
