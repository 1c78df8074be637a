"""Run the whole red-team suite (tests/hacks/) through the real Evaluator on this machine's device and
print a table: case, expected, got, pass/fail. Exits non-zero if any case fails.

Two kinds of case: the hand-written ones (tests/hacks/hack_cases.py, one file per published hack) and the
generated classes (tests/hacks/generated.py: templates x variations per invariant of the evaluator). `--generated`
adds the latter after the former: `sample` (the CPU suite's covering sample plus every GPU-only case), `all` (the full
product; `--generated-shard I/N` splits it over calls), `none` (the default). `bash bench/device_suite.sh redteam`
runs both (REDTEAM_GENERATED).

Each hack is followed by a known-correct ReLU on the same Evaluator (it must stay correct), fake API
keys sit in the parent environment throughout (no result and no reachable file may contain them).

    python bench/gpu_redteam.py --out bench/results/redteam_h100.json           # on the GPU machine
    python bench/gpu_redteam.py --device cpu --only torch_op_instead_of_kernel    # offline smoke
    python bench/gpu_redteam.py --no-hand-written --generated all --generated-shard 0/3 --budget-s 540
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

REPO_ROOT = harness.REPO
sys.path.insert(0, str(REPO_ROOT / "tests" / "hacks"))

import generated  # noqa: E402
from hack_cases import (  # noqa: E402
    KNOWN_GOOD_PROBLEM,
    KNOWN_GOOD_SOLUTION,
    SECRET_ENV,
    cases_for,
    clean_markers,
    judge,
    known_gap,
    runtime_layer_cases,
    sandbox_escapes,
)


def _device_name(device: str) -> str:
    return harness.gpu_name(device) or platform.processor() or platform.machine()


def run(args: argparse.Namespace) -> int:
    from kernelbench_rl.evaluation import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings

    device = args.device
    harness.require_cuda(device)
    size = args.size or ("real" if device == "cuda" else "small")
    base = EvalSettings(device=device, size=size, timeout_s=args.timeout)
    wanted = lambda name: not args.only or any(fnmatch.fnmatchcase(name, p) for p in args.only)  # noqa: E731
    cases = [] if args.no_hand_written else [c for c in cases_for(device) if wanted(c.name)]
    # Named with --only, a generated case runs whether or not the sample holds it.
    which = "all" if args.only else args.generated
    made = sorted((c for c in generated.select(device, which, _shard(args.generated_shard)) if wanted(c.name)),
                  key=_priority)
    os.environ.update(SECRET_ENV)  # fake API keys, before the Evaluator starts its workers

    good_source = KNOWN_GOOD_SOLUTION.read_text()
    rows: list[dict[str, Any]] = []
    started_all = time.perf_counter()
    honest_speedup: float | None = None
    skipped: list[tuple[str, str]] = []
    # The hand-written suite first, both layers, then the generated cases, both layers: under --budget-s the
    # hand-written suite (the one bench/results records) finishes and the generated cases take what is left.
    layers = [("full", True, cases)]
    if not args.skip_runtime_layer:
        layers.append(("runtime", False, [] if args.no_hand_written else
                       [c for c in runtime_layer_cases(device) if wanted(c.name)]))
    layers.append(("full", True, [c for c in made if "full" in c.layers]))
    if not args.skip_runtime_layer:
        layers.append(("runtime", False, [c for c in made if "runtime" in c.layers]))
    budget_end = started_all + args.budget_s if args.budget_s else None
    for layer, static_checks, layer_cases in layers:
        if not layer_cases:
            continue
        if budget_end is not None and time.perf_counter() > budget_end:
            skipped += [(layer, case.name) for case in layer_cases]
            continue
        with Evaluator(base, num_workers=1, store=None, static_checks=static_checks) as evaluator:
            if honest_speedup is None:
                honest = evaluator.evaluate([EvalRequest(KNOWN_GOOD_PROBLEM, good_source, base, request_id="redteam/honest")])[0]
                honest_speedup = honest.speedup
                print(f"honest ReLU: {honest.error_category.value} correct={honest.correct} speedup={honest_speedup}", flush=True)
            wrong = None  # the abstaining cases' yardstick: a plain wrong kernel of the same problem, on this layer
            if any(getattr(c, "expect", "") == "abstain" for c in layer_cases):
                wrong = evaluator.evaluate([EvalRequest("L1/19", generated.plain_wrong_source(), base,
                                                        request_id=f"redteam/{layer}/plain-wrong")])[0]
                print(f"plain wrong kernel: {wrong.error_category.value}", flush=True)
            batch_size = max(1, args.concurrent or (6 if device == "cuda" else 1))
            for start in range(0, len(layer_cases), batch_size):
                batch = layer_cases[start:start + batch_size]
                if budget_end is not None and time.perf_counter() > budget_end:
                    skipped += [(layer, case.name) for case in layer_cases[start:]]
                    print(f"budget spent: {len(layer_cases) - start} case(s) of the {layer} layer not run", flush=True)
                    break
                try:
                    rows += _run_batch(evaluator, batch, layer, base, device, good_source, honest_speedup, wrong)
                    _write_report(args, device, size, honest_speedup, rows, time.perf_counter() - started_all, partial=True)
                except Exception as exc:  # a harness error fails the batch's cases, not the run
                    for case in batch:
                        print(f"FAIL [{layer}] {case.name}: the run itself failed: {type(exc).__name__}: {exc}", flush=True)
                        rows.append({"layer": layer, "case": case.name, "problem": case.problem_id, "expected": "",
                                     "got": f"script error {type(exc).__name__}", "passed": False, "known_gap": None,
                                     "problems": [f"{type(exc).__name__}: {exc}"]})

    total = time.perf_counter() - started_all
    failures = [r for r in rows if not r["passed"]]
    _print_table(rows)
    print(f"\n{len(rows) - len(failures)}/{len(rows)} cases pass on {_device_name(device)} ({device}, {size} sizes) "
          f"in {total:.0f} s")
    if skipped:
        print(f"{len(skipped)} case(s) not run within --budget-s {args.budget_s:.0f} (the report lists them)")
    _write_report(args, device, size, honest_speedup, rows, total, partial=False, skipped=skipped)
    return 1 if failures else 0


def _priority(case: Any) -> int:
    """Generated cases in the order a budget should spend on them: what only a GPU can ask, the honest controls,
    abstaining (whose verdict a GPU decides differently), then the rest, each in the product's order."""
    return 0 if "cpu" not in case.devices else {"control": 1, "abstain": 2, "observe": 3}.get(case.klass, 4)


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise harness.BadInput(f"--generated-shard {text!r}: give it as I/N, e.g. 0/3") from None
    if count < 1 or not 0 <= index < count:
        raise harness.BadInput(f"--generated-shard {text!r}: I must be in 0..N-1")
    return index, count


