"""The problems a run trains and evaluates on: the configured levels loaded once, split once into train and
holdout, and audited once (problems/audit.py), with the widened inputs the audit hands the evaluator.

`kernelbench_rl.compose.build_run_parts` calls `load_audited_split` with the run's `problems` settings and keeps
the `ProblemSplit` in its `RunParts`; the loops and checkpoint evaluation choose their problems from it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems.loaders import default_levels, load_problems
from kernelbench_rl.problems.model import Problem, resolve_problem
from kernelbench_rl.problems.split import split_problems

log = logging.getLogger(__name__)
SPLITS = ("holdout", "train", "all")


@dataclass(frozen=True)
class ProblemSplit:
    """The problems of the configured levels, split once into train and holdout (`problems.split`), with the
    settings that made the split (the retrieval leak rules split the whole source the same way)."""

    all: tuple[Problem, ...]
    train: tuple[Problem, ...]
    holdout: tuple[Problem, ...]
    levels: tuple[int, ...] | None  # None: every level of the source
    source_root: str | None = None
    holdout_fraction: float = 0.2
    seed: int = 0
    ids: tuple[str, ...] = ()  # problems.ids: training keeps to these (empty: the whole train split)
    audit: bool = True  # problems.audit: training leaves out what the audit says cannot tell right from wrong

    def chosen(self, split: str, max_problems: int | None = None) -> list[Problem]:
        """The problems of `split` (holdout, train or all), the first `max_problems` of them when given."""
        if split not in SPLITS:
            raise UserError(f"Unknown split {split!r}; use holdout, train or all.")
        chosen = {"holdout": self.holdout, "train": self.train, "all": self.all}[split]
        if not chosen:
            levels = list(self.levels) if self.levels is not None else None
            raise UserError(f"The {split} split of levels {levels} is empty; raise problems.holdout_fraction or add levels.")
        return list(chosen[:max_problems] if max_problems else chosen)

    def training_problems(self, audits: Mapping[str, Any]) -> list[Problem]:
        """The problems RL and SFT train on: the train split (restricted to `ids` when named), less what cannot run
        here and, with the audit on, less what `audits` says cannot tell right from wrong. A UserError when none is
        left; the holdout split is never trained on (naming a holdout id cannot pull it in)."""
        train = list(self.train)
        if self.ids:
            named = []
            for pid in self.ids:  # ours (L1/19), kernrl's (L1_19_ReLU) or a unique prefix of kernrl's
                problem = resolve_problem(pid, self.all)
                if problem is None:
                    raise UserError(f"Problem {pid} is not among the loaded problems; `kernelbench-rl problems list` "
                                    "shows the ids.")
                named.append(problem.id)
            train_ids = {p.id for p in train}
            train = [p for pid in dict.fromkeys(named) for p in self.all if p.id == pid and pid in train_ids]
        unavailable = [p for p in train if p.unavailable_reason]
        if unavailable:  # a problem that cannot run here is never judged, so never trained on
            log.warning("%d problem(s) left out of training, unavailable here: %s", len(unavailable),
                        "; ".join(p.unavailable_reason or "" for p in unavailable[:5]))
            train = [p for p in train if not p.unavailable_reason]
        if not train:
            raise UserError("No training problems are left after the holdout split; add problems or lower "
                            "problems.holdout_fraction.")
        if self.audit:
            from kernelbench_rl.problems.audit import usable_for_reward

            train = usable_for_reward(train, audits, warn=log.warning)
            if not train:
                raise UserError("The problem audit leaves no training problem whose inputs tell right from wrong "
                                "(`kernelbench-rl problems audit` says why); choose other problems or set "
                                "problems.audit=false.")
        return train


def load_split(source_root: str | None, levels: Sequence[int] | None, *, holdout_fraction: float = 0.2,
               seed: int = 0, ids: Sequence[str] = (), audit: bool = True) -> ProblemSplit:
    """The problems of `levels` (None: the source's own, `default_levels`), loaded once, and their train / holdout
    split; `ids` plays no part (the holdout is always that of the whole set, so naming ids can never pull a holdout
    problem in)."""
    levels = levels if levels is not None else default_levels(source_root)
    loaded = load_problems(source_root, levels=levels)
    train, holdout = split_problems(loaded, holdout_fraction, seed)
    return ProblemSplit(all=tuple(loaded), train=tuple(train), holdout=tuple(holdout),
                        levels=tuple(levels) if levels is not None else None, source_root=source_root,
                        holdout_fraction=holdout_fraction, seed=seed, ids=tuple(ids), audit=audit)


def load_audited_split(source_root: str | None, levels: Sequence[int] | None, *, precision: str,
                       holdout_fraction: float = 0.2, seed: int = 0, ids: Sequence[str] = (),
                       audit: bool = True) -> tuple[ProblemSplit, dict[str, Any], dict[str, Any]]:
    """(split, audits, widened inputs): the split of `load_split`, the problem audit of all its problems
    (problems/audit.py; none when `audit` is off) and the widened inputs the audit hands the evaluator (where
    another problem's reference passes a problem's own)."""
    split = load_split(source_root, levels, holdout_fraction=holdout_fraction, seed=seed, ids=ids, audit=audit)
    if not audit:
        return split, {}, {}
    from kernelbench_rl.problems.audit import audited_set

    audits, variants = audited_set(split.all, precision)
    return split, audits, variants
