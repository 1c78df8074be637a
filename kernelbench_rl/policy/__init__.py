"""Policy backends behind one protocol that mirrors the Tinker SDK (0.38).

    from kernelbench_rl.policy import PolicyConfig, make_service_client
    service = make_service_client(PolicyConfig(backend="local"))        # or "tinker" / "auto"
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=8).result()

See base.py for the protocol, local.py for the local backend's semantics and tinker_backend.py
for the real service (one config change away: policy.backend=tinker with TINKER_API_KEY set).
"""

from __future__ import annotations

from kernelbench_rl import lazy_names

# Imported on first use: base.py pulls in the Tinker SDK and torch (seconds), which a command that only reads the
# policy's configuration (a bad flag refused, `train`'s config checked) never needs.
_LAZY = {
    "ClientFuture": "kernelbench_rl.policy.base",
    "SamplingClientProtocol": "kernelbench_rl.policy.base",
    "ServiceClientProtocol": "kernelbench_rl.policy.base",
    "TrainingClientProtocol": "kernelbench_rl.policy.base",
    "completed_future": "kernelbench_rl.policy.base",
    "PolicyConfig": "kernelbench_rl.policy.config",
    "resolve_backend": "kernelbench_rl.policy.config",
    "make_service_client": "kernelbench_rl.policy.factory",
    "TINY_ASSET_DIR": "kernelbench_rl.policy.tiny",
    "TINY_MODEL_NAME": "kernelbench_rl.policy.tiny",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_names.loader(__name__, _LAZY)