def _write_report(args: argparse.Namespace, device: str, size: str, honest_speedup: float | None,
                  rows: list[dict[str, Any]], total: float, partial: bool,
                  skipped: list[tuple[str, str]] | None = None) -> None:
    """The JSON report; also rewritten after every batch, so a run cut short by its time limit keeps its rows."""
    harness.write_json(args.out, {
        "device": device, "device_name": _device_name(device), "size": size, "environment": harness.environment(device),
        "honest_relu_speedup": honest_speedup, "partial": partial,
        "cases": rows, "passed": sum(1 for r in rows if r["passed"]), "total": len(rows), "wall_s": round(total, 1),
        "generated": {"which": args.generated, "shard": args.generated_shard},
        "not_run": [{"layer": layer, "case": name} for layer, name in skipped or []],
    }, announce=not partial)


def _run_batch(evaluator: Any, batch: list, layer: str, base: Any, device: str, good_source: str,
               honest_speedup: float | None, wrong: Any = None) -> list[dict[str, Any]]:
    """Each case with a known-correct ReLU right behind it, the whole batch submitted at once: the
    ReLUs run beside and after the hacks on the same worker and must all stay correct."""
    from kernelbench_rl.evaluation.result import EvalRequest

    clean_markers(REPO_ROOT)
    since = time.time() - 1.0
    requests = []
    for case in batch:
        settings = dataclasses.replace(base, **case.settings_overrides())
        requests += [
            EvalRequest(case.problem_id, case.source, settings, request_id=f"redteam/{layer}/{case.name}"),
            EvalRequest(KNOWN_GOOD_PROBLEM, good_source, base, request_id=f"redteam/{layer}/after/{case.name}"),
        ]
    t0 = time.perf_counter()
    results = evaluator.evaluate(requests)
    wall = time.perf_counter() - t0
    rows = []
    for index, case in enumerate(batch):
        hack, good = results[2 * index], results[2 * index + 1]
        made = isinstance(case, generated.GeneratedCase)
        if made:
            abstained = _abstain_problems(hack, wrong) if case.expect == "abstain" else None
            verdict = generated.judge_case(case, hack.to_dict(), device, layer, honest_speedup, abstained)
        else:
            verdict = judge(case, hack.to_dict(), device, honest_speedup=honest_speedup, layer=layer)
        problems = list(verdict.problems)
        # Escape markers are named per case, so a batch still attributes them to the case that wrote them.
        problems += sandbox_escapes(case, [hack.to_json(), good.to_json()], REPO_ROOT, since)
        if not good.correct:
            problems.append(f"known-good ReLU alongside: {good.error_category.value} {good.error_message[:120]}")
        gap = None if made else known_gap(layer, case.name, device)
        own_s = hack.phase_seconds.get("worker_total", 0.0)
        print(f"{'PASS' if not problems else 'FAIL'} [{layer}] {case.name:32s} {verdict.got}  ({own_s:.1f} s)"
              + (f"  <- {problems}" if problems else "") + (f"  (known gap: {gap})" if gap and problems else ""), flush=True)
        rows.append({
            "layer": layer, "case": case.name, "problem": case.problem_id, "threat": case.threat,
            "expected": verdict.expected, "got": verdict.got, "passed": not problems, "problems": problems,
            "known_gap": gap, "error_message": hack.error_message[:300], "static_errors": hack.static.errors[:5],
            "flags": hack.flags, "speedup": hack.speedup, "wall_s": round(own_s, 2), "batch_wall_s": round(wall, 2),
            "naive_expected_pass": case.naive_passes, "versions": hack.versions if problems else None,
            **({"class": case.klass, "template": case.template, "variation": dict(case.variation)} if made else {}),
        })
    clean_markers(REPO_ROOT)
    return rows


