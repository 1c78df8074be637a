"""The problem audit: can a problem's inputs tell a right kernel from a wrong one?

For each problem the reference runs on two seeds; the evaluator's own trivial candidates (each input of the
output's shape returned, zeros, ones, another seed's mean, another seed's whole output) are judged with the
evaluator's own comparison, and where one passes, widened inputs are searched exactly as the evaluation
worker does before a problem's first evaluation (evaluation/verdict/discrimination.py). Then the reference of every
other problem that takes inputs of the same shapes (ReLU's for LeakyReLU's) is judged the same way, on the
inputs the evaluator would use.

Statuses:
- ok: no trivial candidate and no other problem's reference passes.
- widened: a trivial candidate passes the problem's own inputs; widened seeds tell it apart (the evaluator
  adds them by itself).
- fails: something trivial passes every input set the evaluator would use. Training leaves the problem out.
- unavailable: the reference cannot run here (a missing module, a problem too large for the device, a reference too
  slow for the sensitivity audit to settle its seeds: the evaluator gives it no verdict either).

Problems are trusted code (the user chose the problem set): they run in this process, as in `problems show`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelbench_rl import private_cache
from kernelbench_rl.evaluation.sandbox import runtime, wire
from kernelbench_rl.evaluation.verdict import checks, discrimination
from kernelbench_rl.evaluation.result import TOLERANCES
from kernelbench_rl.problems.model import Problem, SizeMode

AUDIT_SEEDS = (1234, 5678)
# More seeds, only for confirming a memorised answer that passed the first two (discrimination.confirm_memorised).
CONFIRMATION_SEEDS = (9012, 3456, 7890, 2468, 1357, 8642)
INIT_SEED = 42
STATUSES = ("ok", "widened", "fails", "unavailable")


@dataclass
class ProblemAudit:
    problem_id: str
    name: str
    status: str
    trivial: list[str] = field(default_factory=list)  # trivial candidates passing the problem's own inputs
    inputs: str = ""  # what correctness runs on (discrimination's summary)
    variant: dict[str, Any] | None = None
    siblings: list[str] = field(default_factory=list)  # other problems' references that pass what the evaluator uses
    same_function: list[str] = field(default_factory=list)  # pass on every input set: the same operation
    given_variant: bool = False  # the widened inputs must be handed to the evaluator (it would not find them)
    detail: str = ""
    sensitivity: str = ""  # the sensitivity seeds sound for the problem (evaluation/verdict/sensitivity.py), as a verdict says

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Loaded:
    problem: Problem
    module: types.ModuleType
    model: torch.nn.Module
    signature: tuple


def _load(problem: Problem, source: str, device: str, precision: str) -> _Loaded:
    """The problem's `source` (its text at the audited sizes) run as a module, its reference built."""
    module = types.ModuleType(f"kbrl_audit_{problem.level}_{problem.number}")
    exec(compile(source, f"<problem {problem.id}>", "exec"), module.__dict__)
    model = runtime.build_model(module.Model, module, INIT_SEED, device, precision)
    try:
        with torch.device("meta"):
            meta_inputs = list(module.get_inputs())
    except Exception:  # noqa: BLE001 - inputs built from values (`.item()`, `.tolist()`): make them for real
        meta_inputs = runtime.make_inputs(module, AUDIT_SEEDS[0], device, precision)
    signature = tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x) for x in meta_inputs)
    return _Loaded(problem, module, model, signature)


