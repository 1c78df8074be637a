"""Which chat format a policy speaks: tinker-cookbook's renderer for the model, or the tokenizer's template.

The renderer decides the prompt tokens, the stop sequences the sampler ends a turn at, and the
tokens that end an answer (what SFT teaches the model to emit). tinker-cookbook knows the formats
of the models Tinker serves (`model_info`): for those, `policy.renderer=auto` takes its recommended
renderer, with or without thinking (`sampling.thinking`). A model it does not know (a local
directory, `local:tiny`) keeps the tokenizer's own chat template and stops at its EOS token.
"""

from __future__ import annotations

from typing import Any

from kernelbench_rl.errors import UserError

CHAT_TEMPLATE = "chat_template"  # the tokenizer's own template (no cookbook renderer)


def recommended_renderers(base_model: str) -> list[str]:
    """tinker-cookbook's renderers for the model, most recommended first ([] for a model it does not know)."""
    from tinker_cookbook import model_info
    from tinker_cookbook.exceptions import ConfigurationError

    try:
        return model_info.get_recommended_renderer_names(base_model)
    except (ConfigurationError, KeyError, ValueError):
        return []


def renderer_name_for(base_model: str, renderer: str, thinking: bool) -> str | None:
    """The cookbook renderer to use (None: the tokenizer's chat template)."""
    if renderer == CHAT_TEMPLATE:
        return None
    if renderer != "auto":
        return renderer
    names = recommended_renderers(base_model)
    if not names:
        return None
    if thinking:
        return next((n for n in names if "disable_thinking" not in n), names[0])
    # Models that always reason (no disable_thinking variant) keep their recommended renderer.
    return next((n for n in names if "disable_thinking" in n), names[0])


def make_chat_renderer(tokenizer: Any, base_model: str, renderer: str = "auto", thinking: bool = False) -> Any | None:
    """A tinker-cookbook Renderer for the policy, or None for the tokenizer's chat template."""
    name = renderer_name_for(base_model, renderer, thinking)
    if name is None:
        return None
    from tinker_cookbook.exceptions import RendererError
    from tinker_cookbook.renderers import get_renderer

    try:
        return get_renderer(name, tokenizer, model_name=base_model)
    except RendererError as exc:
        raise UserError(f"policy.renderer={renderer!r} cannot be used: {exc}") from None