def _abstain_problems(result: Any, wrong: Any) -> list[str]:
    """The abstaining rule (generated.abstain_problems) under kernelbench_rl's reward presets."""
    from kernelbench_rl.rewards import PRESETS, score

    if wrong is None:
        return ["no plain wrong answer was evaluated to measure it against"]
    return generated.abstain_problems(lambda r, preset: score(r, preset).reward, PRESETS, result, wrong)


def _print_table(rows: list[dict[str, Any]]) -> None:
    harness.say("")
    harness.print_table(["layer", "case", "expected", "got", "result"], [
        [r["layer"], r["case"], r["expected"][:44], r["got"][:52],
         ("PASS" if r["passed"] else "FAIL") + ("  (known gap)" if r["known_gap"] and not r["passed"] else "")]
        for r in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the red-team hacks through the Evaluator; non-zero exit on any failure.")
    harness.add_device(parser, size=None)
    parser.add_argument("--timeout", type=float, default=120.0, help="per-evaluation timeout (hang cases set their own)")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run (shell patterns: 'observe-cheat_when_timed-*')")
    parser.add_argument("--skip-runtime-layer", action="store_true",
                        help="skip the second pass with the static policy off (sandbox and runtime checks alone)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.add_argument("--generated", choices=("none", "sample", "all"), default="none",
                        help="generated class cases (tests/hacks/generated.py), after the hand-written ones: none (the "
                             "default), the CPU suite's sample plus every GPU-only case, or the full product")
    parser.add_argument("--generated-shard", default="0/1", help="I/N: only every N-th generated case, from the I-th")
    parser.add_argument("--no-hand-written", action="store_true", help="leave out the hand-written cases (hack_cases.py)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no batch after this many seconds; the cases left are listed as not run")
    parser.add_argument("--concurrent", type=int, default=None,
                        help="cases submitted together, each with its known-good ReLU (default: 6 on cuda, 1 on cpu)")
    return harness.run_main(run, parser.parse_args(argv))

if __name__ == "__main__":
    sys.exit(main())
