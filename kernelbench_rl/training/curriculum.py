"""The curriculum: promote the reward stage, then the level, on a smoothed rate.

Stage k watches its rate (format rate in the format stage, compile rate in the compile stage,
correct rate in the correctness stage) and is promoted when the mean of its last `window` judged
steps reaches the stage's threshold (`curriculum.<stage>_threshold`, or `curriculum.threshold` for
every stage when set). A mean, not a streak: a run whose correct rate hovers around its threshold
promotes, where "every one of 5 steps" waits for a lucky run of samples. A stage that has not
promoted after `max_steps_per_stage` judged steps is promoted anyway (its reward has taught what it
could). In the last stage the correct rate at the current level (`level_<L>/correct_rate`),
averaged the same way, promotes the level at `level_threshold`, or after `max_steps_per_level`
judged steps; a level whose mean falls to `demote_threshold` or below goes back one level. A level left
by a demotion is reached again only on its rate, never by the step limit, and only after a back-off:
`demotion_backoff` judged steps at the level below, doubled for each further demotion from it (without
one, a level-1 rate above the threshold and a level-2 rate under the demotion line swapped levels every
two windows, 20 times in 100 steps, half the run at a level where nearly every group was constant). The
earlier levels stay in the problem pool at `previous_levels_share` of each step's problems.

Rates come only from the samples being judged: a step counts toward the current stage and level
only if it was sampled under them (a step rolled out before a promotion, under asynchronous
training, belongs to the old stage or level and is skipped), and only its samples of the current
level count (the earlier levels' share of the batch does not). A step with no such rate (every
sample of the level an infrastructure failure) is not judged at all: no rate 0, and no step toward
a step limit. The defaults were chosen by replaying rate traces of real models (bench/RESULTS.md, "Curriculum promotion").

Every promotion is an event that the training loop writes to `curriculum_events`; a resumed run
rebuilds the state from those rows and the per-step rates in `train_steps`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelbench_rl.rewards.shaping import STAGE_RATE_METRIC


@dataclass
class CurriculumEvent:
    step: int
    kind: str  # stage | level | manual
    from_value: str
    to_value: str
    reason: str

    def row(self, run_id: str) -> dict[str, Any]:
        return {"run_id": run_id, "step": self.step, "kind": self.kind, "from_value": self.from_value,
                "to_value": self.to_value, "reason": self.reason}


@dataclass
class Curriculum:
    stages: list[str]
    stage: str
    level: int
    levels: list[int]  # levels that have training problems, ascending
    thresholds: dict[str, float] = field(default_factory=dict)  # stage -> threshold of its watched rate
    window: int = 5
    enabled: bool = True
    force_stage: str | None = None
    promote_levels: bool = True
    level_threshold: float = 0.5
    max_steps_per_stage: int = 0  # 0: no fallback
    max_steps_per_level: int = 0  # 0: levels promote on their rate only
    demote_threshold: float | None = None  # None: never back to an earlier level
    previous_levels_share: float = 0.0
    demotion_backoff: int = 0  # judged steps below a level left by demotion before it is tried again (x2 per demotion)
    demoted_from: set[int] = field(default_factory=set)  # levels left by a demotion: reached again on their rate only
    demotions: dict[int, int] = field(default_factory=dict)  # level -> demotions from it so far
    recent: list[float] = field(default_factory=list)  # the watched rate of each step since the last event
    history: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: Any, levels: Sequence[int]) -> Curriculum:
        levels = sorted(set(levels))
        start_level = cfg.start_level if cfg.start_level in levels else (levels[0] if levels else cfg.start_level)
        return cls(stages=list(cfg.stages), stage=cfg.start_stage, level=start_level, levels=list(levels),
                   thresholds=stage_thresholds(cfg), window=cfg.window, enabled=cfg.enabled,
                   force_stage=cfg.force_stage, promote_levels=cfg.promote_levels,
                   level_threshold=cfg.level_threshold, max_steps_per_stage=cfg.max_steps_per_stage,
                   max_steps_per_level=cfg.max_steps_per_level, demote_threshold=cfg.demote_threshold,
                   demotion_backoff=cfg.demotion_backoff, previous_levels_share=cfg.previous_levels_share)

    @property
    def at_last_stage(self) -> bool:
        return self.stages.index(self.stage) == len(self.stages) - 1

    @property
    def streak(self) -> int:
        """Steps watched since the last promotion (kept under its old name for logs and tests)."""
        return len(self.recent)

    def watched_rate(self) -> tuple[str, float]:
        """The metric judged now (at the current level) and its threshold."""
        if self._watching_levels():
            return f"level_{self.level}/correct_rate", self.level_threshold
        return f"level_{self.level}/{STAGE_RATE_METRIC[self.stage]}", self.thresholds.get(self.stage, 0.8)

    def smoothed_rate(self) -> float | None:
        """The mean watched rate of the last `window` judged steps (None until that many are in)."""
        if len(self.recent) < self.window:
            return None
        return statistics.fmean(self.recent[-self.window:])

    def apply_override(self, step: int) -> list[CurriculumEvent]:
        """Called at the start of each step: a forced stage that differs from the current one takes
        effect now and becomes a `manual` event (also for a resumed run whose config gained the override)."""
        if self.force_stage and self.force_stage != self.stage:
            event = CurriculumEvent(step, "manual", self.stage, self.force_stage, "curriculum.force_stage")
            self.stage = self.force_stage
            self.recent = []
            return [event]
        return []

    def _rate(self, metrics: dict[str, float]) -> float | None:
        """The watched rate of the current level's samples in `metrics`; None when the step has none (missing, not 0)."""
        name = STAGE_RATE_METRIC[self.stage] if not self._watching_levels() else "correct_rate"
        key = f"level_{self.level}/{name}"
        if key in metrics:
            return float(metrics[key])
        if any(k.startswith("level_") for k in metrics):
            return None  # other levels were judged, this one was not
        # Metrics without per-level keys (one level, e.g. a replayed trace): the overall rate is the level's.
        return float(metrics[name]) if name in metrics else None

    def _watching_levels(self) -> bool:
        return self.at_last_stage or (self.force_stage is not None and self.promote_levels)

    def _sampled_under(self, metrics: dict[str, float], stage: str | None, level: int | None) -> tuple[str, int]:
        """The stage and level a step was sampled under: given, else its metrics' `stage_index` and `level`
        (the loop writes both), else the current ones."""
        if stage is None:
            index = metrics.get("stage_index")
            stage = self.stages[int(index)] if index is not None and 0 <= int(index) < len(self.stages) else self.stage
        if level is None:
            level = int(metrics["level"]) if "level" in metrics else self.level
        return stage, level

    def _judge(self, metrics: dict[str, float], stage: str | None, level: int | None) -> bool:
        """Add the step's rate to the window when it was sampled under the current stage and level and has one."""
        if (stage, level) != (self.stage, self.level):
            return False
        rate = self._rate(metrics)
        if rate is None:
            return False
        self.recent.append(rate)
        return True

    def observe(self, step: int, metrics: dict[str, float], *, stage: str | None = None,
                level: int | None = None) -> list[CurriculumEvent]:
        """Feed one step's metrics (sampled under `stage` and `level`: by default what its metrics say, else the
        current ones); returns the promotions that take effect from the next step."""
        self.history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if not self.enabled:
            return []
        if not self._judge(metrics, *self._sampled_under(metrics, stage, level)):
            return []
        name, threshold = self.watched_rate()
        smoothed = self.smoothed_rate()
        promoting_stage = not self.at_last_stage and self.force_stage is None
        if promoting_stage:
            if smoothed is not None and smoothed >= threshold:
                reason = f"mean {name} of the last {self.window} steps {smoothed:.3f} >= {threshold}"
            elif self.max_steps_per_stage and len(self.recent) >= self.max_steps_per_stage:
                reason = f"{len(self.recent)} steps in the stage (curriculum.max_steps_per_stage)"
            else:
                return []
            nxt = self.stages[self.stages.index(self.stage) + 1]
            event = CurriculumEvent(step, "stage", self.stage, nxt, reason)
            self.stage, self.recent = nxt, []
            return [event]
        if not self.promote_levels or not self._watching_levels():
            return []
        higher = [lv for lv in self.levels if lv > self.level]
        lower = [lv for lv in self.levels if lv < self.level]
        if higher and smoothed is not None and smoothed >= threshold and self._backed_off(higher[0]):
            return [self._move_level(step, higher[0], f"mean {name} of the last {self.window} steps {smoothed:.3f} >= {threshold}"
                                     + self._backoff_note(higher[0]))]
        if (higher and higher[0] not in self.demoted_from and self.max_steps_per_level
                and len(self.recent) >= self.max_steps_per_level):
            return [self._move_level(step, higher[0], f"{len(self.recent)} steps at the level (curriculum.max_steps_per_level)")]
        if (lower and self.demote_threshold is not None and smoothed is not None
                and smoothed <= self.demote_threshold):
            self._note_demotion(self.level)
            return [self._move_level(step, lower[-1], f"mean {name} of the last {self.window} steps {smoothed:.3f} <= "
                                                      f"{self.demote_threshold} (curriculum.demote_threshold)")]
        return []

    def backoff_steps(self, level: int) -> int:
        """Judged steps below `level` before it may be tried again: 0 unless a demotion left it, then
        `demotion_backoff` doubled for each demotion from it after the first."""
        count = self.demotions.get(level, 0)
        return self.demotion_backoff * 2 ** (count - 1) if count else 0

    def _backed_off(self, level: int) -> bool:
        return len(self.recent) >= self.backoff_steps(level)

    def _backoff_note(self, level: int) -> str:
        wait = self.backoff_steps(level)
        return f", after a back-off of {wait} steps (curriculum.demotion_backoff)" if wait else ""

    def _note_demotion(self, level: int) -> None:
        self.demoted_from.add(level)
        self.demotions[level] = self.demotions.get(level, 0) + 1

    def _move_level(self, step: int, to: int, reason: str) -> CurriculumEvent:
        event = CurriculumEvent(step, "level", str(self.level), str(to), reason)
        self.level, self.recent = to, []
        return event

    def replay(self, events: Sequence[dict[str, Any]], step_metrics: Sequence[tuple[int, dict[str, float]]]) -> None:
        """Rebuild the state of a resumed run from its stored events and per-step metrics (steps ascending)."""
        for event in sorted(events, key=lambda e: (e["step"], e["kind"] != "manual")):
            if event["kind"] in ("stage", "manual"):
                self.stage = event["to_value"]
            elif event["kind"] == "level":
                if int(event["to_value"]) < int(event["from_value"]):
                    self._note_demotion(int(event["from_value"]))
                self.level = int(event["to_value"])
        last_event_step = max((e["step"] for e in events), default=-1)
        self.recent = []
        for step, metrics in step_metrics:
            if step <= last_event_step:
                continue
            self.history.append(metrics)
            if self.enabled:
                self._judge(metrics, *self._sampled_under(metrics, None, None))

    def problem_counts(self, batch: int, has_previous: bool) -> tuple[int, int]:
        """(problems of earlier levels, problems of the current level) in a step of `batch` problems."""
        previous = round(batch * self.previous_levels_share) if has_previous else 0
        return previous, batch - previous


def stage_thresholds(cfg: Any) -> dict[str, float]:
    """Each stage's threshold: `threshold` for all when set, else the stage's own (`<stage>_threshold`)."""
    if cfg.threshold is not None:
        return {stage: float(cfg.threshold) for stage in cfg.stages}
    return {stage: float(getattr(cfg, f"{stage}_threshold")) for stage in cfg.stages}
