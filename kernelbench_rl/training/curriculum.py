"""The curriculum: promote the reward stage, then the level, when a rate stays high long enough.

Stage k is promoted when its rate (format rate in the format stage, compile rate in the compile
stage, correct rate in the correctness stage) stays at or above `threshold` for `window`
consecutive steps. In the last stage the correct rate at the current level, held above
`level_threshold` for `window` steps, promotes the level. Every promotion is an event that the
training loop writes to `curriculum_events`; a resumed run rebuilds the state from those rows
and the per-step rates in `train_steps`.
"""

from __future__ import annotations

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
    threshold: float = 0.8
    window: int = 5
    enabled: bool = True
    force_stage: str | None = None
    promote_levels: bool = True
    level_threshold: float = 0.5
    streak: int = 0  # consecutive steps at or above the active threshold since the last promotion
    history: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def from_config(cls, cfg: Any, levels: Sequence[int]) -> Curriculum:
        levels = sorted(set(levels))
        start_level = cfg.start_level if cfg.start_level in levels else (levels[0] if levels else cfg.start_level)
        return cls(stages=list(cfg.stages), stage=cfg.start_stage, level=start_level,
                   levels=list(levels), threshold=cfg.threshold, window=cfg.window, enabled=cfg.enabled,
                   force_stage=cfg.force_stage, promote_levels=cfg.promote_levels,
                   level_threshold=cfg.level_threshold)

    @property
    def at_last_stage(self) -> bool:
        return self.stages.index(self.stage) == len(self.stages) - 1

    def watched_rate(self) -> tuple[str, float]:
        if self.at_last_stage:
            return "correct_rate", self.level_threshold
        return STAGE_RATE_METRIC[self.stage], self.threshold

    def apply_override(self, step: int) -> list[CurriculumEvent]:
        """Called at the start of each step: a forced stage that differs from the current one takes
        effect now and becomes a `manual` event (also for a resumed run whose config gained the override)."""
        if self.force_stage and self.force_stage != self.stage:
            event = CurriculumEvent(step, "manual", self.stage, self.force_stage, "curriculum.force_stage")
            self.stage = self.force_stage
            self.streak = 0
            return [event]
        return []

    def observe(self, step: int, metrics: dict[str, float]) -> list[CurriculumEvent]:
        """Feed one step's metrics; returns the promotions that take effect from the next step."""
        self.history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        if not self.enabled:
            return []
        name, threshold = self.watched_rate()
        rate = float(metrics.get(name, 0.0))
        self.streak = self.streak + 1 if rate >= threshold else 0
        if self.streak < self.window:
            return []
        reason = f"{name} >= {threshold} for {self.window} steps"
        if not self.at_last_stage and self.force_stage is None:
            nxt = self.stages[self.stages.index(self.stage) + 1]
            event = CurriculumEvent(step, "stage", self.stage, nxt, reason)
            self.stage, self.streak = nxt, 0
            return [event]
        if (self.at_last_stage or self.force_stage) and self.promote_levels:
            higher = [lv for lv in self.levels if lv > self.level]
            if higher:
                event = CurriculumEvent(step, "level", str(self.level), str(higher[0]), reason)
                self.level, self.streak = higher[0], 0
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
        name, threshold = self.watched_rate()
        self.streak = 0
        for step, metrics in step_metrics:
            if step <= last_event_step:
                continue
            self.history.append(metrics)
            self.streak = self.streak + 1 if float(metrics.get(name, 0.0)) >= threshold else 0
