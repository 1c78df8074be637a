"""Policy backends behind one protocol that mirrors the Tinker SDK (0.38).

    from kernelbench_rl.policy import PolicyConfig, make_service_client
    service = make_service_client(PolicyConfig(backend="local"))        # or "tinker" / "auto"
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=8).result()

See base.py for the protocol, local.py for the local backend's semantics and tinker_backend.py
for the real service (one config change away: policy.backend=tinker with TINKER_API_KEY set).
"""

from kernelbench_rl.policy.base import (
    ClientFuture,
    SamplingClientProtocol,
    ServiceClientProtocol,
    TrainingClientProtocol,
    completed_future,
)
from kernelbench_rl.policy.config import PolicyConfig, resolve_backend
from kernelbench_rl.policy.factory import make_service_client
from kernelbench_rl.policy.tiny import TINY_ASSET_DIR, TINY_MODEL_NAME

__all__ = [
    "ClientFuture",
    "PolicyConfig",
    "SamplingClientProtocol",
    "ServiceClientProtocol",
    "TINY_ASSET_DIR",
    "TINY_MODEL_NAME",
    "TrainingClientProtocol",
    "completed_future",
    "make_service_client",
    "resolve_backend",
]
