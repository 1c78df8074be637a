"""The policy's driver: run every registered rule on a candidate and build its StaticReport."""

from __future__ import annotations

from kernelbench_rl.evaluation.static_policy import candidate_class
from kernelbench_rl.evaluation.result import PRECISION_POLICIES, StaticReport
from kernelbench_rl.evaluation.static_policy.analysis import Analysis
from kernelbench_rl.evaluation.static_policy.rules import HACK_RULES, RULES

MAX_MESSAGES_PER_RULE = 3
MAX_SOURCE_CHARS = 200_000  # far beyond any real kernel module; bounds the analysis time


def check_static(source: str, backend: str, *, reference_source: str | None = None, precision: str = "fp32",
                 precision_policy: str = "warn") -> StaticReport:
    """Run every rule on a candidate module; errors and warnings are "rule_name: message" lines.

    `precision_policy="reject"` makes precision_downgrade (fp16/bf16/fp8 in an fp32 problem) an error."""
    if precision_policy not in PRECISION_POLICIES:
        raise ValueError(f"precision_policy must be one of {', '.join(PRECISION_POLICIES)}, not {precision_policy!r}")
    report = StaticReport()
    if len(source) > MAX_SOURCE_CHARS:
        report.errors.append(f"structure: the module is {len(source)} characters; keep it under {MAX_SOURCE_CHARS}")
        return report
    source = candidate_class.as_model_new(source)  # a candidate named Model (kernrl's convention) is judged as ModelNew
    try:
        analysis = Analysis(source, backend, reference_source, precision)
    except SyntaxError as exc:
        report.errors.append(f"syntax: line {exc.lineno}: {exc.msg}" if exc.lineno else f"syntax: {exc.msg}")
        return report
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        report.errors.append(f"syntax: the module cannot be parsed ({type(exc).__name__})")
        return report
    for rule in RULES:
        if backend not in rule.backends:
            continue
        try:
            findings = rule.check(analysis)
        except RecursionError:
            # Our fault, not the candidate's: say so without failing the kernel (the sandbox still judges it).
            report.warnings.append(f"policy_error: rule {rule.name} could not analyse this module")
            continue
        messages: list[str] = []
        for line, message in sorted(set(findings)):
            text = f"line {line}: {message}" if line else message
            if text not in messages:
                messages.append(text)
        if len(messages) > MAX_MESSAGES_PER_RULE:
            extra = len(messages) - MAX_MESSAGES_PER_RULE
            messages = messages[:MAX_MESSAGES_PER_RULE] + [f"... and {extra} more"]
        severity = "error" if rule.name == "precision_downgrade" and precision_policy == "reject" else rule.severity
        target = report.errors if severity == "error" else report.warnings
        target.extend(f"{rule.name}: {m}" for m in messages)
    return report


def fired_rules(report: StaticReport) -> set[str]:
    """Names of the rules behind a report's errors and warnings."""
    return {line.split(":", 1)[0].strip() for line in report.errors + report.warnings}


def is_hack(report: StaticReport) -> bool:
    """Whether any error comes from a rule that marks a reward hack."""
    return any(line.split(":", 1)[0].strip() in HACK_RULES for line in report.errors)