def _forward(model: Any, inputs: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        output = model(*runtime.clone_inputs(inputs))
    return [t.detach() for t in wire.flatten_outputs(output)]


def _runner(loaded: _Loaded, device: str, precision: str) -> discrimination.ReferenceFn:
    def run(seed: int, variant: discrimination.Variant | None) -> tuple[list[Any], list[torch.Tensor]]:
        inputs = runtime.make_inputs(loaded.module, seed, device, precision, variant)
        runtime.seed_everything(seed)
        with torch.no_grad():  # on clones: `inputs` go back untouched
            output = loaded.model(*runtime.clone_inputs(inputs))
        return inputs, [t.detach() for t in wire.flatten_outputs(output)]
    return run


def _sibling_passes(sibling: _Loaded, run: discrimination.ReferenceFn, variants: Sequence[discrimination.Variant | None],
                    atol: float, rtol: float) -> list[bool]:
    """For each input set, whether the sibling's reference passes this problem's reference on both seeds."""
    verdicts = []
    for variant in variants:
        passed = True
        for seed in AUDIT_SEEDS:
            inputs, reference = run(seed, variant)
            try:
                runtime.seed_everything(seed)
                theirs = _forward(sibling.model, inputs)
            except Exception:  # noqa: BLE001 - it cannot take these inputs: it does not pass
                passed = False
                break
            if not checks.compare_outputs(reference, theirs, atol, rtol).ok:
                passed = False
                break
        verdicts.append(passed)
    return verdicts


def audit_problems(problems: Sequence[Problem], *, size: SizeMode = "small", device: str = "cpu",
                   precision: str = "fp32", siblings: bool = True,
                   progress: Callable[[Problem], None] | None = None) -> list[ProblemAudit]:
    """Audit `problems` (see the module's docstring); siblings are looked for among `problems` themselves."""
    atol = rtol = TOLERANCES[precision]
    loaded: dict[str, _Loaded] = {}
    audits: list[ProblemAudit] = []
    for problem in problems:
        if progress is not None:
            progress(problem)
        if problem.unavailable_reason:  # a module it imports is not installed: nothing of it can run
            audits.append(ProblemAudit(problem.id, problem.name, "unavailable", detail=problem.unavailable_reason[:300]))
            continue
        try:
            source = problem.source_for(size)
            item = _load(problem, source, device, precision)
            reference = _runner(item, device, precision)
            found = discrimination.discriminate(reference, AUDIT_SEEDS + CONFIRMATION_SEEDS, atol, rtol,
                                                module=item.module, source=source)
        except Exception as exc:  # noqa: BLE001 - the reference cannot run here: say why, judge nothing
            first = str(exc).splitlines()[0] if str(exc) else ""
            audits.append(ProblemAudit(problem.id, problem.name, "unavailable", detail=f"{type(exc).__name__}: {first}"[:300]))
            continue
        status = "ok" if not found.trivial else "widened" if found.variant is not None else "fails"
        detail = found.reason
        if status != "fails" and found.sensitivity is not None and found.sensitivity.out_of_time:
            # The evaluator gives such a problem no verdict here (verdict/correctness.py: refusal): as if it could not run.
            status, detail = "unavailable", ("the reference is too slow here for the sensitivity audit to settle "
                                             f"its seeds in {found.sensitivity.budget_s:.0f} s")
        else:
            loaded[problem.id] = item
        audits.append(ProblemAudit(problem.id, problem.name, status, trivial=list(found.trivial), inputs=found.summary(),
                                   variant=found.variant, detail=detail,
                                   sensitivity=found.sensitivity.summary() if found.sensitivity else ""))
    if siblings:
        _judge_siblings(audits, loaded, device, precision, atol, rtol)
    return audits


def _probe_variants(run: discrimination.ReferenceFn) -> list[discrimination.Variant]:
    """Widened inputs on which the reference stays finite: where a sibling that passes the problem's own inputs
    must also pass to be the same function."""
    inputs, reference = run(AUDIT_SEEDS[0], None)
    probes = []
    for variant in discrimination.candidate_variants(inputs):
        try:
            if discrimination.finite(run(AUDIT_SEEDS[0], variant)[1]) or not discrimination.finite(reference):
                probes.append(variant)
        except Exception:  # noqa: BLE001 - the reference cannot take these: no probe
            continue
    return probes


def _judge_siblings(audits: list[ProblemAudit], loaded: dict[str, _Loaded], device: str, precision: str,
                    atol: float, rtol: float) -> None:
    """Another problem's reference that passes what the evaluator uses is either the same function (it also passes
    the problem's inputs scaled up: a duplicate problem, an op that commutes, a full matmul on triangular inputs)
    or something only these inputs cannot tell apart (an approximation: tanh-GELU for GELU), which fails the
    audit: the evaluator widens inputs only where a trivial candidate passes, so it would not tell them apart."""
    groups: dict[tuple, list[_Loaded]] = {}
    for item in loaded.values():
        groups.setdefault(item.signature, []).append(item)
    for audit in audits:
        item = loaded.get(audit.problem_id)
        if item is None or len(groups[item.signature]) < 2:
            continue
        run = _runner(item, device, precision)
        used: list[discrimination.Variant | None] = [None] + ([audit.variant] if audit.variant else [])
        probes: list[discrimination.Variant] | None = None
        for other in groups[item.signature]:
            if other is item or not all(_sibling_passes(other, run, used, atol, rtol)):
                continue
            if probes is None:
                probes = _probe_variants(run)
            # Scaling alone keeps zeros, signs and structure (triangular or symmetric inputs); a shift may not.
            scaled = [v for v in probes if all(shift == 0 for _i, _scale, shift in v["affine"])]
            if all(_sibling_passes(other, run, scaled or probes, atol, rtol)):
                audit.same_function.append(other.problem.id)
            else:
                audit.siblings.append(other.problem.id)
        if not audit.siblings:
            continue
        names = ", ".join(audit.siblings)
        telling = next((probe for probe in probes or [] if not any(
            _sibling_passes(loaded[s], run, [probe], atol, rtol)[0] for s in audit.siblings)), None)
        if telling is None or audit.variant is not None:
            audit.status = "fails"
            audit.detail = f"the reference of {names} passes every input set the evaluator would use"[:300]
            continue
        audit.status, audit.variant, audit.given_variant = "widened", telling, True
        audit.inputs = (f"widened inputs {discrimination.describe_variant(telling)} beside the problem's own, handed "
                        f"to the evaluator ({names}'s reference passes the problem's own inputs)")


# The code an audit's outcome follows from: a change to any of it makes the stored audits stale.
_AUDIT_CODE = ("problems", "evaluation/verdict", "evaluation/sandbox", "evaluation/result.py")
AUDIT_ENTRY_BYTES = 16 << 20  # an audit of KernelBench's 250 problems is about a tenth of it


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    package = Path(__file__).resolve().parents[1]
    files: list[str] = []
    for part in _AUDIT_CODE:
        path = package / part
        files += sorted(str(f) for f in path.rglob("*.py")) if path.is_dir() else [str(path)]
    return private_cache.source_digest(files)


def _stored_key(problems: Sequence[Problem], precision: str) -> dict[str, str]:
    """What an audit of `problems` follows from: every problem's text as it runs here (its small sizes, whether its
    modules are installed), the precision, torch's version and the audit's own code."""
    digest = hashlib.sha256()
    for problem in problems:
        digest.update(json.dumps([problem.id, problem.name, problem.suite, problem.source,
                                  sorted((str(k), repr(v)) for k, v in problem.small_sizes.items()),
                                  problem.unavailable_reason]).encode() + b"\0")
    return {"problems": digest.hexdigest(), "precision": precision, "torch": torch.__version__,
            "code": _code_digest()}


@functools.lru_cache(maxsize=8)
def _audit_cached(problems: tuple[Problem, ...], precision: str) -> tuple[ProblemAudit, ...]:
    """The audits of `problems`: read back from this user's private cache, else audited and stored there."""
    cache = private_cache.PrivateCache(max_entry_bytes=AUDIT_ENTRY_BYTES)
    key = _stored_key(problems, precision)
    name = f"problem-audit-{key['problems'][:20]}-{precision}"
    stored = cache.get(name, key)
    if stored is not None:
        try:
            return tuple(ProblemAudit(**entry) for entry in stored["audits"])
        except (KeyError, TypeError):
            pass  # written by other code under the same key: audited again below, and replaced
    audits = tuple(audit_problems(problems, precision=precision))
    cache.put(name, key, {"audits": [audit.as_dict() for audit in audits]})
    return audits


def audited_set(problems: Sequence[Problem],
                precision: str = "fp32") -> tuple[dict[str, ProblemAudit], dict[str, discrimination.Variant]]:
    """(audits by problem id, the widened inputs the evaluator must be given): the audit of a whole problem set at
    CPU sizes (siblings found among them), once per process and set, and read back from this user's private cache
    (kernelbench_rl/private_cache.py) while the problems, the precision, torch and the audit's code are the same
    (`train`, `sft` and `eval-model` each start by auditing their set). The evaluator finds trivial-candidate cases
    by itself; it is given the widened inputs where another problem's reference passes a problem's own."""
    audits = _audit_cached(tuple(problems), precision)
    variants = {a.problem_id: a.variant for a in audits if a.given_variant and a.variant is not None}
    return {a.problem_id: a for a in audits}, variants


def audit_set(problems: Sequence[Problem], precision: str = "fp32") -> dict[str, ProblemAudit]:
    """The audits of `audited_set`, by problem id."""
    return {a.problem_id: a for a in _audit_cached(tuple(problems), precision)}


def usable_for_reward(problems: Sequence[Problem], audits: Mapping[str, ProblemAudit],
                      warn: Callable[[str], None] | None = None) -> list[Problem]:
    """The problems whose inputs can tell right from wrong: training rewards no others."""
    def usable(problem: Problem) -> bool:
        audit = audits.get(problem.id)
        return audit is None or audit.status in ("ok", "widened")

    dropped = [audits[p.id] for p in problems if not usable(p)]
    if dropped and warn is not None:
        warn(f"{len(dropped)} problem(s) left out of training by the problem audit: "
             + "; ".join(f"{a.problem_id} {a.status} ({a.detail[:120]})" for a in dropped[:5])
             + (" ..." if len(dropped) > 5 else ""))
    return [p for p in problems if usable(p)]


def counts(audits: Iterable[ProblemAudit]) -> dict[str, int]:
    out = dict.fromkeys(STATUSES, 0)
    for audit in audits:
        out[audit.status] += 1
    return out
