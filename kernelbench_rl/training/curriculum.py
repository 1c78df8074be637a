"""The curriculum: promote the reward stage, then the level, on a smoothed rate.

Stage k watches its rate (format rate in the format stage, compile rate in the compile stage,
correct rate in the correctness stage) and is promoted when the mean of its last `window` steps
reaches the stage's threshold (`curriculum.<stage>_threshold`, or `curriculum.threshold` for every
stage when set). A mean, not a streak: a run whose correct rate hovers around its threshold
promotes, where "every one of 5 steps" waits for a lucky run of samples. A stage that has not
promoted after `max_steps_per_stage` steps is promoted anyway (its reward has taught what it
could). In the last stage the correct rate at the current level (`level_<L>/correct_rate`),
averaged the same way, promotes the level at `level_threshold`; the earlier levels stay in the
problem pool at `previous_levels_share` of each step's problems. bench/curriculum_sim.py chose
the defaults from rate traces like a real run's.

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
    previous_levels_share: float = 0.0
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
                   previous_levels_share=cfg.previous_levels_share)

    @property
    def at_last_stage(self) -> bool:
        return self.stages.index(self.stage) == len(self.stages) - 1

    @property
    def streak(self) -> int:
        """Steps watched since the last promotion (kept under its old name for logs and tests)."""
        return len(self.recent)

    def watched_rate(self) -> tuple[str, float]:
        if self.at_last_stage or (self.force_stage is not None and self.promote_levels):
            return f"level_{self.level}/correct_rate", self.level_threshold
        return STAGE_RATE_METRIC[self.stage], self.thresholds.get(self.stage, 0.8)

    def smoothed_rate(self) -> float | None:
        """The mean watched rate of the last `window` steps (None until that many steps are in)."""
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

    def _rate(self, metrics: dict[str, float]) -> float:
        name, _ = self.watched_rate()
        if name in metrics:
            return float(metrics[name])
        # One level in the step (or metrics without per-level keys): the overall rate is the level's.
        return float(metrics.get(name.split("/", 1)[-1], 0.0))

    def observe(self, step: int, metrics: dict[str, float]) -> list[CurriculumEvent]:
        """Feed one step's metrics; returns the promotions that take effect from the next step."""
        self.history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if not self.enabled:
            return []
        self.recent.append(self._rate(metrics))
        name, threshold = self.watched_rate()
        smoothed = self.smoothed_rate()
        promoting_stage = not self.at_last_stage and self.force_stage is None
        if smoothed is not None and smoothed >= threshold:
            reason = f"mean {name} of the last {self.window} steps {smoothed:.3f} >= {threshold}"
        elif promoting_stage and self.max_steps_per_stage and len(self.recent) >= self.max_steps_per_stage:
            reason = f"{len(self.recent)} steps in the stage (curriculum.max_steps_per_stage)"
        else:
            return []
        if promoting_stage:
            nxt = self.stages[self.stages.index(self.stage) + 1]
            event = CurriculumEvent(step, "stage", self.stage, nxt, reason)
            self.stage, self.recent = nxt, []
            return [event]
        if self.promote_levels:
            higher = [lv for lv in self.levels if lv > self.level]
            if higher:
                event = CurriculumEvent(step, "level", str(self.level), str(higher[0]), reason)
                self.level, self.recent = higher[0], []
                return [event]
        return []

    def replay(self, events: Sequence[dict[str, Any]], step_metrics: Sequence[tuple[int, dict[str, float]]]) -> None:
        """Rebuild the state of a resumed run from its stored events and per-step metrics (steps ascending)."""
        for event in sorted(events, key=lambda e: (e["step"], e["kind"] != "manual")):
            if event["kind"] in ("stage", "manual"):
                self.stage = event["to_value"]
            elif event["kind"] == "level":
                self.level = int(event["to_value"])
        last_event_step = max((e["step"] for e in events), default=-1)
        self.recent = []
        for step, metrics in step_metrics:
            if step <= last_event_step:
                continue
            self.history.append(metrics)
            if self.enabled:
                self.recent.append(self._rate(metrics))

    def problem_counts(self, batch: int, has_previous: bool) -> tuple[int, int]:
        """(problems of earlier levels, problems of the current level) in a step of `batch` problems."""
        previous = round(batch * self.previous_levels_share) if has_previous else 0
        return previous, batch - previous


def stage_thresholds(cfg: Any) -> dict[str, float]:
    """Each stage's threshold: `threshold` for all when set, else the stage's own (`<stage>_threshold`)."""
    if cfg.threshold is not None:
        return {stage: float(cfg.threshold) for stage in cfg.stages}
    return {stage: float(getattr(cfg, f"{stage}_threshold")) for stage in cfg.stages}
