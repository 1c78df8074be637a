"""`kernelbench-rl problems list|show|audit`: browse the bundled set or an external KernelBench checkout, and audit
whether each problem's inputs can tell a right kernel from a wrong one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from kernelbench_rl.commands.options import ProblemsRootOption
from kernelbench_rl.problems import get_problem, holdout_ids, load_problems, load_solution, resolve_problem

problems_app = typer.Typer(help="Browse problems: the bundled set, a KernelBench checkout or kernrl's problems.", no_args_is_help=True)

RootOption = ProblemsRootOption


def _warn(message: str) -> None:
    Console(stderr=True).print(f"[yellow]note:[/yellow] {message}")


LEVEL_HELP = "Only this level (KernelBench's are 1-3, kernrl's 1-10; a level with no problems is an error)."


def _require_level(level: int | None, problems: list, problems_root) -> None:
    """A level the source does not have is a mistake (one sentence, exit 2), never an empty table."""
    if level is None or problems:
        return
    from kernelbench_rl.errors import UserError

    from kernelbench_rl.problems.loaders import resolve_problems_root

    have = sorted({p.level for p in load_problems(problems_root)})
    source = resolve_problems_root(problems_root)
    where = "the bundled set" if source is None else str(source.path)
    raise UserError(f"Level {level} has no problems in {where}; its levels are {', '.join(map(str, have)) or 'none'}.")


@problems_app.command("list")
def list_problems(
    level: Annotated[Optional[int], typer.Option("--level", "-l", help=LEVEL_HELP)] = None,
    problems_root: RootOption = None,
    holdout_fraction: Annotated[float, typer.Option(help="Fraction held out for evaluation.")] = 0.2,
    split_seed: Annotated[int, typer.Option(help="Seed of the train/holdout split.")] = 0,
    ids_only: Annotated[bool, typer.Option("--ids", help="Print only the ids, one per line.")] = False,
) -> None:
    """List problems with their level, name and train/holdout split, then counts per level."""
    levels = [level] if level is not None else None
    problems = load_problems(problems_root, levels=levels, warn=_warn)
    _require_level(level, problems, problems_root)
    if ids_only:  # each in its suite's own form: kernrl's L1_23_Softmax, KernelBench's L1/23
        for problem in problems:
            typer.echo(problem.display_id)
        return
    held = holdout_ids(problems, holdout_fraction, split_seed)
    table = Table(title=f"{len(problems)} problems ({problems[0].origin if problems else 'none'})")
    for column in ("id", "name", "split", "solution", "note"):
        table.add_column(column)
    for problem in problems:
        has_solution = load_solution(problem) is not None
        # A problem whose imports are missing here is listed, and says why it cannot be judged.
        note = f"unavailable: needs {', '.join(problem.missing_modules)}" if problem.missing_modules else ""
        table.add_row(problem.display_id, problem.name, "holdout" if problem.id in held else "train", "yes" if has_solution else "",
                      note)
    console = Console()
    console.print(table)
    counts = Counter(p.level for p in problems)
    console.print("  ".join(f"level {lv}: {n}" for lv, n in sorted(counts.items())) + f"  total: {len(problems)}")


@problems_app.command("show")
def show_problem(
    problem_id: Annotated[str, typer.Argument(help="Problem id, e.g. L1/19.")],
    problems_root: RootOption = None,
    small: Annotated[bool, typer.Option("--small", help="Show the source at its small (CPU) sizes.")] = False,
    solution: Annotated[bool, typer.Option("--solution", help="Also show our known-correct solution.")] = False,
    floor: Annotated[bool, typer.Option("--floor", help="Print the problem's physical floor at its real size instead: "
                                        "bytes moved, FLOPs, the floor time on a GPU and which bound dominates.")] = False,
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="With --floor: H100 (SXM), 'H100 PCIe', H200, A100, L40S or "
                                               "B200 (default: this machine's GPU, else H100).")] = None,
    precision: Annotated[str, typer.Option("--precision", help="With --floor: fp32, fp16 or bf16.")] = "fp32",
    as_json: Annotated[bool, typer.Option("--json", help="With --floor: print JSON.")] = False,
) -> None:
    """Print a problem's source (and optionally our solution), verbatim: `> x.py` gives a Python file; with --floor,
    its speed of light instead."""
    floor_only = [name for name, given in (("--gpu", gpu is not None), ("--precision", precision != "fp32"),
                                           ("--json", as_json)) if given]
    if floor_only and not floor:  # silently ignored they would print the source, not what was asked for
        from kernelbench_rl.errors import UserError

        one = len(floor_only) == 1
        raise UserError(f"{' and '.join(floor_only)} only {'goes' if one else 'go'} with --floor; add --floor to print "
                        f"the problem's speed of light, or drop {'it' if one else 'them'} to print its source.")
    problem = get_problem(problem_id, problems_root)
    if floor:
        _show_floor(problem, gpu, precision, as_json)
        return
    # Code goes out as it is, whatever the terminal (rich would cut lines at its width when piped);
    # what is not code is a comment, so the output is Python as a whole.
    typer.echo(f"# {problem.display_id} {problem.name}  ({problem.origin}: {problem.path or '-'})")
    typer.echo(f"# suite: {problem.suite}  ids: {problem.id}" + (f", {problem.kernrl_id}" if problem.suite == "kernrl" else ""))
    if problem.unavailable_reason:
        typer.echo(f"# unavailable: {problem.unavailable_reason}")
    if small:
        typer.echo(f"# small sizes: {problem.small_sizes or 'as written (small enough for the CPU)'}")
    elif problem.small_sizes:
        typer.echo(f"# small sizes: {problem.small_sizes}")
    typer.echo(problem.source_for("small" if small else "real").rstrip("\n"))
    if solution:
        text = load_solution(problem)  # ours for the bundled problem of the same suite, level and file name
        if text is None:
            typer.echo("# no bundled solution for this problem")
        else:
            typer.echo(f"\n# --- our known-correct solution (ModelNew) for {problem.display_id} ---")
            typer.echo(text.rstrip("\n"))


def _show_floor(problem, gpu: str | None, precision: str, as_json: bool) -> None:
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.evaluation.sandbox.runtime import PRECISION_DTYPES
    from kernelbench_rl.evaluation.timing.floor import gpu_peaks, source_floor

    if precision not in PRECISION_DTYPES:
        raise UserError(f"--precision must be one of {', '.join(PRECISION_DTYPES)}, not {precision!r}.")
    if gpu is None:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "H100"
    try:
        gpu_peaks(gpu)
    except KeyError as exc:
        raise UserError(str(exc).strip("'\"") + ".") from None
    try:
        result = source_floor(problem.source, precision, gpu, problem.id)
    except Exception as exc:  # noqa: BLE001 - the problem cannot run on the meta device: say so
        raise UserError(f"The floor of {problem.id} cannot be computed on the meta device: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    data = {"problem_id": problem.id, "name": problem.name, **result.as_dict()}
    if as_json:
        typer.echo(json.dumps(data, indent=1))
        return
    typer.echo(f"{problem.id} {problem.name} on {result.gpu}, {precision} (real sizes)")
    typer.echo(f"  bytes   {result.bytes:.4g} (read {result.bytes_read:.4g} incl. weights {result.weight_bytes:.4g}, "
               f"written {result.bytes_written:.4g})")
    typer.echo(f"  FLOPs   {result.flops:.4g}" + (f" (not counted: {', '.join(result.uncounted_ops)})" if result.uncounted_ops else ""))
    typer.echo(f"  floor   {result.floor_ms:.4g} ms, {result.bound}-bound (memory {result.memory_ms:.4g} ms, "
               f"compute {result.compute_ms:.4g} ms at the {result.arithmetic} peak)")


_STATUS_STYLE = {"ok": "green", "widened": "cyan", "fails": "red", "unavailable": "yellow"}


@problems_app.command("audit")
def audit_command(
    level: Annotated[Optional[int], typer.Option("--level", "-l", help=LEVEL_HELP)] = None,
    ids: Annotated[Optional[str], typer.Option("--ids", help="Only these problems, comma-separated (e.g. L1/19,L1/20 or kernrl's L10_1).")] = None,
    problems_root: RootOption = None,
    size: Annotated[str, typer.Option("--size", help="small (the CPU sizes) or real (the problem's own sizes).")] = "small",
    device: Annotated[str, typer.Option("--device", help="cpu or cuda: where the references run.")] = "cpu",
    precision: Annotated[str, typer.Option("--precision", help="fp32, fp16 or bf16 (sets the tolerance).")] = "fp32",
    siblings: Annotated[bool, typer.Option("--siblings/--no-siblings",
                                           help="Also judge every other problem's reference that takes inputs of the "
                                                "same shapes (ReLU's for LeakyReLU).")] = True,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write every problem's audit to this JSON file.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List every problem, not only those that are not plainly ok.")] = False,
) -> None:
    """Can each problem's inputs tell a right kernel from a wrong one?

    Runs trivial candidates (each input returned, zeros, ones, another seed's mean, another seed's output) and,
    with --siblings, other problems' references, against each reference with the evaluator's own comparison.
    Status: ok (nothing trivial passes); widened (something passes the problem's own inputs, and widened inputs
    that the evaluator adds by itself tell it apart); fails (something passes every input set the evaluator
    would use: training leaves the problem out); unavailable (the reference cannot run here, with the reason).
    """
    from rich.progress import Progress

    from kernelbench_rl.errors import UserError
    from kernelbench_rl.evaluation.result import TOLERANCES
    from kernelbench_rl.problems.audit import audit_problems, counts

    if size not in ("small", "real"):
        raise UserError(f"--size must be small or real, not {size!r}.")
    if device not in ("cpu", "cuda"):
        raise UserError(f"--device must be cpu or cuda, not {device!r}.")
    if precision not in TOLERANCES:
        raise UserError(f"--precision must be one of {', '.join(TOLERANCES)}, not {precision!r}.")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda needs a CUDA GPU, and none is visible here; use --device cpu.")
    problems = load_problems(problems_root, levels=[level] if level is not None else None, warn=_warn)
    _require_level(level, problems, problems_root)
    if ids:
        chosen = []
        for wanted in (i.strip() for i in ids.split(",") if i.strip()):
            problem = resolve_problem(wanted, problems)  # ours, kernrl's or a unique prefix of kernrl's
            if problem is None:
                raise UserError(f"No problem {wanted} among the loaded problems; `kernelbench-rl problems list` shows the ids.")
            chosen.append(problem)
        problems = list(dict.fromkeys(chosen))
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("auditing", total=len(problems))
        audits = audit_problems(problems, size=size, device=device, precision=precision, siblings=siblings,  # type: ignore[arg-type]
                                progress=lambda p: progress.update(task, advance=1, description=f"auditing {p.id}"))
    shown = {p.id: p.display_id for p in problems}  # each id in its suite's own form
    table = Table(title=f"problem audit: {len(problems)} problems, {size} sizes on {device}, {precision}")
    for column in ("id", "name", "status", "what passes", "inputs / reason"):
        table.add_column(column, overflow="fold")
    for audit in audits:
        if not show_all and audit.status == "ok" and not audit.same_function:
            continue
        passes = ", ".join(audit.trivial + [f"{s}'s reference" for s in audit.siblings])
        why = audit.detail if audit.status in ("fails", "unavailable") else audit.inputs
        if audit.same_function:
            why = (why + "; " if audit.status != "ok" else "") + f"same function as {', '.join(audit.same_function)}"
        table.add_row(shown.get(audit.problem_id, audit.problem_id), audit.name, f"[{_STATUS_STYLE[audit.status]}]{audit.status}[/]", passes, why)
    console = Console()
    console.print(table)
    tally = counts(audits)
    console.print("  ".join(f"{status}: {n}" for status, n in tally.items()) + f"  total: {len(audits)}")
    if json_out is not None:
        json_out.write_text(json.dumps({"size": size, "device": device, "precision": precision, "counts": tally,
                                        "problems": [a.as_dict() for a in audits]}, indent=1))
        console.print(f"wrote {json_out}")


def register(app: typer.Typer) -> None:
    app.add_typer(problems_app, name="problems")
